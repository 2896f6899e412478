package llm_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/inferhq/infer/loadgen/llm"
	"github.com/inferhq/infer/loadgen/llm/llmtest"
	"github.com/inferhq/infer/loadgen/record"
)

// constant is a constant pacer, as vegeta's: hit k at (k+1)·interval.
type constant struct{ interval time.Duration }

func (c constant) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	return time.Duration(hits+1)*c.interval - elapsed, false
}
func (c constant) Rate(time.Duration) float64 { return float64(time.Second) / float64(c.interval) }

// runCase runs cfg against a fake of fake inside a synctest bubble.
func runCase(t *testing.T, fake llmtest.Config, payload llm.PayloadConfig, cfg llm.RunConfig) *llm.Outcome {
	t.Helper()
	var out *llm.Outcome
	synctest.Test(t, func(t *testing.T) {
		hc, url, stop := llmtest.ServePipe(llmtest.New(fake))
		defer stop()
		out = runWith(t, llm.ClientConfig{BaseURL: url, HTTP: hc}, payload, cfg)
	})
	return out
}

// runWith runs cfg with a client of ccfg and a generator of payload.
func runWith(t *testing.T, ccfg llm.ClientConfig, payload llm.PayloadConfig, cfg llm.RunConfig) *llm.Outcome {
	t.Helper()
	c, err := llm.NewClient(ccfg)
	if err != nil {
		t.Fatal(err)
	}
	if payload.Model == "" {
		payload.Model = "fake"
	}
	g, err := llm.NewGenerator(payload)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Client, cfg.Source, cfg.API, cfg.Stream = c, g, payload.API, payload.Stream
	out, err := llm.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol }

var stream20 = llm.PayloadConfig{API: llm.Chat, Stream: true, OutputTokens: llm.Fixed(20)}

func TestRunOpenLoop(t *testing.T) {
	fake := llmtest.Config{Quirks: llmtest.VLLM()} // 40 ms, then 8 ms a chunk
	truth := fake.Truth(20)
	out := runCase(t, fake, stream20, llm.RunConfig{
		Pacer: constant{10 * time.Millisecond}, Warmup: 500 * time.Millisecond, Duration: 2 * time.Second, Histograms: true,
	})
	l := out.LLM
	if l.Scheduled != 200 || l.Requests != 200 || l.Completed != 200 || out.Sent != 200 {
		t.Errorf("scheduled %d, requests %d, completed %d, sent %d; want 200 each", l.Scheduled, l.Requests, l.Completed, out.Sent)
	}
	if out.TargetRate != 100 || out.AchievedRate != 100 {
		t.Errorf("target %v/s, achieved %v/s; want 100", out.TargetRate, out.AchievedRate)
	}
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	for _, c := range []struct {
		name string
		got  record.MsStats
		want time.Duration
	}{
		{"TTFT", l.TTFT, truth.TTFT}, {"ITL", l.ITL, truth.ITL}, {"TPOT", l.TPOT, truth.TPOT}, {"E2EL", l.E2EL, truth.E2EL},
		{"TTFT from intended", l.FromIntended.TTFT, truth.TTFT},
	} {
		if c.got.P50 != ms(c.want) || c.got.P99 != ms(c.want) || c.got.Mean != ms(c.want) {
			t.Errorf("%s = %+v, want %v throughout", c.name, c.got, c.want)
		}
	}
	if l.ITL.N != 200*19 || l.TTFT.N != 200 {
		t.Errorf("ITL pooled over %d gaps, TTFT over %d; want 3800 and 200", l.ITL.N, l.TTFT.N)
	}
	if l.Lag.Max != 0 || l.Queue.Max != 0 {
		t.Errorf("lag %+v, queue %+v; want none (virtual time, free slots)", l.Lag, l.Queue)
	}
	if !near(l.RequestsPerS, 100, 0.01) || !near(l.OutputTokensPerS, 2000, 20) || !near(l.GoodputPerS, 100, 0.01) {
		t.Errorf("rates: %v req/s, %v tok/s, goodput %v/s; want 100, 2000, 100", l.RequestsPerS, l.OutputTokensPerS, l.GoodputPerS)
	}
	if len(l.Flags) != 0 || l.TokenSource.Usage != 200 {
		t.Errorf("flags %v, token sources %+v", l.Flags, l.TokenSource)
	}
	if l.Histograms == nil || l.Histograms.ITL.Count() != 3800 {
		t.Errorf("histograms missing or wrong")
	}
	if len(l.Timeline) != llm.DefaultTimeline || !slices.IsSortedFunc(l.Timeline, func(a, b record.Span) int { return int(a.Intended - b.Intended) }) {
		t.Fatalf("timeline: %d spans, sorted %v", len(l.Timeline), slices.IsSortedFunc(l.Timeline, func(a, b record.Span) int { return int(a.Intended - b.Intended) }))
	}
	for _, sp := range l.Timeline {
		if sp.FirstToken.D()-sp.Sent.D() != truth.TTFT || sp.LastToken.D()-sp.Sent.D() != truth.E2EL || !sp.OK || sp.Intended < 0 {
			t.Fatalf("span %+v: want TTFT %v, E2EL %v", sp, truth.TTFT, truth.E2EL)
		}
	}
}

