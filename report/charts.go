package report

import (
	"cmp"
	"fmt"
	"image/color"
	"math"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/inferhq/infer/loadgen/record"
)

// chart is one chart of the report: its file and title, and how to draw
// it from the run. build returns the figure, or why there is none.
type chart struct {
	file, title string
	build       func() (*figure, string)
}

// optionalCharts are drawn only for the runs they apply to; a report
// without one removes an earlier report's.
var optionalCharts = slices.Concat([]string{"throughput.png", "latency.png", "naive-vs-batched.png", "throughput-latency.png",
	"server-time.png", "policy.png", "comparison.png", routeFile}, llmChartFiles, searchChartFiles)

// charts lists the report's charts: an LLM run's (llm_charts.go), or an
// encoder run's, with the policy comparison only when points differ by
// policy; the comparison only with a baseline.
func (v *view) charts(c *Comparison) []chart {
	if v.isLLM() {
		cs := append(v.llmCharts(), v.searchCharts()...)
		if c != nil {
			cs = append(cs, chart{"comparison.png", "Change against the baseline", func() (*figure, string) { return v.comparisonChart(c) }})
		}
		return cs
	}
	cs := []chart{
		{"throughput.png", "Throughput vs batch size", v.throughputChart},
		{"latency.png", "Latency vs batch size", v.latencyChart},
		{"naive-vs-batched.png", "Naive vs batched", v.naiveVsBatchedChart},
		{"throughput-latency.png", "Throughput vs p99 latency", v.tradeoffChart},
		{"server-time.png", "Server-side time: queue vs compute", v.serverTimeChart},
	}
	if len(v.contrasts(policyDim)) > 0 {
		cs = append(cs, chart{"policy.png", "Batching policies vs offered load", v.policyChart})
	}
	cs = append(cs, v.searchCharts()...)
	if c != nil {
		cs = append(cs, chart{"comparison.png", "Change against the baseline", func() (*figure, string) { return v.comparisonChart(c) }})
	}
	return cs
}

const maxPanels = 4 // load levels drawn as panels at most

// labelAll is the most points throughput-latency.png names one by one.
const labelAll = 16

const (
	noteCapacity = "Each point is the load level with the highest throughput for its configuration: what it can serve."
	noteFlagged  = "Hollow markers are flagged measurements (coordinated omission, saturated generator, no success, or cut short): see summary.md."
)

// seriesGlyph is the marker of series s for a point that is trusted or not.
func (v *view) seriesGlyph(s series, hollow bool, radius float64) draw.GlyphStyle {
	return glyph(v.workerColor(s.Workers), v.shapeOf(s.variant()), hollow, radius)
}

func (v *view) addSeriesLegend(f *figure, order []series) {
	for _, s := range order {
		g := v.seriesGlyph(s, false, 4.5)
		f.add(v.seriesLabel(s), lineThumb(line(v.workerColor(s.Workers), 2), &g))
	}
}

// addFlaggedLegend explains hollow markers, in the legend and, last, in the
// notes.
func addFlaggedLegend(f *figure) {
	g := glyph(naiveColor, circle, true, 4.5)
	f.add("flagged (hollow)", thumb{glyph: &g})
	f.lastNote = noteFlagged
}

// bestNaive returns the naive point with the highest throughput.
func (v *view) bestNaive() *record.Record {
	var best *record.Record
	for _, r := range v.naive {
		if succeeded(r) && (best == nil || better(r, best)) {
			best = r
		}
	}
	return best
}

// batchesOf returns the distinct batch sizes of the served points.
func (v *view) batchesOf(order []series, groups map[series][]*record.Record) []int {
	var bs []int
	for _, s := range order {
		for _, r := range groups[s] {
			if !slices.Contains(bs, r.Point.Batch) {
				bs = append(bs, r.Point.Batch)
			}
		}
	}
	slices.Sort(bs)
	return bs
}

