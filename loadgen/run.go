package loadgen

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/inferhq/infer/loadgen/llm"
	"github.com/inferhq/infer/loadgen/record"
)

// Config configures Run. The zero value runs scenarios that load existing
// targets, into the default run directory.
type Config struct {
	// Dir is the run directory, created if missing; it must not hold
	// results already. Default results/<scenario>-<YYYYMMDD-HHMMSS>.
	Dir string
	// Launcher starts the servers of scenarios with a server section;
	// such scenarios need one.
	Launcher Launcher
	// Progress, if set, receives a Snapshot every Tick and a last one
	// (PhaseDone) when the run ends. It is called from one goroutine and
	// should return quickly.
	Progress func(Snapshot)
	// Tick is the snapshot period. Default 250ms.
	Tick time.Duration
	// Cores is the CPU the generator may use, for the saturation check.
	// Default GOMAXPROCS.
	Cores int
	// Version and Commit identify infer in the manifest.
	Version, Commit string
	// AdminToken is the bearer token of the targets' admin API, which
	// applies a sweep's batching settings to existing targets (and puts
	// their own back at the end). Unused when the sweep sets none.
	AdminToken string
	// Logger receives the run's events; nil discards them.
	Logger *slog.Logger
}

func (c Config) withDefaults(sc *Scenario, now time.Time) Config {
	if c.Dir == "" {
		c.Dir = DefaultDir(sc, now)
	}
	if c.Tick <= 0 {
		c.Tick = DefaultTick
	}
	if c.Cores <= 0 {
		c.Cores = runtime.GOMAXPROCS(0)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// DefaultDir is the run directory of a run of sc started at now:
// results/<scenario>-<YYYYMMDD-HHMMSS>.
func DefaultDir(sc *Scenario, now time.Time) string {
	return filepath.Join("results", sc.Name+"-"+now.Format("20060102-150405"))
}

// Outcome is what a run produced; the same is in its directory.
type Outcome struct {
	Dir         string
	Shared      string // the settings every batched point has (Scenario.Shared)
	Manifest    record.Manifest
	Records     []record.Record // one per finished point, in plan order (level by level with load.interleave)
	Points      int             // points planned
	Interrupted bool            // ctx was done before the last point
}

// ServerLog is the file in the run directory that collects the output of
// the servers infer started.
const ServerLog = "server.log"

// Run runs the scenario's sweep and writes the run directory: the manifest
// first (rewritten at the end), then each point's record as soon as it is
// done. When ctx is done it stops the current point, records what it
// measured (marked partial), stops the server and returns the outcome with
// Interrupted set and no error. Targets that do not answer fail the run at
// once with an error wrapping ErrUnreachable; targets whose settings the
// sweep sets but whose admin API is absent or refuses the token, with one
// wrapping ErrAdminAPI.
func Run(ctx context.Context, sc *Scenario, cfg Config) (*Outcome, error) {
	start := time.Now()
	cfg = cfg.withDefaults(sc, start)
	if sc.Server != nil && cfg.Launcher == nil {
		return nil, errors.New("scenario starts servers, but no launcher was given")
	}
	r := &runner{sc: sc, cfg: cfg, log: cfg.Logger, client: &http.Client{Timeout: 5 * time.Second}}
	defer r.client.CloseIdleConnections()
	if len(sc.Targets) > 0 {
		if err := r.probeTargets(ctx); err != nil {
			return nil, err
		}
		if len(sc.Sweep.adminKeys()) > 0 {
			if err := r.checkAdmin(ctx); err != nil {
				return nil, err
			}
			defer r.restore(ctx)
		}
	}
	if err := prepareDir(cfg.Dir); err != nil {
		return nil, err
	}
	plans := sc.Plans()
	out := &Outcome{Dir: cfg.Dir, Points: len(plans), Shared: sc.Shared(), Manifest: r.manifest(start)}
	if err := record.WriteManifest(cfg.Dir, &out.Manifest); err != nil {
		return nil, fmt.Errorf("write manifest: %w", err)
	}
	w, err := record.Create(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("create results: %w", err)
	}
	defer w.Close()

	r.mon = newMonitor(time.Now, sc.Name, sc.Shared(), cfg.Dir, len(plans))
	for _, n := range r.notices { // the probes' findings
		r.mon.notice(n)
	}
	var wg sync.WaitGroup
	published := make(chan struct{})
	wg.Go(func() { r.publish(ctx, published) })

	interrupted, runErr := r.sweep(ctx, plans, w, out)
	if r.server != nil {
		r.stop(r.server)
	}
	out.Interrupted = interrupted
	if out.Manifest.Runtime == "" {
		out.Manifest.Runtime = r.info.backend
	}
	out.Manifest.End = time.Now()
	out.Manifest.Interrupted = interrupted
	out.Manifest.Notices = r.noticed()
	if err := record.WriteManifest(cfg.Dir, &out.Manifest); err != nil && runErr == nil {
		runErr = fmt.Errorf("write manifest: %w", err)
	}
	close(published)
	wg.Wait()
	if cfg.Progress != nil {
		r.mon.setPhase(PhaseDone)
		cfg.Progress(r.mon.snapshot(cfg.Tick))
	}
	if r.serverLog != nil {
		r.serverLog.Close()
	}
	return out, runErr
}

// publish hands a snapshot to Config.Progress every tick until done is
// closed.
func (r *runner) publish(ctx context.Context, done <-chan struct{}) {
	t := time.NewTicker(r.cfg.Tick)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			if ctx.Err() != nil {
				r.mon.stopping()
			}
			r.mon.tick()
			if r.cfg.Progress != nil {
				r.cfg.Progress(r.mon.snapshot(r.cfg.Tick))
			}
		case <-done:
			return
		}
	}
}

