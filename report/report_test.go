package report

import (
	"bytes"
	"context"
	"flag"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/inferhq/infer/loadgen/record"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// small charts draw faster; the tests that check the default size use
// Options{}.
var small = Options{Width: 600, Height: 400}

func readRun(t *testing.T, dir string) *record.Run {
	t.Helper()
	if dir == "" {
		return nil
	}
	run, err := record.ReadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	return run
}

// checkPNG decodes a chart and checks that it has the asked size and is
// not blank: several distinct colours and a fair share of ink.
func checkPNG(t *testing.T, path string, w, h int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if got := img.Bounds().Size(); got != (image.Point{X: w, Y: h}) {
		t.Errorf("%s is %v, want %dx%d", path, got, w, h)
	}
	colours := map[[3]uint32]bool{}
	ink := 0
	for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y += 2 {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x += 2 {
			r, g, b, _ := img.At(x, y).RGBA()
			colours[[3]uint32{r >> 12, g >> 12, b >> 12}] = true
			if r < 0xf000 || g < 0xf000 || b < 0xf000 {
				ink++
			}
		}
	}
	total := (w / 2) * (h / 2)
	if len(colours) < 6 {
		t.Errorf("%s has %d distinct colours, want at least 6: blank?", path, len(colours))
	}
	if share := float64(ink) / float64(total); share < 0.005 {
		t.Errorf("%s: %.2f %% of the pixels are not white, want at least 0.5 %%", path, share*100)
	}
}

// colours counts the pixels of each colour of a chart.
func colours(t *testing.T, path string) map[color.RGBA]int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	n := map[color.RGBA]int{}
	for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y++ {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
			r, g, b, a := img.At(x, y).RGBA()
			n[color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8), uint8(a >> 8)}]++
		}
	}
	return n
}

// TestChartColours: every worker count of the sweep is drawn, in the same
// colour on every chart that draws worker counts.
func TestChartColours(t *testing.T) {
	dir := t.TempDir()
	if _, err := Write(context.Background(), readRun(t, "testdata/sim"), nil, dir, small); err != nil {
		t.Fatal(err)
	}
	for _, chart := range []string{"throughput.png", "latency.png", "throughput-latency.png", "server-time.png"} {
		n := colours(t, filepath.Join(dir, chart))
		for w, c := range workerColors[:4] {
			if n[c] < 50 {
				t.Errorf("%s has %d pixels of the colour of w=%d, want at least 50", chart, n[c], w+1)
			}
		}
		if c := workerColors[4]; n[c] > 0 {
			t.Errorf("%s has %d pixels of the colour of a fifth worker count, which the run does not have", chart, n[c])
		}
	}
}

// llmOneTurn are the charts of an LLM run without multi-turn sessions.
var llmOneTurn = slices.DeleteFunc(slices.Clone(llmChartFiles), func(f string) bool { return f == "turn-ttft.png" })

