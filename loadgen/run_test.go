package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferhq/infer/loadgen/attack"
	"github.com/inferhq/infer/loadgen/record"
	"github.com/inferhq/infer/loadgen/scenario"
	"github.com/inferhq/infer/loadgen/target"
	"github.com/inferhq/infer/models/sim"
	"github.com/inferhq/infer/models/simlm"
	"github.com/inferhq/infer/server"
	"github.com/inferhq/infer/server/batch"
	"github.com/inferhq/infer/server/encoder"
	"github.com/inferhq/infer/server/generate"
	"github.com/inferhq/infer/server/openai"
)

// serverEnv makes the test binary an inference server: ExecLauncher then
// starts real server processes without infer's command line (the cmd
// package's tests run bench against `infer serve` itself).
const serverEnv = "LOADGEN_TEST_SERVER"

func TestMain(m *testing.M) {
	if os.Getenv(serverEnv) == "1" {
		os.Exit(testServer(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// testServer serves the sim model with the `serve` flags infer bench
// passes, until SIGINT.
func testServer(args []string) int {
	if len(args) == 0 || args[0] != "serve" {
		fmt.Fprintln(os.Stderr, "usage: serve --addr ADDR [flags]")
		return 2
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	addr := fs.String("addr", "", "")
	model := fs.String("model", "sim", "")
	fixed := fs.Duration("sim-fixed", 0, "")
	perItem := fs.Duration("sim-per-item", 0, "")
	b := fs.Int("batch", 64, "")
	workers := fs.Int("workers", 1, "")
	lat := fs.Duration("max-latency", 100*time.Millisecond, "")
	policy := fs.String("policy", "", "")
	queueCap := fs.Int("queue-cap", 0, "")
	adminToken := fs.String("admin-token", "", "")
	failOn := fs.String("sim-fail-on", "", "")
	// Generation models (sim-lm).
	maxSeqs := fs.Int("max-seqs", 8, "")
	mbt := fs.Int("max-batched-tokens", 2048, "")
	timeout := fs.Duration("timeout", 30*time.Second, "")
	step := fs.Duration("sim-step", 2*time.Millisecond, "")
	perSeq := fs.Duration("sim-per-seq", 100*time.Microsecond, "")
	perPrefill := fs.Duration("sim-per-prefill-token", 2*time.Microsecond, "")
	prefixCache := fs.Bool("prefix-cache", true, "")
	blockSize := fs.Int("block-size", 16, "")
	kvTokens := fs.Int("kv-tokens", 0, "")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *model == "sim-lm" {
		f, err := simlm.New(simlm.Config{Step: *step, PerSeq: *perSeq, PerPrefillToken: *perPrefill, KVTokens: *kvTokens})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		svc, err := openai.New(openai.Config{Engine: generate.Config{MaxSeqs: *maxSeqs, MaxBatchedTokens: *mbt, MaxLatency: *lat,
			BlockSize: *blockSize, NoPrefixCache: !*prefixCache}}, f)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		srv, err := server.New(server.Config{Addr: *addr, Timeout: *timeout, AdminToken: *adminToken,
			Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))}, svc)
		if err == nil {
			err = srv.Run(ctx)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	}
	if *model != "sim" {
		fmt.Fprintf(os.Stderr, "unknown model %q\n", *model)
		return 2
	}
	factory, err := sim.New(sim.Config{Fixed: *fixed, PerItem: *perItem, FailOn: *failOn})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	svc, err := encoder.New(encoder.Config{
		Batch:   batch.Config{MaxBatch: *b, MaxLatency: *lat, Policy: batch.Policy(*policy), QueueCap: *queueCap},
		Workers: *workers,
		Logger:  log,
	}, factory)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	srv, err := server.New(server.Config{Addr: *addr, AdminToken: *adminToken, Logger: log}, svc)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := srv.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func testLauncher() target.Launcher {
	return target.ExecLauncher{Path: os.Args[0], Env: []string{serverEnv + "=1"}}
}

func mustParse(t *testing.T, src string) *scenario.Scenario {
	t.Helper()
	sc, err := scenario.Parse("test.yaml", t.TempDir(), []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// snapshots collects the snapshots of a run.
type snapshots struct {
	mu  sync.Mutex
	all []Snapshot
}

func (s *snapshots) put(sn Snapshot) {
	s.mu.Lock()
	s.all = append(s.all, sn)
	s.mu.Unlock()
}

func (s *snapshots) last() Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.all[len(s.all)-1]
}

// TestRunSweep runs a tiny sweep end to end against real server processes.
func TestRunSweep(t *testing.T) {
	sc := mustParse(t, `
name: tiny
server:
  model: sim
  sim_fixed: 2ms
  sim_per_item: 0.1ms
  queue_cap: 256
payload:
  items: 2
load:
  concurrency: 8
  warmup: 200ms
  duration: 700ms
sweep:
  endpoints: [naive, batched, v2]
  batch: [1, 8]
  max_latency: 5ms
slo:
  max_error_rate: 0.01
`)
	dir := filepath.Join(t.TempDir(), "run")
	var snaps snapshots
	out, err := Run(context.Background(), sc, Config{Dir: dir, Launcher: testLauncher(), Progress: snaps.put, Tick: 50 * time.Millisecond,
		Version: "v9", Commit: "abc"})
	if err != nil {
		t.Fatal(err)
	}
	if out.Interrupted || len(out.Records) != 5 || out.Points != 5 {
		t.Fatalf("outcome: interrupted %v, %d records of %d points; want 5 of 5", out.Interrupted, len(out.Records), out.Points)
	}
	run, err := record.ReadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(run.Records) != 5 || run.Manifest.Scenario != "tiny" || run.Manifest.InferVersion != "v9" || run.Manifest.Model != "sim" ||
		run.Manifest.End.IsZero() || run.Manifest.Interrupted || !strings.Contains(run.Manifest.ScenarioYAML, "sim_per_item") {
		t.Errorf("run directory: manifest %+v, %d records", run.Manifest, len(run.Records))
	}
	if log, _ := os.ReadFile(filepath.Join(dir, ServerLog)); !strings.Contains(string(log), "ready") {
		t.Errorf("server log lacks the servers' output:\n%s", log)
	}
	for _, r := range run.Records {
		t.Run(r.Point.Name, func(t *testing.T) {
			if r.Sent == 0 || r.Status["200"] != r.Sent || r.Throughput <= 0 || r.ItemsPerSec != 2*r.Throughput {
				t.Errorf("sent %d, status %v, throughput %v, items/s %v", r.Sent, r.Status, r.Throughput, r.ItemsPerSec)
			}
			if !r.Valid || r.Latency.P50 <= 0 || r.Latency.P99 < r.Latency.P50 || r.Histogram == nil || r.Histogram.Count() != uint64(r.Sent) {
				t.Errorf("valid %v, latency %+v", r.Valid, r.Latency)
			}
			if r.Duration.D() != 700*time.Millisecond || r.TargetRate != 0 {
				t.Errorf("duration %v, target %v", r.Duration.D(), r.TargetRate)
			}
			if r.Server.Timed != r.Sent || r.Server.MeanCompute <= 0 {
				t.Errorf("server timing %+v", r.Server)
			}
			if r.Server.CPUSeconds <= 0 || r.Server.RSSBytes <= 0 {
				t.Errorf("server cpu %v s, rss %d: not measured", r.Server.CPUSeconds, r.Server.RSSBytes)
			}
			if r.Server.Metrics == nil || r.Server.Metrics.Batches == 0 {
				t.Fatalf("metrics = %+v", r.Server.Metrics)
			}
			if r.Point.Endpoint == "naive" {
				// Measured on the first server setting, --batch 1: a naive
				// request runs in model calls of at most --batch items.
				if r.Point.Batch != 0 || r.MeanBatch() != 1 {
					t.Errorf("naive: batch setting %d, mean batch %v (requests of 2 items in calls of --batch 1)", r.Point.Batch, r.MeanBatch())
				}
				return
			}
			if r.Point.Workers != 1 || r.Point.Policy == "" || r.Point.Latency.D() != 5*time.Millisecond {
				t.Errorf("point settings from the server: %+v", r.Point)
			}
			switch r.Point.Batch {
			case 1:
				if r.MeanBatch() != 1 || r.Server.Metrics.MeanBatch != 1 {
					t.Errorf("batch 1: mean batch %v (metrics %v), want 1", r.MeanBatch(), r.Server.Metrics.MeanBatch)
				}
			case 8:
				if r.MeanBatch() < 3 || r.Server.Metrics.MeanBatch < 3 {
					t.Errorf("batch 8, 8 clients of 2 items: mean batch %v (metrics %v), want well above 1", r.MeanBatch(), r.Server.Metrics.MeanBatch)
				}
			}
		})
	}
	last := snaps.last()
	if last.Phase != PhaseDone || last.Done != 5 || len(last.Finished) != 5 {
		t.Errorf("last snapshot: phase %q, done %d, finished %d", last.Phase, last.Done, len(last.Finished))
	}
	sawMeasuring := false
	for _, s := range snaps.all {
		if s.Phase == PhaseMeasuring && s.RPS > 0 && s.P50 > 0 {
			sawMeasuring = true
		}
	}
	if !sawMeasuring {
		t.Error("no snapshot showed a point being measured with live numbers")
	}
	if s := Summarize(out, sc.SLO); !s.Passed {
		t.Errorf("summary: %s", s.Verdict)
	}
	// A second run into the same directory is refused.
	if _, err := Run(context.Background(), sc, Config{Dir: dir, Launcher: testLauncher()}); err == nil || !strings.Contains(err.Error(), "already holds results") {
		t.Errorf("second run into %s: %v", dir, err)
	}
}

// measuredSome reports whether the snapshot's repeat has measured answers,
// with 100ms of its window behind it. The snapshot's clock starts the
// window a moment before the attack's own does, so a stop on the first
// "measuring" snapshot can fall before the window and keep nothing.
func measuredSome(s Snapshot) bool {
	return s.Phase == PhaseMeasuring && s.MeasuredRPS > 0 && s.PhaseElapsed >= 100*time.Millisecond
}

// TestRunStopped stops a run during its second point: the first is kept
// whole, the second partial, and the manifest says so.
func TestRunStopped(t *testing.T) {
	sc := mustParse(t, `
server:
  model: sim
  sim_fixed: 1ms
load:
  concurrency: 4
  warmup: 100ms
  duration: 1s
sweep:
  batch: [4, 8, 16]
`)
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stopAt atomic.Int64
	progress := func(s Snapshot) {
		if s.Done == 1 && measuredSome(s) && stopAt.Load() == 0 {
			stopAt.Store(time.Now().UnixNano())
			cancel()
		}
	}
	out, err := Run(ctx, sc, Config{Dir: dir, Launcher: testLauncher(), Progress: progress, Tick: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if stopAt.Load() == 0 {
		t.Fatal("the run never reached the second point's measurement")
	}
	if took := time.Since(time.Unix(0, stopAt.Load())); took > 10*time.Second {
		t.Errorf("stopping took %v", took)
	}
	run, err := record.ReadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !out.Interrupted || !run.Manifest.Interrupted || len(run.Records) != 2 {
		t.Fatalf("interrupted %v/%v, %d records; want true, 2", out.Interrupted, run.Manifest.Interrupted, len(run.Records))
	}
	if run.Records[0].Partial || !run.Records[1].Partial {
		t.Errorf("partial flags = %v, %v; want false, true", run.Records[0].Partial, run.Records[1].Partial)
	}
	if d := run.Records[1].Duration.D(); d <= 0 || d >= time.Second {
		t.Errorf("partial point measured %v, want less than its 1s", d)
	}
	for _, r := range run.Records {
		if r.Status["200"] != r.Sent || r.Errors != nil {
			t.Errorf("%s: status %v errors %v; the stop must not count as failures", r.Point.Name, r.Status, r.Errors)
		}
	}
}

func TestRunServerFails(t *testing.T) {
	sc := mustParse(t, "server:\n  model: sim\nload:\n  concurrency: 1\n")
	l := target.ExecLauncher{Path: "/bin/sh", Args: []string{"-c", "echo cannot load the model >&2; exit 3"}}
	start := time.Now()
	_, err := Run(context.Background(), sc, Config{Dir: t.TempDir(), Launcher: l})
	if err == nil || !strings.Contains(err.Error(), "cannot load the model") || !strings.Contains(err.Error(), "exited before it was ready") {
		t.Errorf("Run = %v, want the server's exit and its output", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("failing took %v", took)
	}
}

func TestRunUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	sc := mustParse(t, "target:\n  urls: "+url+"\nload:\n  concurrency: 1\n")
	dir := filepath.Join(t.TempDir(), "run")
	start := time.Now()
	_, err = Run(context.Background(), sc, Config{Dir: dir})
	if !errors.Is(err, target.ErrUnreachable) || !strings.Contains(err.Error(), url) {
		t.Errorf("Run = %v, want target.ErrUnreachable naming %s", err, url)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("failing took %v", took)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("run directory created for an unreachable target (%v)", err)
	}
}

// answer replies as infer does, one output per input.
func answer(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Inputs []string `json:"inputs"`
	}
	json.NewDecoder(r.Body).Decode(&req)
	outs := make([]int, len(req.Inputs))
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"outputs": outs})
}

// TestRunOpenLoop paces an open loop against two trivial servers: the
// load is spread over both, the rate is kept, and the absence of
// Server-Timing and /metrics is no error.
func TestRunOpenLoop(t *testing.T) {
	var hits [2]atomic.Int64
	var urls []string
	for i := range hits {
		mux := http.NewServeMux()
		mux.HandleFunc("/batched", func(w http.ResponseWriter, r *http.Request) {
			hits[i].Add(1)
			answer(w, r)
		})
		ts := httptest.NewServer(mux)
		defer ts.Close()
		urls = append(urls, ts.URL)
	}
	sc := mustParse(t, fmt.Sprintf("target:\n  urls: [%s]\nload:\n  rate: 200\n  warmup: 250ms\n  duration: 1s\n", strings.Join(urls, ", ")))
	out, err := Run(context.Background(), sc, Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	r := out.Records[0]
	if r.ScheduleLag == nil || r.FromSchedule == nil || r.FromSchedule.P99 < r.Latency.P99 {
		t.Fatalf("schedule lag %v, latency from schedule %v (service p99 %v): want both, the second no shorter", r.ScheduleLag, r.FromSchedule, r.Latency.P99)
	}
	t.Logf("schedule lag p99 %v, max %v; service p99 %v, from the schedule %v", r.ScheduleLag.P99.D(), r.ScheduleLag.Max.D(), r.Latency.P99.D(), r.FromSchedule.P99.D())
	// A machine too busy to send on time (so late that the p99 from the
	// schedule moves) is flagged for it, and for nothing else. Then the
	// window holds what went out in it, late sends of the warm-up
	// included, so the rate is only checked on time.
	late := behindSchedule(&r)
	if r.TargetRate != 200 || !late && (r.Sent < 196 || r.Sent > 204 || r.AchievedRate < 196 || r.AchievedRate > 204) {
		t.Errorf("sent %d at %v/s, target %v; want 200 ± 2 %%", r.Sent, r.AchievedRate, r.TargetRate)
	}
	if r.Valid == late || r.Status["200"] != r.Sent || (late && !slices.Equal(r.Flags, []string{record.FlagScheduleLag})) {
		t.Errorf("valid %v flags %v status %v (lag p99 %v)", r.Valid, r.Flags, r.Status, r.ScheduleLag.P99.D())
	}
	if len(r.Timeline) != 1 || r.Timeline[0].Sent != r.Sent || r.Timeline[0].Target != 200 || r.Timeline[0].P99 <= 0 {
		t.Errorf("timeline = %+v, want one second holding every request", r.Timeline)
	}
	if r.Server.Timed != 0 || r.Server.Metrics != nil || r.Server.CPUSeconds != 0 {
		t.Errorf("server side %+v, want nothing measured", r.Server)
	}
	if a, b := hits[0].Load(), hits[1].Load(); a == 0 || b == 0 || a-b > 1 || b-a > 1 {
		t.Errorf("requests per target = %d, %d; want an even spread", a, b)
	}
}

// serialServer answers /batched one request at a time, each taking work.
func serialServer(t *testing.T, work time.Duration) *httptest.Server {
	var mu sync.Mutex
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/batched" {
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		time.Sleep(work) // the server's work
		mu.Unlock()
		answer(w, r)
	}))
	t.Cleanup(ts.Close)
	return ts
}

// TestRunSlowServer is flagged, not reported as fast: a server that takes
// 20 ms per request, one at a time (50/s), cannot be loaded at 200/s with
// at most 4 requests in flight.
func TestRunSlowServer(t *testing.T) {
	ts := serialServer(t, 20*time.Millisecond)
	sc := mustParse(t, "target:\n  urls: "+ts.URL+"\nload:\n  rate: 200\n  max_in_flight: 4\n  warmup: 100ms\n  duration: 1s\n")
	out, err := Run(context.Background(), sc, Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	r := out.Records[0]
	if r.Valid || len(r.Flags) == 0 || r.Flags[0] != record.FlagCoordinatedOmission {
		t.Errorf("flags %v valid %v; want coordinated-omission, invalid", r.Flags, r.Valid)
	}
	if r.AchievedRate > 100 || r.Throughput > 100 {
		t.Errorf("achieved %v/s, throughput %v/s from a 50/s server", r.AchievedRate, r.Throughput)
	}
	row := RowOf(&r, scenario.SLO{})
	if !strings.Contains(row.Notes(), record.FlagCoordinatedOmission) {
		t.Errorf("summary notes %q do not show the flag", row.Notes())
	}
}

// TestRunOverloadThroughput: an overloaded server's throughput is the rate
// it answers at, not the rate requests were sent at: a server that answers
// 100 requests/s, offered 200/s for a second, answers the second 100
// after the window, and they do not count.
func TestRunOverloadThroughput(t *testing.T) {
	ts := serialServer(t, 10*time.Millisecond)
	sc := mustParse(t, "target:\n  urls: "+ts.URL+"\nload:\n  rate: 200\n  warmup: 0s\n  duration: 1s\n")
	out, err := Run(context.Background(), sc, Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	r := out.Records[0]
	// A machine too busy to send on time (a sender 50 ms late) sends
	// fewer in the window; the throughput below is what this test is about.
	onTime := r.ScheduleLag != nil && r.ScheduleLag.P99.D() < 50*time.Millisecond
	if onTime && (r.Status["200"] < 190 || r.AchievedRate < 190) || r.Status["200"] != r.Sent {
		t.Errorf("sent %d at %v/s, %d answered; want all 200 sent and answered (schedule lag %v)", r.Sent, r.AchievedRate, r.Status["200"], r.ScheduleLag)
	}
	if r.Throughput < 60 || r.Throughput > 110 {
		t.Errorf("throughput %v/s from a server that answers 100/s at most", r.Throughput)
	}
}

// TestRunCaughtUpStall reproduces hidden coordinated omission: the server
// stalls for 1.5 s once, at 200 requests/s with at most 5 requests in
// flight (far fewer than rate × stall), so sending pauses and then catches
// up in a burst. The average rate looks right and the service times stay
// short; the schedule lag shows the stall, the point is flagged, and the
// latency from the intended send time tells what clients on schedule saw.
func TestRunCaughtUpStall(t *testing.T) {
	var (
		mu         sync.Mutex
		n          int
		stallUntil time.Time
	)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		if n == 100 { // half a second into the window
			stallUntil = time.Now().Add(1500 * time.Millisecond)
		}
		until := stallUntil
		mu.Unlock()
		time.Sleep(time.Until(until)) // the stall, for requests that arrive in it
		answer(w, r)
	}))
	defer ts.Close()
	sc := mustParse(t, "target:\n  urls: "+ts.URL+"\nload:\n  rate: 200\n  max_in_flight: 5\n  warmup: 0s\n  duration: 5s\n")
	out, err := Run(context.Background(), sc, Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	r := out.Records[0]
	if r.Valid || !slices.Contains(r.Flags, record.FlagScheduleLag) {
		t.Errorf("flags %v valid %v; want schedule-lag", r.Flags, r.Valid)
	}
	// The burst catches up within the window unless the machine is too
	// busy to send 300 requests more in 3 s through 5 connections: then
	// the shortfall is flagged too.
	if caughtUp := r.AchievedRate >= 0.95*r.TargetRate; caughtUp == slices.Contains(r.Flags, record.FlagCoordinatedOmission) {
		t.Errorf("achieved %.1f of %v/s, flags %v: coordinated-omission is for a shortfall alone", r.AchievedRate, r.TargetRate, r.Flags)
	}
	if r.ScheduleLag == nil || r.FromSchedule == nil {
		t.Fatalf("schedule lag %v, latency from schedule %v: not measured", r.ScheduleLag, r.FromSchedule)
	}
	if r.ScheduleLag.Max.D() < 1200*time.Millisecond || r.ScheduleLag.P99.D() < time.Second {
		t.Errorf("schedule lag %+v; want p99 and max near the 1.5s stall", *r.ScheduleLag)
	}
	if r.FromSchedule.P99.D() < time.Second || r.Latency.P99.D() > r.FromSchedule.P99.D()/2 {
		t.Errorf("p99 from the schedule %v, service time p99 %v; want the stall in the first, not the second",
			r.FromSchedule.P99.D(), r.Latency.P99.D())
	}
	t.Logf("achieved %.1f of %v/s; service p99 %v; schedule lag p99 %v max %v; p99 from the schedule %v",
		r.AchievedRate, r.TargetRate, r.Latency.P99.D(), r.ScheduleLag.P99.D(), r.ScheduleLag.Max.D(), r.FromSchedule.P99.D())
	var maxTick time.Duration
	for _, tk := range r.Timeline {
		maxTick = max(maxTick, tk.MaxLag.D())
	}
	if maxTick < 1200*time.Millisecond {
		t.Errorf("the timeline's largest lag is %v; want the stall", maxTick)
	}
	if row := RowOf(&r, scenario.SLO{}); !strings.Contains(row.Notes(), record.FlagScheduleLag) {
		t.Errorf("summary notes %q do not show the flag", row.Notes())
	}
}

// TestRunForeignServer: a server that is not infer's (answers {"ok": true},
// no /readyz, no /metrics, no Server-Timing) is measured by status, and
// each missing part is said once; asked to check infer's shape, its
// answers are invalid and the summary says why.
func TestRunForeignServer(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/predict" && r.URL.Path != "/batched" {
			http.NotFound(w, r)
			return
		}
		io.Copy(io.Discard, r.Body)
		// A service time, so that the in-process generator and this
		// server do not saturate a small CI machine under -race (which
		// flags the point generator-saturated and so invalid).
		time.Sleep(2 * time.Millisecond)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok": true}`)
	}))
	defer ts.Close()
	src := "target:\n  urls: " + ts.URL + "\nload:\n  concurrency: 2\n  warmup: 0s\n  duration: 300ms\nsweep:\n  endpoints: [/predict, batched]\n"
	out, err := Run(context.Background(), mustParse(t, src), Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	r := out.Records[0]
	if !r.Valid || r.Status["200"] != r.Sent || r.Sent == 0 || r.Point.Expect != target.ExpectStatus {
		t.Errorf("valid %v (flags %v, generator CPU %.2f), status %v of %d sent, expect %q; want every answer a success by status",
			r.Valid, r.Flags, r.GeneratorCPU, r.Status, r.Sent, r.Point.Expect)
	}
	notices := out.Manifest.Notices
	for _, want := range []string{"has no /readyz (it answers 404)", "/metrics: GET " + ts.URL + "/metrics: 404", "is not an infer server",
		"answers of /predict carry no Server-Timing", "answers of batched carry no Server-Timing"} {
		n := 0
		for _, s := range notices {
			if strings.Contains(s, want) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("notice %q said %d times; notices: %q", want, n, notices)
		}
	}
	if len(notices) != 5 {
		t.Errorf("notices = %q, want the five gaps, each once", notices)
	}
	var text strings.Builder
	if err := Summarize(out, scenario.SLO{}).WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "note: "+ts.URL+" is not an infer server") {
		t.Errorf("summary does not say the notices:\n%s", text.String())
	}

	out, err = Run(context.Background(), mustParse(t, src+"payload:\n  expect: infer\n"), Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	r = out.Records[0]
	if r.Status[attack.StatusInvalid] != r.Sent || r.Valid {
		t.Errorf("expect infer: status %v of %d sent, valid %v; want every answer invalid", r.Status, r.Sent, r.Valid)
	}
	text.Reset()
	Summarize(out, scenario.SLO{}).WriteText(&text)
	if !strings.Contains(text.String(), "failed in /predict c=2: response has 0 outputs, want 1 ×") {
		t.Errorf("summary does not give the reason for the invalid answers:\n%s", text.String())
	}
}

