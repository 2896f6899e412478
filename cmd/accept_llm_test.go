//go:build linux

package cmd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/inferhq/infer/loadgen/llm/llmtest"
	"github.com/inferhq/infer/loadgen/record"
	"github.com/inferhq/infer/loadgen/target"
)

// The acceptance measurements of issue 12 through `infer bench` end to
// end: scenario → run → record, against llmtest's fake servers (in a child
// process, so that this process's CPU is the bench's alone) and against
// infer's own sim-lm server. They run when INFER_LLMBENCH_ACCEPT=1
// (scripts/accept-llmbench.sh sets it) and print "ACCEPT …" lines.

func init() { llmtest.ServeChild() } // before TestMain: a fake server for the child processes

// startFakeLLM runs a fake of cfg in a child process; it returns the base URL.
func startFakeLLM(t *testing.T, cfg llmtest.Config) string { return llmtest.StartChild(t, cfg) }

func acceptLLMOnly(t *testing.T) {
	if os.Getenv("INFER_LLMBENCH_ACCEPT") != "1" {
		t.Skip("acceptance measurement: set INFER_LLMBENCH_ACCEPT=1 (scripts/accept-llmbench.sh)")
	}
}

func acceptLine(t *testing.T, format string, args ...any) {
	t.Helper()
	line := "ACCEPT " + fmt.Sprintf(format, args...)
	fmt.Println(line)
	t.Log(line)
}

// benchRun runs infer bench on a scenario text and returns its run and
// the exit code.
func benchRun(t *testing.T, scenario string) (*record.Run, int, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "run")
	var stdout, stderr bytes.Buffer
	opts := &benchOptions{
		Scenario: writeScenario(t, scenario), Out: dir, Output: "text", Log: logOptions{Level: "warn", Format: "text"},
		Stdout: &stdout, Stderr: &stderr,
		Launcher: target.ExecLauncher{Path: os.Args[0], Env: []string{mainEnv + "=1"}},
	}
	code := exitCode(runBench(context.Background(), opts), &stderr)
	run, err := record.ReadRun(dir)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	return run, code, stdout.String()
}

