package report

import (
	"image/color"
	"maps"
	"math"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/inferhq/infer/loadgen/record"
)

// Besides the generated fixtures, testdata holds real runs, kept as they
// were written: quick (ci/baseline/quick), quick-busy (scenarios/quick.yaml
// on a busy 2-core machine), demo (scenarios/demo.yaml) and target-poisson
// (sim-lm served by hand as a foreign target, Poisson arrivals at 2, 4 and
// 8 requests/s).

// reports are the fixture runs the chart tests draw, with a baseline
// where one makes comparison.png.
var reports = []struct{ run, baseline string }{
	{"testdata/sim", ""},
	{"testdata/sim-slow", "testdata/sim"},
	{"testdata/cpu", ""},
	{"testdata/partial", "testdata/sim"},
	{"testdata/one-point", ""},
	{"testdata/failed", "testdata/sim"},
	{"testdata/policies", "testdata/policies"},
	{"testdata/llm", "testdata/llm"},
	{"testdata/llm-slow", "testdata/llm"},
	{"testdata/llm-closed", ""},
	{"testdata/quick", ""},
	{"testdata/quick-busy", "testdata/quick"},
	{"testdata/demo", ""},
	{"testdata/target-poisson", ""},
}

// figures builds every chart of every fixture report: name → figure.
// They are built once for all the tests: do not change them.
func figures(t *testing.T) map[string]*figure {
	t.Helper()
	builtOnce.Do(func() {
		built = map[string]*figure{}
		for _, rp := range reports {
			run, err := record.ReadRun(rp.run)
			if err != nil {
				builtErr = err
				return
			}
			var c *Comparison
			if rp.baseline != "" {
				base, err := record.ReadRun(rp.baseline)
				if err != nil {
					builtErr = err
					return
				}
				c = Compare(run, base, Noise{})
			}
			for _, ch := range newView(run).charts(c) {
				if f, _ := ch.build(); f != nil {
					built[strings.TrimPrefix(rp.run, "testdata/")+"/"+ch.file] = f
				}
			}
		}
	})
	if builtErr != nil {
		t.Fatal(builtErr)
	}
	return built
}

var (
	builtOnce sync.Once
	built     map[string]*figure
	builtErr  error
)

// plotters returns what p draws. gonum/plot keeps them unexported; the
// tests read them to check each chart's data against its axes.
func plotters(t *testing.T, p *plot.Plot) []plot.Plotter {
	t.Helper()
	f := reflect.ValueOf(p).Elem().FieldByName("plotters")
	if !f.IsValid() {
		t.Fatal("plot.Plot has no field plotters: gonum/plot changed, update this helper")
	}
	return *(*[]plot.Plotter)(unsafe.Pointer(f.UnsafeAddr()))
}

// extent is the data a plotter draws, in data units.
type extent struct{ xmin, xmax, ymin, ymax float64 }

func (e *extent) add(x, y float64) {
	e.xmin, e.xmax, e.ymin, e.ymax = min(e.xmin, x), max(e.xmax, x), min(e.ymin, y), max(e.ymax, y)
}

// dataOf returns the data of a plotter that draws data (not a reference
// line or a label), and whether it draws any.
func dataOf(pl plot.Plotter) (extent, bool) {
	e := extent{math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)}
	xys := func(pts plotter.XYs) {
		for _, p := range pts {
			e.add(p.X, p.Y)
		}
	}
	switch d := pl.(type) {
	case *plotter.Line:
		xys(d.XYs)
	case *plotter.Scatter:
		xys(d.XYs)
	case *markers:
		xys(d.xys)
	case *plotter.YErrorBars:
		for i, p := range d.XYs {
			e.add(p.X, p.Y-d.YErrors[i].Low)
			e.add(p.X, p.Y+d.YErrors[i].High)
		}
	case *bars: // from the panel's floor
		for i, x := range d.x {
			e.add(x-d.width/2, d.top[i])
			e.add(x+d.width/2, d.top[i])
		}
	case *spanBars:
		for _, pc := range d.pieces() {
			e.add(pc.x0, float64(pc.row))
			e.add(pc.x1, float64(pc.row))
		}
	case *rowBands:
		for i, y := range d.y {
			e.add(-d.half[i], y)
			e.add(d.half[i], y)
		}
	}
	return e, e.xmin <= e.xmax
}

