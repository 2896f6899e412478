package llm

import (
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/inferhq/infer/loadgen/record"
)

// Stats defaults and bounds.
const (
	// DefaultMaxLag is the least that the schedule lag must move an
	// open-loop point's p99 TTFT by for the point to be flagged
	// record.FlagScheduleLag (see flags).
	DefaultMaxLag = 10 * time.Millisecond
	// DefaultTimeline is how many requests the timeline samples.
	DefaultTimeline = 200
	maxTimeline     = 10000
	// minAchieved is today's bench's bound: an open loop that sent less
	// than this share of its schedule in the window was held back.
	minAchieved = 0.95
	// HitShare is the share of its prompt a request must have found
	// cached to count as a prefix-cache hit (record.LLMPrefix): more
	// than a shared first block, which nearly every request of a trace
	// has.
	HitShare = 0.5
)

// StatsConfig describes the measured window and what to judge it by.
type StatsConfig struct {
	// Start and End bound the measured window: a request is in it when
	// its intended send time is.
	Start, End time.Time
	API        API
	Stream     bool
	Model      string
	SLO        record.LLMSLO
	// Open is whether the load is an open loop (it has a schedule).
	Open bool
	// MaxLag is the schedule-lag bound; 0: DefaultMaxLag.
	MaxLag time.Duration
	// Timeline is how many requests to sample (0: DefaultTimeline, < 0:
	// none); Seed makes the sample reproducible.
	Timeline int
	Seed     uint64
}

// Stats folds Results into a record.LLM with vLLM's definitions (see
// record.LLM) and keeps live figures since the start for Snapshots. It is
// safe for concurrent use; Add takes a lock for the few microseconds of a
// request's bookkeeping (its ITLs into a histogram).
type Stats struct {
	cfg StatsConfig
	mu  sync.Mutex

	// Requests sent (by intended time) in the window.
	scheduled, requests, completed, failed, unfinished int
	failures, errors                                   map[string]int
	status                                             map[string]int
	ttft, tpot, itl, e2el, queue, lag, fiTTFT, fiE2EL  dist
	prompt, output                                     int64
	src                                                record.TokenSources
	notStreamed, noDone                                int
	timed                                              int
	srvQueue, srvTTFT                                  time.Duration
	sampled                                            []record.Span
	seen                                               int // window requests offered to the sample
	rng                                                *rand.Rand
	prefix                                             prefixStats
	turns                                              []turnStats // by turn, from 1

	// What happened in the window, whenever sent: actual sends, requests
	// completed, good ones, their prompt tokens, output tokens received.
	sentInWindow, doneInWindow, goodInWindow int
	chunksInWindow                           int
	promptInWindow                           int64
	tokensInWindow                           float64
	seconds                                  seconds

	live liveStats
}

// NewStats returns empty stats for cfg.
func NewStats(cfg StatsConfig) *Stats {
	if cfg.MaxLag <= 0 {
		cfg.MaxLag = DefaultMaxLag
	}
	switch {
	case cfg.Timeline == 0:
		cfg.Timeline = DefaultTimeline
	case cfg.Timeline > maxTimeline:
		cfg.Timeline = maxTimeline
	}
	return &Stats{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 0x11e))}
}

func (s *Stats) inWindow(t time.Time) bool {
	return !t.Before(s.cfg.Start) && t.Before(s.cfg.End)
}

// Schedule counts one send the schedule planned at intended (open loop).
func (s *Stats) Schedule(intended time.Time) {
	if !s.inWindow(intended) {
		return
	}
	s.mu.Lock()
	s.scheduled++
	s.mu.Unlock()
}

// Add folds in one finished request.
func (s *Stats) Add(r *Result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.live.add(r)
	if s.inWindow(r.Sent) {
		s.sentInWindow++
	}
	in := 0 // content chunks received in the window
	for _, c := range r.Chunks {
		if s.inWindow(r.Sent.Add(c)) {
			in++
		}
	}
	s.chunksInWindow += in
	s.seconds.add(s.cfg.Start, s.cfg.End, r)
	if r.OK() {
		good := s.cfg.SLO.Good(r.TTFT(), r.TPOT(), r.E2EL())
		if s.inWindow(r.Sent.Add(r.E2EL())) {
			s.doneInWindow++
			s.promptInWindow += int64(r.PromptTokens)
			if good {
				s.goodInWindow++
			}
		}
		if n := len(r.Chunks); n > 0 {
			s.tokensInWindow += float64(r.OutputTokens) * float64(in) / float64(n)
		}
	}
	if r.Cause == CauseCancelled {
		// The run cut it off at the drain: neither success nor failure,
		// counted even when it was sent during the warm-up (a stream that
		// never ends is cut whenever it started).
		s.unfinished++
		return
	}
	if !s.inWindow(r.Intended) {
		return
	}
	s.sample(r)
	s.requests++
	s.countStatus(r)
	s.lag.record(r.Lag())
	s.queue.record(r.Queue())
	if !r.OK() {
		s.failed++
		if s.failures == nil {
			s.failures = make(map[string]int)
		}
		s.failures[string(r.Cause)]++
		s.errors = record.CountError(s.errors, r.Err, 1)
		return
	}
	s.completed++
	ttft, e2el := r.TTFT(), r.E2EL()
	s.ttft.record(ttft)
	s.e2el.record(e2el)
	s.fiTTFT.record(r.Sent.Sub(r.Intended) + ttft)
	s.fiE2EL.record(r.Sent.Sub(r.Intended) + e2el)
	if r.OutputTokens > 1 {
		s.tpot.record(r.TPOT())
	}
	for i := 1; i < len(r.Chunks); i++ {
		s.itl.record(r.Chunks[i] - r.Chunks[i-1])
	}
	s.prompt += int64(r.PromptTokens)
	s.output += int64(r.OutputTokens)
	s.prefix.add(r)
	s.addTurn(r)
	switch r.Source {
	case FromUsage:
		s.src.Usage++
	case FromTokenizer:
		s.src.Tokenizer++
	default:
		s.src.Chunks++
	}
	if s.cfg.Stream && !r.Streamed {
		s.notStreamed++
	}
	if r.Timed {
		s.timed++
		s.srvQueue += r.ServerQueue
		s.srvTTFT += r.ServerTTFT
	}
	if r.Streamed && !r.Done {
		s.noDone++
	}
}

