package llm

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inferhq/infer/loadgen/record"
)

// Pacer is vegeta.Pacer's method set, so that package attack's pacers
// (vegeta's, and its Poisson and gamma ones) drive the open loop without
// this package importing vegeta: Pace returns how long to wait before hit
// number hits (from 0) given the time elapsed since the start, or stop.
type Pacer interface {
	Pace(elapsed time.Duration, hits uint64) (wait time.Duration, stop bool)
	Rate(elapsed time.Duration) float64
}

// Source makes the requests of a run: Request(i) is the i-th, from 0. The
// open loop calls it from one goroutine, ahead of the send time; the
// closed loop from each client, so it must be safe for concurrent use.
type Source interface {
	Request(i uint64) *Request
}

// Run bounds and defaults.
const (
	// DefaultMaxInFlight bounds the open loop's streams in flight.
	DefaultMaxInFlight = 4096
	// MaxStreams bounds streams in flight and closed-loop clients.
	MaxStreams = 100000
	// DefaultDrain is how long streams sent in the window may finish
	// after it.
	DefaultDrain = time.Minute
	// DefaultTick is the snapshot period.
	DefaultTick = 250 * time.Millisecond
	// stopGrace is how long streams may finish after a stop.
	stopGrace = 2 * time.Second
	// maxGeneratorCPU is today's bench's bound: a generator using this
	// share of its cores or more was the limit.
	maxGeneratorCPU = 0.9
)

// RunConfig configures Run.
type RunConfig struct {
	Client *Client
	// Clients, when set, take Client's place: request i goes to
	// Clients[i % len(Clients)], so that a load spreads over the frontends
	// of one deployment.
	Clients []*Client
	Source  Source
	// API, Stream and Model describe the requests, for the record.
	API    API
	Stream bool
	Model  string

	// Pacer drives an open loop: the intended send time of each request
	// comes from it, whatever the server does; a request is sent when a
	// stream slot is free, and its lateness is recorded. Nil: a closed
	// loop of Concurrency clients, each sending when answered.
	Pacer       Pacer
	Concurrency int
	// MaxInFlight bounds the open loop's streams in flight (default
	// DefaultMaxInFlight): when all are busy, due requests queue in the
	// client and are sent late, in order.
	MaxInFlight int

	// Warmup is sent but not measured; Duration is the measured window;
	// Drain is how long the window's streams may finish after it (default
	// DefaultDrain), after which they are cut off and counted unfinished.
	Warmup, Duration, Drain time.Duration

	SLO      record.LLMSLO
	MaxLag   time.Duration // see StatsConfig
	Timeline int           // see StatsConfig
	Seed     uint64        // for the timeline sample
	// Histograms keeps the distributions in the record.
	Histograms bool

	// Progress, if set, receives a Snapshot every Tick (default
	// DefaultTick) and a last one (PhaseDone). It is called from one
	// goroutine and should return quickly.
	Progress func(Snapshot)
	Tick     time.Duration
	// Cores is the CPU the client may use, for the saturation flag.
	// Default GOMAXPROCS.
	Cores int
}

// Outcome is what Run measured.
type Outcome struct {
	LLM record.LLM
	// Start is the measured window's start; Window its length (shorter
	// than asked when stopped).
	Start  time.Time
	Window time.Duration
	// Sent counts sends in the window by actual time; TargetRate is the
	// schedule's rate over the window (0 in closed loop), AchievedRate
	// the sends' rate.
	Sent                     int
	TargetRate, AchievedRate float64
	Status                   map[string]int
	// ClientCPU is this process's CPU use over the window, in cores (as
	// record.Record.GeneratorCPU); -1 when unknown.
	ClientCPU float64
	Stopped   bool // ctx was done before the end
}

// ErrConfig is wrapped by Run's configuration errors.
var ErrConfig = errors.New("llm run config")

