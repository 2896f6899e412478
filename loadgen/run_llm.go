package loadgen

// The points of streaming LLM scenarios (payload.api): each runs package
// llm's client against an OpenAI-compatible endpoint and watches an infer
// generation server's /metrics alongside.

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/inferhq/infer/loadgen/attack"
	"github.com/inferhq/infer/loadgen/llm"
	"github.com/inferhq/infer/loadgen/record"
	"github.com/inferhq/infer/loadgen/scenario"
	"github.com/inferhq/infer/loadgen/target"
)

// llmSeed seeds the arrival pacers and the timeline's sample: each point
// of a sweep gets the same arrival times, repeat r the seed llmSeed+r-1.
const llmSeed = 1

// llmPayload makes an LLM scenario's requests: one source for the model,
// made anew when the model changes, so that its prompts' tokens are cached
// across points.
type llmPayload struct {
	gen   llm.Source
	model string
}

func (p *llmPayload) generator(lp *scenario.LLMPayload, model string) (llm.Source, error) {
	if p.gen == nil || p.model != model {
		g, err := llm.NewSource(lp.Config(model))
		if err != nil {
			return nil, err
		}
		p.gen, p.model = g, model
	}
	return p.gen, nil
}

// genProbeEvery is how often an LLM point reads the server's gauges
// (running and waiting sequences, KV usage).
const genProbeEvery = 500 * time.Millisecond

// genProbed takes what target i's /metrics said (samples, or err) for an
// LLM scenario: whether it is an infer generation server (infer_gen_
// metrics); what it lacks is said once.
func (r *runner) genProbed(i int, base string, samples []target.Sample, err error) {
	switch g := target.GenInfoOf(samples); {
	case err != nil:
		r.notice("%s/metrics: %s: the server's running and waiting sequences, KV usage and own TTFT are not measured", base,
			strings.TrimPrefix(err.Error(), "GET "+base+"/metrics: "))
	case !g.OK:
		r.notice("%s/metrics has no infer_gen_ metrics: the server's running and waiting sequences, KV usage and own TTFT are not measured", base)
	case i == 0:
		r.gen = g
	}
}

// llmModel returns the model to ask for: model (target.model, or what
// /readyz named), else the first of the first target's /v1/models (base
// is its root).
func (r *runner) llmModel(ctx context.Context, base, model string) string {
	if model != "" {
		return model
	}
	if m, err := target.FirstModel(ctx, r.client, base); err == nil && m != "" {
		return m
	}
	r.notice("%s: no model named (target.model) or listed (/v1/models): requests carry none, which some servers refuse", base)
	return ""
}

// checkGenServer makes sure a server infer started serves a generative
// model: one that is not has no OpenAI endpoints to load.
func (r *runner) checkGenServer(ctx context.Context) error {
	samples, err := target.Scrape(ctx, r.client, r.servers.Replicas()[0])
	if err != nil {
		return fmt.Errorf("read the server's /metrics: %w", err)
	}
	g := target.GenInfoOf(samples)
	if !g.OK {
		return fmt.Errorf("server.model %s serves no generation endpoints (its /metrics has no infer_gen_batching_info): payload.api needs a generative model such as sim-lm", r.sc.Server.Model)
	}
	r.gen = g
	return nil
}

// llmRun is an LLM point being measured, repeat by repeat.
type llmRun struct {
	r       *runner
	p       Plan
	label   string
	pt      record.Point // as the first repeat found the server
	outs    []*llm.Outcome
	servers []*record.LLMServer
	shares  [][]record.ReplicaShare // per repeat: each replica's, behind a front
	cpu     time.Duration
	cpuOK   bool
	rss     int64
	partial bool
	trace   *record.TraceCache // a trace replay's hit rates, before the run
	// Whether each repeat drifted.
	unsteady []bool
}

func (r *runner) newLLMRun(p Plan) *llmRun {
	return &llmRun{r: r, p: p, label: target.GenLabel(p.Point.Endpoint), cpuOK: true}
}