// labelled returns the labelled ticks of a, when its labels are numbers
// that must reach the data (not nominal or per-value ones).
func labelled(a plot.Axis) ([]float64, bool) {
	switch a.Tick.Marker.(type) {
	case niceTicks, logTicks:
	default:
		return nil, false
	}
	var vs []float64
	for _, t := range a.Tick.Marker.Ticks(a.Min, a.Max) {
		if t.Label != "" {
			vs = append(vs, t.Value)
		}
	}
	return vs, true
}

// TestAxesCoverData: on every chart of every fixture, each axis covers the
// data drawn on it, between labelled ticks: no point sits above the top
// label (the demo's 164 req/s under a top label of 150) or past the axis.
func TestAxesCoverData(t *testing.T) {
	for name, f := range figures(t) {
		for i, p := range f.panels {
			all := extent{math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)}
			for _, pl := range plotters(t, p) {
				if e, ok := dataOf(pl); ok {
					all.add(e.xmin, e.ymin)
					all.add(e.xmax, e.ymax)
				}
			}
			if all.xmin > all.xmax {
				continue
			}
			for _, ax := range []struct {
				name   string
				a      plot.Axis
				lo, hi float64
			}{{"x", p.X, all.xmin, all.xmax}, {"y", p.Y, all.ymin, all.ymax}} {
				tol := 1e-9 * (ax.a.Max - ax.a.Min)
				if ax.lo < ax.a.Min-tol || ax.hi > ax.a.Max+tol {
					t.Errorf("%s panel %d: %s data %g…%g past the axis %g…%g", name, i, ax.name, ax.lo, ax.hi, ax.a.Min, ax.a.Max)
				}
				vs, ok := labelled(ax.a)
				if !ok {
					continue
				}
				if len(vs) == 0 {
					t.Errorf("%s panel %d: %s axis %g…%g has no label", name, i, ax.name, ax.a.Min, ax.a.Max)
					continue
				}
				if top := slices.Max(vs); top < ax.hi-tol {
					t.Errorf("%s panel %d: %s data up to %g above the top label %g (axis to %g)", name, i, ax.name, ax.hi, top, ax.a.Max)
				}
				if bottom := slices.Min(vs); bottom > ax.lo+tol {
					t.Errorf("%s panel %d: %s data from %g below the bottom label %g", name, i, ax.name, ax.lo, bottom)
				}
			}
		}
	}
}

func TestNiceRange(t *testing.T) {
	for _, tc := range []struct{ lo, hi, wantLo, wantHi float64 }{
		{0, 177, 0, 200}, // the demo's throughput: 164 × 1.08
		{0, 800, 0, 800}, // on a label already
		{0, 776, 0, 800}, // server time: 719 × 1.08
		{0, 14.2, 0, 15}, // a rate axis
		{-64, 211, -100, 250},
		{0, 0.0107, 0, 0.012},
	} {
		lo, hi := niceRange(tc.lo, tc.hi)
		if math.Abs(lo-tc.wantLo) > 1e-9 || math.Abs(hi-tc.wantHi) > 1e-9 {
			t.Errorf("niceRange(%v, %v) = %v, %v, want %v, %v", tc.lo, tc.hi, lo, hi, tc.wantLo, tc.wantHi)
		}
		ticks := (niceTicks{}).Ticks(lo, hi)
		if first, last := ticks[0], ticks[len(ticks)-1]; first.Label == "" || last.Label == "" || first.Value != lo || math.Abs(last.Value-hi) > 1e-9 {
			t.Errorf("niceRange(%v, %v) = %v, %v: ends at ticks %+v and %+v, want labelled ends", tc.lo, tc.hi, lo, hi, first, last)
		}
	}
}

