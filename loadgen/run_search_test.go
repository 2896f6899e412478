package loadgen

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferhq/infer/loadgen/llm/llmtest"
	"github.com/inferhq/infer/loadgen/record"
	"github.com/inferhq/infer/loadgen/scenario"
	"github.com/inferhq/infer/loadgen/search"
)

// slotServer is a foreign server of a known capacity: slots requests at
// a time, each taking work; one more is refused at once with 429, as a
// server with a bounded queue refuses its overload. It has no /metrics,
// no /readyz and no Server-Timing. A slot is freed before the answer is
// written, so a closed-loop client whose answer came always finds its
// slot free: up to slots clients, nothing is refused; one more, and one
// of them is refused all the time.
func slotServer(t *testing.T, slots int, work time.Duration) *httptest.Server {
	sem := make(chan struct{}, slots)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/predict" {
			http.NotFound(w, r)
			return
		}
		select {
		case sem <- struct{}{}:
		default:
			http.Error(w, `{"error":{"code":"queue_full"}}`, http.StatusTooManyRequests)
			return
		}
		time.Sleep(work)
		<-sem
		answer(w, r)
	}))
	t.Cleanup(ts.Close)
	return ts
}

// TestSearchForeignServer: against a server that is not infer's and
// tells nothing of itself, a search over clients finds its capacity, 8
// clients, exactly: the first count of clients it refuses is 9.
func TestSearchForeignServer(t *testing.T) {
	ts := slotServer(t, 8, 15*time.Millisecond)
	sc := mustParse(t, "target:\n  urls: "+ts.URL+"\nload:\n  search: {over: clients, from: 1, to: 64}\n  warmup: 100ms\n  duration: 500ms\n"+
		"sweep:\n  endpoints: /predict\nslo:\n  p99: 1s\n")
	var snaps snapshots
	out, err := Run(context.Background(), sc, Config{Dir: t.TempDir(), Progress: snaps.put, Tick: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Capacities) != 1 {
		t.Fatalf("capacities = %+v, want one", out.Capacities)
	}
	c := out.Capacities[0]
	if c.Capacity != 8 || c.Failed != 9 || c.End != string(search.Converged) || c.Partial || c.Over != record.OverClients {
		t.Errorf("capacity %+v; want 8 clients, 9 refused, converged", c)
	}
	var levels []float64
	for i, r := range out.Records {
		s := r.Search
		if s == nil || !slices.Contains(r.Flags, record.FlagSearch) || r.Index != i || r.Point.Load.Concurrency != int(s.Level) {
			t.Fatalf("record %d: search %+v, flags %v, load %+v", i, s, r.Flags, r.Point.Load)
		}
		levels = append(levels, s.Level)
		if s.Pass != (s.Level <= 8) {
			t.Errorf("%v clients: pass %v (margin %v, errors %.3f)", s.Level, s.Pass, s.Margin, r.ErrorRate())
		}
	}
	if want := []float64{1, 2, 4, 8, 16, 12, 10, 9}; !slices.Equal(levels, want) {
		t.Errorf("levels = %v, want %v", levels, want)
	}
	if !strings.Contains(out.Records[len(out.Records)-1].Search.Why, "8 clients met the SLO and 9 clients missed it") {
		t.Errorf("why = %q", out.Records[len(out.Records)-1].Search.Why)
	}
	if !slices.Equal(out.Manifest.Capacities, out.Capacities) {
		t.Errorf("manifest capacities %+v, outcome's %+v", out.Manifest.Capacities, out.Capacities)
	}
	run, err := record.ReadRun(out.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := record.Capacities(run.Records); len(got) != 1 || got[0].Capacity != 8 || got[0].Failed != 9 || got[0].Index < 0 {
		t.Errorf("capacities from the records = %+v", got)
	}
	s := Summarize(out, sc.SLO)
	if !s.Passed || len(s.Capacity) != 1 || !strings.Contains(s.Verdict, "1 of 1 configurations meet the SLO") {
		t.Errorf("summary: passed %v, %q, capacity %+v", s.Passed, s.Verdict, s.Capacity)
	}
	var text strings.Builder
	if err := s.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "capacity under the SLO (p99 ≤ 1s, errors ≤ 1%)") || !strings.Contains(text.String(), "8 clients  8–9 clients") {
		t.Errorf("summary text:\n%s", text.String())
	}
	last := snaps.last()
	if last.Search == nil || len(last.Search.Found) != 1 || last.Search.Found[0].Capacity != 8 || last.Phase != PhaseDone {
		t.Errorf("last snapshot's search = %+v", last.Search)
	}
}

// TestSearchLLMForeignServer: a streaming OpenAI-compatible server that
// is not infer's, of a known capacity (4 streams; the fifth refused with
// 429), is searched over clients and its capacity found exactly.
func TestSearchLLMForeignServer(t *testing.T) {
	fake := llmtest.New(llmtest.Config{Timing: llmtest.Timing{FirstToken: 5 * time.Millisecond, Interval: time.Millisecond}, Tokens: 8})
	sem := make(chan struct{}, 4)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/v1/") {
			http.NotFound(w, r)
			return
		}
		select {
		case sem <- struct{}{}:
		default:
			http.Error(w, `{"error":{"message":"busy"}}`, http.StatusTooManyRequests)
			return
		}
		// The stream's slot is freed before its last bytes go out, as
		// in slotServer: a client that got its answer finds it free.
		rel := &releaser{ResponseWriter: w, release: func() { <-sem }}
		fake.ServeHTTP(rel, r)
		rel.once.Do(rel.release)
	}))
	defer ts.Close()
	sc := mustParse(t, "target:\n  urls: "+ts.URL+"/v1\n  model: fake\npayload:\n  api: completions\n  output_tokens: 8\n"+
		"load:\n  search: {over: clients, to: 16}\n  warmup: 100ms\n  duration: 500ms\n  drain: 2s\nslo:\n  ttft_p99: 1s\n")
	out, err := Run(context.Background(), sc, Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Capacities) != 1 {
		t.Fatalf("capacities = %+v", out.Capacities)
	}
	if c := out.Capacities[0]; c.Capacity != 4 || c.Failed != 5 || c.End != string(search.Converged) || c.OutputTokensPerS <= 0 {
		var levels []string
		for _, r := range out.Records {
			levels = append(levels, fmt.Sprintf("%v:%v(%.2f)", r.Search.Level, r.Search.Pass, r.Search.Margin))
		}
		t.Errorf("capacity %+v after %v; want 4 streams, 5 refused", c, levels)
	}
	for _, r := range out.Records {
		if r.LLM == nil || len(r.LLM.Seconds) != 0 { // a half-second window has no whole second
			t.Errorf("record %s: LLM %v", r.Point.Name, r.LLM != nil)
		}
	}
}