func (c *RunConfig) check() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case (c.Client == nil && len(c.Clients) == 0) || c.Source == nil || slices.Contains(c.Clients, nil):
		return bad("a client and a source are required")
	case c.Duration <= 0:
		return bad("duration %v: want > 0", c.Duration)
	case c.Warmup < 0 || c.Drain < 0:
		return bad("negative warm-up or drain")
	case c.Pacer == nil && (c.Concurrency < 1 || c.Concurrency > MaxStreams):
		return bad("closed loop: concurrency %d, want 1 to %d", c.Concurrency, MaxStreams)
	case c.MaxInFlight < 0 || c.MaxInFlight > MaxStreams:
		return bad("max in flight %d, want 0 (default) to %d", c.MaxInFlight, MaxStreams)
	}
	if _, ok := c.Source.(SessionSource); ok && c.Pacer != nil {
		return bad("a multi-turn workload runs its sessions on a closed loop, not on a pacer")
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if len(c.Clients) == 0 {
		c.Clients = []*Client{c.Client}
	}
	if c.Drain == 0 {
		c.Drain = DefaultDrain
	}
	if c.Tick <= 0 {
		c.Tick = DefaultTick
	}
	if c.Cores <= 0 {
		c.Cores = runtime.GOMAXPROCS(0)
	}
	return nil
}

// runner is one Run's state.
type runner struct {
	cfg   RunConfig
	stats *Stats
	start time.Time
	// reqCtx is given to every request; cancelling it cuts off the
	// streams still open (after the drain or a stop's grace).
	reqCtx context.Context
	open   atomic.Int64
	sent   atomic.Int64
	tokens atomic.Int64
	phase  atomic.Value // Phase
	wg     sync.WaitGroup
	pool   sync.Pool // *Result

	panicMu sync.Mutex
	panicV  any
}

// Run sends the load of cfg and measures it. It returns when every stream
// has ended; a done ctx stops the sending, lets open streams finish for a
// short grace, then cuts them off (the Outcome is marked Stopped).
func Run(ctx context.Context, cfg RunConfig) (*Outcome, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	reqCtx, cutOff := context.WithCancel(context.WithoutCancel(ctx))
	defer cutOff()
	r := &runner{cfg: cfg, reqCtx: reqCtx, start: time.Now()}
	r.pool.New = func() any { return new(Result) }
	winStart := r.start.Add(cfg.Warmup)
	winEnd := winStart.Add(cfg.Duration)
	r.stats = NewStats(StatsConfig{
		Start: winStart, End: winEnd, API: cfg.API, Stream: cfg.Stream, Model: cfg.Model, SLO: cfg.SLO,
		Open: cfg.Pacer != nil, MaxLag: cfg.MaxLag, Timeline: cfg.Timeline, Seed: cfg.Seed,
	})
	r.phase.Store(PhaseWarmup)
	if cfg.Warmup == 0 {
		r.phase.Store(PhaseMeasuring)
	}

	// The reporter: snapshots, the window's phases and its CPU.
	reportDone := make(chan struct{})
	var cpu cpuWindow
	var reporter sync.WaitGroup
	reporter.Add(1)
	go func() {
		defer reporter.Done()
		r.report(ctx, winStart, winEnd, &cpu, reportDone)
	}()

	if cfg.Pacer != nil {
		r.openLoop(ctx, winEnd)
	} else {
		r.closedLoop(ctx, winEnd)
	}
	var stoppedAt time.Time // when a stop cut the window short
	if ctx.Err() != nil {
		stoppedAt = time.Now()
	}

	// Let the streams finish: until the drain ends, or a short grace
	// after a stop; then cut them off.
	r.phase.Store(PhaseDraining)
	finished := make(chan struct{})
	go func() { r.wg.Wait(); close(finished) }()
	grace := time.NewTimer(max(cfg.Drain-time.Since(winEnd), 0))
	select {
	case <-finished:
	case <-grace.C:
	case <-ctx.Done():
		select {
		case <-finished:
		case <-time.After(stopGrace):
		}
	}
	grace.Stop()
	stopped := ctx.Err() != nil
	cutOff()
	<-finished
	close(reportDone)
	reporter.Wait()
	if r.panicV != nil {
		panic(r.panicV)
	}

	window := cfg.Duration
	if !stoppedAt.IsZero() && stoppedAt.Before(winEnd) {
		window = max(stoppedAt.Sub(winStart), 0)
	}
	out := &Outcome{Start: winStart, Window: window, Stopped: stopped, ClientCPU: cpu.cores()}
	out.LLM = r.stats.Record(window, cfg.Histograms)
	counts := r.stats.Counts()
	out.Sent, out.Status = counts.Sent, counts.Status
	if secs := window.Seconds(); secs > 0 {
		out.AchievedRate = float64(counts.Sent) / secs
		if cfg.Pacer != nil {
			out.TargetRate = float64(counts.Scheduled) / secs
		}
	}
	if out.ClientCPU >= maxGeneratorCPU*float64(cfg.Cores) {
		out.LLM.Flags = append(out.LLM.Flags, record.FlagGeneratorSaturated)
	}
	if r.cfg.Progress != nil {
		r.cfg.Progress(r.snapshot(time.Now(), PhaseDone))
	}
	return out, nil
}