// prefixStats are the window's completed requests that said their cached
// tokens.
type prefixStats struct {
	reported, hits, misses int
	prompt, cached         int64
	ttftHit, ttftMiss      dist
}

func (p *prefixStats) add(r *Result) {
	if !r.CachedKnown {
		return
	}
	p.reported++
	p.prompt += int64(r.PromptTokens)
	p.cached += int64(r.Cached)
	if r.PromptTokens > 0 && float64(r.Cached) >= HitShare*float64(r.PromptTokens) {
		p.hits++
		p.ttftHit.record(r.TTFT())
	} else {
		p.misses++
		p.ttftMiss.record(r.TTFT())
	}
}

func (p *prefixStats) record() *record.LLMPrefix {
	if p.reported == 0 {
		return nil
	}
	out := &record.LLMPrefix{Reported: p.reported, PromptTokens: p.prompt, CachedTokens: p.cached, HitShare: HitShare,
		Hits: p.hits, Misses: p.misses, TTFTHit: p.ttftHit.stats(), TTFTMiss: p.ttftMiss.stats()}
	if p.prompt > 0 {
		out.HitRate = record.Round3(float64(p.cached) / float64(p.prompt))
	}
	return out
}

// turnStats are the window's completed requests of one session turn.
type turnStats struct {
	ttft           dist
	n              int
	prompt, cached int64
}

func (s *Stats) addTurn(r *Result) {
	if r.Turn < 1 || r.Turn > MaxTurns {
		return
	}
	for len(s.turns) < r.Turn {
		s.turns = append(s.turns, turnStats{})
	}
	t := &s.turns[r.Turn-1]
	t.ttft.record(r.TTFT())
	t.n++
	t.prompt += int64(r.PromptTokens)
	t.cached += int64(r.Cached)
}

func (s *Stats) turnRecords() []record.LLMTurn {
	var out []record.LLMTurn
	for i := range s.turns {
		t := &s.turns[i]
		lt := record.LLMTurn{Turn: i + 1, TTFT: t.ttft.stats()}
		if t.n > 0 {
			lt.PromptTokens = record.Round3(float64(t.prompt) / float64(t.n))
			lt.CachedTokens = record.Round3(float64(t.cached) / float64(t.n))
		}
		out = append(out, lt)
	}
	return out
}

func (s *Stats) countStatus(r *Result) {
	if s.status == nil {
		s.status = make(map[string]int)
	}
	key := "error"
	if r.Status != 0 {
		key = strconv.Itoa(r.Status)
	}
	s.status[key]++
}

// sample keeps a uniform sample of the window's requests (reservoir
// sampling with the configured seed).
func (s *Stats) sample(r *Result) {
	k := s.cfg.Timeline
	if k <= 0 {
		return
	}
	s.seen++
	slot := len(s.sampled)
	if slot >= k {
		slot = s.rng.IntN(s.seen)
		if slot >= k {
			return
		}
	}
	from := func(t time.Time) record.Duration { return record.Duration(t.Sub(s.cfg.Start)) }
	sp := record.Span{Intended: from(r.Intended), Sent: from(r.Sent), End: from(r.Sent.Add(r.End)), OK: r.OK(), OutputTokens: r.OutputTokens}
	if len(r.Chunks) > 0 {
		sp.FirstToken = from(r.Sent.Add(r.TTFT()))
		sp.LastToken = from(r.Sent.Add(r.E2EL()))
	}
	if slot == len(s.sampled) {
		s.sampled = append(s.sampled, sp)
	} else {
		s.sampled[slot] = sp
	}
}

