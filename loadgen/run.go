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

	"github.com/inferhq/infer/loadgen/record"
	"github.com/inferhq/infer/loadgen/scenario"
	"github.com/inferhq/infer/loadgen/target"
)

// Config configures Run. The zero value runs scenarios that load existing
// targets, into the default run directory.
type Config struct {
	// Dir is the run directory, created if missing; it must not hold
	// results already. Default results/<scenario>-<YYYYMMDD-HHMMSS>.
	Dir string
	// Launcher starts the servers of scenarios with a server section;
	// such scenarios need one.
	Launcher target.Launcher
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

func (c Config) withDefaults(sc *scenario.Scenario, now time.Time) Config {
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
func DefaultDir(sc *scenario.Scenario, now time.Time) string {
	return filepath.Join("results", sc.Name+"-"+now.Format("20060102-150405"))
}

// Outcome is what a run produced; the same is in its directory.
type Outcome struct {
	Dir         string
	Shared      string // the settings every batched point has (Shared)
	Manifest    record.Manifest
	Records     []record.Record // one per finished point, in plan order (level by level with load.interleave)
	Points      int             // points planned (a search's: those it measured)
	Interrupted bool            // ctx was done before the last point
	// Search says the run was a capacity search (load.search); Capacities
	// are its findings, one per configuration searched, as in the
	// manifest.
	Search     bool
	Capacities []record.Capacity
	// TargetFailed says why a search stopped when its target went away
	// ("" when it did not): the result is partial.
	TargetFailed string
}

// ServerLog is the file in the run directory that collects the output of
// the servers infer started.
const ServerLog = "server.log"

// Run runs the scenario's sweep and writes the run directory: the manifest
// first (rewritten at the end), then each point's record as soon as it is
// done. When ctx is done it stops the current point, records what it
// measured (marked partial), stops the server and returns the outcome with
// Interrupted set and no error. Targets that do not answer fail the run at
// once with an error wrapping target.ErrUnreachable; targets whose
// settings the sweep sets but whose admin API is absent or refuses the
// token, with one wrapping target.ErrAdminAPI.
func Run(ctx context.Context, sc *scenario.Scenario, cfg Config) (*Outcome, error) {
	start := time.Now()
	cfg = cfg.withDefaults(sc, start)
	if sc.Server != nil && cfg.Launcher == nil {
		return nil, errors.New("scenario starts servers, but no launcher was given")
	}
	r := &runner{sc: sc, cfg: cfg, client: &http.Client{Timeout: 5 * time.Second}}
	defer r.client.CloseIdleConnections()
	if sc.Server != nil {
		r.servers = &target.Started{Launcher: cfg.Launcher, Spec: sc.Server, LogPath: filepath.Join(cfg.Dir, ServerLog),
			Client: r.client, Logger: cfg.Logger}
	} else if err := r.probeTargets(ctx); err != nil {
		return nil, err
	}
	defer r.servers.Close(ctx)
	if err := prepareDir(cfg.Dir); err != nil {
		return nil, err
	}
	plans := Plans(sc)
	points := len(plans)
	if s := sc.Load.Search; s != nil {
		plans = SearchPlans(sc)
		points = len(plans) * s.MaxPoints // at most
	}
	out := &Outcome{Dir: cfg.Dir, Points: len(plans), Shared: Shared(sc), Manifest: r.manifest(start)}
	if err := record.WriteManifest(cfg.Dir, &out.Manifest); err != nil {
		return nil, fmt.Errorf("write manifest: %w", err)
	}
	w, err := record.Create(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("create results: %w", err)
	}
	defer w.Close()

	r.mon = newMonitor(time.Now, sc.Name, out.Shared, cfg.Dir, points)
	for _, n := range r.noticed() { // the probes' findings
		r.mon.notice(n)
	}
	var wg sync.WaitGroup
	published := make(chan struct{})
	wg.Go(func() { r.publish(ctx, published) })

	var interrupted bool
	var runErr error
	if sc.Load.Search != nil {
		out.Search = true
		interrupted, runErr = r.search(ctx, plans, w, out)
		out.Points = len(out.Records)
		out.Manifest.Capacities = out.Capacities
	} else {
		interrupted, runErr = r.sweep(ctx, plans, w, out)
	}
	r.servers.Close(ctx)
	out.Interrupted = interrupted
	if out.Manifest.Runtime == "" {
		out.Manifest.Runtime = r.info.Backend
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
	sc      *scenario.Scenario
	cfg     Config
	client  *http.Client // probes and /metrics
	mon     *monitor
	servers target.Servers // where the load goes
	info    target.Info    // what an encoder server's metrics said last
	gen     target.GenInfo // what a generation server's metrics said last
	notes   notices
	payload llmPayload // LLM scenarios: the requests' generator
	// fresh tells that the server was started and no load has run on it
	// since: its prefix cache is empty.
	fresh bool
}

// notices are what a run found missing or assumed, each said once.
type notices struct {
	mu   sync.Mutex
	list []string
}

// notice says a gap in what the run measures, or an assumption it made,
// once per run: in the log, the live view and the manifest. Safe for
// concurrent use.
func (r *runner) notice(format string, args ...any) {
	text := record.Printable(fmt.Sprintf(format, args...))
	n := &r.notes
	n.mu.Lock()
	defer n.mu.Unlock()
	if slices.Contains(n.list, text) {
		return
	}
	r.cfg.Logger.Warn(text)
	if len(n.list) >= maxNotices { // a server's errors may differ every time
		if n.list[len(n.list)-1] != moreNotices {
			n.list = append(n.list, moreNotices)
			if r.mon != nil {
				r.mon.notice(moreNotices)
			}
		}
		return
	}
	n.list = append(n.list, text)
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
	r.notes.mu.Lock()
	defer r.notes.mu.Unlock()
	return slices.Clone(r.notes.list)
}

// inferServer reports whether the load goes to infer servers: ones infer
// started, or targets whose /metrics carries infer's info metrics.
func (r *runner) inferServer() bool { return r.sc.Server != nil || r.info.OK }

func prepareDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create run directory: %w", err)
	}
	if _, err := os.Stat(filepath.Join(dir, record.ResultsFile)); err == nil {
		return fmt.Errorf("%s already holds results; choose another directory", dir)
	}
	return nil
}

// probeTargets checks that the scenario's targets answer, reads what
// their /metrics tell, and makes them the run's servers; an admin API the
// sweep needs must answer with the token.
func (r *runner) probeTargets(ctx context.Context) error {
	llmLoad := r.sc.Payload.LLM != nil
	bases := r.sc.Targets
	if llmLoad {
		// An OpenAI base URL (http://host:8000/v1) names its server:
		// /readyz, /metrics and the admin API are at the server's root.
		bases = make([]string, len(r.sc.Targets))
		for i, t := range r.sc.Targets {
			bases[i] = strings.TrimSuffix(t, "/v1")
		}
	}
	model := r.sc.Model
	for i, base := range bases {
		m, noReady, err := target.Probe(ctx, r.client, base, 30*time.Second)
		if err != nil {
			return err
		}
		if noReady != 0 {
			r.notice("%s has no /readyz (it answers %d): taken as ready", base, noReady)
		}
		if i == 0 && model == "" {
			model = m
		}
		samples, err := target.Scrape(ctx, r.client, base)
		if llmLoad {
			if len(r.sc.Replicas) == 0 {
				r.genProbed(i, base, samples, err)
			}
			continue
		}
		switch {
		case err != nil:
			r.notice("%s/metrics: %v: the server's batch sizes, queue times and dropped items are not measured", base, err)
		case len(samples) == 0:
			r.notice("%s/metrics has no infer_ metrics: the server's batch sizes, queue times and dropped items are not measured", base)
		case i == 0:
			r.info = target.InfoOf(samples)
		}
	}
	if llmLoad {
		for i, rep := range r.sc.Replicas { // the servers behind a front: theirs are the metrics
			samples, err := target.Scrape(ctx, r.client, rep)
			r.genProbed(i, rep, samples, err)
		}
		model = r.llmModel(ctx, bases[0], model)
	} else if !r.inferServer() && r.sc.Payload.Expect == "" &&
		slices.ContainsFunc(r.sc.Sweep.Endpoints, func(e string) bool { return r.sc.Payload.Expectation(e, false) == target.ExpectStatus }) {
		r.notice("%s is not an infer server (no infer_model_info in /metrics): a 200 answer counts as a success whatever its body (payload.expect: status); set payload.expect to check its shape", bases[0])
	}
	servers, err := target.NewExisting(ctx, target.ExistingConfig{URLs: bases, Replicas: r.sc.Replicas, Model: model,
		AdminKeys: r.sc.Sweep.AdminKeys(), AdminToken: r.cfg.AdminToken, Logger: r.cfg.Logger})
	if err != nil {
		return err
	}
	r.servers = servers
	return nil
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
		if m.Model == "" {
			m.Model = strings.Join(r.sc.Sweep.Model, ",")
		}
	} else {
		m.Model = r.info.Model
		m.Runtime = r.info.Backend
		if r.sc.Payload.LLM != nil {
			m.Model, m.Runtime = r.servers.Model(), r.gen.Backend
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

// reading is what the probes saw at one edge of a measured window.
type reading struct {
	gen      time.Duration // this process's CPU
	srv      time.Duration // the server's CPU
	srvOK    bool
	rss      int64
	counters target.Counters // the endpoint's batching counters, over targets
	countsOK bool
}

func (r *runner) read(ctx context.Context, endpoint string) reading {
	rd := reading{gen: selfCPU()}
	if pid := r.servers.PID(); pid > 0 {
		cpu, err := target.ProcCPU(pid)
		rd.srv, rd.srvOK = cpu, err == nil
		rd.rss, _ = target.ProcRSS(pid)
	}
	label := target.BatchLabel(endpoint)
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
	for _, base := range r.servers.Replicas() {
		samples, err := target.Scrape(ctx, r.client, base)
		if err != nil {
			r.notice("%s/metrics: %v: the server's batch sizes are missing from the points measured then", base, err)
			rd.countsOK = false
			break
		}
		rd.counters = rd.counters.Add(target.CountersOf(samples, label))
	}
	return rd
}