// releaser calls release once, at the stream's [DONE] or its end.
type releaser struct {
	http.ResponseWriter
	release func()
	once    sync.Once
}

func (r *releaser) Write(b []byte) (int, error) {
	if strings.Contains(string(b), "[DONE]") {
		r.once.Do(r.release)
	}
	return r.ResponseWriter.Write(b)
}

func (r *releaser) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// TestSearchNoneMeets: a server that fails every request misses the SLO
// at the lowest level: the search stops there, says why, and the run
// fails its SLO.
func TestSearchNoneMeets(t *testing.T) {
	var hits atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/batched" {
			http.NotFound(w, r)
			return
		}
		hits.Add(1)
		http.Error(w, `{"error":{"code":"model_failed"}}`, http.StatusInternalServerError)
	}))
	defer ts.Close()
	sc := mustParse(t, "target:\n  urls: "+ts.URL+"\nload:\n  search: {over: rate, from: 20}\n  warmup: 100ms\n  duration: 500ms\nslo:\n  p99: 1s\n")
	out, err := Run(context.Background(), sc, Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Records) != 1 || len(out.Capacities) != 1 || hits.Load() < 10 {
		t.Fatalf("%d records, capacities %+v; want the one level", len(out.Records), out.Capacities)
	}
	c, s := out.Capacities[0], out.Records[0].Search
	if c.Capacity != 0 || c.Failed != 20 || c.End != string(search.NoneMeets) || s.Pass || s.Margin != search.MaxMargin {
		t.Errorf("capacity %+v, probe %+v", c, s)
	}
	if !strings.Contains(c.Why, "even the lowest level, 20 req/s, misses the SLO (p99 unknown: no successful request; errors 100.00% > 1.00%)") {
		t.Errorf("why = %q", c.Why)
	}
	sum := Summarize(out, sc.SLO)
	if sum.Passed || !strings.Contains(sum.Verdict, "no load meets the SLO for batched") {
		t.Errorf("summary: passed %v, %q", sum.Passed, sum.Verdict)
	}
}

// dyingServer answers /batched until it has answered n requests, then
// goes away: its port refuses connections, its open ones are closed.
func dyingServer(t *testing.T, n int64) *httptest.Server {
	var hits atomic.Int64
	var once sync.Once
	var ts *httptest.Server
	ts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) > n {
			once.Do(func() {
				go func() {
					ts.Listener.Close()
					ts.CloseClientConnections()
				}()
			})
			return
		}
		answer(w, r)
	}))
	t.Cleanup(ts.Close)
	return ts
}