// TestLogRange: a log axis ends on labelled ticks around the data, and its
// labels keep apart (a factor of 2 at least, more over many decades).
func TestLogRange(t *testing.T) {
	for _, tc := range []struct {
		lo, hi         float64
		narrow         bool
		wantLo, wantHi float64
		want           []string
	}{
		{20, 2000, false, 10, 4000, []string{"10", "20", "50", "100", "200", "500", "1000", "2000", "4000"}},
		{17, 985, false, 10, 2000, []string{"10", "20", "50", "100", "200", "500", "1000", "2000"}},
		{9.2, 210, true, 5, 400, []string{"5", "10", "20", "50", "100", "200", "400"}},
		{9, 14000, true, 2, 50000, []string{"2", "10", "100", "1000", "10000", "50000"}},
		{0.03, 0.7, false, 0.02, 1, []string{"0.02", "0.05", "0.1", "0.2", "0.5", "1"}},
	} {
		lo, hi := logRange(tc.lo, tc.hi, tc.narrow)
		var got []string
		var vals []float64
		for _, tk := range (logTicks{narrow: tc.narrow}).Ticks(lo, hi) {
			if tk.Label != "" {
				got, vals = append(got, tk.Label), append(vals, tk.Value)
			}
		}
		if math.Abs(lo/tc.wantLo-1) > 1e-9 || math.Abs(hi/tc.wantHi-1) > 1e-9 || !slices.Equal(got, tc.want) {
			t.Errorf("logRange(%v, %v) = %v…%v labelled %q, want %v…%v labelled %q", tc.lo, tc.hi, lo, hi, got, tc.wantLo, tc.wantHi, tc.want)
		}
		gap, _ := logLabelGap(lo, hi, tc.narrow)
		for i := 1; i < len(vals); i++ {
			if vals[i]/vals[i-1] < gap*(1-1e-9) {
				t.Errorf("logRange(%v, %v): labels %v and %v closer than %.2f×", tc.lo, tc.hi, vals[i-1], vals[i], gap)
			}
		}
	}
}

// TestMarkersStayVisible: no marker of a chart of a few points hides
// another (in quick's run the naive endpoint's point coincides with b=1
// w=1's, 48 req/s at 660 ms: its cross moves aside onto a leader line),
// and no marker moves farther than one width from its point.
func TestMarkersStayVisible(t *testing.T) {
	img := vgimg.New(vg.Inch*12, vg.Inch*8)
	for name, f := range figures(t) {
		for i, p := range f.panels {
			for _, pl := range plotters(t, p) {
				m, ok := pl.(*markers)
				if !ok {
					continue
				}
				c := p.DataCanvas(draw.New(img))
				at, moved := m.places(c, p)
				trX, trY := p.Transforms(&c)
				for a := range at {
					home := vg.Point{X: trX(m.xys[a].X), Y: trY(m.xys[a].Y)}
					if d := dist(home, at[a]); moved[a] && d > markerStep(m.styles[a])*1.001 {
						t.Errorf("%s panel %d: marker %d moved %v from its point, more than one width", name, i, a, d)
					}
					for b := range a {
						if len(at) <= 16 && covers(dist(at[a], at[b]), m.styles[a].Radius, m.styles[b].Radius) {
							t.Errorf("%s panel %d: marker %d at %v covers marker %d at %v", name, i, a, m.xys[a], b, m.xys[b])
						}
					}
				}
			}
		}
	}
	// The case itself: two markers on one point.
	p := plot.New()
	p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = 0, 10, 0, 10
	m := &markers{}
	m.add(5, 5, glyph(workerColors[0], circle, false, 4))
	m.add(5, 5, glyph(naiveColor, cross, false, 4))
	at, moved := m.places(draw.New(img), p)
	if moved[0] || !moved[1] || covers(dist(at[0], at[1]), vg.Points(4), vg.Points(4)) {
		t.Errorf("two markers on one point placed at %v (moved %v), want the second moved clear of the first", at, moved)
	}
}

// TestServerTimeRule: server-time.png draws no unexplained rule, and the
// naive bar keeps to its slot (the demo's, with one worker count, was as
// wide as 1.5 slots and crossed by a dashed line).
func TestServerTimeRule(t *testing.T) {
	for name, f := range figures(t) {
		if !strings.HasSuffix(name, "/server-time.png") {
			continue
		}
		for i, p := range f.panels {
			for _, pl := range plotters(t, p) {
				switch d := pl.(type) {
				case vline:
					t.Errorf("%s panel %d: a vertical line at %v, which the legend does not explain", name, i, d.x)
				case *bars:
					for j, x := range d.x {
						if slot := math.Round(x); x-d.width/2 < slot-0.5 || x+d.width/2 > slot+0.5 {
							t.Errorf("%s panel %d: bar %d spans %v…%v, beyond its slot %v±0.5", name, i, j, x-d.width/2, x+d.width/2, slot)
						}
					}
				}
			}
		}
	}
}

// legendLabels returns a figure's legend texts.
func legendLabels(f *figure) []string {
	var out []string
	for _, e := range f.legend {
		out = append(out, e.label)
	}
	return out
}