// TestWriteFixtures reports every fixture run, with and without a
// baseline, and checks which charts are drawn and that each is a real
// picture.
func TestWriteFixtures(t *testing.T) {
	all := []string{"throughput.png", "latency.png", "naive-vs-batched.png", "throughput-latency.png", "server-time.png", "pareto.png"}
	llmAll := append(slices.Clone(llmOneTurn), "pareto.png")
	for _, tc := range []struct {
		run, baseline string
		drawn         []string
		verdict       Verdict
		full          bool // draw at the default size
	}{
		{run: "testdata/sim", drawn: all, full: true},
		{run: "testdata/sim", baseline: "testdata/sim-slow", drawn: append(all, "comparison.png"), verdict: Pass},
		{run: "testdata/sim-slow", baseline: "testdata/sim", drawn: append(all, "comparison.png"), verdict: Regression},
		{run: "testdata/cpu", drawn: all},
		{run: "testdata/partial", baseline: "testdata/sim", drawn: append(all, "comparison.png"), verdict: Pass},
		{run: "testdata/one-point", drawn: []string{"naive-vs-batched.png", "throughput-latency.png", "server-time.png"}},
		{run: "testdata/failed", baseline: "testdata/sim", drawn: []string{"throughput.png", "naive-vs-batched.png", "throughput-latency.png", "server-time.png", "pareto.png", "comparison.png"}, verdict: Regression},
		{run: "testdata/policies", drawn: append(all[:5:5], "policy.png", "pareto.png"), full: true},
		{run: "testdata/llm", drawn: llmAll, full: true},
		{run: "testdata/llm", baseline: "testdata/llm", drawn: append(slices.Clone(llmAll), "comparison.png"), verdict: Pass},
		{run: "testdata/llm-slow", baseline: "testdata/llm", drawn: append(slices.Clone(llmAll), "comparison.png"), verdict: Regression},
		{run: "testdata/llm-closed", drawn: []string{"llm-throughput.png", "llm-latency.png", "ttft-cdf.png", "timeline.png", "pareto.png"}},
	} {
		t.Run(filepath.Base(tc.run)+"/"+filepath.Base(tc.baseline), func(t *testing.T) {
			dir := t.TempDir()
			opts, w, h := small, small.Width, small.Height
			if tc.full {
				opts, w, h = Options{}, 1200, 800
			}
			res, err := Write(context.Background(), readRun(t, tc.run), readRun(t, tc.baseline), dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			var drawn []string
			for _, c := range res.Charts {
				if c.Skipped == "" {
					drawn = append(drawn, c.File)
					checkPNG(t, filepath.Join(dir, c.File), w, h)
				}
			}
			if !slices.Equal(drawn, tc.drawn) {
				t.Errorf("charts drawn = %v, want %v", drawn, tc.drawn)
			}
			summary, err := os.ReadFile(res.Summary)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range drawn {
				if !strings.Contains(string(summary), "]("+c+")") {
					t.Errorf("summary.md does not embed %s", c)
				}
			}
			if (res.Comparison != nil) != (tc.baseline != "") {
				t.Fatalf("comparison = %v with baseline %q", res.Comparison, tc.baseline)
			}
			if res.Comparison != nil && res.Comparison.Verdict != tc.verdict {
				t.Errorf("verdict = %v (%s), want %v", res.Comparison.Verdict, res.Comparison.Line(), tc.verdict)
			}
		})
	}
}

// TestWriteReplacesCharts: reporting again without a baseline, or a run
// without policies, removes the earlier comparison or policy chart, so that
// a folder never shows a stale chart.
func TestWriteReplacesCharts(t *testing.T) {
	dir := t.TempDir()
	run, base := readRun(t, "testdata/policies"), readRun(t, "testdata/policies")
	if _, err := Write(context.Background(), run, base, dir, small); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"comparison.png", "policy.png"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Write(context.Background(), readRun(t, "testdata/cpu"), nil, dir, small); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"comparison.png", "policy.png"} {
		if _, err := os.Stat(filepath.Join(dir, f)); !os.IsNotExist(err) {
			t.Errorf("%s after a report without baseline or policies: %v, want it removed", f, err)
		}
	}
}

func TestWriteDefaultsAndSize(t *testing.T) {
	src := readRun(t, "testdata/cpu")
	run := &record.Run{Dir: t.TempDir(), Manifest: src.Manifest, Records: src.Records}
	res, err := Write(context.Background(), run, nil, "", Options{Width: 400, Height: 300})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(run.Dir, "report"); res.Dir != want {
		t.Errorf("Dir = %s, want %s", res.Dir, want)
	}
	checkPNG(t, filepath.Join(res.Dir, "throughput.png"), 400, 300)
}

func TestWriteCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Write(ctx, readRun(t, "testdata/cpu"), nil, t.TempDir(), Options{}); err != context.Canceled {
		t.Errorf("Write with a cancelled context = %v, want context.Canceled", err)
	}
}