// openLoop sends on the pacer's schedule until the window's end or ctx.
// Intended times come from the pacer on a virtual clock, so a late send
// never shifts the ones after it; a request waits for a stream slot when
// all MaxInFlight are busy, and is sent late.
func (r *runner) openLoop(ctx context.Context, winEnd time.Time) {
	slots := make(chan struct{}, r.cfg.MaxInFlight)
	horizon := winEnd.Sub(r.start)
	var at time.Duration      // the next send's intended offset
	var slotWaitEnd time.Time // when the last wait for a slot ended
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for hits := uint64(0); ; hits++ {
		// Ask the pacer as vegeta's attack loop does, but on the
		// schedule's own clock.
		for {
			wait, stop := r.cfg.Pacer.Pace(at, hits)
			if stop {
				return
			}
			if wait <= 0 {
				break
			}
			at += wait
		}
		if at >= horizon {
			return
		}
		intended := r.start.Add(at)
		req := r.cfg.Source.Request(hits) // built before its time
		r.stats.Schedule(intended)
		// A request late because earlier ones waited for slots has
		// queued since its intended time; one late on its own (timers,
		// CPU) has not.
		var queueFrom time.Time
		if d := time.Until(intended); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
				return
			}
		} else if slotWaitEnd.After(intended) {
			queueFrom = intended
		}
		select {
		case slots <- struct{}{}:
		default:
			if queueFrom.IsZero() {
				queueFrom = time.Now()
			}
			select { // all busy: the request queues
			case slots <- struct{}{}:
				slotWaitEnd = time.Now()
			case <-ctx.Done():
				return
			}
		}
		var queued time.Duration
		if !queueFrom.IsZero() {
			queued = time.Since(queueFrom)
		}
		res := r.pool.Get().(*Result)
		res.Intended, res.Queued = intended, queued
		r.launch(r.client(hits), req, res, func() { <-slots })
	}
}

// closedLoop starts Concurrency clients, each sending its next request
// when answered until the window's end or ctx, and returns then: the
// clients' last streams drain (or are cut off) as the open loop's do. A
// SessionSource's clients run sessions (see sessions).
func (r *runner) closedLoop(ctx context.Context, winEnd time.Time) {
	var next atomic.Uint64
	client := func() { r.requests(ctx, winEnd, &next) }
	var stagger time.Duration
	if ss, ok := r.cfg.Source.(SessionSource); ok {
		client = func() { r.sessions(ctx, winEnd, ss, &next) }
		// Sessions that started together would keep in step, every
		// turn i arriving with the others' turn i; client c starts
		// c/Concurrency of a think time late instead.
		stagger = ss.ThinkTime() / time.Duration(r.cfg.Concurrency)
	}
	for c := range r.cfg.Concurrency {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			defer r.recoverPanic()
			if c > 0 && stagger > 0 && !waitUntil(ctx, time.Now().Add(time.Duration(c)*stagger)) {
				return
			}
			client()
		}()
	}
	waitUntil(ctx, winEnd)
}

// waitUntil waits until t or ctx is done; it reports whether t came.
func waitUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// requests is one closed-loop client: it sends the next request (by next)
// when its last was answered, until the window's end or ctx.
func (r *runner) requests(ctx context.Context, winEnd time.Time, next *atomic.Uint64) {
	for ctx.Err() == nil {
		i := next.Add(1) - 1
		if !r.send(r.client(i), r.cfg.Source.Request(i), winEnd, nil) {
			return
		}
	}
}

// send streams req on c now and waits for its end, unless the window has
// ended; it reports whether it sent.
func (r *runner) send(c *Client, req *Request, winEnd time.Time, after func(*Result)) bool {
	now := time.Now()
	if !now.Before(winEnd) {
		return false
	}
	res := r.pool.Get().(*Result)
	res.Intended, res.Queued = now, 0
	r.wg.Add(1)
	r.stream(c, req, res, after)
	return true
}

