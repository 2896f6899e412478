package report

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/inferhq/infer/loadgen/record"
)

// TestWriteSearch reports a capacity search (testdata/search: sim at the
// seed calibration under p99 500 ms): the capacity chart and the Pareto
// chart are drawn, and summary.md ranks the configuration by capacity.
func TestWriteSearch(t *testing.T) {
	dir := t.TempDir()
	run := readRun(t, "testdata/search")
	res, err := Write(context.Background(), run, nil, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var drawn []string
	for _, c := range res.Charts {
		if c.Skipped == "" {
			drawn = append(drawn, c.File)
		}
	}
	for _, want := range []string{"capacity.png", "pareto.png"} {
		if !slices.Contains(drawn, want) {
			t.Errorf("charts drawn = %v, want %s among them", drawn, want)
			continue
		}
		checkPNG(t, filepath.Join(dir, want), 1200, 800)
	}
	b, err := os.ReadFile(res.Summary)
	if err != nil {
		t.Fatal(err)
	}
	summary := string(b)
	for _, want := range []string{
		"## Capacity under the SLO",
		"| 1 | batched | **425 req/s** | 425–438 req/s | 422 req/s | 10 (16) | 181 s | 425 req/s met the SLO and 438 req/s missed it: within 5 % |",
		"![Capacity under the SLO, per configuration](capacity.png)", "![Pareto front](pareto.png)",
	} {
		if !strings.Contains(summary, want) {
			t.Errorf("summary.md lacks %q:\n%s", want, summary)
		}
	}
	// Its points that meet the SLO are all of one configuration: no
	// "next best" table, not even an empty one.
	if strings.Contains(summary, "next best") {
		t.Errorf("summary.md names next best configurations of a run of one:\n%s", summary)
	}
	// The same capacities from the records alone, as for a run whose
	// manifest was not rewritten at its end.
	run.Manifest.Capacities = nil
	if got := newView(run).capacities(); len(got) != 1 || got[0].Capacity != 425 || got[0].Failed != 438 || got[0].Probes != 10 || got[0].Measurements != 16 {
		t.Errorf("capacities from the records = %+v", got)
	}
	// A run without a search has no capacity chart, and an earlier one is
	// removed.
	if _, err := Write(context.Background(), readRun(t, "testdata/sim"), nil, dir, small); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "capacity.png")); !os.IsNotExist(err) {
		t.Errorf("capacity.png left from the search's report (%v)", err)
	}
}

func TestParetoFront(t *testing.T) {
	pt := func(x, y float64) paretoPoint { return paretoPoint{x: x, y: y} }
	pts := []paretoPoint{pt(100, 50), pt(200, 60), pt(150, 80), pt(300, 200), pt(300, 150), pt(250, 400), pt(50, 40)}
	xys := func(ps []paretoPoint) [][2]float64 {
		var out [][2]float64
		for _, p := range ps {
			out = append(out, [2]float64{p.x, p.y})
		}
		return out
	}
	// Down is better (p99): every step right costs latency.
	if got, want := xys(paretoFront(pts, false)), [][2]float64{{50, 40}, {100, 50}, {200, 60}, {300, 150}}; !slices.Equal(got, want) {
		t.Errorf("front, lower y better = %v, want %v", got, want)
	}
	// Up is better (tokens/s): the front is the upper right.
	if got, want := xys(paretoFront(pts, true)), [][2]float64{{250, 400}, {300, 200}}; !slices.Equal(got, want) {
		t.Errorf("front, higher y better = %v, want %v", got, want)
	}
}

// TestCapacityChartPartial: a search cut short by a failed target is
// drawn, titled partial, from the records alone.
func TestCapacityChartPartial(t *testing.T) {
	run := readRun(t, "testdata/search")
	run.Manifest.Capacities = nil
	run.Records = run.Records[:6]
	last := &run.Records[5]
	last.Partial, last.Search.End, last.Search.Why = true, record.EndTargetFailed, "the target stopped answering"
	v := newView(run)
	f, why := v.capacityChart()
	if f == nil {
		t.Fatalf("no chart: %s", why)
	}
	if title := f.panels[0].Title.Text; !strings.Contains(title, "partial") || !strings.Contains(title, "400 req/s") {
		t.Errorf("title = %q", title)
	}
	if _, err := f.png(600, 400); err != nil {
		t.Fatal(err)
	}
}
