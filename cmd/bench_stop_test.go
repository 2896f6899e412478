package cmd

import (
	"bytes"
	"context"
	"io"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inferhq/infer/loadgen/llm/llmtest"
	"github.com/inferhq/infer/loadgen/record"
)

// stopScenario is a run far longer than the tests wait: two points of a
// minute each on a fake OpenAI server, with an SLO its first seconds meet.
func stopScenario(t *testing.T) string {
	fake := httptest.NewServer(llmtest.New(llmtest.Config{Timing: llmtest.Timing{FirstToken: 5 * time.Millisecond, Interval: time.Millisecond}}))
	t.Cleanup(fake.Close)
	return writeScenario(t, `
name: stop
target:
  urls: [`+fake.URL+`]
  model: gpt2
payload:
  api: completions
  output_tokens: 8
load:
  rate: [20, 40]
  warmup: 200ms
  duration: 60s
slo:
  ttft_p99: 10s
`)
}

// TestBenchStoppedNoTUI: a signal (the command's context cancelled) in the
// middle of a run with plain progress lines: STOPPED, exit 130, and the
// partial point kept.
func TestBenchStoppedNoTUI(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	var stdout, stderr bytes.Buffer
	opts := &benchOptions{Scenario: stopScenario(t), Out: dir, Output: "text", NoTUI: true,
		Log: logOptions{Level: "warn", Format: "text"}, Stdout: &stdout, Stderr: &stderr}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(1500*time.Millisecond, cancel)
	start := time.Now()
	code := exitCode(runBench(ctx, opts), &stderr)
	checkStopped(t, code, stdout.String(), stderr.String(), dir, time.Since(start))
}

// TestBenchStoppedLiveView: Ctrl-C typed into the live view (the byte a
// terminal in raw mode sends) stops the run the same way: STOPPED, exit
// 130, although the command's context was never cancelled.
func TestBenchStoppedLiveView(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	in, typed := io.Pipe()
	defer typed.Close()
	var stdout, stderr bytes.Buffer
	opts := &benchOptions{Scenario: stopScenario(t), Out: dir, Output: "text", Terminal: true,
		Log: logOptions{Level: "warn", Format: "text"}, Stdin: in, Stdout: &stdout, Stderr: &stderr}
	time.AfterFunc(1500*time.Millisecond, func() { _, _ = typed.Write([]byte{0x03}) })
	start := time.Now()
	code := exitCode(runBench(context.Background(), opts), &stderr)
	out := stdout.String()
	if i := strings.LastIndex(out, "POINT"); i >= 0 {
		out = out[i:] // the summary, after the live view's frames
	}
	checkStopped(t, code, out, stderr.String(), dir, time.Since(start))
}

func checkStopped(t *testing.T, code int, stdout, stderr, dir string, took time.Duration) {
	t.Helper()
	if code != exitInterrupted {
		t.Errorf("exit %d, want %d\nstderr:\n%s", code, exitInterrupted, stderr)
	}
	if !strings.Contains(stdout, "STOPPED, stopped before the end, 0 of 2 points done") || strings.Contains(stdout, "PASS") {
		t.Errorf("summary:\n%s", stdout)
	}
	if took > 30*time.Second {
		t.Errorf("took %v to stop", took)
	}
	run, err := record.ReadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !run.Manifest.Interrupted || len(run.Records) != 1 || !run.Records[0].Partial {
		t.Errorf("run: interrupted %v, %d records", run.Manifest.Interrupted, len(run.Records))
	}
}
