package loadgen

import (
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/inferhq/infer/loadgen/attack"
	"github.com/inferhq/infer/loadgen/llm"
	"github.com/inferhq/infer/loadgen/record"
)

// Phase is what a run is doing.
type Phase string

// Phases of a run.
const (
	PhaseStarting    Phase = "starting server"
	PhaseConfiguring Phase = "configuring targets"
	PhaseWarmup      Phase = "warm-up"
	PhaseMeasuring   Phase = "measuring"
	PhaseDraining    Phase = "draining" // an LLM point's window is over; its streams finish
	PhaseStopping    Phase = "stopping"
	PhaseDone        Phase = "done"
)

// Snapshot is a run's state at one moment, aggregated for display: Run
// publishes one a few times a second, never one per request.
type Snapshot struct {
	Scenario string
	// Shared are the settings every batched point has, which point names
	// leave out (Shared): like "w=1 lat=20ms".
	Shared  string
	Dir     string // the run directory
	Points  int    // points in the sweep
	Done    int    // points finished whole (a point cut short is not done)
	Elapsed time.Duration
	ETA     time.Duration // estimated time left

	Phase   Phase
	Index   int          // the current point's index
	Point   record.Point // the current point
	Repeat  int          // from 1
	Repeats int
	// PointElapsed and PointTotal are the load time spent and planned in
	// the current point (warm-ups included, server start excluded).
	PointElapsed, PointTotal time.Duration
	// PhaseElapsed and PhaseTotal are the time spent and planned in the
	// current repeat's phase: its warm-up, or its measured window.
	PhaseElapsed, PhaseTotal time.Duration

	// Over the last Window: answers per second, the open loop's target
	// rate now (0 in closed loop), latency percentiles of successful
	// requests, and the server's mean batch size from Server-Timing.
	Window     time.Duration
	RPS        float64
	TargetRate float64
	P50, P99   time.Duration
	Batch      float64 // items per batch, each batch counted once
	// LagP99 and LagMax are how late requests went out against the open
	// loop's schedule (0 in closed loop).
	LagP99, LagMax time.Duration
	// MeasuredRPS is the successful answers per second received so far
	// in the current repeat's measured window: what its record will say
	// (0 in the warm-up).
	MeasuredRPS float64
	// Status counts answers by status since the current point began
	// (warm-up included); LastError is the latest failure's text.
	Status    map[string]int
	LastError string
	// Spark holds the p99 latency of each recent tick, oldest first.
	Spark []time.Duration

	Finished []Row // summaries of the finished points, in order
	Stopping bool  // a stop was asked for
	// Notices are what the run found missing or assumed (no /metrics, no
	// Server-Timing, answers checked by status only…), each said once.
	Notices []string

	// LLM is the current point's live state when it is a streaming LLM
	// load (the fields above about answers and batches are then unset);
	// nil otherwise.
	LLM *LLMLive
	// Search is the capacity search's state (load.search); nil for a
	// sweep of levels.
	Search *SearchLive
}

// LLMLive is an LLM point's live state: the client's (package llm's
// snapshot: streams open, TTFT, TPOT and ITL p50 and p99 since the
// point's start, tokens/s and requests/s over its Window) and, when the
// target is an infer generation server, its gauges.
type LLMLive struct {
	llm.Snapshot
	Server *GenGauges // nil without infer_gen_ metrics
}

// GenGauges are an infer generation server's gauges for the point's
// endpoint, summed over targets (KV usage averaged).
type GenGauges struct {
	Running, Waiting float64
	KV               float64 // share of the KV capacity in use, 0 to 1
	MaxSeqs          int     // the /v1 engine's --max-seqs, 0 when unknown
}

// Snapshot defaults.
const (
	DefaultTick = 250 * time.Millisecond
	windowTicks = 8  // the live window: 2 s at the default tick
	sparkLen    = 60 // ticks of sparkline history
)

// monitor holds what snapshots are made from. The run loop sets the
// progress fields; the attack feeds outcomes; a ticker takes snapshots.
type monitor struct {
	mu  sync.Mutex
	now func() time.Time

	snap      Snapshot  // progress fields, as last set
	runStart  time.Time //
	remaining time.Duration
	// The current attack: when it began and its shape.
	attackStart      time.Time
	warmup, duration time.Duration
	load             record.Load
	perRepeat        time.Duration

	buckets  [windowTicks]attack.Tally // the live window, by tick
	measured int                       // successful answers received in the current measured window
	cur      int
	ticks    int // ticks since the current point began, up to windowTicks-1
	lastTick time.Time
	spark    []time.Duration

	llm *llm.Snapshot // the LLM point's latest, nil for other points
	gen *GenGauges

	search *SearchLive // the capacity search's state, nil without one
}

func newMonitor(now func() time.Time, scenario, shared, dir string, points int) *monitor {
	m := &monitor{now: now, runStart: now()}
	m.lastTick = m.runStart
	m.snap = Snapshot{Scenario: scenario, Shared: shared, Dir: dir, Points: points, Phase: PhaseStarting}
	return m
}

// startPoint resets the live numbers for point p; remaining is the planned
// time of the points after it.
func (m *monitor) startPoint(p Plan, repeats int, perRepeat, remaining time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.snap.Index, m.snap.Point = p.Index, p.Point
	m.snap.Repeat, m.snap.Repeats = 0, repeats
	m.snap.PointTotal = time.Duration(repeats) * perRepeat
	m.snap.Status, m.snap.LastError = nil, ""
	m.perRepeat, m.remaining = perRepeat, remaining
	m.attackStart = time.Time{}
	m.buckets = [windowTicks]attack.Tally{}
	m.ticks = 0
	m.lastTick = m.now()
	m.spark = nil
	m.llm, m.gen = nil, nil
}