// TestTimelineLegend: timeline.png's legend names exactly the parts it
// draws, decoding in each configuration's colour; waiting is thinner than
// decoding, so that it reads apart from the naive endpoint's grey.
func TestTimelineLegend(t *testing.T) {
	figs := maps.Clone(figures(t))
	// A point whose requests queued in the client, failed and broke off.
	ms := func(n int) record.Duration { return record.Duration(time.Duration(n) * time.Millisecond) }
	run := &record.Run{Records: []record.Record{{Point: record.Point{Endpoint: "/v1", Load: record.Load{Mode: "open", Rate: 4}},
		Valid: true, Throughput: 1, Status: map[string]int{"200": 2, "error": 2}, LLM: &record.LLM{Timeline: []record.Span{
			{Intended: ms(0), Sent: ms(0), FirstToken: ms(100), LastToken: ms(900), End: ms(900), OK: true},
			{Intended: ms(200), Sent: ms(600), FirstToken: ms(700), LastToken: ms(1500), End: ms(1500), OK: true},
			{Intended: ms(400), Sent: ms(650), End: ms(2000)},
			{Intended: ms(800), Sent: ms(800), FirstToken: ms(900), LastToken: ms(1200), End: ms(1800)},
		}}}}}
	f, why := newView(run).timelineChart()
	if f == nil {
		t.Fatalf("no timeline: %s", why)
	}
	figs["failures/timeline.png"] = f
	seen := map[spanKind]bool{}
	for name, f := range figs {
		if !strings.HasSuffix(name, "/timeline.png") {
			continue
		}
		drawn := map[spanKind]bool{}
		var decodes []string
		for _, p := range f.panels {
			for _, pl := range plotters(t, p) {
				if b, ok := pl.(*spanBars); ok {
					for _, pc := range b.pieces() {
						drawn[pc.kind], seen[pc.kind] = true, true
						if d := "decoding: " + p.Title.Text; pc.kind == decoding && !slices.Contains(decodes, d) {
							decodes = append(decodes, d)
						}
					}
				}
			}
		}
		var want []string
		if drawn[queued] {
			want = append(want, "client queue (intended → sent)")
		}
		if drawn[waiting] {
			want = append(want, "waiting for the first token (thin)")
		}
		want = append(want, decodes...)
		if drawn[failed] {
			want = append(want, "failed, or cut off at the drain")
		}
		if got := legendLabels(f); !slices.Equal(got, want) {
			t.Errorf("%s: legend %q, want what it draws: %q", name, got, want)
		}
	}
	for _, k := range []spanKind{queued, waiting, decoding, failed} {
		if !seen[k] {
			t.Errorf("nothing draws span part %d: the test does not cover it", k)
		}
	}
	if spanHeight[waiting] > spanHeight[decoding]/2 {
		t.Errorf("waiting bars %.2f rows high against decoding's %.2f: want at most half, to read apart from a grey decoding bar", spanHeight[waiting], spanHeight[decoding])
	}
	for _, c := range []color.Color{naiveColor, batchedColor, workerColors[0], workerColors[1]} {
		if d := colorDist(c, waitColor); d < 60 {
			t.Errorf("decoding colour %v is %.0f from waiting's %v: too close", c, d, waitColor)
		}
	}
}

func colorDist(a, b color.Color) float64 {
	ar, ag, ab, _ := a.RGBA()
	br, bg, bb, _ := b.RGBA()
	d := func(x, y uint32) float64 { return float64(x>>8) - float64(y>>8) }
	return math.Sqrt(d(ar, br)*d(ar, br) + d(ag, bg)*d(ag, bg) + d(ab, bb)*d(ab, bb))
}

