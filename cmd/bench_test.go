package cmd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/inferhq/infer/loadgen"
	"github.com/inferhq/infer/loadgen/record"
	"github.com/inferhq/infer/loadgen/target"
)

// mainEnv makes the test binary run infer's command line: the bench tests
// start real `infer serve` processes from it.
const mainEnv = "INFER_CMD_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) == "1" {
		os.Exit(Main())
	}
	os.Exit(m.Run())
}

func TestBenchFlags(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		check func(t *testing.T, o *benchOptions)
	}{
		{[]string{"-s", "x.yaml"}, func(t *testing.T, o *benchOptions) {
			if o.Scenario != "x.yaml" || o.Output != "text" || o.NoTUI || o.DryRun || o.Out != "" || o.Targets != nil || o.Terminal {
				t.Errorf("defaults = %+v", o)
			}
		}},
		{[]string{"--scenario", "x.yaml", "--target", "http://a:1,http://b:2", "--target", "http://c:3", "--no-tui", "--output", "json",
			"-o", "out/dir", "--dry-run", "--log-level", "debug"}, func(t *testing.T, o *benchOptions) {
			if !slices.Equal(o.Targets, []string{"http://a:1", "http://b:2", "http://c:3"}) || !o.NoTUI || o.Output != "json" ||
				o.Out != "out/dir" || !o.DryRun || o.Log.Level != "debug" || o.WarmupSet || o.Duration != 0 || o.AdminToken != "" {
				t.Errorf("options = %+v", o)
			}
		}},
		{[]string{"-s", "x.yaml", "--admin-token", "t", "--duration", "2s", "--warmup", "0s"}, func(t *testing.T, o *benchOptions) {
			if o.AdminToken != "t" || o.Duration != 2*time.Second || o.Warmup != 0 || !o.WarmupSet {
				t.Errorf("options = %+v", o)
			}
		}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var got *benchOptions
			cmd := newCmdBench(func(_ context.Context, o *benchOptions) error { got = o; return nil })
			cmd.SetArgs(tc.args)
			cmd.SetOut(&bytes.Buffer{})
			cmd.SetErr(&bytes.Buffer{})
			if err := cmd.Execute(); err != nil {
				t.Fatal(err)
			}
			tc.check(t, got)
		})
	}
}