// resolve returns the point as the server it now runs against has it:
// what the sweep leaves to the server, from its /metrics.
func (l *llmRun) resolve(ctx context.Context) record.Point {
	r, pt, label := l.r, l.p.Point, l.label
	if label != "" && r.gen.OK {
		if samples, err := target.Scrape(ctx, r.client, r.servers.Replicas()[0]); err == nil {
			if g := target.GenInfoOf(samples); g.OK {
				r.gen = g
			}
		}
	}
	if pt.Endpoint != target.EndpointNaive && label != "naive" && r.gen.OK {
		// What the sweep leaves to the server, as the server says.
		if pt.MaxSeqs == 0 {
			pt.MaxSeqs = r.gen.MaxSeqs
		}
		if pt.MaxBatchedTokens == 0 {
			pt.MaxBatchedTokens = r.gen.MaxBatchedTokens
		}
		if !l.p.LatencySet {
			pt.Latency = record.Duration(r.gen.MaxLatency)
		}
	}
	switch label {
	case "v1":
		if r.gen.OK {
			pt.Policy = r.gen.Policy
			if pt.Endpoint == target.EndpointContinuous && r.gen.Policy != target.EndpointContinuous {
				r.notice("endpoint continuous: the server's /v1 schedules with policy %s (infer serve --gen-policy)", r.gen.Policy)
			}
		}
	case "static", "naive":
		pt.Policy = label
	}
	return pt
}

func (l *llmRun) repeat(ctx context.Context, rep int) (stop bool, err error) {
	r := l.r
	if rep == 1 {
		l.pt = l.resolve(ctx)
	}
	pt := l.pt
	lp, model := r.sc.Payload.LLM, r.servers.Model()
	source, err := r.payload.generator(lp, model)
	if err != nil {
		return false, fmt.Errorf("point %q: payload: %w", pt.Name, err)
	}
	conns := pt.Load.Concurrency
	if pt.Load.Mode == "open" {
		conns = r.sc.Load.MaxInFlight
	}
	tr := llm.NewTransport(min(conns, 4096))
	defer tr.CloseIdleConnections()
	httpClient := &http.Client{Transport: tr}
	// The clients anew: an interleaved sweep restarts the server, on
	// another port, between repeats.
	var clients []*llm.Client
	var targets []string
	for _, base := range r.servers.URLs() {
		c, err := llm.NewClient(llm.ClientConfig{BaseURL: base + target.LLMPrefix(pt.Endpoint), HTTP: httpClient,
			Timeout: r.sc.Load.Timeout, Tokenizer: llm.KnownTokenizer(model), KeyHeader: lp.KeyHeader})
		if err != nil {
			return false, fmt.Errorf("point %q: %w", pt.Name, err)
		}
		clients = append(clients, c)
		targets = append(targets, c.URL(lp.API))
	}
	if rep == 1 {
		l.pt.Targets = targets
	}
	cfg := llm.RunConfig{
		Clients: clients, Source: source, API: lp.API, Stream: lp.Stream, Model: model,
		Concurrency: pt.Load.Concurrency, MaxInFlight: r.sc.Load.MaxInFlight,
		Warmup: r.sc.Load.Warmup, Duration: r.sc.Load.Duration, Drain: r.sc.Load.Drain,
		SLO: r.sc.SLO.Record().LLM(), Seed: llmSeed, Histograms: true,
		Progress: r.mon.llmLive, Cores: r.cfg.Cores,
	}
	switch {
	case lp.Trace != nil:
		cfg.Pacer = lp.Trace.Pacer()
		if rep == 1 {
			l.trace = r.traceHitRates(lp.Trace)
		}
		switch {
		case l.trace == nil || r.fresh:
		case r.sc.Server == nil:
			l.trace.Warm = true
			r.notice("the target's prefix cache may hold load from before the trace replay: its hit rate may pass the trace's own figures")
		default:
			l.trace.Warm = true
			r.notice("a trace replay ran on a server whose prefix cache held earlier load (%s): its hit rate may pass the trace's own figures; give each repeat a fresh server (load.interleave with sweep.prefix_cache [true, false] restarts it every repeat)", pt.Name)
		}
		r.fresh = false
	case pt.Load.Mode == "open":
		// Each repeat draws its own schedule: the same draws repeated
		// would repeat their chance.
		pacer, err := attack.NewPacer(pt.Load, cfg.Warmup, cfg.Duration, llmSeed+uint64(rep-1))
		if err != nil {
			return false, fmt.Errorf("point %q: %w", pt.Name, err)
		}
		cfg.Pacer = pacer
	}
	r.mon.startAttack(rep, pt.Load, cfg.Warmup, cfg.Duration)
	r.mon.setPhase(PhaseWarmup)
	r.mon.llmLive(llm.Snapshot{Phase: llm.PhaseWarmup}) // an LLM view from the start
	w := &genWatch{r: r, label: l.label, gen: r.gen.OK && l.label != ""}
	done := make(chan struct{})
	var wg sync.WaitGroup
	start := time.Now()
	wg.Go(func() { w.run(context.WithoutCancel(ctx), start, cfg.Warmup, cfg.Duration, done) })
	out, err := llm.Run(ctx, cfg)
	close(done)
	wg.Wait()
	if err != nil {
		return false, fmt.Errorf("point %q: %w", pt.Name, err)
	}
	if out.Window <= 0 {
		l.partial = true
		return true, nil
	}
	l.outs = append(l.outs, out)
	srv := w.server(out.Window)
	if srv != nil && pt.PrefixCache != nil { // the point's own, though r.gen may be another's
		srv.PrefixCache = pt.PrefixCache
	}
	l.servers = append(l.servers, srv)
	l.unsteady = append(l.unsteady, drifted(pt.Load, llm.Tokens(&out.LLM)))
	l.shares = append(l.shares, w.shares(out.Window))
	l.cpu += w.cpu
	l.cpuOK = l.cpuOK && w.cpuOK
	l.rss = max(l.rss, w.rss)
	if out.Stopped {
		l.partial = true
		return true, nil
	}
	return false, nil
}

