package tui

import (
	"bytes"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"

	"github.com/inferhq/infer/loadgen"
	"github.com/inferhq/infer/loadgen/llm"
	"github.com/inferhq/infer/loadgen/record"
)

func init() {
	// Plain text: the tests read the view, not its colours.
	lipgloss.SetColorProfile(termenv.Ascii)
}

func ms(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }

func running() loadgen.Snapshot {
	return loadgen.Snapshot{
		Scenario: "quick", Dir: "results/quick-1", Points: 7, Done: 2,
		Elapsed: 75 * time.Second, ETA: 65 * time.Second,
		Phase: loadgen.PhaseMeasuring, Index: 2,
		Point:  record.Point{Name: "batched b=8 w=1 c=32", Load: record.Load{Mode: "open", Rate: 400}},
		Shared: "lat=10ms",
		Repeat: 1, Repeats: 2, PointElapsed: 4 * time.Second, PointTotal: 10 * time.Second,
		PhaseElapsed: 3 * time.Second, PhaseTotal: 4 * time.Second, MeasuredRPS: 322.25,
		Window: 2 * time.Second, RPS: 316.5, TargetRate: 400, P50: ms(97.4), P99: ms(231.2), Batch: 7.9,
		LagP99: ms(1.2), LagMax: ms(3.4),
		Notices:   []string{"http://127.0.0.1:1/metrics answers 404: the server's batch sizes are not measured"},
		Status:    map[string]int{"200": 1264, "429": 3},
		LastError: "HTTP 429 queue_full",
		Spark:     []time.Duration{ms(10), ms(50), ms(100), ms(231)},
		Finished: []loadgen.Row{
			{Index: 0, Name: "naive c=32", Throughput: 48.2, P50: record.Duration(ms(662)), P99: record.Duration(ms(675)), Valid: true},
			{Index: 1, Name: "batched b=1 w=1 c=32", Throughput: 47, P50: record.Duration(ms(669)), P99: record.Duration(ms(793)),
				Flags: []string{record.FlagCoordinatedOmission}, Caveats: []string{record.FlagCoordinatedOmission}},
		},
	}
}

func TestViewRunning(t *testing.T) {
	m := New(NewFeed(), func() {})
	var tm tea.Model = m
	tm, _ = tm.Update(tea.WindowSizeMsg{Width: 100, Height: 40})
	tm, cmd := tm.Update(snapshotMsg(running()))
	if cmd == nil {
		t.Error("a snapshot does not lead to reading the next one")
	}
	view := tm.View()
	for _, want := range []string{
		"infer bench · quick", "54% · 2/7 points done", "1m15s elapsed", "ETA 1m05s",
		"every batched point: max latency 10ms", "b batch size · w workers · c clients",
		"3/7 batched b=8 w=1 c=32", "measuring · repeat 1/2 · 3s of 4s",
		"316.5 answers/s last 2s · target 400/s (behind)", "322.2 ok/s so far", "p50 97.4ms", "p99 231ms",
		"note     http://127.0.0.1:1/metrics answers 404", "lag      p99 1.2ms     max 3.4ms",
		"7.9 items per batch", "200: 1264", "429: 3", "▁▂▄█", "HTTP 429 queue_full",
		"naive c=32", "48.2", "662ms", "coordinated-omission", "q stop · results in results/quick-1",
	} {
		if !strings.Contains(view, want) {
			t.Errorf("view lacks %q:\n%s", want, view)
		}
	}
	// 75 s of 75 + 65: 54 % of the bar, as the ETA says.
	if full := strings.Count(view, "█") - 1; full < 37 || full > 38 {
		t.Errorf("progress bar has %d full cells of 70, want about 38:\n%s", full, view)
	}
	// Interleaved repeats: 1 point of 7 done, but 66 s of 81: the bar
	// and the percentage follow the ETA, not the points done.
	s := running()
	s.Done, s.Elapsed, s.ETA = 1, 66*time.Second, 15*time.Second
	tm, _ = tm.Update(snapshotMsg(s))
	if view := tm.View(); !strings.Contains(view, "81% · 1/7 points done") {
		t.Errorf("interleaved run's header:\n%s", view)
	}
	// In the first second the rate is not shown over an empty window.
	s.Window = 0
	tm, _ = tm.Update(snapshotMsg(s))
	if view := tm.View(); strings.Contains(view, "last 0s") || !strings.Contains(view, "after the first second") {
		t.Errorf("a rate over no window:\n%s", view)
	}
}