// TestWriteOddRuns: what other servers and scenarios leave must give a
// report, never an error or a panic.
func TestWriteOddRuns(t *testing.T) {
	ok := func(p record.Point, thr float64, p99 time.Duration) record.Record {
		return record.Record{Point: p, Sent: 100, Throughput: thr, ItemsPerSec: thr * float64(max(p.Items, 1)),
			Status: map[string]int{"200": 100}, Valid: true,
			Latency: record.Percentiles{P50: record.Duration(p99 / 2), P99: record.Duration(p99)}}
	}
	closed := func(c int) record.Load { return record.Load{Mode: "closed", Concurrency: c} }
	ms := func(n int) record.Duration { return record.Duration(time.Duration(n) * time.Millisecond) }
	for _, tc := range []struct {
		name string
		recs []record.Record
	}{
		{"empty", nil},
		{"external server, closed loop", []record.Record{
			ok(record.Point{Endpoint: "batched", Load: closed(1), Items: 1}, 50, 30*time.Millisecond),
			ok(record.Point{Endpoint: "batched", Load: closed(8), Items: 1}, 300, 60*time.Millisecond),
			ok(record.Point{Endpoint: "v2", Load: closed(8), Items: 1}, 280, 70*time.Millisecond),
		}},
		{"variants and ramps", []record.Record{
			ok(record.Point{Endpoint: "batched", Batch: 8, Workers: 1, Latency: ms(5), Load: record.Load{Mode: "open", Pacer: "ramp", RampFrom: 10, Rate: 100}, Items: 4}, 90, 40*time.Millisecond),
			ok(record.Point{Endpoint: "batched", Batch: 8, Workers: 1, Latency: ms(50), Load: record.Load{Mode: "open", Pacer: "ramp", RampFrom: 10, Rate: 100}, Items: 4}, 95, 90*time.Millisecond),
			ok(record.Point{Endpoint: "batched", Batch: 32, Workers: 2, Latency: ms(5), Policy: "adaptive", Load: record.Load{Mode: "open", Rate: 100}, Items: 4}, 99, 30*time.Millisecond),
			ok(record.Point{Endpoint: "batched", Batch: 32, Workers: 2, Latency: ms(50), Policy: "fixed", Load: record.Load{Mode: "open", Rate: 100}, Items: 4}, 99, 80*time.Millisecond),
		}},
		{"all failed", []record.Record{
			{Point: record.Point{Endpoint: "naive", Load: record.Load{Mode: "open", Rate: 10}}, Sent: 10, Status: map[string]int{"error": 10}, Flags: []string{record.FlagNoSuccess}},
			{Point: record.Point{Endpoint: "batched", Batch: 4, Workers: 1, Load: record.Load{Mode: "open", Rate: 10}}, Sent: 10, Status: map[string]int{"503": 10}, Flags: []string{record.FlagNoSuccess}},
		}},
		{"zero latencies", []record.Record{
			{Point: record.Point{Endpoint: "batched", Batch: 4, Workers: 1}, Throughput: 10, Status: map[string]int{"200": 1}, Valid: true},
			{Point: record.Point{Endpoint: "batched", Batch: 8, Workers: 1}, Throughput: 10, Status: map[string]int{"200": 1}, Valid: true,
				Latency: record.Percentiles{P99: record.Duration(time.Millisecond)}},
			{Point: record.Point{Endpoint: "batched", Batch: 16, Workers: 1}, Throughput: 10, Status: map[string]int{"200": 1}, Valid: true,
				Latency: record.Percentiles{P50: record.Duration(time.Microsecond), P99: record.Duration(time.Second)}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := &record.Run{Dir: t.TempDir(), Records: tc.recs}
			res, err := Write(context.Background(), run, run, "", small)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range res.Charts {
				if c.Skipped == "" {
					checkPNG(t, filepath.Join(res.Dir, c.File), small.Width, small.Height)
				}
			}
		})
	}
}

// TestSummaryGolden keeps summary.md under review: run
// go test ./report -run Golden -update after changing it on purpose.
func TestSummaryGolden(t *testing.T) {
	for _, tc := range []struct{ run, baseline, golden string }{
		{"testdata/sim", "testdata/sim-slow", "testdata/sim-vs-sim-slow.summary.md"},
		{"testdata/policies", "", "testdata/policies.summary.md"},
		{"testdata/llm-slow", "testdata/llm", "testdata/llm-slow-vs-llm.summary.md"},
	} {
		t.Run(filepath.Base(tc.golden), func(t *testing.T) {
			res, err := Write(context.Background(), readRun(t, tc.run), readRun(t, tc.baseline), t.TempDir(), small)
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(res.Summary)
			if err != nil {
				t.Fatal(err)
			}
			if *update {
				if err := os.WriteFile(tc.golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(tc.golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("summary.md differs from %s (rerun with -update if intended); got:\n%s", tc.golden, got)
			}
		})
	}
}

// TestSummaryScheduleLag: a point that fell behind its schedule is warned
// about with its lag, and the latency from the intended send stands next to
// the service time.
func TestSummaryScheduleLag(t *testing.T) {
	d := func(ms float64) record.Duration { return record.Duration(ms * float64(time.Millisecond)) }
	open := record.Load{Mode: "open", Rate: 200}
	recs := []record.Record{
		{Point: record.Point{Endpoint: "batched", Batch: 8, Workers: 1, Load: open, Items: 1}, Sent: 800, TargetRate: 200, AchievedRate: 199.8,
			Throughput: 199, Status: map[string]int{"200": 800}, Flags: []string{record.FlagScheduleLag},
			Latency: record.Percentiles{P50: d(1), P99: d(3.1)}, ScheduleLag: &record.Percentiles{P99: d(1453), Max: d(1476)},
			FromSchedule: &record.Percentiles{P99: d(1468)}},
	}
	run := &record.Run{Dir: t.TempDir(), Records: recs}
	res, err := Write(context.Background(), run, nil, "", small)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(res.Summary)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"**Behind schedule** (1 point)", "lag p99 1.45 s, max 1.48 s; p99 1.47 s from the intended send, 3.1 ms from the actual one",
		"p99 from schedule", "schedule-lag"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("summary.md lacks %q:\n%s", want, b)
		}
	}
}