// TestRunKeepsSchedule: with too few stream slots for the load, due
// requests queue in the client and go late, in order; the latencies from
// the actual send stay the server's, those from the intended time show
// what users on schedule saw, and the point is flagged.
func TestRunKeepsSchedule(t *testing.T) {
	fake := llmtest.Config{}
	truth := fake.Truth(20) // 192 ms a request: 5 slots serve 26/s
	out := runCase(t, fake, stream20, llm.RunConfig{
		Pacer: constant{10 * time.Millisecond}, MaxInFlight: 5, Duration: 2 * time.Second, Drain: 30 * time.Second,
	})
	l := out.LLM
	// Hits at 10 ms, 20 ms, … 1990 ms: 199 in the window.
	if l.Scheduled != 199 || l.Requests != 199 || l.Completed != 199 {
		t.Errorf("scheduled %d, requests %d, completed %d; want 199: every scheduled request is sent, late", l.Scheduled, l.Requests, l.Completed)
	}
	if l.TTFT.P99 != float64(truth.TTFT)/1e6 {
		t.Errorf("TTFT p99 from the send = %vms, want the server's %v", l.TTFT.P99, truth.TTFT)
	}
	if l.FromIntended.TTFT.P99 < 5000 || l.Lag.P99 < 5000 || l.Queue.P99 < 5000 {
		t.Errorf("from intended: TTFT p99 %vms, lag p99 %vms, queue p99 %vms; want seconds", l.FromIntended.TTFT.P99, l.Lag.P99, l.Queue.P99)
	}
	for _, f := range []string{record.FlagCoordinatedOmission, record.FlagScheduleLag} {
		if !slices.Contains(l.Flags, f) {
			t.Errorf("flags %v: %s missing", l.Flags, f)
		}
	}
	if out.AchievedRate > 30 {
		t.Errorf("achieved %v/s, want about 26 (5 slots / 192 ms)", out.AchievedRate)
	}
}

func TestRunClosedLoop(t *testing.T) {
	out := runCase(t, llmtest.Config{}, stream20, llm.RunConfig{Concurrency: 4, Duration: 2 * time.Second})
	l := out.LLM
	// 4 clients, 192 ms a request: 11 rounds of 4 start in 2 s, 10 end.
	if l.Requests != 44 || l.Completed != 44 || l.Lag.Max != 0 || out.TargetRate != 0 {
		t.Errorf("requests %d, completed %d, lag %+v, target %v; want 44, 44, none, 0", l.Requests, l.Completed, l.Lag, out.TargetRate)
	}
	if l.RequestsPerS != 20 {
		t.Errorf("%v req/s, want 20 (40 answers in 2 s)", l.RequestsPerS)
	}
	if slices.Contains(l.Flags, record.FlagCoordinatedOmission) || slices.Contains(l.Flags, record.FlagScheduleLag) {
		t.Errorf("closed loop flagged %v", l.Flags)
	}
}