func writeScenario(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestBenchUsageErrors: a bad scenario, a missing file or an unreachable
// target is a clear message and exit code 2, at once.
// TestBenchServeFlags: every flag infer bench gives the servers it starts
// (package target renders them from a scenario's typed spec) is one that
// infer serve takes, with a value it parses.
func TestBenchServeFlags(t *testing.T) {
	d := func(v time.Duration) *time.Duration { return &v }
	for _, tc := range []struct {
		name string
		spec target.Serve
		set  target.Settings
	}{
		{"encoder", target.Serve{Model: "sim", SimFixed: d(time.Millisecond), SimPerItem: d(0), SimFailOn: "poison", Devices: "cpu",
			QueueCap: 512, Timeout: 5 * time.Second, Args: []string{"--max-items", "64"}},
			target.Settings{Batch: 8, Workers: 2, MaxLatency: 5 * time.Millisecond, MaxLatencySet: true, Policy: "fixed",
				Buckets: []int{16, 64}, BucketsSet: true}},
		{"no buckets", target.Serve{Model: "sim"}, target.Settings{MaxLatencySet: true, BucketsSet: true}},
		{"generation", target.Serve{Model: "sim-lm", SimStep: d(2 * time.Millisecond), SimPerSeq: d(100 * time.Microsecond),
			SimPerPrefillToken: d(2 * time.Microsecond), KVTokens: 8192, QueueCap: 256, Timeout: 10 * time.Minute},
			target.Settings{MaxSeqs: 8, MaxBatchedTokens: 512, MaxLatency: 20 * time.Millisecond, MaxLatencySet: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--addr", "127.0.0.1:0"}, tc.spec.Flags(tc.set)...)
			cmd := newCmdServe(func(_ context.Context, o *serveOptions) error { return nil })
			execFlags(t, cmd, args, "")
		})
	}
}

func TestBenchUsageErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	good := writeScenario(t, "server:\n  model: sim\nload:\n  concurrency: 1\n")
	typo := writeScenario(t, "server:\n  model: sim\nload:\n  concurrency: 1\n  duraton: 5s\n")
	bad := writeScenario(t, "server:\n  model: sim\nload:\n  concurrency: 0\n")
	badLen := writeScenario(t, "server:\n  model: sim-lm\npayload:\n  api: chat\n  output_tokens: {dist: lognormal, median: 100}\nload:\n  concurrency: 1\n")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"typo", []string{"bench", "-s", typo}, typo + `:5:3: unknown field "duraton" (did you mean "duration"?)`},
		{"bad value", []string{"bench", "-s", bad}, bad + ":4:3: load.concurrency 0"},
		{"bad llm length", []string{"bench", "-s", badLen}, badLen + ":5:3: payload.output_tokens: token length: lognormal needs a max"},
		{"missing file", []string{"bench", "-s", "no/such.yaml"}, "no/such.yaml: cannot read: no such file or directory"},
		{"unreachable", []string{"bench", "-s", good, "--target", closed, "--no-tui", "-o", filepath.Join(t.TempDir(), "r")},
			"target " + closed + ": unreachable"},
		{"bad target", []string{"bench", "-s", good, "--target", "localhost:8080"}, "want an http:// or https:// URL"},
		{"no scenario", []string{"bench"}, "-s quick), or a server: infer bench --target"},
		{"bad output", []string{"bench", "-s", good, "--output", "xml"}, "--output"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			root := newCmdRoot(&out, &out)
			root.SetArgs(tc.args)
			start := time.Now()
			code := exitCode(root.Execute(), &out)
			if code != exitUsage || !strings.Contains(out.String(), tc.want) {
				t.Errorf("exit %d, output:\n%s\nwant exit %d and %q", code, out.String(), exitUsage, tc.want)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("took %v", took)
			}
		})
	}
}

// TestBenchEndToEnd runs infer bench against real `infer serve` processes:
// the run directory, the JSON summary, and the thresholds' exit code.
func TestBenchEndToEnd(t *testing.T) {
	scenario := writeScenario(t, `
name: e2e
server:
  model: sim
  sim_fixed: 1ms
  sim_per_item: 0.1ms
load:
  concurrency: 4
  warmup: 100ms
  duration: 500ms
sweep:
  endpoints: [naive, batched]
  batch: [4]
  workers: [2]
slo:
  max_error_rate: 0.01
  min_throughput: 1000000
  require: any
`)
	dir := filepath.Join(t.TempDir(), "run")
	var stdout, stderr bytes.Buffer
	opts := &benchOptions{
		Scenario: scenario, Out: dir, Output: "json", Log: logOptions{Level: "info", Format: "text"},
		Stdout: &stdout, Stderr: &stderr,
		Launcher: target.ExecLauncher{Path: os.Args[0], Env: []string{mainEnv + "=1"}},
	}
	err := runBench(context.Background(), opts)
	if code := exitCode(err, &stderr); code != exitThresholds {
		t.Errorf("exit %d (%v), want %d: no point reaches a million requests per second\n%s", code, err, exitThresholds, stderr.String())
	}
	var summary loadgen.Summary
	if err := json.Unmarshal(stdout.Bytes(), &summary); err != nil {
		t.Fatalf("stdout is not a JSON summary: %v\n%s", err, stdout.String())
	}
	if summary.Passed || summary.Scenario != "e2e" || len(summary.Rows) != 2 || summary.Rows[1].Name != "batched c=4" {
		t.Errorf("summary = %+v", summary)
	}
	for _, r := range summary.Rows {
		if r.Throughput <= 0 || r.ErrorRate != 0 || !strings.Contains(strings.Join(r.Violations, ";"), "throughput") {
			t.Errorf("row %+v", r)
		}
	}
	run, err := record.ReadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(run.Records) != 2 || run.Manifest.InferCommit == "" || run.Records[1].Point.Workers != 2 || run.Records[1].Server.CPUSeconds <= 0 {
		t.Errorf("run: manifest %+v, records %+v", run.Manifest, run.Records)
	}
	if !strings.Contains(stderr.String(), "done batched c=4") {
		t.Errorf("no progress lines on stderr:\n%s", stderr.String())
	}
	// Info logs go to bench.log, not between the progress lines.
	if strings.Contains(stderr.String(), `msg="point done"`) {
		t.Errorf("raw log lines on stderr:\n%s", stderr.String())
	}
	if log, err := os.ReadFile(filepath.Join(dir, "bench.log")); err != nil || !strings.Contains(string(log), `msg="point done"`) {
		t.Errorf("bench.log: %v\n%s", err, log)
	}
}