func measuredOf(t *testing.T, url string) llmtest.Measured {
	t.Helper()
	resp, err := http.Get(url + llmtest.MeasuredPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m llmtest.Measured
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

func envIntOr(t *testing.T, name string, def int) int {
	if s := os.Getenv(name); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v <= 0 {
			t.Fatalf("%s=%q: want a positive integer", name, s)
		}
		return v
	}
	return def
}

func msOf(d time.Duration) float64 { return float64(d) / 1e6 }

// TestAcceptBenchAccuracy: through infer bench, TTFT and ITL within 1 ms of
// the truth at p50, TPOT from usage tokens (not chunks), a chat TTFT that
// ignores the role chunk, for every server form.
func TestAcceptBenchAccuracy(t *testing.T) {
	acceptLLMOnly(t)
	const n = 100
	for _, tc := range []struct {
		name, api string
		q         llmtest.Quirks
	}{
		{"completions/vLLM", "completions", llmtest.VLLM()},
		{"chat/vLLM (role chunk at once)", "chat", llmtest.VLLM()},
		{"chat/TGI", "chat", llmtest.TGI()},
		{"chat/llama.cpp", "chat", llmtest.LlamaCpp()},
		{"chat/Ollama", "chat", llmtest.Ollama()},
		{"chat/all quirks", "chat", llmtest.Quirks{NoSpace: true, EOL: "\r", KeepAlive: true, MultiLine: true, NoDone: true, RoleFirst: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := llmtest.Config{Timing: llmtest.Timing{FirstToken: 40 * time.Millisecond, Interval: 8 * time.Millisecond, DoubleEvery: 3}, Quirks: tc.q}
			truth := fake.Truth(n)
			url := startFakeLLM(t, fake)
			run, code, _ := benchRun(t, fmt.Sprintf(`
name: accuracy
target:
  urls: [%s]
  model: fake
payload:
  api: %s
  output_tokens: %d
load:
  rate: 10
  warmup: 500ms
  duration: 5s
`, url, tc.api, n))
			if code != 0 || len(run.Records) != 1 {
				t.Fatalf("exit %d, %d records", code, len(run.Records))
			}
			l := run.Records[0].LLM
			srv := measuredOf(t, url)
			acceptLine(t, "bench accuracy %s: TTFT p50 %.3fms (server-side %.3f, nominal %.3f), ITL p50 %.3fms (server-side %.3f, nominal %.3f), TPOT p50 %.3fms (nominal %.3f from %d usage tokens in %d chunks), token source %+v, %d requests",
				tc.name, l.TTFT.P50, msOf(srv.TTFTP50), msOf(truth.TTFT), l.ITL.P50, msOf(srv.ITLP50), msOf(truth.ITL),
				l.TPOT.P50, msOf(truth.TPOT), n, truth.Chunks, l.TokenSource, l.Completed)
			if l.Completed == 0 || l.Failed > 0 {
				t.Fatalf("completed %d, failed %d %v", l.Completed, l.Failed, l.Errors)
			}
			for _, c := range []struct {
				name      string
				got, want float64
			}{{"TTFT", l.TTFT.P50, msOf(srv.TTFTP50)}, {"ITL", l.ITL.P50, msOf(srv.ITLP50)}} {
				if c.got < c.want-1 || c.got > c.want+1 {
					t.Errorf("%s p50 %.3fms, the server's %.3fms: want within 1 ms", c.name, c.got, c.want)
				}
			}
			// TPOT from the usage's tokens: chunks carry 1-2 tokens, so
			// a per-chunk count would put it at the ITL.
			if l.TokenSource.Usage != l.Completed || l.TPOT.P50 > 0.8*l.ITL.P50 {
				t.Errorf("TPOT p50 %.3fms with ITL p50 %.3fms, token source %+v: want TPOT from usage", l.TPOT.P50, l.ITL.P50, l.TokenSource)
			}
			if l.TTFT.P50 < 30 { // the role chunk comes at once
				t.Errorf("TTFT p50 %.3fms: the role chunk was taken for the first token", l.TTFT.P50)
			}
		})
	}
}

// TestAcceptBenchSimLM compares the bench's TTFT with infer serve's own,
// per request (Server-Timing) and from its histogram (/metrics).
func TestAcceptBenchSimLM(t *testing.T) {
	acceptLLMOnly(t)
	run, code, _ := benchRun(t, `
name: simlm
server:
  model: sim-lm
payload:
  api: completions
  prompt_tokens: {dist: uniform, min: 32, max: 512}
  output_tokens: {dist: lognormal, median: 100, sigma: 0.8, max: 1024}
  ignore_eos: true
load:
  rate: 4
  arrival: poisson
  warmup: 3s
  duration: 20s
sweep:
  endpoints: [continuous, static]
  max_seqs: 32
`)
	if code != 0 || len(run.Records) != 2 {
		t.Fatalf("exit %d, %d records", code, len(run.Records))
	}
	for _, r := range run.Records {
		l := r.LLM
		if l.Server == nil || l.Timing == nil {
			t.Fatalf("%s: server side %+v, Server-Timing %+v", r.Point.Name, l.Server, l.Timing)
		}
		acceptLine(t, "sim-lm %s: client TTFT mean %.2fms p50 %.2fms p99 %.2fms; Server-Timing (same %d requests) mean %.2fms (client − server %.2fms); /metrics histogram over the window (%v requests) mean %.2fms p50 %.2fms p99 %.2fms; server tokens/s %.1f vs the client's %.1f",
			r.Point.Name, l.TTFT.Mean, l.TTFT.P50, l.TTFT.P99, l.Timing.Timed, l.Timing.TTFTMean, l.TTFT.Mean-l.Timing.TTFTMean,
			l.Server.Requests, l.Server.TTFTMean, l.Server.TTFTP50, l.Server.TTFTP99, l.Server.OutputTokensPerS, l.OutputTokensPerS)
		if d := l.TTFT.Mean - l.Timing.TTFTMean; d < 0 || d > 5 {
			t.Errorf("%s: client TTFT mean %.2fms against the server's %.2fms: want the client's at most 5 ms later", r.Point.Name, l.TTFT.Mean, l.Timing.TTFTMean)
		}
	}
}

// TestAcceptBenchForeign: a server that is not infer's.
func TestAcceptBenchForeign(t *testing.T) {
	acceptLLMOnly(t)
	for _, tc := range []struct {
		name string
		q    llmtest.Quirks
	}{
		{"plain (no /metrics, no Server-Timing)", llmtest.VLLM()},
		{"no usage", llmtest.Quirks{NoUsage: true}},
		{"error mid-stream", llmtest.Quirks{ErrorAfter: 5}},
		{"error mid-stream, TGI style", llmtest.Quirks{ErrorAfter: 5, ErrorStyle: "tgi"}},
		{"connection dropped mid-stream", llmtest.Quirks{CutAfter: 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := startFakeLLM(t, llmtest.Config{Timing: llmtest.Timing{FirstToken: 10 * time.Millisecond, Interval: 2 * time.Millisecond}, Quirks: tc.q})
			run, code, out := benchRun(t, `
name: foreign
target:
  urls: [`+url+`]
  model: gpt2
payload:
  api: chat
  output_tokens: 20
load:
  concurrency: 4
  warmup: 200ms
  duration: 2s
`)
			if len(run.Records) != 1 {
				t.Fatalf("exit %d, %d records", code, len(run.Records))
			}
			r := run.Records[0]
			acceptLine(t, "foreign %s: exit %d, flags %v, failures %v of %d, token source %+v, notices %q",
				tc.name, code, r.Flags, r.LLM.Failures, r.LLM.Requests, r.LLM.TokenSource, run.Manifest.Notices)
			if code != 0 {
				t.Errorf("exit %d: missing parts are not errors\n%s", code, out)
			}
		})
	}
}

// TestAcceptBenchCost: 1,000 concurrent streams cost the bench less than a
// core; an open loop of 100 req/s × 200 tokens holds its schedule.
func TestAcceptBenchCost(t *testing.T) {
	acceptLLMOnly(t)
	streams := envIntOr(t, "LLMBENCH_ACCEPT_STREAMS", 1000)
	for _, interval := range []time.Duration{8 * time.Millisecond, 40 * time.Millisecond} {
		t.Run(interval.String(), func(t *testing.T) {
			url := startFakeLLM(t, llmtest.Config{Timing: llmtest.Timing{Interval: interval}})
			// Streams outlast the window: every client stays open throughout.
			tokens := int((3*time.Second + 8*time.Second + 5*time.Second) / interval)
			run, code, _ := benchRun(t, fmt.Sprintf(`
name: cost
target:
  urls: [%s]
  model: fake
payload:
  api: chat
  output_tokens: %d
load:
  concurrency: %d
  warmup: 3s
  duration: 8s
  drain: 1s
`, url, tokens, streams))
			if len(run.Records) != 1 {
				t.Fatalf("exit %d, %d records", code, len(run.Records))
			}
			r := run.Records[0]
			acceptLine(t, "bench cost: %d concurrent streams, a chunk every %v: %.0f chunks/s received (%.0f/s asked); infer bench's CPU %.3f cores (%.2f µs a chunk); flags %v",
				streams, interval, r.LLM.ChunksPerS, float64(streams)*float64(time.Second)/float64(interval), r.GeneratorCPU,
				r.GeneratorCPU/max(r.LLM.ChunksPerS, 1)*1e6, r.Flags)
			if r.GeneratorCPU >= 1 {
				t.Errorf("infer bench used %.2f cores for %d streams, want < 1", r.GeneratorCPU, streams)
			}
		})
	}
	rate := envIntOr(t, "LLMBENCH_ACCEPT_RATE", 100)
	for _, arrival := range []string{"constant", "poisson"} {
		t.Run("schedule "+arrival, func(t *testing.T) {
			url := startFakeLLM(t, llmtest.Config{})
			run, code, _ := benchRun(t, fmt.Sprintf(`
name: schedule
target:
  urls: [%s]
  model: fake
payload:
  api: completions
  output_tokens: 200
load:
  rate: %d
  arrival: %s
  warmup: 2s
  duration: 10s
`, url, rate, arrival))
			if len(run.Records) != 1 {
				t.Fatalf("exit %d, %d records", code, len(run.Records))
			}
			r := run.Records[0]
			l := r.LLM
			share := r.AchievedRate / r.TargetRate
			acceptLine(t, "bench schedule (%s, %d req/s × 200 tokens): scheduled %.2f/s, sent %.2f/s = %.2f%% of the schedule; lag p50 %.3fms p99 %.3fms max %.3fms; infer bench's CPU %.3f cores; flags %v",
				arrival, rate, r.TargetRate, r.AchievedRate, 100*share, l.Lag.P50, l.Lag.P99, l.Lag.Max, r.GeneratorCPU, r.Flags)
			if share < 0.99 {
				t.Errorf("sent %.2f%% of the schedule, want ≥ 99%%", 100*share)
			}
		})
	}
}
