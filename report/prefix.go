package report

// The prefix-cache parts of an LLM run's report: summary.md's cache on
// against off, hit rates and TTFT of hits and misses per point, a trace
// replay's measured hit rate against the one its trace allows, TTFT by
// turn of multi-turn sessions, and turn-ttft.png.

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"

	"github.com/inferhq/infer/loadgen/record"
)

// cacheOf names a point's prefix cache setting: "on", "off", or "" when
// the sweep left it to the server.
func cacheOf(p record.Point) string {
	if p.PrefixCache == nil {
		return ""
	}
	return record.OnOff(*p.PrefixCache)
}

// hasPrefix reports whether a point says anything of a prefix cache.
func hasPrefix(r *record.Record) bool {
	l := r.LLM
	return l != nil && (l.Prefix != nil || l.Trace != nil || (l.Server != nil && l.Server.PrefixQueries > 0) || r.Point.PrefixCache != nil)
}

// rate renders a hit rate: "96.93 %", or "–" when unknown.
func rate(v float64, known bool) string {
	if !known {
		return "–"
	}
	return fmt.Sprintf("%.2f %%", 100*v)
}

// serverRate is a point's hit rate from the server's counters; ok is false
// without them.
func serverRate(l *record.LLM) (float64, bool) {
	if s := l.Server; s != nil && s.PrefixQueries > 0 {
		return s.PrefixHits / s.PrefixQueries, true
	}
	return 0, false
}

// clientRate is a point's hit rate from its answers' cached tokens; ok is
// false when none said.
func clientRate(l *record.LLM) (float64, bool) {
	if p := l.Prefix; p != nil && p.PromptTokens > 0 {
		return float64(p.CachedTokens) / float64(p.PromptTokens), true
	}
	return 0, false
}