func (l *llmRun) record() *record.Record {
	r := l.r
	if len(l.outs) == 0 {
		return nil
	}
	rec := buildLLMRecord(l.p.Index, l.pt, l.outs, l.servers)
	rec.Partial = l.partial || len(l.outs) < r.sc.Load.Repeats
	flagUnsteady(rec, l.unsteady)
	rec.LLM.Replicas = mergeShares(l.shares, l.outs)
	if l.cpuOK && r.servers.PID() > 0 {
		rec.Server.CPUSeconds = l.cpu.Seconds() // the router's, in front of replicas (record.ServerSide)
	}
	rec.Server.RSSBytes = l.rss
	rec.LLM.Trace = l.trace
	if g := rec.LLM; g.Server != nil {
		r.ideal(l.pt, g)
	}
	r.llmNotices(l.pt, rec.LLM)
	return rec
}

// ideal sets l's ideal tokens/s when the server runs a simulated model
// whose costs it tells (sim-lm's): each replica's behind a front.
func (r *runner) ideal(pt record.Point, l *record.LLM) {
	step, perSeq, perPrefill, ok := target.SimCosts(l.Server.Params)
	if !ok || l.Completed == 0 {
		return
	}
	slots := pt.MaxSeqs
	if target.GenLabel(pt.Endpoint) == "naive" {
		slots = 1
	}
	lo, lp := float64(l.OutputTokens)/float64(l.Completed), l.ComputedPrompt()
	l.Ideal = math.Round(target.IdealTokens(step, perSeq, perPrefill, slots, lo, lp)*float64(r.replicasBehind())*10) / 10
}

// traceHitRates computes the hit rate a trace replay allows, at the
// server's block size and KV capacity (from its infer_gen_batching_info,
// else the scenario's server section), and says it.
func (r *runner) traceHitRates(t *llm.TraceReplay) *record.TraceCache {
	block, kv := 0, 0
	if r.gen.OK {
		block, kv = r.gen.BlockSize, r.gen.KVTokens
	}
	if s := r.sc.Server; s != nil {
		block, kv = cmp.Or(block, s.BlockSize), cmp.Or(kv, s.KVTokens)
	}
	if block == 0 {
		block = t.BlockTokens()
		r.notice("the server's KV block size is unknown (no infer_gen_batching_info): the trace's hit rates are computed in its own blocks of %d tokens, and without a capacity", block)
	}
	h, err := t.HitRates(block, kv/block)
	if err != nil {
		r.notice("trace hit rates: %v", err)
		return nil
	}
	r.notice("trace window: %d requests; the trace allows %s", t.WindowRequests(), h)
	round5 := func(v float64) float64 { return math.Round(v*1e5) / 1e5 } // a ratio to them is read to 0.1 %
	return &record.TraceCache{Requests: t.WindowRequests(), Queries: h.Queries, Unbounded: round5(h.Unbounded),
		LRU: round5(h.LRU), Capacity: h.Capacity, BlockSize: h.BlockSize}
}