// TestViewNarrow: at 80 columns no line is wider, point names keep their
// load, and notes that do not fit beside their row go below it.
func TestViewNarrow(t *testing.T) {
	s := running()
	s.Notices = append(s.Notices, "http://127.0.0.1:25090 is not an infer server (no infer_model_info in /metrics): a 200 answer counts as a success whatever its body")
	s.Finished = append(s.Finished, loadgen.Row{Index: 2, Name: "batched b=32 w=2 lat=10ms c=32", Throughput: 1234.5,
		P50: record.Duration(ms(38.5)), P99: record.Duration(ms(1180)), ErrorRate: 0.125,
		Caveats: []string{record.FlagCoordinatedOmission, record.FlagGeneratorSaturated}, Violations: []string{"p99 1.18s > 250ms"}})
	var tm tea.Model = New(NewFeed(), func() {})
	tm, _ = tm.Update(tea.WindowSizeMsg{Width: 80, Height: 40})
	tm, _ = tm.Update(snapshotMsg(s))
	view := tm.View()
	for i, l := range strings.Split(view, "\n") {
		if n := len([]rune(l)); n > 80 {
			t.Errorf("line %d is %d columns wide: %q", i, n, l)
		}
	}
	for _, want := range []string{"batched b=32 w=2 lat=10ms c=32", "12.5%", "↳ coordinated-omission; generator-saturated; p99 1.18s > 250ms",
		"note     http://127.0.0.1:25090 is not an infer server (no infer_model_info", "whatever its body"} {
		if !strings.Contains(view, want) {
			t.Errorf("view lacks %q:\n%s", want, view)
		}
	}
}

// TestViewStopped: after q the header counts the points done whole, as the
// summary does, and the last frame leaves the table to the summary.
func TestViewStopped(t *testing.T) {
	s := running()
	s.Phase, s.Done = loadgen.PhaseDone, 1
	s.Finished[1].Partial = true
	var tm tea.Model = New(NewFeed(), func() {})
	tm, _ = tm.Update(snapshotMsg(s))
	view := tm.View()
	if !strings.Contains(view, "1/7 points") || !strings.Contains(view, "stopped") {
		t.Errorf("stopped view:\n%s", view)
	}
	for _, unwanted := range []string{"finished", "results in", "POINT"} {
		if strings.Contains(view, unwanted) {
			t.Errorf("last frame holds %q, which the summary prints:\n%s", unwanted, view)
		}
	}
}

func TestViewBeforeFirstSnapshot(t *testing.T) {
	if v := New(NewFeed(), func() {}).View(); !strings.Contains(v, "starting") {
		t.Errorf("view = %q", v)
	}
}

func TestStopKeys(t *testing.T) {
	for _, key := range []tea.KeyMsg{{Type: tea.KeyRunes, Runes: []rune("q")}, {Type: tea.KeyCtrlC}} {
		stopped := 0
		var tm tea.Model = New(NewFeed(), func() { stopped++ })
		tm, _ = tm.Update(snapshotMsg(running()))
		tm, cmd := tm.Update(key)
		if cmd == nil {
			t.Fatalf("%s: no command", key)
		}
		if msg := cmd(); msg != nil {
			t.Errorf("%s: the stop command returned %T; the view should wait for the run to end", key, msg)
		}
		if stopped != 1 {
			t.Errorf("%s: stop called %d times, want 1", key, stopped)
		}
		if v := tm.View(); !strings.Contains(v, "stopping") || strings.Contains(v, "q stop") {
			t.Errorf("%s: view after stop:\n%s", key, v)
		}
		// A second press leaves at once.
		_, cmd = tm.Update(key)
		if cmd == nil {
			t.Fatalf("%s: second press: no command", key)
		}
		if _, ok := cmd().(tea.QuitMsg); !ok {
			t.Errorf("%s: second press does not quit", key)
		}
	}
}

func TestFeedEndQuits(t *testing.T) {
	feed := NewFeed()
	m := New(feed, func() {})
	done := running()
	done.Phase, done.Done = loadgen.PhaseDone, 7
	feed.Put(running())
	feed.Put(done) // replaces the unread one
	feed.Close()
	msg := next(m.feed)()
	s, ok := msg.(snapshotMsg)
	if !ok || s.Phase != loadgen.PhaseDone {
		t.Fatalf("first message = %#v, want the latest snapshot", msg)
	}
	var tm tea.Model = m
	tm, _ = tm.Update(s)
	tm, cmd := tm.Update(next(m.feed)())
	if _, ok := cmd().(tea.QuitMsg); !ok {
		t.Error("closing the feed does not quit the view")
	}
	v := tm.View()
	if !strings.Contains(v, "done") || strings.Contains(v, "ETA") || strings.Contains(v, "measuring") {
		t.Errorf("final view:\n%s", v)
	}
}

func TestSparkline(t *testing.T) {
	for _, tc := range []struct {
		in    []time.Duration
		width int
		want  string
	}{
		{[]time.Duration{0, 1, 2, 3, 4, 5, 6, 7}, 10, "▁▂▃▄▅▆▇█"},
		{[]time.Duration{8, 8, 0, 4}, 3, "█▁▄"},
		{[]time.Duration{0, 0}, 5, "▁▁"},
	} {
		if got := Sparkline(tc.in, tc.width); got != tc.want {
			t.Errorf("Sparkline(%v, %d) = %s, want %s", tc.in, tc.width, got, tc.want)
		}
	}
}