// throughputChart: throughput against batch size, one line per series, at
// each configuration's capacity, with the repeats' spread and the naive
// endpoint as a reference line.
func (v *view) throughputChart() (*figure, string) {
	order, groups := v.bySeries()
	if len(order) == 0 {
		return nil, "no batched point with a known batch size"
	}
	p := newPlot("Throughput vs batch size", "max batch size (--batch, log scale)", "throughput (successful requests/s)")
	f := &figure{panels: []*plot.Plot{p}, notes: []string{noteCapacity}}
	ymax, flagged, repeats := 0.0, false, false
	var fx, fy []float64 // points where every request failed
	for _, s := range order {
		batches, best := capacity(groups[s])
		xys := make(plotter.XYs, len(batches))
		errs := make(plotter.YErrors, len(batches))
		for i, b := range batches {
			r := best[b]
			xys[i] = plotter.XY{X: float64(b), Y: r.Throughput}
			lo, hi := r.Spread()
			errs[i].Low, errs[i].High = max(r.Throughput-lo, 0), max(hi-r.Throughput, 0)
			ymax = max(ymax, r.Throughput, hi)
			flagged = flagged || !trusted(r)
			repeats = repeats || len(r.Repeats) > 1
			if !succeeded(r) {
				fx, fy = append(fx, float64(b)), append(fy, 0)
			}
		}
		col := v.workerColor(s.Workers)
		p.Add(&plotter.Line{XYs: xys, LineStyle: line(col, 2)},
			&plotter.YErrorBars{XYs: xys, YErrors: errs, LineStyle: line(col, 1.3), CapWidth: vg.Points(9)},
			&plotter.Scatter{XYs: xys, GlyphStyleFunc: func(i int) draw.GlyphStyle { return v.seriesGlyph(s, !trusted(best[batches[i]]), 4.5) }})
	}
	if len(fx) > 0 {
		failed := newLabels(fx, fy, slices.Repeat([]string{"no success"}, len(fx)), 9.5, 0, 8, draw.XCenter)
		failed.avoid = true
		p.Add(failed)
	}
	v.addSeriesLegend(f, order)
	if r := v.bestNaive(); r != nil {
		ls := line(naiveColor, 2, 8, 5)
		p.Add(hline(r.Throughput, ls))
		f.add(fmt.Sprintf("naive: %s req/s", num(r.Throughput)), lineThumb(ls, nil))
		ymax = max(ymax, r.Throughput)
	}
	if repeats {
		f.notes[0] += " Bars span the repeats' minimum to maximum."
	}
	if flagged {
		addFlaggedLegend(f)
	}
	batchAxis(&p.X, v.batchesOf(order, groups))
	linearAxis(&p.Y, 0, ymax, 0.08)
	return f, ""
}

