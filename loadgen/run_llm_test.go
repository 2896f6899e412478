package loadgen

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/inferhq/infer/loadgen/llm/llmtest"
	"github.com/inferhq/infer/loadgen/record"
	"github.com/inferhq/infer/loadgen/target"
)

// TestRunLLMSweep runs an LLM sweep end to end against real sim-lm server
// processes: continuous, static and naive over two max-seqs.
func TestRunLLMSweep(t *testing.T) {
	sc := mustParse(t, `
server:
  model: sim-lm
payload:
  api: chat
  prompt_tokens: {dist: uniform, min: 8, max: 64}
  output_tokens: {dist: uniform, min: 8, max: 48}
  ignore_eos: true
load:
  concurrency: 6
  warmup: 200ms
  duration: 1s
sweep:
  endpoints: [continuous, static, naive]
  max_seqs: [2, 4]
slo:
  ttft_p99: 30s
`)
	var snaps snapshots
	out, err := Run(context.Background(), sc, Config{Dir: t.TempDir(), Launcher: testLauncher(), Progress: snaps.put, Tick: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		endpoint, policy string
		seqs             int
	}
	wants := []want{{"continuous", "continuous", 2}, {"static", "static", 2}, {"naive", "naive", 0}, {"continuous", "continuous", 4}, {"static", "static", 4}}
	if len(out.Records) != len(wants) {
		t.Fatalf("%d records, want %d", len(out.Records), len(wants))
	}
	for i, r := range out.Records {
		w, l := wants[i], r.LLM
		if l == nil {
			t.Fatalf("record %d has no LLM part", i)
		}
		if r.Point.Endpoint != w.endpoint || r.Point.Policy != w.policy || r.Point.MaxSeqs != w.seqs {
			t.Errorf("record %d: endpoint %s policy %s max_seqs %d, want %+v", i, r.Point.Endpoint, r.Point.Policy, r.Point.MaxSeqs, w)
		}
		if l.Completed == 0 || l.Failed != 0 || l.TokenSource.Usage != l.Completed || !r.Valid {
			t.Errorf("%s: completed %d failed %d usage %d valid %v flags %v", r.Point.Name, l.Completed, l.Failed, l.TokenSource.Usage, r.Valid, r.Flags)
		}
		if l.TTFT.N == 0 || l.TPOT.P50 <= 0 || l.OutputTokensPerS <= 0 || r.Throughput != l.RequestsPerS || r.Latency.P99 <= 0 {
			t.Errorf("%s: TTFT %+v TPOT %+v tokens/s %v throughput %v latency %+v", r.Point.Name, l.TTFT, l.TPOT, l.OutputTokensPerS, r.Throughput, r.Latency)
		}
		if l.Server == nil || l.Server.Requests == 0 || l.Server.TTFTMean <= 0 || l.Server.Samples == 0 {
			t.Errorf("%s: server side %+v", r.Point.Name, l.Server)
		} else if !strings.Contains(l.Server.Params, "step=2ms") {
			t.Errorf("%s: server params %q, want the sim's costs", r.Point.Name, l.Server.Params)
		}
		if l.Timing == nil || l.Timing.Timed != l.Completed {
			t.Errorf("%s: Server-Timing %+v, want one per completed request (%d)", r.Point.Name, l.Timing, l.Completed)
		} else if d := l.TTFT.Mean - l.Timing.TTFTMean; d < 0 || d > 50 {
			t.Errorf("%s: client TTFT mean %vms, server's %vms: the client's should be a little later", r.Point.Name, l.TTFT.Mean, l.Timing.TTFTMean)
		}
		if l.Ideal <= 0 {
			t.Errorf("%s: no ideal tokens/s", r.Point.Name)
		}
		if l.Histograms == nil || l.Histograms.TTFT.Count() != l.TTFT.N || len(l.Timeline) == 0 {
			t.Errorf("%s: histograms %v, timeline %d", r.Point.Name, l.Histograms, len(l.Timeline))
		}
	}
	if n := out.Manifest.Notices; len(n) > 0 {
		t.Errorf("notices %q, want none against infer's own server", n)
	}
	live := slices.ContainsFunc(snaps.all, func(s Snapshot) bool { return s.LLM != nil && s.LLM.Server != nil && s.LLM.Open > 0 })
	if !live {
		t.Error("no live snapshot with open streams and the server's gauges")
	}
}

// TestRunLLMForeign loads servers that are not infer's: no /readyz, no
// /metrics, no Server-Timing and no usage are said once, not errors;
// mid-stream errors and broken streams are counted by cause.
func TestRunLLMForeign(t *testing.T) {
	for _, tc := range []struct {
		name   string
		quirks llmtest.Quirks
		cause  string
		flags  []string
	}{
		{"no usage", llmtest.Quirks{NoUsage: true}, "", []string{record.FlagNoUsage}},
		{"error mid-stream", llmtest.Quirks{ErrorAfter: 2}, "stream_error", []string{record.FlagErrors, record.FlagNoSuccess}},
		{"cut mid-stream", llmtest.Quirks{CutAfter: 2}, "disconnect", []string{record.FlagErrors, record.FlagNoSuccess}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := httptest.NewServer(llmtest.New(llmtest.Config{Quirks: tc.quirks, Tokens: 6,
				Timing: llmtest.Timing{FirstToken: 5 * time.Millisecond, Interval: time.Millisecond}}))
			defer fake.Close()
			sc := mustParse(t, `
target:
  urls: [`+fake.URL+`]
  model: gpt2
payload:
  api: completions
  output_tokens: 6
load:
  concurrency: 2
  warmup: 0s
  duration: 300ms
`)
			out, err := Run(context.Background(), sc, Config{Dir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			if len(out.Records) != 1 {
				t.Fatalf("%d records", len(out.Records))
			}
			r := out.Records[0]
			l := r.LLM
			if !slices.Equal(r.Flags, tc.flags) {
				t.Errorf("flags %v, want %v", r.Flags, tc.flags)
			}
			if tc.cause != "" && (l.Failures[tc.cause] != l.Requests || l.Requests == 0 || r.ErrorRate() != 1) {
				t.Errorf("failures %v of %d requests (error rate %v), want all %s", l.Failures, l.Requests, r.ErrorRate(), tc.cause)
			}
			if tc.cause == "" && (l.TokenSource.Tokenizer != l.Completed || l.Completed == 0 || l.OutputTokens != int64(6*l.Completed)) {
				t.Errorf("token sources %+v, output %d of %d completed: want counted by GPT-2's tokenizer, 6 each", l.TokenSource, l.OutputTokens, l.Completed)
			}
			said := func(part string) int {
				n := 0
				for _, s := range out.Manifest.Notices {
					if strings.Contains(s, part) {
						n++
					}
				}
				return n
			}
			parts := []string{"no /readyz", "/metrics"}
			if tc.cause == "" { // said of the answers that completed
				parts = append(parts, "Server-Timing", "no usage")
			}
			for _, part := range parts {
				if said(part) != 1 {
					t.Errorf("notices %q: %q said %d times, want once", out.Manifest.Notices, part, said(part))
				}
			}
		})
	}
}

// TestRunLLMAdminSweep sweeps max_seqs on an existing sim-lm server
// through its admin API, and puts its own setting back at the end. The
// target is named by its OpenAI base URL (…/v1), as OpenAI clients name it:
// the admin API and /metrics are found at the server's root.
func TestRunLLMAdminSweep(t *testing.T) {
	srv, err := testLauncher().Launch(context.Background(), target.CommandServe, []string{"--model", "sim-lm", "--admin-token", "tok", "--max-seqs", "4"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(context.Background())
	if _, err := target.WaitReady(context.Background(), http.DefaultClient, srv, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	sc := mustParse(t, `
target:
  urls: [`+srv.URL()+`/v1]
payload:
  api: completions
  output_tokens: 8
load:
  concurrency: 3
  warmup: 0s
  duration: 300ms
sweep:
  endpoints: [continuous, naive]
  max_seqs: [2, 3]
`)
	out, err := Run(context.Background(), sc, Config{Dir: t.TempDir(), AdminToken: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, r := range out.Records {
		got = append(got, r.Point.MaxSeqs)
		if r.Point.Endpoint == "continuous" && (r.LLM.Server == nil || r.LLM.Server.MaxSeqs != r.Point.MaxSeqs) {
			t.Errorf("%s: the server ran max_seqs %+v", r.Point.Name, r.LLM.Server)
		}
	}
	if !slices.Equal(got, []int{2, 0, 3}) {
		t.Errorf("max_seqs %v, want [2 0 3] (naive once)", got)
	}
	if b := adminSettings(t, srv.URL(), "tok"); b.MaxSeqs != 4 {
		t.Errorf("after the run: %+v; want max_seqs 4 back", b)
	}
}