// TestTTFTCDF: a run of one configuration at three rates draws one panel,
// a curve per rate, on an axis that fits the curves rather than the SLO
// far to their right (which a note names); no label sits on the plot where
// the SLO line could cross it.
func TestTTFTCDF(t *testing.T) {
	figs := figures(t)
	f := figs["target-poisson/ttft-cdf.png"]
	if f == nil {
		t.Fatal("target-poisson draws no ttft-cdf.png")
	}
	if len(f.panels) != 1 {
		t.Fatalf("%d panels, want 1 for one configuration", len(f.panels))
	}
	p := f.panels[0]
	lines, hi := 0, 0.0
	for _, pl := range plotters(t, p) {
		switch d := pl.(type) {
		case *plotter.Line:
			lines++
			for _, xy := range d.XYs {
				hi = max(hi, xy.X)
			}
		case lineLabel, *labels:
			t.Errorf("a label on the plot (%T), where lines can cross it", d)
		}
	}
	if lines != 3 {
		t.Errorf("%d curves, want one per rate (3)", lines)
	}
	if p.X.Max > 2.5*hi || p.X.Max >= 500 {
		t.Errorf("x axis to %v for curves up to %v ms (SLO 500 ms): want it fitted to the curves", p.X.Max, hi)
	}
	if !slices.ContainsFunc(f.notes, func(n string) bool { return strings.Contains(n, "500 ms") }) {
		t.Errorf("no note names the SLO off the axis: %q", f.notes)
	}
	for name, f := range figs {
		if strings.HasSuffix(name, "/ttft-cdf.png") && !slices.Contains(legendLabels(f), "0.99: the p99") {
			t.Errorf("%s: the p99 line is not in the legend: %q", name, legendLabels(f))
		}
	}
}

// comparisonDots returns, for each panel of a comparison figure, its
// rows' bands (row → half-width) and its dots with their colours.
func comparisonDots(t *testing.T, p *plot.Plot) (bands map[float64]float64, dots plotter.XYs, cols []color.Color) {
	t.Helper()
	bands = map[float64]float64{}
	for _, pl := range plotters(t, p) {
		switch d := pl.(type) {
		case *rowBands:
			for i, y := range d.y {
				bands[y] = d.half[i]
			}
		case *plotter.Scatter:
			for i, xy := range d.XYs {
				dots, cols = append(dots, xy), append(cols, d.GlyphStyleFunc(i).Color)
			}
		}
	}
	return bands, dots, cols
}

// TestComparisonBands: comparison.png draws each point's own noise band,
// and a dot in the colour of a change within noise only inside its band:
// quick's busy run once drew b=32 w=2's +147 % p99 (band ±168 %) "pass,
// within noise" outside the one box drawn (±43 %). Each point that warns or
// regresses shows the change beyond its band that made it (the LLM run's
// TPOT, which the old chart did not draw).
func TestComparisonBands(t *testing.T) {
	figs := figures(t)
	for _, rp := range reports {
		if rp.baseline == "" {
			continue
		}
		name := strings.TrimPrefix(rp.run, "testdata/")
		f := figs[name+"/comparison.png"]
		if f == nil {
			t.Errorf("%s against %s: no comparison.png", rp.run, rp.baseline)
			continue
		}
		c := Compare(readRun(t, rp.run), readRun(t, rp.baseline), Noise{})
		rows := min(len(c.Changes), maxComparisonRows)
		explained := map[float64]bool{} // rows with a change beyond its band, worse
		halves := map[float64]bool{}
		for k, p := range f.panels {
			bands, dots, cols := comparisonDots(t, p)
			if len(bands) != rows {
				t.Errorf("%s panel %d: %d bands drawn for %d rows", name, k, len(bands), rows)
			}
			for _, h := range bands {
				halves[h] = true
			}
			for i, xy := range dots {
				h, ok := bands[xy.Y]
				if !ok {
					t.Errorf("%s panel %d: dot %v on a row without a band", name, k, xy)
					continue
				}
				inside := math.Abs(xy.X) <= h*(1+1e-9)
				if (cols[i] == statusColor[within]) != inside {
					t.Errorf("%s panel %d: dot at %v (band ±%v) coloured %v: within-noise colour %v must be inside its band and only there", name, k, xy, h, cols[i], statusColor[within])
				}
				if cols[i] == statusColor[worseOut] || cols[i] == statusColor[flaggedOut] {
					explained[xy.Y] = true
				}
			}
		}
		if len(c.Changes) > 1 && len(halves) < 2 && name == "quick-busy" {
			t.Errorf("%s: one band for every point, want each point's own", name)
		}
		// The rows of the points that warn or regress with a latency on
		// both sides show why.
		var bad int
		for _, ch := range c.Changes {
			if ch.Verdict != Pass {
				bad++
			}
		}
		if want := min(bad, rows); len(explained) != want {
			t.Errorf("%s: %d rows show a worse change beyond their band, want one per point that warns or regresses (%d)", name, len(explained), want)
		}
	}
}