// latencyChart: p50 and p99 against batch size per series, one panel per
// load level.
func (v *view) latencyChart() (*figure, string) {
	order, groups := v.bySeries()
	if len(order) == 0 {
		return nil, "no batched point with a known batch size"
	}
	loads := panelLoads(v.loads, maxPanels)
	f := &figure{title: "Latency vs batch size (p50 solid, p99 dashed)", cols: min(len(loads), 2)}
	lo, hi, flagged, drawn := math.Inf(1), 0.0, false, 0
	for _, l := range loads {
		p := newPlot("at "+loadLabel(l), "max batch size (--batch, log scale)", "latency (ms)")
		for _, s := range order {
			recs := keep(atLoad(groups[s], l), func(r *record.Record) bool { return succeeded(r) && r.Latency.P99 > 0 })
			slices.SortFunc(recs, func(a, b *record.Record) int { return cmp.Compare(a.Point.Batch, b.Point.Batch) })
			if len(recs) == 0 {
				continue
			}
			drawn++
			col := v.workerColor(s.Workers)
			for _, q := range []struct {
				get    func(*record.Record) record.Duration
				dashes []float64
			}{
				{func(r *record.Record) record.Duration { return r.Latency.P50 }, nil},
				{func(r *record.Record) record.Duration { return r.Latency.P99 }, []float64{7, 4}},
			} {
				var xys plotter.XYs
				var hollow []bool
				for _, r := range recs {
					if y := q.get(r).Ms(); y > 0 { // a log axis has no zero
						xys = append(xys, plotter.XY{X: float64(r.Point.Batch), Y: y})
						hollow = append(hollow, !trusted(r))
						lo, hi = min(lo, y), max(hi, y)
						flagged = flagged || !trusted(r)
					}
				}
				p.Add(&plotter.Line{XYs: xys, LineStyle: line(col, 2, q.dashes...)},
					&plotter.Scatter{XYs: xys, GlyphStyleFunc: func(i int) draw.GlyphStyle { return v.seriesGlyph(s, hollow[i], 4) }})
			}
		}
		batchAxis(&p.X, v.batchesOf(order, groups))
		f.panels = append(f.panels, p)
	}
	if drawn == 0 {
		return nil, "no batched point with a success"
	}
	slo := v.run.Manifest.SLO.P99.Ms()
	if slo > 0 {
		lo, hi = min(lo, slo), max(hi, slo)
	}
	for _, p := range f.panels {
		if slo > 0 {
			sloLine(p, slo)
		}
		if needsLog(lo, hi) {
			logAxis(&p.Y, lo, hi, false)
		} else {
			linearAxis(&p.Y, 0, hi, 0.1)
		}
	}
	v.addSeriesLegend(f, order)
	f.add("p50", lineThumb(line(color.Black, 2), nil))
	f.add("p99", lineThumb(line(color.Black, 2, 7, 4), nil))
	if slo > 0 {
		f.add("SLO p99 "+fmtMs(slo), lineThumb(line(sloColor, 1.5, 3, 3), nil))
	}
	if flagged {
		addFlaggedLegend(f)
	}
	if len(loads) < len(v.loads) {
		f.note("%d of the run's %d load levels are drawn (lowest, highest and evenly spaced between); summary.md lists every point.", len(loads), len(v.loads))
	}
	return f, ""
}

// bars draws one rectangle per value, centred at x[i] and width wide in
// data units, from bottom[i] (or the panel's floor when zero) to top[i].
// It works on log axes, where a bar cannot start at zero.
type bars struct {
	x, bottom, top []float64
	width          float64
	color          color.Color
	hatch          bool // stripes of color over its tint
}

func (b *bars) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	for i := range b.x {
		if !(b.top[i] > b.bottom[i]) || (isLog(p.Y) && b.top[i] <= 0) {
			continue
		}
		y0 := c.Min.Y
		if b.bottom[i] > p.Y.Min {
			y0 = trY(b.bottom[i])
		}
		y1 := trY(b.top[i])
		x0, x1 := trX(b.x[i]-b.width/2), trX(b.x[i]+b.width/2)
		y0, y1 = max(y0, c.Min.Y), min(y1, c.Max.Y)
		if y1 > y0 {
			fillBox(&c, vg.Rectangle{Min: vg.Point{X: x0, Y: y0}, Max: vg.Point{X: x1, Y: y1}}, b.color, b.hatch)
		}
	}
}