func TestLines(t *testing.T) {
	var b bytes.Buffer
	l := &Lines{W: &b, Every: 5 * time.Second}
	s := running()
	s.Finished = s.Finished[:1]
	s.Done = 1
	l.Put(s) // a new point, and one finished
	s.Elapsed += time.Second
	l.Put(s) // too soon for a progress line
	s.Elapsed += 5 * time.Second
	l.Put(s)
	s.Finished = running().Finished
	s.Stopping = true
	l.Put(s)
	s.Phase = loadgen.PhaseDone
	l.Put(s)
	want := `[1/7] done naive c=32: 48.2 ok/s, 0.0 items/s, p50 662ms, p99 675ms, errors 0.00%
note: http://127.0.0.1:1/metrics answers 404: the server's batch sizes are not measured
[3/7] batched b=8 w=1 c=32: measuring · ETA 1m05s
[3/7] batched b=8 w=1 c=32: measuring (repeat 1/2) 3s of 4s · 316.5 answers/s over 2s (target 400/s) · 322.2 ok/s so far · p50 97.4ms p99 231ms · batch 7.9 · 3 failed · ETA 1m05s
[2/7] done batched b=1 w=1 c=32: 47.0 ok/s, 0.0 items/s, p50 669ms, p99 793ms, errors 0.00% [coordinated-omission]
stopping: finishing the current point and writing results…
`
	if b.String() != want {
		t.Errorf("lines =\n%s\nwant\n%s", b.String(), want)
	}
}

func runningLLM() loadgen.Snapshot {
	s := loadgen.Snapshot{
		Scenario: "llm-sim", Dir: "results/llm-sim-1", Points: 18, Done: 1, Elapsed: 40 * time.Second, ETA: 9 * time.Minute,
		Phase: loadgen.PhaseMeasuring, Index: 1, Shared: "seqs=32",
		Point:        record.Point{Name: "continuous rate=2/s", Endpoint: "continuous", Load: record.Load{Mode: "open", Rate: 2, Arrival: "poisson"}},
		PointElapsed: 8 * time.Second, PointTotal: 18 * time.Second, PhaseElapsed: 5 * time.Second, PhaseTotal: 15 * time.Second,
		TargetRate: 2,
		LLM: &loadgen.LLMLive{
			Snapshot: llm.Snapshot{Open: 12, Sent: 31, Completed: 19, Failed: 1, Window: 2 * time.Second, TokensPerS: 412.5, RequestsPerS: 2.5,
				TTFT: llm.Quantiles{P50: ms(31.2), P99: ms(88)}, TPOT: llm.Quantiles{P50: ms(10.4), P99: ms(12.9)}, ITL: llm.Quantiles{P50: ms(10.1), P99: ms(18.3)},
				LastError: "stream_error: upstream went away"},
			Server: &loadgen.GenGauges{Running: 11, Waiting: 1, KV: 0.043, MaxSeqs: 32},
		},
		Finished: []loadgen.Row{{Index: 0, Name: "continuous rate=0.5/s", Throughput: 0.5, Valid: true,
			LLMRow: &loadgen.LLMRow{OutputTokensPerS: 69.6, TTFT: record.MsStats{P99: 40.2}, TPOT: record.MsStats{P99: 10.9}}}},
	}
	return s
}

func TestViewLLM(t *testing.T) {
	var tm tea.Model = New(NewFeed(), func() {})
	tm, _ = tm.Update(tea.WindowSizeMsg{Width: 80, Height: 40})
	tm, _ = tm.Update(snapshotMsg(runningLLM()))
	view := tm.View()
	for _, want := range []string{
		"2/18 continuous rate=2/s", "412 tokens/s · 2.50 req/s last 2s · target 2/s",
		"12 open · 31 sent · 19 done · 1 failed",
		"TTFT     p50 31.2ms    p99 88ms", "TPOT     p50 10.4ms    p99 12.9ms", "ITL      p50 10.1ms    p99 18.3ms",
		"11/32 running · 1 waiting · KV 4%", "stream_error: upstream went away",
		"TOK/s", "TTFT99", "continuous rate=0.5/s", "70", "40.2ms",
	} {
		if !strings.Contains(view, want) {
			t.Errorf("view lacks %q:\n%s", want, view)
		}
	}
	for _, line := range strings.Split(view, "\n") {
		if n := len([]rune(line)); n > 80 {
			t.Errorf("line of %d columns: %q", n, line)
		}
	}
	var b bytes.Buffer
	l := &Lines{W: &b}
	s := runningLLM()
	l.Put(s)
	s.Elapsed += 6 * time.Second
	l.Put(s)
	if !strings.Contains(b.String(), "12 open · 412 tokens/s, 2.50 req/s over 2s · TTFT p50 31.2ms p99 88ms") || !strings.Contains(b.String(), "server 11 running, 1 waiting, KV 4%") {
		t.Errorf("progress lines:\n%s", b.String())
	}
}