// TestComparisonSampling: an encoder p99 beyond its band that passes by
// the p99s' sampling is drawn in a colour of its own, with the line from
// its change at the least (inside the band) to its change, never in the
// colour of a change within noise.
func TestComparisonSampling(t *testing.T) {
	r := record.Record{Point: record.Point{Endpoint: "batched", Batch: 8, Workers: 1, Load: record.Load{Mode: "closed", Concurrency: 8}},
		Valid: true, Throughput: 100, Status: map[string]int{"200": 100}}
	run := &record.Run{Records: []record.Record{r}}
	ch := Change{Base: &run.Records[0], Cur: &run.Records[0], Throughput: 0.02, P99: 0.5, P99Least: 0.1, TPOT: math.NaN(),
		Band: Noise{Throughput: 0.1, P99: 0.2, ErrorRate: 0.01}, Verdict: Pass}
	c := &Comparison{Baseline: "base", Changes: []Change{ch}, Default: ch.Band}
	f, why := newView(run).comparisonChart(c)
	if f == nil {
		t.Fatal(why)
	}
	p := f.panels[1]
	_, dots, cols := comparisonDots(t, p)
	if len(dots) != 1 || dots[0].X != 50 || cols[0] != statusColor[sampling] {
		t.Fatalf("p99 dots %v coloured %v, want one at +50 %% coloured %v", dots, cols, statusColor[sampling])
	}
	whisker := false
	for _, pl := range plotters(t, p) {
		if l, ok := pl.(*plotter.Line); ok && len(l.XYs) == 2 && l.XYs[0].X == 10 && l.XYs[1].X == 50 {
			whisker = true
		}
	}
	if !whisker {
		t.Error("no line from the change at the least (+10 %) to the change (+50 %)")
	}
	if !slices.Contains(legendLabels(f), statusLabel[sampling]) || slices.Contains(legendLabels(f), statusLabel[worseOut]) {
		t.Errorf("legend %q: want the sampling pass named, and no regression", legendLabels(f))
	}
	for _, tc := range []struct {
		ch   Change
		m    judged
		want status
	}{
		{ch, judged{value: func(c Change) float64 { return c.P99 }, band: func(c Change) float64 { return c.Band.P99 }, worseUp: true}, sampling},
		{ch, judged{value: func(c Change) float64 { return c.Throughput }, band: func(c Change) float64 { return c.Band.Throughput }}, within},
		{Change{Throughput: 0.3, Band: ch.Band}, judged{value: func(c Change) float64 { return c.Throughput }, band: func(c Change) float64 { return c.Band.Throughput }}, betterOut},
		{Change{Throughput: -0.3, Band: ch.Band, Verdict: Warn}, judged{value: func(c Change) float64 { return c.Throughput }, band: func(c Change) float64 { return c.Band.Throughput }}, flaggedOut},
		{Change{P99: 0.3, Band: ch.Band, Verdict: Regression}, judged{value: func(c Change) float64 { return c.P99 }, band: func(c Change) float64 { return c.Band.P99 }, worseUp: true}, worseOut},
	} {
		if got := statusOf(tc.ch, tc.m); got != tc.want {
			t.Errorf("statusOf(%+v) = %v, want %v", tc.ch, got, tc.want)
		}
	}
}

// TestComparisonTableP99: where the verdict compares the repeats' median
// p99s, the comparison table shows them beside the points' own p99s of the
// points table, each named, so that they never read as a contradiction
// (quick-busy's b=32 w=1: 116 ms in the points table, 127 ms compared).
func TestComparisonTableP99(t *testing.T) {
	res, err := Write(t.Context(), readRun(t, "testdata/quick-busy"), readRun(t, "testdata/quick"), t.TempDir(), small)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(res.Summary)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{
		"| 3 | batched | 32 | 1 | 32 clients | 634.67 | 634.67 | 634.67 | 43.3 ms | 65.8 ms | 116 ms |",          // the points table
		"| p99 base → now | compared: repeats' median p99 base → now | Δ |",                                      // the comparison's header
		"| b=32 w=1 @ 32 clients | 796.44 → 634.67 | −20.3 % | 44.2 ms → 116 ms | 44.6 ms → 127 ms | +184.3 % |", // its row
	} {
		if !strings.Contains(s, want) {
			t.Errorf("summary.md lacks %q", want)
		}
	}
}