// TestRunInferPaths: infer's endpoints named by their paths are joined
// with their /metrics counters like the named endpoints.
func TestRunInferPaths(t *testing.T) {
	sc := mustParse(t, `
server:
  model: sim
  sim_fixed: 1ms
load:
  concurrency: 4
  warmup: 100ms
  duration: 400ms
sweep:
  endpoints: [/batched, /v2/models/sim/infer]
`)
	if sc.Sweep.Endpoints[0] != "batched" {
		t.Errorf("endpoints = %q, want /batched read as batched", sc.Sweep.Endpoints)
	}
	out, err := Run(context.Background(), sc, Config{Dir: t.TempDir(), Launcher: testLauncher()})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range out.Records {
		if m := r.Server.Metrics; m == nil || m.Batches == 0 || r.Status["200"] != r.Sent || r.Sent == 0 {
			t.Errorf("%s: metrics %+v, status %v of %d; want the batches counted and every answer good", r.Point.Name, r.Server.Metrics, r.Status, r.Sent)
		}
	}
	if r := out.Records[1]; r.Point.Expect != target.ExpectKServe {
		t.Errorf("the v2 path's answers were checked as %q, want kserve", r.Point.Expect)
	}
	if len(out.Manifest.Notices) != 0 {
		t.Errorf("notices %q against infer's own server", out.Manifest.Notices)
	}
}

// TestNoticesBounded: a notice is said once, and a run keeps a bounded
// number of them (a server's errors may differ every time).
func TestNoticesBounded(t *testing.T) {
	r := &runner{cfg: Config{Logger: slog.New(slog.DiscardHandler)}}
	for i := range 2 * maxNotices {
		r.notice("gap %d", i)
		r.notice("gap %d", i)
	}
	got := r.noticed()
	if len(got) != maxNotices+1 || got[0] != "gap 0" || got[maxNotices] != moreNotices {
		t.Errorf("notices = %q, want %d once each, then %q", got, maxNotices, moreNotices)
	}
}