func TestBenchDryRun(t *testing.T) {
	var out bytes.Buffer
	root := newCmdRoot(&out, &out)
	root.SetArgs([]string{"bench", "-s", "../scenarios/quick.yaml", "--dry-run"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "naive c=32") || !strings.Contains(out.String(), "7 points, 6 server configurations") {
		t.Errorf("dry run:\n%s", out.String())
	}
}

// serveTarget starts a real `infer serve` process (this test binary as
// infer) with args, waits until it is ready, and stops it when the test
// ends.
func serveTarget(t *testing.T, args ...string) string {
	t.Helper()
	l := target.ExecLauncher{Path: os.Args[0], Env: []string{mainEnv + "=1"}}
	srv, err := l.Launch(context.Background(), target.CommandServe, args, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		srv.Stop(ctx)
	})
	for deadline := time.Now().Add(30 * time.Second); ; {
		resp, err := http.Get(srv.URL() + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return srv.URL()
			}
		}
		select {
		case <-srv.Exited():
			t.Fatalf("infer serve %q exited:\n%s", args, srv.LogTail())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("infer serve %q not ready:\n%s", args, srv.LogTail())
		}
	}
}

// TestBenchAdminSweep sweeps the policy and batch size of a running
// `infer serve --admin-token` through its admin API, with the token from
// the variable the scenario names; a server without the admin API is exit
// code 2 before any load.
func TestBenchAdminSweep(t *testing.T) {
	url := serveTarget(t, "--model", "sim", "--sim-fixed", "1ms", "--sim-per-item", "0.1ms", "--admin-token", "tok-123")
	t.Setenv("BENCH_TEST_TOKEN", "tok-123")
	scenario := writeScenario(t, `
target:
  urls: `+url+`
  admin_token_env: BENCH_TEST_TOKEN
load:
  concurrency: 4
  warmup: 100ms
  duration: 400ms
sweep:
  batch: [1, 4]
  policy: [fixed, adaptive]
`)
	dir := filepath.Join(t.TempDir(), "run")
	var stdout, stderr bytes.Buffer
	opts := &benchOptions{Scenario: scenario, Out: dir, Output: "text", Log: logOptions{Level: "warn", Format: "text"}, Stdout: &stdout, Stderr: &stderr}
	if err := runBench(context.Background(), opts); err != nil {
		t.Fatalf("bench: %v\n%s", err, stderr.String())
	}
	run, err := record.ReadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range run.Records {
		got = append(got, fmt.Sprintf("b=%d %s", r.Point.Batch, r.Point.Policy))
		if r.Point.Batch == 1 && r.MeanBatch() != 1 {
			t.Errorf("%s: mean batch %.2f at batch 1", r.Point.Name, r.MeanBatch())
		}
	}
	if want := []string{"b=1 fixed", "b=4 fixed", "b=1 adaptive", "b=4 adaptive"}; !slices.Equal(got, want) {
		t.Errorf("points = %q, want %q", got, want)
	}

	plain := serveTarget(t, "--model", "sim", "--sim-fixed", "1ms")
	var out bytes.Buffer
	root := newCmdRoot(&out, &out)
	root.SetArgs([]string{"bench", "-s", scenario, "--target", plain, "--no-tui", "-o", filepath.Join(t.TempDir(), "r")})
	if code := exitCode(root.Execute(), &out); code != exitUsage || !strings.Contains(out.String(), "no admin API") {
		t.Errorf("bench against a server without admin API: exit %d, output:\n%s", code, out.String())
	}
}