// naiveVsBatchedChart: at each load level, the naive endpoint against the
// best batched configuration, throughput and p99 side by side.
func (v *view) naiveVsBatchedChart() (*figure, string) {
	type pair struct {
		naive, served *record.Record
		why           [2]string // for a missing bar: "failed" when every point there failed, else "n/a"
	}
	var levels []record.Load
	var pairs []pair
	for _, l := range v.loads {
		pr := pair{why: [2]string{"n/a", "n/a"}}
		for i, recs := range [][]*record.Record{atLoad(v.naive, l), atLoad(v.served, l)} {
			if len(recs) > 0 {
				pr.why[i] = "failed"
			}
		}
		for _, r := range atLoad(v.naive, l) {
			if succeeded(r) && (pr.naive == nil || better(r, pr.naive)) {
				pr.naive = r
			}
		}
		for _, r := range atLoad(v.served, l) {
			if succeeded(r) && (pr.served == nil || better(r, pr.served)) {
				pr.served = r
			}
		}
		if pr.naive != nil || pr.served != nil {
			levels, pairs = append(levels, l), append(pairs, pr)
		}
	}
	if len(pairs) == 0 {
		return nil, "no point with a success"
	}
	names := make([]string, len(levels))
	for i, l := range levels {
		names[i] = loadLabel(l)
		if pairs[i].served != nil {
			names[i] += "\n" + v.configLabel(pairs[i].served)
		}
	}
	f := &figure{title: "Naive vs batched at each load level", cols: 2}
	const w = 0.42
	flagged := false
	for _, m := range []struct {
		title, unit string
		get         func(*record.Record) float64
		format      func(float64) string
	}{
		{"Throughput", "throughput (successful requests/s)", func(r *record.Record) float64 { return r.Throughput }, record.Short},
		{"p99 latency", "p99 latency (ms)", func(r *record.Record) float64 { return r.Latency.P99.Ms() }, func(ms float64) string { return strings.ReplaceAll(fmtMs(ms), " ", "") }},
	} {
		p := newPlot(m.title, "load level", m.unit)
		p.NominalX(names...)
		p.X.Tick.Label.Font.Size = vg.Points(10)
		p.X.Min, p.X.Max = -0.6, float64(len(levels))-0.4
		nb := &bars{width: w, color: naiveColor}
		sb := &bars{width: w, color: batchedColor}
		var lx, ly []float64
		var lt []string
		lo, hi := math.Inf(1), 0.0
		for i, pr := range pairs {
			for j, side := range []struct {
				r   *record.Record
				b   *bars
				off float64
			}{{pr.naive, nb, -w / 2}, {pr.served, sb, w / 2}} {
				x := float64(i) + side.off
				if side.r == nil {
					lx, ly, lt = append(lx, x), append(ly, 0), append(lt, pr.why[j])
					continue
				}
				val := m.get(side.r)
				side.b.x, side.b.bottom, side.b.top = append(side.b.x, x), append(side.b.bottom, 0), append(side.b.top, val)
				txt := m.format(val)
				if !trusted(side.r) {
					txt += "*"
					flagged = true
				}
				lx, ly, lt = append(lx, x), append(ly, val), append(lt, txt)
				if val > 0 {
					lo, hi = min(lo, val), max(hi, val)
				}
			}
		}
		if hi == 0 {
			hi = 1
		}
		if m.title != "Throughput" && needsLog(lo, hi) {
			logAxis(&p.Y, lo, hi*1.6, false) // room above the bars for their labels
			for i := range ly {
				ly[i] = max(ly[i], p.Y.Min)
			}
		} else {
			linearAxis(&p.Y, 0, hi, 0.22)
		}
		p.Add(nb, sb, newLabels(lx, ly, lt, 9, 0, 5, draw.XCenter))
		f.panels = append(f.panels, p)
	}
	f.add("naive", thumb{fill: naiveColor})
	f.add("batched, best config", thumb{fill: batchedColor})
	f.note("At each load level the batched bar is the configuration with the highest throughput there (lowest p99 on a tie), trusted points first; it is named under the level.")
	if flagged {
		f.note("Values marked * rest on a flagged measurement: see summary.md.")
	}
	if len(v.naive) == 0 {
		f.note("This run has no naive points.")
	}
	return f, ""
}