// llmLive keeps an LLM point's latest snapshot (llm.RunConfig.Progress).
func (m *monitor) llmLive(s llm.Snapshot) {
	s.LastError = record.Printable(s.LastError) // a server's text
	m.mu.Lock()
	m.llm = &s
	m.mu.Unlock()
}

// genLive keeps the generation server's latest gauges.
func (m *monitor) genLive(g GenGauges) {
	m.mu.Lock()
	m.gen = &g
	m.mu.Unlock()
}

func (m *monitor) setPhase(ph Phase) {
	m.mu.Lock()
	m.snap.Phase = ph
	m.mu.Unlock()
}

// startAttack marks the start of repeat (from 1) of the current point.
func (m *monitor) startAttack(repeat int, load record.Load, warmup, duration time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.snap.Repeat = repeat
	m.attackStart = m.now()
	m.load, m.warmup, m.duration = load, warmup, duration
	m.measured = 0
}

func (m *monitor) finishPoint(r Row) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !r.Partial {
		m.snap.Done++
	}
	m.snap.Finished = append(m.snap.Finished, r)
	m.attackStart = time.Time{}
}

// notice records a notice, unless it was given already.
func (m *monitor) notice(text string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !slices.Contains(m.snap.Notices, text) {
		m.snap.Notices = append(m.snap.Notices, text)
	}
}

func (m *monitor) stopping() {
	m.mu.Lock()
	m.snap.Stopping = true
	m.mu.Unlock()
}

// add counts one answer.
func (m *monitor) add(o *attack.Outcome) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.buckets[m.cur].Add(o)
	if m.snap.Status == nil {
		m.snap.Status = make(map[string]int)
	}
	m.snap.Status[o.Status]++
	if !o.OK() {
		m.snap.LastError = o.ErrText
		return
	}
	if !m.attackStart.IsZero() {
		start := m.attackStart.Add(m.warmup)
		if done := o.Sent.Add(o.Latency); !done.Before(start) && done.Before(start.Add(m.duration)) {
			m.measured++
		}
	}
}

// tick closes the current bucket: its p99 joins the sparkline.
func (m *monitor) tick() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.attackStart.IsZero() {
		m.spark = append(m.spark, m.buckets[m.cur].Latency().Quantile(0.99))
		if len(m.spark) > sparkLen {
			m.spark = m.spark[len(m.spark)-sparkLen:]
		}
	}
	m.cur = (m.cur + 1) % windowTicks
	m.buckets[m.cur] = attack.Tally{}
	m.ticks = min(m.ticks+1, windowTicks-1)
	m.lastTick = m.now()
}

// snapshot returns the state now; tick is the ticker's period.
func (m *monitor) snapshot(tick time.Duration) Snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	s := m.snap
	s.Status = maps.Clone(m.snap.Status)
	s.Finished = append([]Row(nil), m.snap.Finished...)
	s.Notices = slices.Clone(m.snap.Notices)
	s.Spark = append([]time.Duration(nil), m.spark...)
	s.Search = m.searchSnapshot()
	s.Elapsed = now.Sub(m.runStart)
	if !m.attackStart.IsZero() {
		in := now.Sub(m.attackStart)
		s.PointElapsed = min(time.Duration(max(s.Repeat-1, 0))*m.perRepeat+min(in, m.perRepeat), s.PointTotal)
		if s.Phase == PhaseWarmup || s.Phase == PhaseMeasuring {
			if in < m.warmup {
				s.Phase = PhaseWarmup
				s.PhaseElapsed, s.PhaseTotal = in, m.warmup
			} else {
				s.Phase = PhaseMeasuring
				s.PhaseElapsed, s.PhaseTotal = min(in-m.warmup, m.duration), m.duration
				if s.PhaseElapsed > 0 {
					s.MeasuredRPS = float64(m.measured) / s.PhaseElapsed.Seconds()
				}
			}
		}
		s.TargetRate = attack.TargetRate(m.load, in-m.warmup, m.duration)
	}
	if m.llm != nil {
		s.LLM = &LLMLive{Snapshot: *m.llm, Server: m.gen}
		if m.llm.Phase == llm.PhaseDraining && (s.Phase == PhaseMeasuring || s.Phase == PhaseWarmup) {
			s.Phase = PhaseDraining
			s.PhaseElapsed, s.PhaseTotal = 0, 0
		}
	}
	s.ETA = s.PointTotal - s.PointElapsed + m.remaining
	if s.Phase == PhaseDone {
		s.ETA = 0
	}
	// The live window: the finished buckets plus the filling one.
	var agg attack.Tally
	n := m.ticks + 1
	for i := range n {
		agg.Merge(&m.buckets[(m.cur-i+windowTicks)%windowTicks])
	}
	s.Window = time.Duration(n-1)*tick + now.Sub(m.lastTick)
	if s.Window > 0 {
		s.RPS = float64(agg.Sent()) / s.Window.Seconds()
	}
	s.P50, s.P99 = agg.Latency().Quantile(0.5), agg.Latency().Quantile(0.99)
	s.LagP99, s.LagMax = agg.Lag().Quantile(0.99), agg.Lag().Max()
	s.Batch = agg.ServerSide().Batch
	return s
}
