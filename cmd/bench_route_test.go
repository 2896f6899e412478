package cmd

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inferhq/infer/loadgen/record"
	"github.com/inferhq/infer/loadgen/target"
	"github.com/inferhq/infer/report"
)

// TestBenchRoutePolicies runs infer bench with replicas behind an infer
// route it starts, a policy per configuration: each point's record names
// its policy and holds every replica's share, the router's CPU, and the
// report draws route.png.
func TestBenchRoutePolicies(t *testing.T) {
	if testing.Short() {
		t.Skip("starts infer processes")
	}
	scenario := writeScenario(t, `
name: route-e2e
server:
  model: sim-lm
  replicas: 2
  sim_step: 2ms
  route:
    args: [--health-interval, 200ms]
payload:
  api: completions
  prompt_tokens: 16
  output_tokens: 8
  ignore_eos: true
load:
  concurrency: 4
  warmup: 500ms
  duration: 3s
  drain: 10s
sweep:
  max_seqs: 8
  route_policy: [round-robin, hash]
`)
	dir := filepath.Join(t.TempDir(), "run")
	var stdout, stderr bytes.Buffer
	opts := &benchOptions{
		Scenario: scenario, Out: dir, Output: "json", Log: logOptions{Level: "info", Format: "text"},
		Stdout: &stdout, Stderr: &stderr,
		Launcher: target.ExecLauncher{Path: os.Args[0], Env: []string{mainEnv + "=1"}},
	}
	if err := runBench(context.Background(), opts); err != nil {
		t.Fatalf("bench: %v\n%s", err, stderr.String())
	}
	run, err := record.ReadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(run.Records) != 2 {
		t.Fatalf("%d records, want one per policy", len(run.Records))
	}
	for i, want := range []string{"round-robin", "hash"} {
		r := run.Records[i]
		if r.Point.RoutePolicy != want || !strings.Contains(r.Point.Name, "route="+want) {
			t.Errorf("record %d: policy %q name %q, want %s", i, r.Point.RoutePolicy, r.Point.Name, want)
		}
		if r.LLM == nil || r.LLM.Completed == 0 || len(r.LLM.Replicas) != 2 {
			t.Fatalf("record %d: %+v, want completed requests and 2 replica shares", i, r.LLM)
		}
		var reqs float64
		for _, s := range r.LLM.Replicas {
			if s.Name == "" || s.OutputTokensPerS < 0 {
				t.Errorf("record %d: share %+v", i, s)
			}
			reqs += s.Requests
		}
		// The replicas' counters cover the window; the client's count is of
		// the requests completed in it: the same to within those in flight
		// at its edges.
		if reqs <= 0 || reqs > float64(r.LLM.Completed)+8 {
			t.Errorf("record %d: replicas finished %v requests, the client completed %d", i, reqs, r.LLM.Completed)
		}
		if r.Server.CPUSeconds <= 0 {
			t.Errorf("record %d: no router CPU", i)
		}
	}
	// Round-robin spreads 4 streams over 2 replicas evenly enough.
	rr := run.Records[0].LLM.Replicas
	if rr[0].Requests == 0 || rr[1].Requests == 0 {
		t.Errorf("round-robin left a replica idle: %+v", rr)
	}
	res, err := report.Write(context.Background(), run, nil, filepath.Join(t.TempDir(), "report"), report.Options{})
	if err != nil {
		t.Fatal(err)
	}
	summary, err := os.ReadFile(res.Summary)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(summary), "## Routing policies") {
		t.Errorf("summary has no routing section:\n%s", summary)
	}
	drawn := false
	for _, c := range res.Charts {
		if c.File == "route.png" {
			drawn = c.Skipped == ""
			if !drawn {
				t.Errorf("route.png not drawn: %s", c.Skipped)
			}
		}
	}
	if !drawn {
		t.Errorf("charts %+v, want route.png", res.Charts)
	}
}