// tradeoffChart: every point's throughput against its p99, each
// configuration's points joined across load levels, with the frontier of
// best trade-offs, its knee, and the SLO.
func (v *view) tradeoffChart() (*figure, string) {
	groups := map[config][]*record.Record{}
	var order []config
	lo, hi, xmax, flagged := math.Inf(1), 0.0, 0.0, false
	for _, r := range v.recs {
		if !succeeded(r) || r.Latency.P99 <= 0 {
			continue
		}
		c := configOf(r.Point)
		if _, ok := groups[c]; !ok {
			order = append(order, c)
		}
		groups[c] = append(groups[c], r)
		lo, hi, xmax = min(lo, r.Latency.P99.Ms()), max(hi, r.Latency.P99.Ms()), max(xmax, r.Throughput)
		flagged = flagged || !trusted(r)
	}
	if len(order) == 0 {
		return nil, "no point with a success"
	}
	p := newPlot("Throughput vs p99 latency", "throughput (successful requests/s)", "p99 latency (ms)")
	f := &figure{panels: []*plot.Plot{p}}
	// The naive endpoint goes last, on top, as a cross: its points often
	// coincide with those of batch size 1.
	naiveLast := func(c config) int {
		if c.Endpoint == "naive" {
			return 1
		}
		return 0
	}
	slices.SortStableFunc(order, func(a, b config) int { return cmp.Compare(naiveLast(a), naiveLast(b)) })
	var lx, ly []float64
	var lt []string
	var lm []int        // the marker each label names
	marks := &markers{} // over the lines, the naive crosses last
	for _, c := range order {
		recs := groups[c]
		slices.SortFunc(recs, func(a, b *record.Record) int { return compareLoad(a.Point.Load, b.Point.Load) })
		col, s := color.Color(naiveColor), seriesOf(recs[0].Point)
		if !isNaive(recs[0]) {
			col = v.workerColor(c.Workers)
		}
		xys := make(plotter.XYs, len(recs))
		for i, r := range recs {
			xys[i] = plotter.XY{X: r.Throughput, Y: r.Latency.P99.Ms()}
		}
		faded := col
		if rgba, ok := col.(color.RGBA); ok {
			faded = color.NRGBA{R: rgba.R, G: rgba.G, B: rgba.B, A: 110}
		}
		sh := v.shapeOf(s.variant())
		if isNaive(recs[0]) {
			sh = cross
		}
		p.Add(&plotter.Line{XYs: xys, LineStyle: line(faded, 1)})
		for i, r := range recs {
			marks.add(xys[i].X, xys[i].Y, glyph(col, sh, !trusted(r), 4))
		}
		// Few points are each named with their load; many, by
		// configuration once, at its highest throughput.
		first := len(marks.xys) - len(recs)
		if len(v.recs) <= labelAll {
			for i, r := range recs {
				lx, ly, lt = append(lx, r.Throughput), append(ly, r.Latency.P99.Ms()), append(lt, v.batchLabel(r)+" "+shortLoad(r.Point.Load))
				lm = append(lm, first+i)
			}
			continue
		}
		top := 0
		for i, r := range recs {
			if r.Throughput > recs[top].Throughput {
				top = i
			}
		}
		r := recs[top]
		lx, ly, lt, lm = append(lx, r.Throughput), append(ly, r.Latency.P99.Ms()), append(lt, v.batchLabel(r)), append(lm, first+top)
	}
	// The naive points' names go first, so that they win a collision with
	// the points under them.
	slices.Reverse(lx)
	slices.Reverse(ly)
	slices.Reverse(lt)
	slices.Reverse(lm)
	names := newLabels(lx, ly, lt, 9, 7, 2, draw.XLeft)
	names.avoid, names.marks, names.mark = true, marks, lm
	front := frontier(v.recs)
	if len(front) > 1 {
		xys := make(plotter.XYs, len(front))
		for i, r := range front {
			xys[i] = plotter.XY{X: r.Throughput, Y: r.Latency.P99.Ms()}
		}
		p.Add(&plotter.Line{XYs: xys, LineStyle: line(color.Black, 1.8)})
	}
	p.Add(marks)
	slo := v.run.Manifest.SLO
	if slo.P99 > 0 {
		lo, hi = min(lo, slo.P99.Ms()), max(hi, slo.P99.Ms())
		sloLine(p, slo.P99.Ms())
	}
	if slo.MinThroughput > 0 {
		p.Add(vline{x: slo.MinThroughput, style: line(sloColor, 1.5, 3, 3)})
		xmax = max(xmax, slo.MinThroughput)
	}
	if needsLog(lo, hi) {
		logAxis(&p.Y, lo, hi, false)
	} else {
		linearAxis(&p.Y, 0, hi, 0.1)
	}
	linearAxis(&p.X, 0, xmax, 0.05)
	k := knee(front)
	if k != nil {
		x, y := k.Throughput, k.Latency.P99.Ms()
		sc := &plotter.Scatter{XYs: plotter.XYs{{X: x, Y: y}},
			GlyphStyle: draw.GlyphStyle{Color: color.Black, Radius: vg.Points(10), Shape: marker{shape: circle, outline: true}}}
		dx, align := 16.0, draw.XLeft
		if x > xmax*0.6 {
			dx, align = -16, draw.XRight
		}
		p.Add(sc, newLabels([]float64{x}, []float64{y}, []string{fmt.Sprintf("knee: %s\n%s req/s, p99 %s", v.pointLabel(k), record.Short(k.Throughput), fmtMs(y))}, 10.5, dx, 10, align))
	}
	p.Add(names) // after the knee's label, which goes first
	for _, w := range v.workers {
		g := glyph(v.workerColor(w), circle, false, 4.5)
		f.add(fmt.Sprintf("w=%d", w), lineThumb(line(v.workerColor(w), 1), &g))
	}
	if len(v.naive) > 0 {
		g := glyph(naiveColor, cross, false, 4.5)
		f.add("naive", lineThumb(line(naiveColor, 1), &g))
	}
	if len(v.vars) > 1 {
		for _, vr := range v.vars {
			g := glyph(color.Black, v.shapeOf(vr), false, 4.5)
			f.add(v.variantLabel(vr), thumb{glyph: &g})
		}
	}
	if len(front) > 1 {
		f.add("best trade-offs", lineThumb(line(color.Black, 1.8), nil))
	}
	if k != nil {
		g := draw.GlyphStyle{Color: color.Black, Radius: vg.Points(7), Shape: marker{shape: circle, outline: true}}
		f.add("knee", thumb{glyph: &g})
	}
	if slo.P99 > 0 || slo.MinThroughput > 0 {
		f.add("SLO "+sloText(record.SLO{P99: slo.P99, MinThroughput: slo.MinThroughput}), lineThumb(line(sloColor, 1.5, 3, 3), nil))
	}
	if flagged {
		addFlaggedLegend(f)
	}
	switch {
	case len(v.recs) > labelAll:
		f.note("Thin lines join a configuration's points across load levels; each configuration is named at its highest throughput (colour: workers).")
	case len(v.recs) > len(order):
		f.note("Thin lines join a configuration's points across load levels; each point is named by its configuration and load (colour: workers).")
	default:
		f.note("Each point is named by its configuration and load (colour: workers).")
	}
	if len(front) > 1 {
		f.note("The black line joins the trusted points no other point beats on both throughput and p99.")
	}
	switch {
	case k != nil:
		f.note("The knee is the frontier's point where p99 starts to climb faster than throughput: beyond it, more throughput costs disproportionate latency.")
	case len(front) >= 3:
		f.note("No knee: along the frontier p99 never climbs faster than throughput, so the sweep did not push its best configurations into saturation.")
	}
	return f, ""
}