// llmNotices says once what an LLM point found missing.
func (r *runner) llmNotices(pt record.Point, l *record.LLM) {
	if l.Completed == 0 {
		return
	}
	if n := l.TokenSource.Tokenizer + l.TokenSource.Chunks; n > 0 {
		how := "GPT-2's tokenizer over their text"
		if l.TokenSource.Chunks > 0 {
			how = "one token per content chunk (the model's tokenizer is unknown)"
		}
		r.notice("answers of %s carry no usage (stream_options.include_usage): output tokens counted with %s; flagged no-usage", pt.Endpoint, how)
	}
	if l.NotStreamed > 0 {
		r.notice("answers of %s came as one JSON body though a stream was asked: their TTFT is their E2EL; flagged not-streamed", pt.Endpoint)
	}
	if l.Timing == nil {
		r.notice("answers of %s carry no Server-Timing header: the server's own queue time and TTFT per request are not measured", pt.Endpoint)
	}
}

// genWatch reads the server's side of one LLM repeat: its infer_gen_
// counters at the window's edges, its gauges through the window (also
// shown live), and its process's CPU and memory.
type genWatch struct {
	r     *runner
	label string
	gen   bool // the server has infer_gen_ metrics for label

	mu                   sync.Mutex
	begin, end           target.GenCounters
	beginEach, endEach   []target.GenCounters // per replica (servers.Replicas)
	haveBegin, haveEnd   bool
	running, waiting, kv record.Gauge
	samples              int
	cpu                  time.Duration
	cpuOK                bool
	cpuBegin             time.Duration
	rss                  int64
}

// run probes until done: the window's start and end, and the gauges every
// genProbeEvery.
func (w *genWatch) run(ctx context.Context, start time.Time, warmup, duration time.Duration, done <-chan struct{}) {
	winStart, winEnd := start.Add(warmup), start.Add(warmup+duration)
	begin := time.NewTimer(time.Until(winStart))
	end := time.NewTimer(time.Until(winEnd))
	tick := time.NewTicker(genProbeEvery)
	defer begin.Stop()
	defer end.Stop()
	defer tick.Stop()
	for {
		select {
		case <-done:
			if w.haveBegin && !w.haveEnd { // stopped inside the window
				w.edge(ctx, false)
			}
			return
		case <-begin.C:
			w.edge(ctx, true)
		case <-end.C:
			w.edge(ctx, false)
		case now := <-tick.C:
			if c, _, ok := w.read(ctx); ok {
				w.r.mon.genLive(GenGauges{Running: c.Running, Waiting: c.Waiting, KV: c.KV / float64(len(w.r.servers.Replicas())), MaxSeqs: w.r.gen.MaxSeqs})
				if now.After(winStart) && now.Before(winEnd) {
					w.gauge(c)
				}
			}
		}
	}
}

// read scrapes the replicas' counters for the label: their sum, and each
// one's.
func (w *genWatch) read(ctx context.Context) (target.GenCounters, []target.GenCounters, bool) {
	if !w.gen {
		return target.GenCounters{}, nil, false
	}
	var sum target.GenCounters
	reps := w.r.servers.Replicas()
	each := make([]target.GenCounters, 0, len(reps))
	for _, base := range reps {
		samples, err := target.Scrape(ctx, w.r.client, base)
		if err != nil {
			w.r.notice("%s/metrics: %v: the server's side of the points measured then is missing", base, err)
			return target.GenCounters{}, nil, false
		}
		c, ok := target.GenOf(samples, w.label)
		if !ok {
			return target.GenCounters{}, nil, false
		}
		sum.Add(c)
		each = append(each, c)
	}
	return sum, each, true
}

func (w *genWatch) gauge(c target.GenCounters) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := float64(w.samples)
	for _, g := range []struct {
		g *record.Gauge
		v float64
	}{{&w.running, c.Running}, {&w.waiting, c.Waiting}, {&w.kv, c.KV / float64(len(w.r.servers.Replicas()))}} {
		g.g.Mean = (g.g.Mean*n + g.v) / (n + 1)
		g.g.Max = max(g.g.Max, g.v)
	}
	w.samples++
}