// runner is one run's state.
type runner struct {
	sc     *Scenario
	cfg    Config
	log    *slog.Logger
	client *http.Client // probes and /metrics
	mon    *monitor

	bases     []string   // where the load goes
	model     string     // the model's name, for v2
	info      serverInfo // what the server's metrics said last
	server    Server     // the server infer started, if any
	group     int        // the configuration of the server, or the one applied to the targets
	admin     *admin     // sets the targets' configuration; nil when the sweep sets none
	orig      []batching // the targets' settings before the run, for restore
	applied   bool       // a configuration was applied to the targets
	serverLog *os.File
	starts    int           // servers started
	startTime time.Duration // their time to ready, summed

	noticeMu sync.Mutex
	notices  []string // what the run found missing or assumed, each once

	// LLM scenarios: what the generation server's metrics said last, and
	// the payload generator (made once for the model, so that its
	// prompts' tokens are cached across points).
	gen         genInfo
	llmGen      *llm.Generator
	llmGenModel string
}

// notice says a gap in what the run measures, or an assumption it made,
// once per run: in the log, the live view and the manifest. Safe for
// concurrent use.
func (r *runner) notice(format string, args ...any) {
	text := printable(fmt.Sprintf(format, args...))
	r.noticeMu.Lock()
	defer r.noticeMu.Unlock()
	if slices.Contains(r.notices, text) {
		return
	}
	r.log.Warn(text)
	if len(r.notices) >= maxNotices { // a server's errors may differ every time
		if r.notices[len(r.notices)-1] != moreNotices {
			r.notices = append(r.notices, moreNotices)
			if r.mon != nil {
				r.mon.notice(moreNotices)
			}
		}
		return
	}
	r.notices = append(r.notices, text)
	if r.mon != nil {
		r.mon.notice(text)
	}
}

// A run keeps maxNotices notices, then says moreNotices.
const (
	maxNotices  = 20
	moreNotices = "more notices: see the log"
)

func (r *runner) noticed() []string {
	r.noticeMu.Lock()
	defer r.noticeMu.Unlock()
	return slices.Clone(r.notices)
}

// inferServer reports whether the load goes to infer servers: ones infer
// started, or targets whose /metrics carries infer's info metrics.
func (r *runner) inferServer() bool { return r.sc.Server != nil || r.info.ok }

func prepareDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create run directory: %w", err)
	}
	if _, err := os.Stat(filepath.Join(dir, record.ResultsFile)); err == nil {
		return fmt.Errorf("%s already holds results; choose another directory", dir)
	}
	return nil
}