// TestSearchTargetGone: a target that goes away mid-search ends it at
// once (each level measured once, so that a busy machine's doubtful
// level, measured again, cannot spend the target's 100 answers before
// 80 req/s): the probe it died in is recorded partial and flagged, the
// capacity is partial, the run fails and says why.
func TestSearchTargetGone(t *testing.T) {
	ts := dyingServer(t, 100)
	sc := mustParse(t, "target:\n  urls: "+ts.URL+"\nload:\n  search: {over: rate, from: 40, repeats: 1}\n  warmup: 100ms\n  duration: 1s\nslo:\n  p99: 1s\n")
	start := time.Now()
	out, err := Run(context.Background(), sc, Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("took %v", took)
	}
	if out.TargetFailed == "" || len(out.Records) < 2 {
		t.Fatalf("target failed %q, %d records", out.TargetFailed, len(out.Records))
	}
	last := out.Records[len(out.Records)-1]
	if !last.Partial || last.Valid || !slices.Contains(last.Flags, record.FlagTargetFailed) || last.Search.End != record.EndTargetFailed ||
		!strings.Contains(last.Search.Why, "the target stopped answering at 80 req/s") {
		t.Errorf("last record: partial %v valid %v flags %v search %+v", last.Partial, last.Valid, last.Flags, last.Search)
	}
	c := out.Capacities[0]
	if !c.Partial || c.Capacity != 40 || c.End != record.EndTargetFailed {
		t.Errorf("capacity %+v; want 40 req/s, partial", c)
	}
	sum := Summarize(out, sc.SLO)
	if sum.Passed || !strings.Contains(sum.Verdict, "the target stopped answering mid-search") {
		t.Errorf("summary: passed %v, %q", sum.Passed, sum.Verdict)
	}
	if !slices.ContainsFunc(out.Manifest.Notices, func(n string) bool { return strings.Contains(n, "the target stopped answering") }) {
		t.Errorf("notices = %q", out.Manifest.Notices)
	}
}

// TestSearchStopped: a search stopped mid-probe keeps what it measured,
// the probe marked partial, and is not judged.
func TestSearchStopped(t *testing.T) {
	ts := slotServer(t, 64, time.Millisecond)
	sc := mustParse(t, "target:\n  urls: "+ts.URL+"\nload:\n  search: {over: clients}\n  warmup: 50ms\n  duration: 400ms\n"+
		"sweep:\n  endpoints: /predict\nslo:\n  p99: 1s\n")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	progress := func(s Snapshot) {
		// Once the third level has answers in its window: stopped before
		// any, the level has nothing to record.
		if s.Search != nil && s.Search.Probe == 3 && s.Phase == PhaseMeasuring && s.MeasuredRPS > 0 {
			cancel()
		}
	}
	out, err := Run(ctx, sc, Config{Dir: t.TempDir(), Progress: progress, Tick: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if !out.Interrupted || len(out.Records) < 3 {
		t.Fatalf("interrupted %v, %d records", out.Interrupted, len(out.Records))
	}
	last := out.Records[len(out.Records)-1]
	if !last.Partial || last.Search.End != record.EndStopped {
		t.Errorf("last record: partial %v, search %+v", last.Partial, last.Search)
	}
	if c := out.Capacities[0]; !c.Partial || c.End != record.EndStopped {
		t.Errorf("capacity %+v", c)
	}
	if s := Summarize(out, sc.SLO); s.Passed || s.Outcome != OutcomeStopped || len(s.Capacity) != 1 {
		t.Errorf("summary: passed %v, outcome %s, %d capacities, %q", s.Passed, s.Outcome, len(s.Capacity), s.Verdict)
	}
}

func TestMargin(t *testing.T) {
	ok := map[string]int{"200": 100}
	for _, tc := range []struct {
		name string
		r    record.Record
		slo  scenario.SLO
		want float64
	}{
		{"p99 half the bound", record.Record{Status: ok, Sent: 100, Latency: record.Percentiles{P99: ms(250)}}, scenario.SLO{P99: 500 * time.Millisecond}, 0.5},
		{"errors the worst", record.Record{Status: map[string]int{"200": 95, "429": 5}, Sent: 100, Latency: record.Percentiles{P99: ms(250)}},
			scenario.SLO{P99: 500 * time.Millisecond, MaxErrorRate: 0.01}, 5},
		{"no success", record.Record{Status: map[string]int{"500": 10}, Sent: 10}, scenario.SLO{P99: time.Second}, search.MaxMargin},
		{"held back", record.Record{Status: ok, Sent: 100, TargetRate: 100, AchievedRate: 47.5, Latency: record.Percentiles{P99: ms(1)}},
			scenario.SLO{P99: time.Second}, 2},
		{"no bound", record.Record{Status: ok, Sent: 100}, scenario.SLO{}, 0},
		{"LLM TTFT", record.Record{Status: ok, LLM: &record.LLM{Requests: 10, Completed: 10, RequestsPerS: 2, GoodputPerS: 1,
			TTFT: record.MsStats{P99: 1500, N: 10}, TPOT: record.MsStats{P99: 10, N: 10}}},
			scenario.SLO{TTFTP99: time.Second, TPOTP99: 50 * time.Millisecond}, 1.5},
		{"LLM good share", record.Record{Status: ok, LLM: &record.LLM{Requests: 10, Completed: 8, RequestsPerS: 2, GoodputPerS: 1,
			TTFT: record.MsStats{P99: 100, N: 8}}}, scenario.SLO{MinGoodputFraction: 0.8}, 2},
		{"LLM TTFT unknown", record.Record{LLM: &record.LLM{Requests: 10, Failed: 10}}, scenario.SLO{TTFTP99: time.Second}, search.MaxMargin},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Margin(&tc.r, tc.slo); math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("Margin = %v, want %v", got, tc.want)
			}
		})
	}
}
