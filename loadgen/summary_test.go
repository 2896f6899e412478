package loadgen

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/inferhq/infer/loadgen/record"
	"github.com/inferhq/infer/loadgen/scenario"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (rerun with -update if intended):\n%s", path, got)
	}
}

func ms(n float64) record.Duration { return record.Duration(n * float64(time.Millisecond)) }

func sampleOutcome() *Outcome {
	return &Outcome{
		Dir: "results/quick-1", Points: 4, Interrupted: true, Shared: "w=1 lat=10ms",
		Manifest: record.Manifest{Scenario: "quick", Notices: []string{"http://127.0.0.1:1 has no /metrics (404): the server's batch sizes are not measured"}},
		Records: []record.Record{
			{Index: 0, Point: record.Point{Name: "naive c=32"}, Sent: 193, AchievedRate: 48.2, Throughput: 48.2, ItemsPerSec: 48.2,
				Latency: record.Percentiles{P50: ms(662.4), P99: ms(675.3)}, Status: map[string]int{"200": 193},
				Server: record.ServerSide{Batch: 1}, Valid: true},
			{Index: 1, Point: record.Point{Name: "batched b=32 rate=900/s"}, Sent: 3300, TargetRate: 900, AchievedRate: 825, Throughput: 800, ItemsPerSec: 3200,
				Latency: record.Percentiles{P50: ms(38.81), P99: ms(2047.9)}, Status: map[string]int{"200": 3200, "429": 100},
				Errors: map[string]int{"HTTP 429 queue_full": 98, "connection reset by peer": 2},
				Server: record.ServerSide{Batch: 31.96}, Flags: []string{record.FlagCoordinatedOmission, record.FlagScheduleLag, record.FlagErrors},
				ScheduleLag: &record.Percentiles{P99: ms(1453), Max: ms(1476)}, FromSchedule: &record.Percentiles{P99: ms(3500)}},
			{Index: 2, Point: record.Point{Name: "batched b=64 rate=900/s"}, Sent: 10, TargetRate: 900, AchievedRate: 900, Throughput: 900, ItemsPerSec: 900,
				Latency: record.Percentiles{P50: ms(0.2517), P99: ms(1.5)}, Status: map[string]int{"200": 10}, Valid: true, Partial: true},
		},
	}
}

func TestSummarize(t *testing.T) {
	o := sampleOutcome()
	o.Interrupted = false
	for _, tc := range []struct {
		name        string
		slo         scenario.SLO
		wantOutcome string
		wantRow1    int // violations of the second row, an untrusted one
	}{
		{"none", scenario.SLO{Require: "all"}, OutcomePass, 0},
		{"all fail", scenario.SLO{P99: time.Second, MaxErrorRate: 0.01, Require: "all"}, OutcomeFail, 3},
		{"any pass", scenario.SLO{P99: time.Second, MaxErrorRate: 0.01, Require: "any"}, OutcomePass, 3},
		{"throughput", scenario.SLO{MinThroughput: 100, Require: "any"}, OutcomeFail, 1}, // the one point fast enough is untrusted
		{"throughput all", scenario.SLO{MinThroughput: 100, Require: "all"}, OutcomeFail, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Summarize(o, tc.slo)
			if s.Outcome != tc.wantOutcome || s.Passed != (tc.wantOutcome == OutcomePass) || len(s.Rows) != 3 || len(s.Rows[1].Violations) != tc.wantRow1 {
				t.Errorf("Summarize = %s passed %v (%s), row 1 violations %q; want %s, %d", s.Outcome, s.Passed, s.Verdict, s.Rows[1].Violations, tc.wantOutcome, tc.wantRow1)
			}
			if len(s.Rows[2].Violations) != 0 {
				t.Errorf("partial row judged: %q", s.Rows[2].Violations)
			}
		})
	}
}

// TestSummarizeOutcomes: a stopped run is STOPPED, never PASS, whatever
// its points; thresholds with no complete point to judge give NO VERDICT;
// points the report would not trust (schedule lag) do not pass.
func TestSummarizeOutcomes(t *testing.T) {
	slo := scenario.SLO{P99: time.Second, Require: "any"}
	stopped := sampleOutcome() // its point 0 meets the SLO
	if s := Summarize(stopped, slo); s.Passed || s.Outcome != OutcomeStopped || !strings.Contains(s.Verdict, "2 of 4 points done") {
		t.Errorf("stopped run: %s passed %v (%s)", s.Outcome, s.Passed, s.Verdict)
	}
	if s := Summarize(stopped, scenario.SLO{}); s.Passed || s.Outcome != OutcomeStopped {
		t.Errorf("stopped run without thresholds: %s passed %v", s.Outcome, s.Passed)
	}
	partial := sampleOutcome()
	partial.Interrupted = false
	partial.Records = partial.Records[2:]
	if s := Summarize(partial, slo); s.Passed || s.Outcome != OutcomeUnjudged {
		t.Errorf("no complete point: %s passed %v (%s)", s.Outcome, s.Passed, s.Verdict)
	}
	lag := sampleOutcome()
	lag.Interrupted = false
	lag.Records = lag.Records[:1]
	lag.Records[0].Flags, lag.Records[0].Valid = []string{record.FlagScheduleLag}, false
	s := Summarize(lag, slo)
	if s.Passed || s.Outcome != OutcomeFail || !slices.Contains(s.Rows[0].Violations, "untrusted measurement") {
		t.Errorf("a lagging point: %s passed %v, violations %q", s.Outcome, s.Passed, s.Rows[0].Violations)
	}
	var b bytes.Buffer
	if err := Summarize(stopped, slo).WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "SLO p99 ≤ 1s: STOPPED, stopped before the end") || strings.Contains(b.String(), "PASS") {
		t.Errorf("stopped run's summary:\n%s", b.String())
	}
}