func (r *runner) probeTargets(ctx context.Context) error {
	r.bases = r.sc.Targets
	if r.sc.Payload.LLM != nil {
		// An OpenAI base URL (http://host:8000/v1) names its server:
		// /readyz, /metrics and the admin API are at the server's root.
		r.bases = make([]string, len(r.sc.Targets))
		for i, t := range r.sc.Targets {
			r.bases[i] = strings.TrimSuffix(t, "/v1")
		}
	}
	r.model = r.sc.Model
	for i, base := range r.bases {
		model, noReady, err := probeTarget(ctx, r.client, base, 30*time.Second)
		if err != nil {
			return err
		}
		if noReady != 0 {
			r.notice("%s has no /readyz (it answers %d): taken as ready", base, noReady)
		}
		if i == 0 && r.model == "" {
			r.model = model
		}
		samples, err := scrape(ctx, r.client, base)
		if r.sc.Payload.LLM != nil {
			r.genProbed(i, base, samples, err)
			continue
		}
		switch {
		case err != nil:
			r.notice("%s/metrics: %v: the server's batch sizes, queue times and dropped items are not measured", base, err)
		case len(samples) == 0:
			r.notice("%s/metrics has no infer_ metrics: the server's batch sizes, queue times and dropped items are not measured", base)
		case i == 0:
			r.info = infoOf(samples)
		}
	}
	if r.sc.Payload.LLM != nil {
		r.llmModel(ctx)
		return nil
	}
	if !r.inferServer() && r.sc.Payload.Expect == "" &&
		slices.ContainsFunc(r.sc.Sweep.Endpoints, func(e string) bool { return r.sc.Payload.Expectation(e, false) == ExpectStatus }) {
		r.notice("%s is not an infer server (no infer_model_info in /metrics): a 200 answer counts as a success whatever its body (payload.expect: status); set payload.expect to check its shape", r.bases[0])
	}
	return nil
}

// checkAdmin makes sure every target's admin API answers with the token,
// before any load, and keeps the targets' settings for restore.
func (r *runner) checkAdmin(ctx context.Context) error {
	r.admin = &admin{client: &http.Client{}, token: r.cfg.AdminToken, keys: r.sc.Sweep.adminKeys()}
	for _, base := range r.bases {
		b, err := r.admin.check(ctx, base)
		if err != nil {
			return err
		}
		r.orig = append(r.orig, b)
	}
	return nil
}

// restore puts the targets' settings back as they were, if the run changed
// them.
func (r *runner) restore(ctx context.Context) {
	if !r.applied {
		return
	}
	if err := r.admin.restore(context.WithoutCancel(ctx), r.bases, r.orig); err != nil {
		r.log.Warn("restore the targets' batching settings", "err", err)
	}
}

func (r *runner) manifest(start time.Time) record.Manifest {
	host, _ := os.Hostname()
	m := record.Manifest{
		Scenario:     r.sc.Name,
		ScenarioFile: r.sc.File,
		ScenarioYAML: string(r.sc.Source),
		InferVersion: r.cfg.Version,
		InferCommit:  r.cfg.Commit,
		Cores:        runtime.NumCPU(),
		GoVersion:    runtime.Version(),
		OS:           runtime.GOOS + "/" + runtime.GOARCH,
		Host:         host,
		Start:        start,
		SLO:          r.sc.SLO.Record(),
	}
	if r.sc.Server != nil {
		m.Model = r.sc.Server.Model
		m.ModelHash = fileHash(m.Model)
	} else {
		m.Model = r.info.model
		m.Runtime = r.info.backend
		if r.sc.Payload.LLM != nil {
			m.Model, m.Runtime = r.model, r.gen.backend
		}
	}
	return m
}

// fileHash returns the sha256 of the file at path, or "" if it is not a
// readable file (a built-in model name).
func fileHash(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return ""
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return ""
	}
	return hex.EncodeToString(h.Sum(nil))
}

