package tui

import (
	"bytes"
	"strings"
	"testing"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/inferhq/infer/loadgen"
	"github.com/inferhq/infer/loadgen/record"
)

// searching is a run searching its second configuration: four probes
// decided, the fifth being measured a second time.
func searching() loadgen.Snapshot {
	s := running()
	s.Points, s.Done, s.Repeats = 24, 11, 1
	s.Point = record.Point{Name: "batched b=64 rate=600/s", Load: record.Load{Mode: "open", Rate: 600}}
	s.Search = &loadgen.SearchLive{Config: 2, Configs: 2, Name: "batched b=64", Over: record.OverRate, From: 50, To: 1e6,
		Tolerance: 0.05, MaxProbes: 12, Probe: 6, Level: 600, Repeat: 2, Passed: 400, Failed: 800, Left: 4,
		Steps: []loadgen.SearchStep{
			{Level: 50, Pass: true, Margin: 0.31, Measured: 1, Passed: 50},
			{Level: 100, Pass: true, Margin: 0.3, Measured: 1, Passed: 100},
			{Level: 200, Pass: true, Margin: 0.42, Measured: 1, Passed: 200},
			{Level: 400, Pass: true, Margin: 0.93, Measured: 2, Passed: 400},
			{Level: 800, Pass: false, Margin: 1000, Measured: 1, Passed: 400, Failed: 800, Doubtful: true},
		},
		Found: []record.Capacity{{Name: "batched b=8", Over: record.OverRate, Capacity: 338, Failed: 350}},
	}
	return s
}

// TestViewSearch: the live view of a search names the configuration,
// the level and its measurement, draws the bracket after each probe, and
// lists the capacities found, in 80 columns.
func TestViewSearch(t *testing.T) {
	var tm tea.Model = New(NewFeed(), func() {})
	tm, _ = tm.Update(tea.WindowSizeMsg{Width: 80, Height: 40})
	tm, _ = tm.Update(snapshotMsg(searching()))
	view := tm.View()
	for _, want := range []string{
		"config 2/2 · probe 6", "batched b=64 rate=600/s",
		"search   batched b=64 · probe 6 of ≤12 at 600 req/s · measurement 2",
		"bracket  400 ✓ … 800 ✗ req/s (100 % wide)  to within 5 %",
		"  1        50 ✓ 0.31× ▕┃━━━", "  4       400 ✓ 0.93× ", "×2", "  5       800 ✗    ≫1 ", "in doubt",
		"found    batched b=8: 338 req/s (350 missed)",
	} {
		if !strings.Contains(view, want) {
			t.Errorf("view lacks %q:\n%s", want, view)
		}
	}
	for i, l := range strings.Split(view, "\n") {
		if n := len([]rune(l)); n > 80 {
			t.Errorf("line %d is %d columns wide: %q", i, n, l)
		}
	}
	if strings.Contains(view, "finished") {
		t.Errorf("a search's view lists its probes twice:\n%s", view)
	}
	// The bracket narrows: the 800 ✗ row's bar is shorter than the first's.
	rows := strings.Split(view, "\n")
	bar := func(prefix string) int {
		for _, r := range rows {
			if strings.HasPrefix(r, prefix) {
				return strings.Count(r, "━")
			}
		}
		t.Fatalf("no row %q:\n%s", prefix, view)
		return 0
	}
	if first, last := bar("    1 "), bar("    5 "); last >= first || last == 0 {
		t.Errorf("bracket bars %d then %d cells: want it to narrow", first, last)
	}
	// Config 1 of 2 done, and 5 of about 9 probes of the second: about 3/4.
	if full := strings.Count(rows[1], "█"); full < 47 || full > 57 {
		t.Errorf("progress bar has %d full cells of 70, want about 52:\n%s", full, rows[1])
	}
}

// TestLinesSearch: without a terminal, each probe decided is a line with
// the bracket after it, and each capacity found one more.
func TestLinesSearch(t *testing.T) {
	var b bytes.Buffer
	l := &Lines{W: &b}
	s := searching()
	s.Finished = nil
	l.Put(s)
	s.Search.Steps = append(s.Search.Steps, loadgen.SearchStep{Level: 600, Pass: false, Margin: 1.1, Measured: 3, Passed: 400, Failed: 600})
	l.Put(s)
	out := b.String()
	for _, want := range []string{
		"capacity of batched b=8: 338 req/s (338 ✓ … 350 ✗ req/s (4 % wide))",
		"search batched b=64: 50 req/s meets the SLO (margin 0.31×, 1 measurement) → bracket ≥ 50 req/s",
		"search batched b=64: 800 req/s misses the SLO (margin ≫1, 1 measurement) → bracket 400 ✓ … 800 ✗ req/s",
		"search batched b=64: 600 req/s misses the SLO (margin 1.10×, 3 measurements) → bracket 400 ✓ … 600 ✗ req/s (50 % wide)",
		"[config 2/2] batched b=64 rate=600/s",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("lines lack %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "800 req/s misses"); n != 1 {
		t.Errorf("probe 800 written %d times:\n%s", n, out)
	}
}