// Counts are a Stats' request counts in the window.
type Counts struct {
	Scheduled int // open loop: sends planned in the window
	Sent      int // sent in the window, by actual send time
	// Status counts the window's requests by HTTP status ("error": no
	// answer), as record.Record.Status.
	Status map[string]int
}

// Counts returns the window's counts.
func (s *Stats) Counts() Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Counts{Scheduled: s.scheduled, Sent: s.sentInWindow, Status: clone(s.status)}
}

// Record summarises the window. window is the measured time (shorter than
// End − Start when the run was stopped early); histograms says whether to
// include the distributions.
func (s *Stats) Record(window time.Duration, histograms bool) record.LLM {
	s.mu.Lock()
	defer s.mu.Unlock()
	secs := window.Seconds()
	rate := func(n float64) float64 {
		if secs <= 0 {
			return 0
		}
		return n / secs
	}
	l := record.LLM{
		API: s.cfg.API.String(), Stream: s.cfg.Stream, Model: s.cfg.Model,
		Scheduled: s.scheduled, Requests: s.requests, Completed: s.completed, Failed: s.failed,
		Failures: clone(s.failures), Unfinished: s.unfinished, Errors: clone(s.errors),
		TTFT: s.ttft.stats(), TPOT: s.tpot.stats(), ITL: s.itl.stats(), E2EL: s.e2el.stats(),
		RequestsPerS:     rate(float64(s.doneInWindow)),
		OutputTokensPerS: rate(s.tokensInWindow),
		TotalTokensPerS:  rate(float64(s.promptInWindow) + s.tokensInWindow),
		GoodputPerS:      rate(float64(s.goodInWindow)),
		ChunksPerS:       rate(float64(s.chunksInWindow)),
		Good:             s.goodInWindow,
		PromptTokens:     s.prompt, OutputTokens: s.output, TokenSource: s.src,
		NotStreamed: s.notStreamed, NoDone: s.noDone,
		Queue: s.queue.stats(), Lag: s.lag.stats(),
		FromIntended: record.FromIntended{TTFT: s.fiTTFT.stats(), E2EL: s.fiE2EL.stats()},
		SLO:          s.cfg.SLO,
	}
	if histograms {
		cp := func(d *dist) *record.Histogram {
			var c record.Histogram
			c.Merge(&d.h)
			return &c
		}
		l.Histograms = &record.LLMHistograms{TTFT: cp(&s.ttft), TPOT: cp(&s.tpot), ITL: cp(&s.itl), E2EL: cp(&s.e2el)}
		if s.prefix.reported > 0 {
			l.Histograms.TTFTHit, l.Histograms.TTFTMiss = cp(&s.prefix.ttftHit), cp(&s.prefix.ttftMiss)
		}
		for i := range s.turns {
			l.Histograms.Turns = append(l.Histograms.Turns, cp(&s.turns[i].ttft))
		}
	}
	l.Prefix = s.prefix.record()
	l.Turns = s.turnRecords()
	if s.timed > 0 {
		mean := func(d time.Duration) float64 { return math.Round(float64(d)/float64(s.timed)/1e3) / 1e3 }
		l.Timing = &record.LLMTiming{Timed: s.timed, QueueMean: mean(s.srvQueue), TTFTMean: mean(s.srvTTFT)}
	}
	if len(s.sampled) > 0 {
		l.Timeline = slices.Clone(s.sampled)
		slices.SortFunc(l.Timeline, func(a, b record.Span) int { return int(a.Intended - b.Intended) })
	}
	l.Seconds = s.seconds.record(window)
	l.Flags = s.flags()
	return l
}

// flags judges the window (the lock held).
func (s *Stats) flags() []string {
	var f []string
	if s.cfg.Open && s.scheduled > 0 && float64(s.sentInWindow) < minAchieved*float64(s.scheduled) {
		f = append(f, record.FlagCoordinatedOmission)
	}
	if s.cfg.Open && s.behindSchedule() {
		f = append(f, record.FlagScheduleLag)
	}
	if s.failed > 0 {
		f = append(f, record.FlagErrors)
	}
	if s.completed == 0 {
		f = append(f, record.FlagNoSuccess)
	}
	if s.src.Tokenizer+s.src.Chunks > 0 {
		f = append(f, record.FlagNoUsage)
	}
	if s.notStreamed > 0 {
		f = append(f, record.FlagNotStreamed)
	}
	return f
}

// behindSchedule reports whether the sends lagged the schedule enough to
// matter, by the rule of infer bench's other points: the p99 TTFT measured
// from the intended send passes the one from the actual send by over a
// tenth of it and by MaxLag. A lag that moves the p99 less (a busy
// machine's timer jitter under slow answers) leaves the figures standing.
// The lock is held.
func (s *Stats) behindSchedule() bool {
	if s.lag.h.Count() == 0 || s.ttft.h.Count() == 0 {
		return false
	}
	p99 := s.ttft.p99()
	return s.fiTTFT.p99()-p99 > max(s.cfg.MaxLag, p99/10)
}

// clone copies m; an empty map becomes nil.
func clone(m map[string]int) map[string]int {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}