// startServer stops the running server, if any, and starts the one of p's
// group, waiting until it is ready.
func (r *runner) startServer(ctx context.Context, p Plan) error {
	if r.server != nil {
		r.stop(r.server)
		r.server = nil
	}
	r.mon.setPhase(PhaseStarting)
	if r.serverLog == nil {
		f, err := os.OpenFile(filepath.Join(r.cfg.Dir, ServerLog), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("create server log: %w", err)
		}
		r.serverLog = f
	}
	fmt.Fprintf(r.serverLog, "=== %s infer serve %v\n", time.Now().Format(time.RFC3339), p.Serve)
	r.log.Info("starting server", "flags", p.Serve)
	start := time.Now()
	srv, err := r.cfg.Launcher.Launch(ctx, p.Serve, r.serverLog)
	if err != nil {
		return fmt.Errorf("start server %v: %w", p.Serve, err)
	}
	model, err := waitReady(ctx, r.client, srv, r.sc.Server.ReadyTimeout)
	if err != nil {
		r.stop(srv)
		return fmt.Errorf("start server %v: %w", p.Serve, err)
	}
	r.server, r.group, r.bases, r.model = srv, p.Group, []string{srv.URL()}, model
	r.starts++
	r.startTime += time.Since(start)
	if r.sc.Payload.LLM != nil {
		return r.checkGenServer(ctx)
	}
	return nil
}

// configure applies the configuration of p's group to the targets.
func (r *runner) configure(ctx context.Context, p Plan) error {
	r.mon.setPhase(PhaseConfiguring)
	r.log.Info("configuring targets", "settings", patchOf(p.server))
	r.applied = true // from the first try: a PATCH may take on some targets and fail on others
	if err := r.admin.apply(ctx, r.bases, p.server); err != nil {
		return err
	}
	r.group = p.Group
	return nil
}

// stopTimeout bounds the wait for a server to drain and exit; infer
// serve's own drain timeout is 30s by default.
const stopTimeout = 40 * time.Second

// stop drains and stops a server infer started. The probes' idle
// connection is closed first: the server's drain would otherwise wait for
// it to be quiet (a second) before closing it itself.
func (r *runner) stop(srv Server) {
	r.client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	if err := srv.Stop(ctx); err != nil {
		r.log.Warn("stop server", "err", err)
	}
}

// reading is what the probes saw at one edge of a measured window.
type reading struct {
	gen      time.Duration // this process's CPU
	srv      time.Duration // the server's CPU
	srvOK    bool
	rss      int64
	counters counters // the endpoint's batching counters, over targets
	countsOK bool
}

func (r *runner) read(ctx context.Context, endpoint string) reading {
	rd := reading{gen: selfCPU()}
	if r.server != nil && r.server.PID() > 0 {
		cpu, err := procCPU(r.server.PID())
		rd.srv, rd.srvOK = cpu, err == nil
		rd.rss, _ = procRSS(r.server.PID())
	}
	label := metricsEndpoint(endpoint)
	if label == "" {
		if r.inferServer() {
			r.notice("sweep endpoint %s is none of infer's (naive, batched, v2): its batches are not counted in /metrics", endpoint)
		}
		return rd
	}
	if !r.inferServer() {
		return rd // no infer metrics to read; said at the probe
	}
	rd.countsOK = true
	for _, base := range r.bases {
		samples, err := scrape(ctx, r.client, base)
		if err != nil {
			r.notice("%s/metrics: %v: the server's batch sizes are missing from the points measured then", base, err)
			rd.countsOK = false
			break
		}
		rd.counters = rd.counters.add(countersOf(samples, label))
	}
	return rd
}

// classicRun is a point of a request/response endpoint being measured,
// repeat by repeat.
type classicRun struct {
	r        *runner
	p        Plan
	pt       record.Point // as the first repeat found the server
	inject   string
	total    tally
	answered int
	m        measure
	repeats  []record.Repeat
	first    time.Time
	ticks    []record.Tick
	partial  bool
}

func (r *runner) newClassicRun(p Plan) *classicRun {
	c := &classicRun{r: r, p: p}
	if in := r.sc.Payload.Inject; in != nil {
		c.inject = in.Text
	}
	return c
}