// sessions is one closed-loop client of a multi-turn workload: it runs
// one session (by next) after another, each turn sent when the last was
// answered and the think time has passed, until the window's end or ctx.
// A session keeps to one frontend (Clients), whose cache holds its
// conversation; one whose turn fails ends there.
func (r *runner) sessions(ctx context.Context, winEnd time.Time, ss SessionSource, next *atomic.Uint64) {
	think := ss.ThinkTime()
	for ctx.Err() == nil {
		k := next.Add(1) - 1
		sess, c := ss.Session(k), r.client(k)
		for req := sess.Next(); req != nil; req = sess.Next() {
			if due := time.Now().Add(think); sess.Turn() > 1 && think > 0 && (!due.Before(winEnd) || !waitUntil(ctx, due)) {
				return // the next turn would come after the window
			}
			if !r.send(c, req, winEnd, func(res *Result) {
				if res.OK() {
					sess.Answer(string(res.Text()), res.OutputTokens)
				}
			}) {
				return
			}
		}
	}
}

// client returns the client of request i.
func (r *runner) client(i uint64) *Client {
	return r.cfg.Clients[i%uint64(len(r.cfg.Clients))]
}

// launch runs one stream on a goroutine of its own.
func (r *runner) launch(c *Client, req *Request, res *Result, done func()) {
	r.wg.Add(1)
	go func() {
		defer done()
		r.stream(c, req, res, nil)
	}()
}

// stream sends one request and folds it into the stats, after handing the
// result to after (when not nil); the caller has done r.wg.Add(1).
func (r *runner) stream(c *Client, req *Request, res *Result, after func(*Result)) {
	defer r.wg.Done()
	defer r.recoverPanic()
	r.open.Add(1)
	r.sent.Add(1)
	c.Do(r.reqCtx, req, res, &r.tokens)
	r.open.Add(-1)
	if res.OK() {
		// The live count took a chunk for a token; usage says better.
		r.tokens.Add(int64(res.OutputTokens - len(res.Chunks)))
	}
	if after != nil {
		after(res)
	}
	r.stats.Add(res)
	r.pool.Put(res)
}

// recoverPanic keeps a stream's panic for Run to raise again once every
// goroutine has ended.
func (r *runner) recoverPanic() {
	if v := recover(); v != nil {
		r.panicMu.Lock()
		if r.panicV == nil {
			r.panicV = v
		}
		r.panicMu.Unlock()
	}
}

// report publishes snapshots, moves the phase at the window's start, and
// measures the process's CPU over the window, until done.
func (r *runner) report(ctx context.Context, winStart, winEnd time.Time, cpu *cpuWindow, done <-chan struct{}) {
	var tick <-chan time.Time
	if r.cfg.Progress != nil {
		t := time.NewTicker(r.cfg.Tick)
		defer t.Stop()
		tick = t.C
	}
	startT := time.NewTimer(time.Until(winStart))
	endT := time.NewTimer(time.Until(winEnd))
	defer startT.Stop()
	defer endT.Stop()
	for {
		select {
		case <-done:
			cpu.end()
			return
		case <-startT.C:
			cpu.begin()
			if r.phase.Load() == PhaseWarmup {
				r.phase.Store(PhaseMeasuring)
			}
		case <-endT.C:
			cpu.end()
		case now := <-tick:
			r.cfg.Progress(r.snapshot(now, r.phase.Load().(Phase)))
		case <-ctx.Done():
			cpu.end()
			ctx = context.Background() // report the stop's drain too
		}
	}
}

func (r *runner) snapshot(now time.Time, phase Phase) Snapshot {
	return r.stats.Snapshot(now, r.start, phase, int(r.open.Load()), int(r.sent.Load()), r.tokens.Load())
}

// cpuWindow measures the process's CPU between begin and end.
type cpuWindow struct {
	mu         sync.Mutex
	wall       time.Time
	cpu0, used time.Duration
	secs       float64
	ok, ended  bool
}

func (c *cpuWindow) begin() {
	c.mu.Lock()
	defer c.mu.Unlock()
	var err error
	c.cpu0, err = selfCPU()
	c.wall, c.ok = time.Now(), err == nil
}

func (c *cpuWindow) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ok || c.ended {
		return
	}
	c.ended = true
	now, err := selfCPU()
	if err != nil {
		c.ok = false
		return
	}
	c.used, c.secs = now-c.cpu0, time.Since(c.wall).Seconds()
}

// cores returns the CPU used over the window in cores, -1 if unknown.
func (c *cpuWindow) cores() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ok || !c.ended || c.secs <= 0 {
		return -1
	}
	return c.used.Seconds() / c.secs
}