func TestAdminToken(t *testing.T) {
	t.Setenv("INFER_ADMIN_TOKEN", "fallback")
	t.Setenv("SCENARIO_TOKEN", "named")
	t.Setenv("EMPTY_TOKEN", "")
	for _, tc := range []struct{ flag, env, want string }{
		{"flag", "SCENARIO_TOKEN", "flag"},
		{"", "SCENARIO_TOKEN", "named"},
		{"", "EMPTY_TOKEN", "fallback"},
		{"", "", "fallback"},
	} {
		if got := adminToken(tc.flag, tc.env); got != tc.want {
			t.Errorf("adminToken(%q, %q) = %q, want %q", tc.flag, tc.env, got, tc.want)
		}
	}
}

// TestBenchLLM runs infer bench against real `infer serve --model sim-lm`
// processes: the JSON summary's LLM keys per point, the report's charts,
// and the thresholds' exit code.
func TestBenchLLM(t *testing.T) {
	scenario := writeScenario(t, `
name: llm-e2e
server:
  model: sim-lm
  sim_step: 2ms
  sim_per_seq: 0.1ms
  sim_per_prefill_token: 2us
payload:
  api: completions
  prompt_tokens: 32
  output_tokens: {dist: uniform, min: 8, max: 24}
  ignore_eos: true
load:
  concurrency: 4
  warmup: 100ms
  duration: 700ms
sweep:
  endpoints: [continuous, static]
  max_seqs: 4
slo:
  ttft_p99: 1us
`)
	dir := filepath.Join(t.TempDir(), "run")
	var stdout, stderr bytes.Buffer
	opts := &benchOptions{
		Scenario: scenario, Out: dir, Output: "json", Report: true, Log: logOptions{Level: "info", Format: "text"},
		Stdout: &stdout, Stderr: &stderr,
		Launcher: target.ExecLauncher{Path: os.Args[0], Env: []string{mainEnv + "=1"}},
	}
	err := runBench(context.Background(), opts)
	if code := exitCode(err, &stderr); code != exitThresholds {
		t.Errorf("exit %d (%v), want %d: no TTFT is under a microsecond\n%s", code, err, exitThresholds, stderr.String())
	}
	var summary struct {
		Rows []map[string]any `json:"rows"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &summary); err != nil {
		t.Fatalf("stdout is not a JSON summary: %v\n%s", err, stdout.String())
	}
	if len(summary.Rows) != 2 {
		t.Fatalf("%d rows, want 2", len(summary.Rows))
	}
	for _, r := range summary.Rows {
		for _, k := range []string{"ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"} {
			m, ok := r[k].(map[string]any)
			if !ok || m["p50"] == nil || m["p99"] == nil || m["mean"] == nil || m["p90"] == nil {
				t.Errorf("row %v: %s = %v", r["name"], k, r[k])
			}
		}
		for _, k := range []string{"output_tokens_per_s", "requests_per_s", "goodput_per_s"} {
			if _, ok := r[k].(float64); !ok {
				t.Errorf("row %v lacks %s", r["name"], k)
			}
		}
		if r["output_tokens_per_s"].(float64) <= 0 || r["goodput_per_s"].(float64) != 0 {
			t.Errorf("row %v: tokens/s %v, goodput %v (want > 0, and 0 under a 1µs TTFT bound)", r["name"], r["output_tokens_per_s"], r["goodput_per_s"])
		}
	}
	for _, png := range []string{"llm-throughput.png", "llm-latency.png", "ttft-cdf.png", "timeline.png"} {
		if st, err := os.Stat(filepath.Join(dir, "report", png)); err != nil || st.Size() < 1000 {
			t.Errorf("report chart %s: %v", png, err)
		}
	}
	if !strings.Contains(stderr.String(), "done static c=4") || !strings.Contains(stderr.String(), "tokens/s") {
		t.Errorf("no LLM progress lines on stderr:\n%s", stderr.String())
	}
}