// resolve returns the point as the server it now runs against has it:
// what the sweep leaves to the server, from its /metrics.
func (c *classicRun) resolve(ctx context.Context) record.Point {
	r, pt := c.r, c.p.Point
	// Record the batching settings in effect where the sweep left them to
	// the server.
	if samples, err := scrape(ctx, r.client, r.bases[0]); err == nil {
		r.info = infoOf(samples)
	}
	if info := r.info; pt.Endpoint != "naive" {
		if pt.Batch == 0 {
			pt.Batch = info.batch
		}
		if pt.Workers == 0 {
			pt.Workers = info.workers
		}
		if !c.p.LatencySet {
			pt.Latency = record.Duration(info.latency)
		}
		if pt.Policy == "" {
			pt.Policy = info.policy
		}
	}
	pt.Expect = r.sc.Payload.Expectation(pt.Endpoint, r.inferServer())
	return pt
}

func (c *classicRun) repeat(ctx context.Context, rep int) (stop bool, err error) {
	r := c.r
	if rep == 1 {
		c.pt = c.resolve(ctx)
	}
	pt := c.pt
	// The traffic anew: an interleaved sweep restarts the server, on
	// another port, between repeats.
	tr, err := newTraffic(r.bases, pt.Endpoint, r.model, r.sc.Payload.Format, pt.Expect, r.sc.Payload.Items, r.sc.Payload.N, c.inject)
	if err != nil {
		return false, fmt.Errorf("point %q: %w", pt.Name, err)
	}
	if rep == 1 {
		c.pt.Targets = tr.urls
	}
	a := attack{traffic: tr, load: pt.Load, warmup: r.sc.Load.Warmup, duration: r.sc.Load.Duration,
		timeout: r.sc.Load.Timeout, maxInFlight: r.sc.Load.MaxInFlight}
	r.mon.startAttack(rep, pt.Load, a.warmup, a.duration)
	r.mon.setPhase(PhaseWarmup)
	var begin, end reading
	res := a.run(ctx, r.mon.add, func(isEnd bool) {
		rd := r.read(context.WithoutCancel(ctx), pt.Endpoint)
		if isEnd {
			end = rd
		} else {
			begin = rd
		}
	})
	if res.window <= 0 {
		c.partial = true
		return true, nil
	}
	if c.first.IsZero() {
		c.first = res.start
		c.ticks = res.timeline.ticks(pt.Load, a.duration)
	}
	c.total.merge(&res.tally)
	c.answered += res.answered
	c.m.add(res.window, begin, end)
	secs := res.window.Seconds()
	c.repeats = append(c.repeats, record.Repeat{
		Throughput:   float64(res.answered) / secs,
		AchievedRate: float64(res.tally.sent) / secs,
		P50:          record.Duration(res.tally.hist.Quantile(0.5)),
		P99:          record.Duration(res.tally.hist.Quantile(0.99)),
	})
	if res.stopped {
		c.partial = true
		return true, nil
	}
	return false, nil
}

func (c *classicRun) record() *record.Record {
	r := c.r
	partial := c.partial || len(c.repeats) < r.sc.Load.Repeats
	if c.total.sent == 0 && partial {
		return nil
	}
	rec := buildRecord(c.p.Index, c.pt, c.first, &c.total, c.answered, &c.m, c.repeats, r.sc.Payload.N)
	rec.Timeline = c.ticks
	rec.Partial = partial
	if c.inject != "" {
		rec.Injected = c.total.injected(c.inject)
	}
	judge(rec, r.cfg.Cores)
	if c.total.ok > 0 && c.total.timed == 0 {
		r.notice("answers of %s carry no Server-Timing header: the server's queue and compute times are not measured", c.pt.Endpoint)
	}
	return rec
}

// measure sums the probes' deltas over the windows of a point's repeats;
// a server figure is kept only if every window had it.
type measure struct {
	window        time.Duration
	gen           time.Duration
	srv           time.Duration
	srvMissing    bool
	rss           int64
	before, after counters
	countsMissing bool
}

func (m *measure) add(window time.Duration, begin, end reading) {
	m.window += window
	m.gen += end.gen - begin.gen
	m.srv += end.srv - begin.srv
	m.srvMissing = m.srvMissing || !begin.srvOK || !end.srvOK
	m.rss = max(m.rss, end.rss)
	m.before = m.before.add(begin.counters)
	m.after = m.after.add(end.counters)
	m.countsMissing = m.countsMissing || !begin.countsOK || !end.countsOK
}