// writePrefix writes summary.md's prefix-cache section.
func (v *view) writePrefix(b *strings.Builder) {
	recs := keep(v.recs, hasPrefix)
	if len(recs) == 0 {
		return
	}
	b.WriteString("## Prefix cache\n\n")
	v.writeCachePairs(b)
	b.WriteString("Hit rates are prompt tokens found cached over prompt tokens: the server's from its prefix-cache counters over the measured window (`infer_gen_prefix_cache_hits_total` / `_queries_total`, requests started in it), the clients' from each completed request's `usage.prompt_tokens_details.cached_tokens` (else its `Server-Timing` `cached`). ")
	for _, r := range recs {
		if p := r.LLM.Prefix; p != nil {
			fmt.Fprintf(b, "A request is a hit when at least %.0f %% of its prompt was cached (a shared first block alone does not make one), else a miss; their TTFTs are apart.", 100*p.HitShare)
			break
		}
	}
	b.WriteString("\n\n")
	b.WriteString("| point | server hit rate | clients' hit rate | hits / misses | TTFT of hits p50 · p99 | TTFT of misses p50 · p99 |\n|---|--:|--:|--:|--:|--:|\n")
	for _, r := range recs {
		l := r.LLM
		server, clients, hm, hit, miss := rate(serverRate(l)), rate(clientRate(l)), "–", "–", "–"
		if s := l.Server; server == "–" && s != nil && s.PrefixCache != nil && !*s.PrefixCache {
			server = "off"
		}
		if p := l.Prefix; p != nil {
			hm = fmt.Sprintf("%d / %d", p.Hits, p.Misses)
			hit = fmt.Sprintf("%s · %s", msOrDash(p.TTFTHit.P50), msOrDash(p.TTFTHit.P99))
			miss = fmt.Sprintf("%s · %s", msOrDash(p.TTFTMiss.P50), msOrDash(p.TTFTMiss.P99))
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s |\n", v.pointLabel(r), server, clients, hm, hit, miss)
	}
	b.WriteString("\n")
	v.writeTraceRates(b, recs)
}

// writeCachePairs sets each point with the cache on beside the same point
// with it off: output tokens/s and TTFT, with their ratios.
func (v *view) writeCachePairs(b *strings.Builder) {
	type pair struct{ on, off *record.Record }
	var pairs []pair
	for _, on := range v.recs {
		if on.LLM == nil || cacheOf(on.Point) != "on" {
			continue
		}
		s := llmSeriesOf(on.Point)
		s.Cache = "off"
		for _, off := range v.recs {
			if off.LLM != nil && off.Point.Load == on.Point.Load && llmSeriesOf(off.Point) == s {
				pairs = append(pairs, pair{on, off})
				break
			}
		}
	}
	if len(pairs) == 0 {
		return
	}
	b.WriteString("The cache on against off, at the same load: output tokens/s (× is on over off: higher is better) and TTFT (÷ is off over on: how many times sooner the first token comes with the cache). Flagged measurements are marked *.\n\n")
	b.WriteString("| load | configuration | tokens/s on | off | × | TTFT p50 on | off | ÷ | TTFT p99 on | off | ÷ |\n|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	ratio := func(a, b float64) string {
		if a <= 0 || b <= 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f", a/b)
	}
	for _, p := range pairs {
		on, off := p.on.LLM, p.off.LLM
		s := llmSeriesOf(p.on.Point)
		s.Cache = ""
		mark := ""
		if !trusted(p.on) || !trusted(p.off) {
			mark = " *"
		}
		fmt.Fprintf(b, "| %s | %s%s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", loadLabel(p.on.Point.Load), v.llmLabelNoCache(s), mark,
			record.Short(on.OutputTokensPerS), record.Short(off.OutputTokensPerS), ratio(on.OutputTokensPerS, off.OutputTokensPerS),
			msOrDash(on.TTFT.P50), msOrDash(off.TTFT.P50), ratio(off.TTFT.P50, on.TTFT.P50),
			msOrDash(on.TTFT.P99), msOrDash(off.TTFT.P99), ratio(off.TTFT.P99, on.TTFT.P99))
	}
	b.WriteString("\n")
}

// llmLabelNoCache names a series without its cache setting.
func (v *view) llmLabelNoCache(s llmSeries) string {
	return strings.TrimSpace(strings.TrimSuffix(strings.TrimSuffix(v.llmLabel(s), " cache on"), " cache off"))
}

// writeTraceRates sets a trace replay's measured hit rates against the ones
// its trace allows.
func (v *view) writeTraceRates(b *strings.Builder, recs []*record.Record) {
	recs = keep(recs, func(r *record.Record) bool { return r.LLM.Trace != nil })
	if len(recs) == 0 {
		return
	}
	t := recs[0].LLM.Trace
	fmt.Fprintf(b, "The trace allows (from its hash ids, its window's requests replayed in order, one at a time, through a model of the server's prefix cache in blocks of %d tokens): an unbounded cache finds %s of the window's %d prompt tokens", t.BlockSize, rate(t.Unbounded, true), t.Queries)
	if t.Capacity > 0 {
		fmt.Fprintf(b, ", LRU at the server's KV capacity of %d blocks %s", t.Capacity, rate(t.LRU, true))
	}
	b.WriteString(". A server also holds its running sequences' blocks and caches the blocks its answers fill, which the model leaves out; concurrent requests that share a prefix may both miss it. A measured rate is at most the unbounded one.\n\n")
	b.WriteString("| point | requests | server | server / LRU | clients | clients / LRU | unbounded |\n|---|--:|--:|--:|--:|--:|--:|\n")
	over := func(a float64, known bool) string {
		if !known || t.LRU <= 0 {
			return "–"
		}
		return fmt.Sprintf("%.3f", a/t.LRU)
	}
	for _, r := range recs {
		l := r.LLM
		tc := l.Trace
		label := v.pointLabel(r)
		if tc.Warm {
			label += " (warm: its server's cache held earlier load)"
		}
		if cacheOf(r.Point) == "off" {
			fmt.Fprintf(b, "| %s | %d | off | – | off | – | %s |\n", label, tc.Requests, rate(tc.Unbounded, true))
			continue
		}
		s, sOK := serverRate(l)
		c, cOK := clientRate(l)
		fmt.Fprintf(b, "| %s | %d | %s | %s | %s | %s | %s |\n", label, tc.Requests, rate(s, sOK), over(s, sOK), rate(c, cOK), over(c, cOK), rate(tc.Unbounded, true))
	}
	b.WriteString("\n")
}

// hasTurns reports whether the run has multi-turn sessions.
func (v *view) hasTurns() bool {
	return slices.ContainsFunc(v.recs, func(r *record.Record) bool { return r.LLM != nil && len(r.LLM.Turns) > 0 })
}

// writeTurns writes summary.md's TTFT by turn of multi-turn sessions.
func (v *view) writeTurns(b *strings.Builder) {
	recs := keep(v.recs, func(r *record.Record) bool { return r.LLM != nil && len(r.LLM.Turns) > 0 })
	if len(recs) == 0 {
		return
	}
	n := 0
	for _, r := range recs {
		n = max(n, len(r.LLM.Turns))
	}
	b.WriteString("## TTFT by turn\n\n")
	b.WriteString("Multi-turn sessions: each turn sends the conversation so far (the earlier messages and the server's answers) and a new message. TTFT p50 (p99) of each turn's completed requests; the last column is the last turn's p50 over the first's. With a prefix cache a later turn computes only what is new since the last; without one, the whole conversation again.\n\n")
	b.WriteString("| point |")
	for i := range n {
		fmt.Fprintf(b, " turn %d |", i+1)
	}
	b.WriteString(" last / first |\n|---|" + strings.Repeat("--:|", n+1) + "\n")
	for _, r := range recs {
		ts := r.LLM.Turns
		fmt.Fprintf(b, "| %s |", v.pointLabel(r))
		for i := range n {
			if i >= len(ts) || ts[i].TTFT.N == 0 {
				b.WriteString(" – |")
				continue
			}
			fmt.Fprintf(b, " %s (%s) |", fmtMs(ts[i].TTFT.P50), fmtMs(ts[i].TTFT.P99))
		}
		last := ts[len(ts)-1].TTFT.P50
		if first := ts[0].TTFT.P50; first > 0 && last > 0 {
			fmt.Fprintf(b, " %.2f |\n", last/first)
		} else {
			b.WriteString(" – |\n")
		}
	}
	b.WriteString("\n")
}

// turnChart draws TTFT p50 and p99 against the turn of multi-turn
// sessions, a line per configuration, a panel per load level.
func (v *view) turnChart() (*figure, string) {
	order, groups := v.llmGroups()
	loads := panelLoads(v.loads, maxPanels)
	f := &figure{title: "TTFT by turn (p50 solid ●, p99 dashed ▲)", cols: min(len(loads), 2)}
	turns, hi, flagged := 0, 0.0, false
	for _, l := range loads {
		p := newPlot("at "+loadLabel(l), "turn of the session", "time to first token (ms)")
		drawn := false
		for _, s := range order {
			for _, r := range groups[s] {
				if r.Point.Load != l || r.LLM == nil || len(r.LLM.Turns) == 0 {
					continue
				}
				col := v.llmColor(s)
				for _, q := range []struct {
					get    func(record.MsStats) float64
					mark   shape
					dashes []float64
				}{{func(m record.MsStats) float64 { return m.P50 }, circle, nil}, {func(m record.MsStats) float64 { return m.P99 }, triangle, []float64{7, 4}}} {
					var xys plotter.XYs
					for _, t := range r.LLM.Turns {
						if t.TTFT.N > 0 {
							xys = append(xys, plotter.XY{X: float64(t.Turn), Y: q.get(t.TTFT)})
							hi = max(hi, q.get(t.TTFT))
						}
					}
					if len(xys) == 0 {
						continue
					}
					g := glyph(col, q.mark, !trusted(r), 4)
					p.Add(&plotter.Line{XYs: xys, LineStyle: line(col, 2, q.dashes...)}, &plotter.Scatter{XYs: xys, GlyphStyle: g})
					drawn = true
				}
				turns = max(turns, len(r.LLM.Turns))
				flagged = flagged || !trusted(r)
			}
		}
		if drawn {
			f.panels = append(f.panels, p)
		}
	}
	if len(f.panels) == 0 {
		return nil, "the run has no multi-turn sessions (payload.multi_turn)"
	}
	var ticks []plot.Tick
	for t := 1; t <= turns; t++ {
		ticks = append(ticks, plot.Tick{Value: float64(t), Label: fmt.Sprint(t)})
	}
	for _, p := range f.panels {
		p.X.Min, p.X.Max = 0.7, float64(turns)+0.3
		p.X.Tick.Marker = plot.ConstantTicks(ticks)
		p.Y.Min, p.Y.Max = 0, math.Max(hi*1.1, 1)
	}
	var drawnOrder []llmSeries
	for _, s := range order {
		for _, r := range groups[s] {
			if r.LLM != nil && len(r.LLM.Turns) > 0 {
				drawnOrder = append(drawnOrder, s)
				break
			}
		}
	}
	v.addLLMLegend(f, drawnOrder)
	g50, g99 := glyph(noteColor, circle, false, 4), glyph(noteColor, triangle, false, 4)
	f.add("p50", lineThumb(line(noteColor, 2), &g50))
	f.add("p99", lineThumb(line(noteColor, 2, 7, 4), &g99))
	if flagged {
		addFlaggedLegend(f)
	}
	f.note("Each turn sends the conversation so far and a new message: without a prefix cache its prompt, and so its prefill, grows with every turn; with one, a turn computes only what is new.")
	if len(loads) < len(v.loads) {
		f.note("%d of the run's %d load levels are drawn; summary.md lists every point.", len(loads), len(v.loads))
	}
	return f, ""
}