func TestRunGoodput(t *testing.T) {
	for _, tc := range []struct {
		slo  record.LLMSLO
		good bool
	}{
		{record.LLMSLO{}, true},
		{record.LLMSLO{TTFT: record.Duration(50 * time.Millisecond)}, true},
		{record.LLMSLO{TTFT: record.Duration(30 * time.Millisecond)}, false},
		{record.LLMSLO{TPOT: record.Duration(7 * time.Millisecond)}, false},
		{record.LLMSLO{TTFT: record.Duration(50 * time.Millisecond), E2EL: record.Duration(200 * time.Millisecond)}, true},
	} {
		out := runCase(t, llmtest.Config{}, stream20, llm.RunConfig{Pacer: constant{20 * time.Millisecond}, Duration: time.Second, SLO: tc.slo})
		l := out.LLM
		want := 0.0
		if tc.good {
			want = l.RequestsPerS
		}
		if l.GoodputPerS != want || l.RequestsPerS == 0 {
			t.Errorf("SLO %+v: goodput %v/s, want %v (of %v req/s)", tc.slo, l.GoodputPerS, want, l.RequestsPerS)
		}
		if misses := tc.slo.Misses(&l); (len(misses) == 0) != tc.good {
			t.Errorf("SLO %+v: misses %v", tc.slo, misses)
		}
	}
}

func TestRunFailuresByCause(t *testing.T) {
	out := runCase(t, llmtest.Config{Quirks: llmtest.Quirks{ErrorAfter: 5, ErrorStyle: "tgi"}}, stream20,
		llm.RunConfig{Pacer: constant{20 * time.Millisecond}, Duration: time.Second})
	l := out.LLM
	if l.Failed != 49 || l.Completed != 0 || l.Failures[string(llm.CauseStreamError)] != 49 {
		t.Errorf("failed %d, completed %d, failures %v; want 49 stream errors", l.Failed, l.Completed, l.Failures)
	}
	if l.TTFT.N != 0 || l.ITL.N != 0 {
		t.Errorf("failures in the latency stats: TTFT n %d, ITL n %d", l.TTFT.N, l.ITL.N)
	}
	if !slices.Contains(l.Flags, record.FlagErrors) || !slices.Contains(l.Flags, record.FlagNoSuccess) {
		t.Errorf("flags %v", l.Flags)
	}
	if len(l.Errors) != 1 {
		t.Errorf("errors %v", l.Errors)
	}
	if out.Status["200"] != 49 {
		t.Errorf("status %v: the mid-stream errors came in 200 answers", out.Status)
	}
}

func TestRunNoUsageFlagged(t *testing.T) {
	out := runCase(t, llmtest.Config{Quirks: llmtest.Quirks{NoUsage: true}, Timing: llmtest.Timing{DoubleEvery: 2}}, stream20,
		llm.RunConfig{Pacer: constant{50 * time.Millisecond}, Duration: time.Second})
	l := out.LLM
	if !slices.Contains(l.Flags, record.FlagNoUsage) || l.TokenSource.Chunks != l.Completed || l.Completed == 0 {
		t.Errorf("flags %v, sources %+v", l.Flags, l.TokenSource)
	}
}

// TestRunDrainCutsOff: streams still open when the drain ends are cut off
// and counted unfinished, neither good nor failed.
func TestRunDrainCutsOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hc, url, stop := llmtest.ServePipe(llmtest.New(llmtest.Config{Timing: llmtest.Timing{FirstToken: time.Hour}}))
		defer stop()
		c, _ := llm.NewClient(llm.ClientConfig{BaseURL: url, HTTP: hc})
		g, _ := llm.NewGenerator(stream20)
		start := time.Now()
		out, err := llm.Run(context.Background(), llm.RunConfig{Client: c, Source: g, Pacer: constant{100 * time.Millisecond},
			Duration: time.Second, Drain: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took != 3*time.Second {
			t.Errorf("took %v, want the window and the drain, 3s", took)
		}
		if l := out.LLM; l.Unfinished != 9 || l.Failed != 0 || l.Requests != 0 {
			t.Errorf("unfinished %d, failed %d, requests %d; want 9, 0, 0", l.Unfinished, l.Failed, l.Requests)
		}
	})
}

func TestRunStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hc, url, stop := llmtest.ServePipe(llmtest.New(llmtest.Config{}))
		defer stop()
		c, _ := llm.NewClient(llm.ClientConfig{BaseURL: url, HTTP: hc})
		g, _ := llm.NewGenerator(llm.PayloadConfig{API: llm.Completions, Stream: true, OutputTokens: llm.Fixed(1000)})
		ctx, cancel := context.WithTimeout(context.Background(), 3050*time.Millisecond)
		defer cancel()
		start := time.Now()
		out, err := llm.Run(ctx, llm.RunConfig{Client: c, Source: g, Pacer: constant{100 * time.Millisecond}, Warmup: time.Second, Duration: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		// Streams of 1000 tokens (8 s) cannot finish in the 2 s grace.
		if took := time.Since(start); took != 5050*time.Millisecond || !out.Stopped || out.Window != 2050*time.Millisecond {
			t.Errorf("took %v, stopped %v, window %v; want 5.05s (3.05s + 2s grace), true, 2.05s", took, out.Stopped, out.Window)
		}
		// Sent in the window, 1.0 s to 3.0 s: 21; in the warm-up: 9, cut
		// off all the same.
		if out.LLM.Unfinished != 30 || out.LLM.Failed != 0 {
			t.Errorf("unfinished %d, failed %d; want 30 (21 sent in the window, 9 in the warm-up), 0", out.LLM.Unfinished, out.LLM.Failed)
		}
	})
}

func TestRunSnapshots(t *testing.T) {
	var mu sync.Mutex
	var snaps []llm.Snapshot
	runCase(t, llmtest.Config{}, stream20, llm.RunConfig{
		Pacer: constant{10 * time.Millisecond}, Warmup: time.Second, Duration: 3 * time.Second,
		Progress: func(s llm.Snapshot) { mu.Lock(); snaps = append(snaps, s); mu.Unlock() },
	})
	if len(snaps) < 15 || snaps[len(snaps)-1].Phase != llm.PhaseDone {
		t.Fatalf("%d snapshots, last %+v", len(snaps), snaps[len(snaps)-1])
	}
	phases := map[llm.Phase]bool{}
	for _, s := range snaps {
		phases[s.Phase] = true
	}
	if !phases[llm.PhaseWarmup] || !phases[llm.PhaseMeasuring] {
		t.Errorf("phases seen %v", phases)
	}
	mid := snaps[len(snaps)/2]
	// 100 req/s of 192 ms: about 19 streams open, 2000 tokens/s.
	if mid.Window != llm.LiveWindow || !near(mid.TokensPerS, 2000, 100) || mid.Open < 17 || mid.Open > 21 ||
		mid.TTFT.P50 != 40*time.Millisecond || mid.ITL.P99 != 8*time.Millisecond {
		t.Errorf("mid-run snapshot %+v", mid)
	}
}

func TestRunConfigErrors(t *testing.T) {
	c, _ := llm.NewClient(llm.ClientConfig{BaseURL: "http://127.0.0.1:1"})
	g, _ := llm.NewGenerator(stream20)
	for _, cfg := range []llm.RunConfig{
		{Source: g, Duration: time.Second, Concurrency: 1},
		{Client: c, Source: g, Concurrency: 1},
		{Client: c, Source: g, Duration: time.Second},
		{Client: c, Source: g, Duration: time.Second, Concurrency: llm.MaxStreams + 1},
		{Client: c, Source: g, Duration: time.Second, Pacer: constant{time.Second}, MaxInFlight: -1},
		{Client: c, Source: g, Duration: time.Second, Concurrency: 1, Warmup: -time.Second},
	} {
		if _, err := llm.Run(context.Background(), cfg); !errors.Is(err, llm.ErrConfig) {
			t.Errorf("Run(%+v) = %v, want ErrConfig", cfg, err)
		}
	}
}

// TestRunClients spreads requests round-robin over several clients (the
// frontends of one deployment).
func TestRunClients(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var fakes []*llmtest.Server
		var clients []*llm.Client
		for range 2 {
			f := llmtest.New(llmtest.Config{})
			hc, url, stop := llmtest.ServePipe(f)
			defer stop()
			c, err := llm.NewClient(llm.ClientConfig{BaseURL: url, HTTP: hc})
			if err != nil {
				t.Fatal(err)
			}
			fakes, clients = append(fakes, f), append(clients, c)
		}
		g, _ := llm.NewGenerator(stream20)
		out, err := llm.Run(context.Background(), llm.RunConfig{Clients: clients, Source: g, API: llm.Chat, Stream: true,
			Pacer: constant{10 * time.Millisecond}, Duration: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		a, b := fakes[0].Requests(), fakes[1].Requests()
		if a+b != int64(out.LLM.Requests) || a-b > 1 || b-a > 1 {
			t.Errorf("requests %d and %d of %d, want them split evenly", a, b, out.LLM.Requests)
		}
	})
}