// buildRecord turns a point's measurements into its record: t holds the
// requests sent in the measured windows, answered the successful answers
// received in them.
func buildRecord(index int, pt record.Point, start time.Time, t *tally, answered int, m *measure, repeats []record.Repeat, items int) *record.Record {
	secs := m.window.Seconds()
	rec := &record.Record{
		Index:        index,
		Point:        pt,
		Start:        start,
		Duration:     record.Duration(m.window),
		Sent:         t.sent,
		AchievedRate: float64(t.sent) / secs,
		Throughput:   float64(answered) / secs,
		ItemsPerSec:  float64(answered*items) / secs,
		Latency:      t.hist.Percentiles(),
		Histogram:    &t.hist,
		ScheduleLag:  percentiles(&t.lag),
		FromSchedule: percentiles(&t.fromSchedule),
		Status:       copyCounts(t.status),
		Errors:       copyCounts(t.errors),
		Server:       t.serverSide(),
		GeneratorCPU: m.gen.Seconds() / secs,
	}
	if pt.Load.Mode == "open" {
		rec.TargetRate = pt.Load.Rate
		if pt.Load.Pacer == "ramp" {
			rec.TargetRate = (pt.Load.RampFrom + pt.Load.Rate) / 2
		}
	}
	if !m.srvMissing {
		rec.Server.CPUSeconds = m.srv.Seconds()
	}
	rec.Server.RSSBytes = m.rss
	if !m.countsMissing {
		rec.Server.Metrics = m.before.delta(m.after)
	}
	if len(repeats) > 1 {
		rec.Repeats = repeats
	}
	return rec
}

// percentiles returns h's percentiles, or nil when h is empty.
func percentiles(h *record.Histogram) *record.Percentiles {
	if h.Count() == 0 {
		return nil
	}
	p := h.Percentiles()
	return &p
}

// Validity thresholds.
const (
	// An open-loop point that sent less than this share of its target
	// rate was held back by the server: coordinated omission.
	minAchieved = 0.95
	// An open-loop point whose p99 latency from the intended send times
	// passes its p99 service time by this share of it, and by maxLagFloor,
	// went out late against its schedule enough to matter: coordinated
	// omission that the average rate hides.
	maxLagShare = 0.1
	maxLagFloor = 10 * time.Millisecond
	// A generator using this share of its cores or more was the limit.
	maxGeneratorCPU = 0.9
)

// behindSchedule reports whether an open-loop point's sends lagged its
// schedule enough to matter: its p99 latency from the intended send times
// passes the p99 service time by a tenth of it and by 10 ms. A lag that
// moves the p99 less, such as a busy machine's scheduling jitter under
// slower answers, leaves the service times standing.
func behindSchedule(r *record.Record) bool {
	if r.ScheduleLag == nil || r.FromSchedule == nil {
		return false
	}
	p99 := r.Latency.P99.D()
	return r.FromSchedule.P99.D()-p99 > max(maxLagFloor, time.Duration(maxLagShare*float64(p99)))
}

// judge sets the record's validity flags.
func judge(r *record.Record, cores int) {
	r.Flags = nil
	if r.TargetRate > 0 && r.AchievedRate < minAchieved*r.TargetRate {
		r.Flags = append(r.Flags, record.FlagCoordinatedOmission)
	}
	if behindSchedule(r) {
		r.Flags = append(r.Flags, record.FlagScheduleLag)
	}
	if r.GeneratorCPU >= maxGeneratorCPU*float64(cores) {
		r.Flags = append(r.Flags, record.FlagGeneratorSaturated)
	}
	if r.Sent > r.Status["200"] {
		r.Flags = append(r.Flags, record.FlagErrors)
	}
	if r.Status["200"] == 0 {
		r.Flags = append(r.Flags, record.FlagNoSuccess)
	}
	r.Valid = true
	for _, f := range r.Flags {
		if f != record.FlagErrors {
			r.Valid = false
		}
	}
}