// serverTimeChart: the server's mean queue and compute time per response,
// stacked, by batch size and worker count, one panel per load level.
func (v *view) serverTimeChart() (*figure, string) {
	timed := func(r *record.Record) bool { return r.Server.MeanCompute > 0 || r.Server.MeanQueue > 0 }
	order, groups := v.bySeries()
	naive := slices.ContainsFunc(v.naive, timed)
	any := naive
	for _, r := range v.served {
		any = any || (r.Point.Batch > 0 && timed(r))
	}
	if !any {
		return nil, "no point carries server-side timings (Server-Timing)"
	}
	batches := v.batchesOf(order, groups)
	var names []string
	if naive {
		names = append(names, "naive")
	}
	for _, b := range batches {
		names = append(names, fmt.Sprintf("b=%d", b))
	}
	xLabel := "max batch size (--batch)"
	if naive {
		xLabel = "naive, then batched by max batch size (--batch)"
	}
	loads := panelLoads(v.loads, maxPanels)
	f := &figure{title: "Server-side time per request: compute (solid) and queue (hatched)", cols: min(len(loads), 2)}
	n := len(order)
	w := 0.8 / float64(max(n, 1))
	for _, l := range loads {
		p := newPlot("at "+loadLabel(l), xLabel, "mean time per request (ms)")
		p.NominalX(names...)
		p.X.Min, p.X.Max = -0.6, float64(len(names))-0.4
		top := 0.0
		if naive {
			for _, r := range atLoad(v.naive, l) {
				if timed(r) {
					c, q := r.Server.MeanCompute.Ms(), r.Server.MeanQueue.Ms()
					// As wide as a batch size's group of bars at most,
					// so that it stays in its own slot.
					nw := min(w*1.5, 0.8)
					p.Add(&bars{x: []float64{0}, bottom: []float64{0}, top: []float64{c}, width: nw, color: naiveColor},
						&bars{x: []float64{0}, bottom: []float64{c}, top: []float64{c + q}, width: nw, color: naiveColor, hatch: true})
					top = max(top, c+q)
					break
				}
			}
		}
		first := 0.0
		if naive {
			first = 1
		}
		var mx, my []float64
		var marks []draw.GlyphStyle
		for si, s := range order {
			col := v.workerColor(s.Workers)
			cb, qb := &bars{width: w * 0.92, color: col}, &bars{width: w * 0.92, color: col, hatch: true}
			for _, r := range atLoad(groups[s], l) {
				if !timed(r) {
					continue
				}
				x := first + float64(slices.Index(batches, r.Point.Batch)) - 0.4 + w*(float64(si)+0.5)
				c, q := r.Server.MeanCompute.Ms(), r.Server.MeanQueue.Ms()
				cb.x, cb.bottom, cb.top = append(cb.x, x), append(cb.bottom, 0), append(cb.top, c)
				qb.x, qb.bottom, qb.top = append(qb.x, x), append(qb.bottom, c), append(qb.top, c+q)
				top = max(top, c+q)
				if len(v.vars) > 1 {
					mx, my = append(mx, x), append(my, c+q)
					marks = append(marks, v.seriesGlyph(s, !trusted(r), 3.5))
				}
			}
			p.Add(cb, qb)
		}
		if len(mx) > 0 {
			xys := make(plotter.XYs, len(mx))
			for i := range mx {
				xys[i] = plotter.XY{X: mx[i], Y: my[i]}
			}
			p.Add(&plotter.Scatter{XYs: xys, GlyphStyleFunc: func(i int) draw.GlyphStyle { return marks[i] }})
		}
		linearAxis(&p.Y, 0, top, 0.08)
		f.panels = append(f.panels, p)
	}
	if len(v.vars) > 1 {
		v.addSeriesLegend(f, order)
	} else {
		for _, w := range v.workers {
			f.add(fmt.Sprintf("w=%d", w), thumb{fill: v.workerColor(w)})
		}
	}
	if naive {
		f.add("naive", thumb{fill: naiveColor})
	}
	neutral := color.RGBA{40, 40, 40, 255}
	f.add("compute (solid)", thumb{fill: neutral})
	f.add("queue (hatched)", thumb{fill: neutral, hatch: true})
	f.note("Means over successful responses, from their Server-Timing headers. Queue time is waiting for a batch to fill (up to --max-latency) and for a free worker.")
	if len(loads) < len(v.loads) {
		f.note("%d of the run's %d load levels are drawn.", len(loads), len(v.loads))
	}
	return f, ""
}

// tint returns c mixed halfway with white... and a bit more: 60 % white.
func tint(c color.Color) color.Color {
	r, g, b, _ := c.RGBA()
	mix := func(v uint32) uint8 { return uint8((float64(v>>8)*0.4 + 255*0.6)) }
	return color.RGBA{mix(r), mix(g), mix(b), 255}
}

// fmtMs formats milliseconds briefly: "0.85 ms", "84.1 ms", "1.21 s".
func fmtMs(ms float64) string {
	switch {
	case ms >= 1e6:
		return fmt.Sprintf("%.0f s", ms/1000)
	case ms >= 1000:
		return fmt.Sprintf("%.3g s", ms/1000)
	case ms >= 1:
		return fmt.Sprintf("%.3g ms", ms)
	default:
		return fmt.Sprintf("%.2g ms", ms)
	}
}