// edge reads the window's start (first) or end.
func (w *genWatch) edge(ctx context.Context, first bool) {
	c, each, ok := w.read(ctx)
	var cpu time.Duration
	cpuOK := false
	var rss int64
	if pid := w.r.servers.PID(); pid > 0 {
		var err error
		cpu, err = target.ProcCPU(pid)
		cpuOK = err == nil
		rss, _ = target.ProcRSS(pid)
	}
	if first && ok {
		w.gauge(c)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if first {
		w.begin, w.beginEach, w.haveBegin = c, each, ok
		w.cpuBegin, w.cpuOK = cpu, cpuOK
		return
	}
	w.end, w.endEach, w.haveEnd = c, each, ok && w.haveBegin
	w.cpuOK = w.cpuOK && cpuOK
	w.cpu = cpu - w.cpuBegin
	w.rss = rss
}

// server returns the server's side of a window of that length; nil
// without infer_gen_ metrics.
func (w *genWatch) server(window time.Duration) *record.LLMServer {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.haveBegin || !w.haveEnd {
		return nil
	}
	s := target.GenDelta(w.begin, w.end, window)
	s.Running, s.Waiting, s.KV, s.Samples = w.running, w.waiting, w.kv, w.samples
	g := w.r.gen
	s.Policy, s.MaxSeqs, s.MaxBatchedTokens, s.KVTokens = g.Policy, g.MaxSeqs, g.MaxBatchedTokens, g.KVTokens
	if w.label != "v1" {
		s.Policy = w.label
	}
	if w.label == "naive" {
		s.MaxSeqs = 1
	}
	s.Model, s.Params = g.Model, g.Params
	s.PrefixCache, s.BlockSize = g.PrefixCache, g.BlockSize
	return s
}

// buildLLMRecord turns an LLM point's repeats into its record.
func buildLLMRecord(index int, pt record.Point, outs []*llm.Outcome, servers []*record.LLMServer) *record.Record {
	first := outs[0]
	l := mergeLLM(outs, servers)
	if len(l.Errors) > 0 { // a server's texts
		errs := make(map[string]int, len(l.Errors))
		for k, n := range l.Errors {
			errs[record.Printable(k)] += n
		}
		l.Errors = errs
	}
	var window time.Duration
	sent := 0
	status := map[string]int{}
	cpu, cpuOK := 0.0, true
	for _, o := range outs {
		window += o.Window
		sent += o.Sent
		for k, n := range o.Status {
			status[k] += n
		}
		if o.ClientCPU < 0 {
			cpuOK = false
		}
		cpu += o.ClientCPU * o.Window.Seconds()
	}
	secs := window.Seconds()
	rec := &record.Record{
		Index: index, Point: pt, Start: first.Start, Duration: record.Duration(window),
		Sent: sent, AchievedRate: float64(sent) / secs,
		Throughput: l.RequestsPerS, ItemsPerSec: l.RequestsPerS,
		Status: status, Errors: l.Errors, LLM: l,
	}
	if cpuOK {
		rec.GeneratorCPU = cpu / secs
	}
	if l.E2EL.N > 0 {
		rec.Latency = *msPercentiles(l.E2EL)
	}
	if pt.Load.Mode == "open" {
		// What the schedule asked in the window: with random arrivals,
		// the draws' rate rather than the level's.
		var scheduled int
		for _, o := range outs {
			scheduled += o.LLM.Scheduled
		}
		rec.TargetRate = float64(scheduled) / secs
		if l.Lag.N > 0 {
			rec.ScheduleLag = msPercentiles(l.Lag)
		}
		if l.FromIntended.E2EL.N > 0 {
			rec.FromSchedule = msPercentiles(l.FromIntended.E2EL)
		}
	}
	if len(outs) > 1 {
		for _, o := range outs {
			rec.Repeats = append(rec.Repeats, record.Repeat{
				Throughput: o.LLM.RequestsPerS, AchievedRate: o.AchievedRate,
				P50: msDuration(o.LLM.E2EL.P50), P99: msDuration(o.LLM.E2EL.P99),
				OutputTokensPerS: o.LLM.OutputTokensPerS, TTFTP99: msDuration(o.LLM.TTFT.P99),
			})
		}
	}
	rec.Flags = slices.Clone(l.Flags)
	rec.Valid = true
	for _, f := range rec.Flags {
		switch f {
		case record.FlagErrors, record.FlagNoUsage, record.FlagNotStreamed:
		default:
			rec.Valid = false
		}
	}
	return rec
}

func msDuration(ms float64) record.Duration { return record.Duration(ms * float64(time.Millisecond)) }

func msPercentiles(m record.MsStats) *record.Percentiles {
	return &record.Percentiles{Mean: msDuration(m.Mean), P50: msDuration(m.P50), P90: msDuration(m.P90),
		P99: msDuration(m.P99), P999: msDuration(m.P999), Max: msDuration(m.Max)}
}

// mergeLLM merges the repeats of a point: counts add up, rates are over
// the summed windows, the four latency distributions merge exactly (as
// histograms, to 1 %); the client's queue and schedule lag, the latencies
// from the intended send and the server's side are the worst repeat's
// (by p99 TTFT from the intended send), but for the server's prefix-cache
// counters, which add up; the timeline is the first repeat's. One repeat
// is returned as it is.
func mergeLLM(outs []*llm.Outcome, servers []*record.LLMServer) *record.LLM {
	if len(outs) == 1 {
		l := outs[0].LLM
		l.Server = servers[0]
		return &l
	}
	m := outs[0].LLM
	m.Failures, m.Errors = addCounts(nil, m.Failures), addCounts(nil, m.Errors)
	m.Flags = slices.Clone(m.Flags)
	worst := 0
	var secs float64
	rates := [5]float64{}
	for i, o := range outs {
		l := &o.LLM
		w := o.Window.Seconds()
		secs += w
		for j, v := range []float64{l.RequestsPerS, l.OutputTokensPerS, l.TotalTokensPerS, l.GoodputPerS, l.ChunksPerS} {
			rates[j] += v * w
		}
		if i == 0 {
			continue
		}
		m.Scheduled += l.Scheduled
		m.Requests += l.Requests
		m.Completed += l.Completed
		m.Failed += l.Failed
		m.Unfinished += l.Unfinished
		m.Good += l.Good
		m.PromptTokens += l.PromptTokens
		m.OutputTokens += l.OutputTokens
		m.TokenSource.Usage += l.TokenSource.Usage
		m.TokenSource.Tokenizer += l.TokenSource.Tokenizer
		m.TokenSource.Chunks += l.TokenSource.Chunks
		m.NotStreamed += l.NotStreamed
		m.NoDone += l.NoDone
		m.Failures = addCounts(m.Failures, l.Failures)
		m.Errors = addCounts(m.Errors, l.Errors)
		for _, f := range l.Flags {
			if !slices.Contains(m.Flags, f) {
				m.Flags = append(m.Flags, f)
			}
		}
		if l.FromIntended.TTFT.P99 > outs[worst].LLM.FromIntended.TTFT.P99 {
			worst = i
		}
		if t := l.Timing; t != nil {
			if m.Timing == nil {
				m.Timing = &record.LLMTiming{}
			}
			n := float64(m.Timing.Timed + t.Timed)
			m.Timing.QueueMean = record.Round3((m.Timing.QueueMean*float64(m.Timing.Timed) + t.QueueMean*float64(t.Timed)) / n)
			m.Timing.TTFTMean = record.Round3((m.Timing.TTFTMean*float64(m.Timing.Timed) + t.TTFTMean*float64(t.Timed)) / n)
			m.Timing.Timed += t.Timed
		}
	}
	if secs > 0 {
		m.RequestsPerS, m.OutputTokensPerS, m.TotalTokensPerS, m.GoodputPerS, m.ChunksPerS =
			rates[0]/secs, rates[1]/secs, rates[2]/secs, rates[3]/secs, rates[4]/secs
	}
	h := &record.LLMHistograms{TTFT: &record.Histogram{}, TPOT: &record.Histogram{}, ITL: &record.Histogram{}, E2EL: &record.Histogram{}}
	for _, o := range outs {
		if oh := o.LLM.Histograms; oh != nil {
			h.TTFT.Merge(oh.TTFT)
			h.TPOT.Merge(oh.TPOT)
			h.ITL.Merge(oh.ITL)
			h.E2EL.Merge(oh.E2EL)
		}
	}
	m.Histograms = h
	m.TTFT, m.TPOT, m.ITL, m.E2EL = record.MsStatsOf(h.TTFT), record.MsStatsOf(h.TPOT), record.MsStatsOf(h.ITL), record.MsStatsOf(h.E2EL)
	w := &outs[worst].LLM
	m.Queue, m.Lag, m.FromIntended = w.Queue, w.Lag, w.FromIntended
	m.Server = servers[worst]
	mergePrefix(&m, outs, servers)
	return &m
}

// addCounts adds b's counts into a (a new map when a is nil).
func addCounts(a, b map[string]int) map[string]int {
	if len(b) == 0 {
		return a
	}
	if a == nil {
		a = make(map[string]int, len(b))
	}
	for k, n := range b {
		a[k] += n
	}
	return a
}