func TestSummaryGolden(t *testing.T) {
	s := Summarize(sampleOutcome(), scenario.SLO{P99: time.Second, MaxErrorRate: 0.01, MinThroughput: 100, Require: "all"})
	var text bytes.Buffer
	if err := s.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	golden(t, "summary.txt", text.Bytes())
	js, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "summary.json", append(js, '\n'))
}

func TestRound(t *testing.T) {
	for in, want := range map[time.Duration]string{
		251700 * time.Nanosecond:   "252µs",
		1234567 * time.Nanosecond:  "1.23ms",
		38812345 * time.Nanosecond: "38.8ms",
		662412345:                  "662ms",
		2047900000:                 "2.05s",
		95 * time.Second:           "1m35s",
	} {
		if got := record.Round(in).String(); got != want {
			t.Errorf("Round(%v) = %s, want %s", in, got, want)
		}
	}
}

func llmOutcome() *Outcome {
	l := func(tok, req, good, ttft50, ttft99, tpot99 float64, failed int, failures map[string]int) *record.LLM {
		return &record.LLM{API: "completions", Stream: true, Requests: 100, Completed: 100 - failed, Failed: failed, Failures: failures,
			TTFT: record.MsStats{Mean: ttft50, P50: ttft50, P90: ttft99, P99: ttft99, N: 100}, TPOT: record.MsStats{P50: tpot99 - 1, P99: tpot99, N: 100},
			ITL: record.MsStats{P50: 8, P99: 12, N: 900}, E2EL: record.MsStats{P50: 900, P99: 1500, N: 100},
			OutputTokensPerS: tok, RequestsPerS: req, GoodputPerS: good, Ideal: 1848}
	}
	return &Outcome{
		Dir: "results/llm-1", Points: 3, Shared: "seqs=32",
		Manifest: record.Manifest{Scenario: "llm"},
		Records: []record.Record{
			{Index: 0, Point: record.Point{Name: "continuous c=64"}, Sent: 200, Throughput: 13.9, Valid: true,
				LLM: l(1830.4, 13.9, 13.9, 41.2, 120, 9.9, 0, nil)},
			{Index: 1, Point: record.Point{Name: "static c=64"}, Sent: 60, Throughput: 3.5, Valid: true,
				LLM: l(494, 3.5, 1.2, 5100, 11700, 9.1, 0, nil)},
			{Index: 2, Point: record.Point{Name: "naive c=64"}, Sent: 20, Throughput: 0.8, Flags: []string{record.FlagErrors, record.FlagNoUsage}, Valid: true,
				Errors: map[string]int{"sse: event too large (over 1 MiB)": 3, "answer is not JSON: <html><body>Bad gateway": 1},
				LLM:    l(114, 0.8, 0, 30000, 61000, 8.3, 4, map[string]int{"stream_error": 3, "disconnect": 1})},
		},
	}
}

func TestSummaryLLM(t *testing.T) {
	slo := scenario.SLO{TTFTP99: 2 * time.Second, Require: "any"}
	out := llmOutcome()
	out.Records[2].LLM.Unfinished = 2
	s := Summarize(out, slo)
	if !s.Passed || s.Rows[1].Violations[0] != "TTFT p99 11.7s > 2s" {
		t.Errorf("passed %v, violations %q", s.Passed, s.Rows[1].Violations)
	}
	var b bytes.Buffer
	if err := s.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	golden(t, "summary-llm.txt", b.Bytes())
	js, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Rows []map[string]any `json:"rows"`
	}
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"ttft_ms", "tpot_ms", "itl_ms", "e2el_ms", "output_tokens_per_s", "requests_per_s", "goodput_per_s"} {
		if _, ok := back.Rows[0][k]; !ok {
			t.Errorf("--output json row lacks %q: %s", k, js)
		}
	}
	for _, k := range []string{"mean", "p50", "p90", "p99"} {
		if _, ok := back.Rows[0]["ttft_ms"].(map[string]any)[k]; !ok {
			t.Errorf("ttft_ms lacks %q", k)
		}
	}
	if f := back.Rows[2]["failures"].(map[string]any); f["stream_error"] != 3.0 {
		t.Errorf("failures %v, want by cause", f)
	}
}

// TestRowMeanBatch: a row's mean batch counts each batch once: /metrics'
// items ÷ batches when the server was scraped, else Server-Timing's
// batch-weighted figure; the response-weighted one is named apart.
func TestRowMeanBatch(t *testing.T) {
	ss := record.ServerSide{Batch: 16, ResponseBatch: 30.0625, Timed: 320}
	rec := record.Record{Server: ss}
	if got := RowOf(&rec, scenario.SLO{}).Batch; got != ss.Batch {
		t.Errorf("row mean batch without /metrics = %v, want Server-Timing's batch-weighted %v", got, ss.Batch)
	}
	rec.Server.Metrics = &record.Metrics{Batches: 20, Items: 300, MeanBatch: 15}
	row := RowOf(&rec, scenario.SLO{})
	if row.Batch != 15 || row.ResponseBatch != ss.ResponseBatch {
		t.Errorf("row mean batch %v, response batch %v; want /metrics' 15 and %v", row.Batch, row.ResponseBatch, ss.ResponseBatch)
	}
}
