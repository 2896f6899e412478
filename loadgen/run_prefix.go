package loadgen

// The prefix-caching parts of an LLM point's record, merged over its
// repeats.

import (
	"github.com/inferhq/infer/loadgen/llm"
	"github.com/inferhq/infer/loadgen/record"
)

// mergePrefix merges the repeats' prefix-cache figures and TTFT by turn
// into m, their distributions exactly (as histograms, to 1 %), and the
// servers' prefix-cache counters into a copy of m.Server.
func mergePrefix(m *record.LLM, outs []*llm.Outcome, servers []*record.LLMServer) {
	if m.Server != nil {
		s := *m.Server
		s.PrefixQueries, s.PrefixHits, s.PrefixHitRate = 0, 0, 0
		for _, o := range servers {
			if o != nil {
				s.PrefixQueries += o.PrefixQueries
				s.PrefixHits += o.PrefixHits
			}
		}
		if s.PrefixQueries > 0 {
			s.PrefixHitRate = record.Round3(s.PrefixHits / s.PrefixQueries)
		}
		m.Server = &s
	}
	var p *record.LLMPrefix
	hit, miss := &record.Histogram{}, &record.Histogram{}
	var turns []record.LLMTurn
	var turnH []*record.Histogram
	for _, o := range outs {
		l := &o.LLM
		if q := l.Prefix; q != nil {
			if p == nil {
				p = &record.LLMPrefix{HitShare: q.HitShare}
			}
			p.Reported += q.Reported
			p.PromptTokens += q.PromptTokens
			p.CachedTokens += q.CachedTokens
			p.Hits += q.Hits
			p.Misses += q.Misses
		}
		for i, t := range l.Turns {
			if i == len(turns) {
				turns = append(turns, record.LLMTurn{Turn: t.Turn})
				turnH = append(turnH, &record.Histogram{})
			}
			n, add := float64(turns[i].TTFT.N), float64(t.TTFT.N)
			if n+add > 0 {
				turns[i].PromptTokens = record.Round3((turns[i].PromptTokens*n + t.PromptTokens*add) / (n + add))
				turns[i].CachedTokens = record.Round3((turns[i].CachedTokens*n + t.CachedTokens*add) / (n + add))
			}
			turns[i].TTFT.N += t.TTFT.N
		}
		if h := l.Histograms; h != nil {
			hit.Merge(h.TTFTHit)
			miss.Merge(h.TTFTMiss)
			for i, th := range h.Turns {
				if i < len(turnH) {
					turnH[i].Merge(th)
				}
			}
		}
	}
	if p != nil {
		if p.PromptTokens > 0 {
			p.HitRate = record.Round3(float64(p.CachedTokens) / float64(p.PromptTokens))
		}
		p.TTFTHit, p.TTFTMiss = record.MsStatsOf(hit), record.MsStatsOf(miss)
		m.Histograms.TTFTHit, m.Histograms.TTFTMiss = hit, miss
	}
	for i := range turns {
		turns[i].TTFT = record.MsStatsOf(turnH[i])
	}
	m.Prefix, m.Turns, m.Histograms.Turns = p, turns, turnH
}
