package report

// The charts and summary.md section of capacity searches (load.search)
// and the Pareto front of any run:
//
//	capacity.png  a panel per configuration searched: each probe's level, its
//	              verdict, the bracket after it narrowing to the capacity
//	pareto.png    LLM runs: per-user tokens/s (1 / median TPOT) against output
//	              tokens/s over every point, the front marked (vLLM's plot_pareto
//	              view); encoder runs: p99 against throughput, the front marked

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

// searchChartFiles are the charts of this file, drawn only for the runs
// they apply to.
var searchChartFiles = []string{"capacity.png", "pareto.png"}

// searchCharts lists the capacity chart, for runs with a search, and the
// Pareto chart.
func (v *view) searchCharts() []chart {
	var cs []chart
	if len(v.capacities()) > 0 {
		cs = append(cs, chart{"capacity.png", "Capacity under the SLO, per configuration", v.capacityChart})
	}
	return append(cs, chart{"pareto.png", "Pareto front", v.paretoChart})
}

// capacities are the run's capacity searches: the manifest's, else those
// its records tell (a run cut short before its manifest was final).
func (v *view) capacities() []record.Capacity {
	if cs := v.run.Manifest.Capacities; len(cs) > 0 {
		return cs
	}
	return record.Capacities(v.run.Records)
}

// probesOf returns the records of the search of configuration c, in the
// order measured.
func (v *view) probesOf(c int) []*record.Record {
	return keep(v.recs, func(r *record.Record) bool { return r.Search != nil && r.Search.Config == c })
}

// levelText renders a search level with its unit.
func levelText(over string, x float64) string {
	if over == record.OverClients {
		return plural(int(x), "client")
	}
	return num(x) + " req/s"
}

var (
	passColor = color.RGBA{89, 161, 79, 255}  // green
	missColor = color.RGBA{225, 87, 89, 255}  // red
	bandColor = color.NRGBA{78, 121, 167, 50} // the bracket, translucent blue
	capColor  = color.RGBA{78, 121, 167, 255} // the capacity found
)

// capacityChart draws a panel per configuration searched: each probe's
// level by its order, green where it met the SLO and red where it
// missed, the bracket after it as a band that narrows to the capacity.
func (v *view) capacityChart() (*figure, string) {
	caps := v.capacities()
	if len(caps) == 0 {
		return nil, "no capacity search (load.search)"
	}
	f := &figure{cols: 1}
	switch {
	case len(caps) > 4:
		f.cols = 3
	case len(caps) > 1:
		f.cols = 2
	}
	flagged := false
	for _, c := range caps {
		probes := v.probesOf(c.Config)
		if len(probes) == 0 {
			continue
		}
		title := c.Name + ": "
		switch {
		case c.Capacity > 0 && c.Failed > 0:
			title += fmt.Sprintf("%s (%s missed)", levelText(c.Over, c.Capacity), num(c.Failed))
		case c.Capacity > 0:
			title += "at least " + levelText(c.Over, c.Capacity)
		default:
			title += "no level meets the SLO"
		}
		if c.Partial {
			title += ", partial"
		}
		yLabel := "offered rate (requests/s)"
		if c.Over == record.OverClients {
			yLabel = "clients"
		}
		p := newPlot(title, "probe (in the order measured)", yLabel)
		lo, hi := math.Inf(1), 0.0
		for _, r := range probes {
			lo, hi = min(lo, r.Search.Level), max(hi, r.Search.Level)
		}
		logY := needsLog(lo, hi) || hi/lo > 8
		// An open end of the bracket reaches the axis's end (bands clip);
		// a log scale takes no 0.
		top, bottom := math.Inf(1), 0.0
		if logY {
			bottom = math.SmallestNonzeroFloat64
		}
		band := &bands{}
		marks := &markers{}
		var lx, ly []float64
		var lt []string
		var lm []int
		for i, r := range probes {
			s := r.Search
			x := float64(i + 1)
			b0, b1 := bottom, top
			if s.Passed > 0 {
				b0 = s.Passed
			}
			if s.Failed > 0 {
				b1 = s.Failed
			}
			band.add(x, b0, b1)
			hollow := !trusted(r)
			flagged = flagged || hollow
			if s.Pass {
				marks.add(x, s.Level, glyph(passColor, circle, hollow, 5))
			} else {
				marks.add(x, s.Level, glyph(missColor, diamond, hollow, 5))
			}
			text := num(s.Level)
			if n := len(s.Margins); n > 1 {
				text += fmt.Sprintf(" ×%d", n)
			}
			lx, ly, lt, lm = append(lx, x), append(ly, s.Level), append(lt, text), append(lm, i)
		}
		p.Add(band)
		if c.Capacity > 0 { // named in the title
			p.Add(hline(c.Capacity, line(capColor, 1.5, 5, 3)))
		}
		p.Add(marks)
		names := newLabels(lx, ly, lt, 9, 8, -3, draw.XLeft)
		names.avoid, names.marks, names.mark = true, marks, lm // keep off the markers
		p.Add(names)
		var ts plot.ConstantTicks
		for i := range probes {
			ts = append(ts, plot.Tick{Value: float64(i + 1), Label: fmt.Sprint(i + 1)})
		}
		p.X.Tick.Marker = ts
		p.X.Min, p.X.Max = 0.4, float64(len(probes))+1.6 // room for the last label
		if logY {
			logAxis(&p.Y, lo, hi, false)
		} else {
			linearAxis(&p.Y, 0, hi, 0.15)
		}
		f.panels = append(f.panels, p)
	}
	if len(f.panels) == 0 {
		return nil, "no probe recorded"
	}
	gp, gm := glyph(passColor, circle, false, 5), glyph(missColor, diamond, false, 5)
	f.add("met the SLO", thumb{glyph: &gp})
	f.add("missed it", thumb{glyph: &gm})
	f.add("bracket after the probe", thumb{fill: bandColor})
	f.add("capacity found", lineThumb(line(capColor, 1.5, 5, 3), nil))
	if flagged {
		addFlaggedLegend(f)
	}
	slo := v.run.Manifest.SLO
	f.note("Each marker is a level measured, in the order the search chose it: it grows until a level misses the SLO (%s), then halves the bracket between the highest level that met it and the lowest that missed it. ×n: measured n times (near the SLO's bounds, or in doubt: unsteady, behind its schedule or with a saturated generator); the median decided.", sloText(slo))
	for _, c := range caps {
		if c.Why != "" {
			f.note("%s: %s.", c.Name, c.Why)
		}
	}
	return f, ""
}

// bands draws a vertical band [lo, hi] at each x, as wide as 0.6 of a
// probe's step.
type bands struct{ x, lo, hi []float64 }

func (b *bands) add(x, lo, hi float64) {
	b.x, b.lo, b.hi = append(b.x, x), append(b.lo, lo), append(b.hi, hi)
}

func (b *bands) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	for i, x := range b.x {
		x0, x1 := trX(x-0.3), trX(x+0.3)
		y0, y1 := max(trY(b.lo[i]), c.Min.Y), min(trY(b.hi[i]), c.Max.Y)
		if y1 <= y0 {
			continue
		}
		c.FillPolygon(bandColor, []vg.Point{{X: x0, Y: y0}, {X: x1, Y: y0}, {X: x1, Y: y1}, {X: x0, Y: y1}})
	}
}

// paretoPoint is a point on the Pareto chart.
type paretoPoint struct {
	x, y float64
	r    *record.Record
}

// paretoFront returns the points of pts that no other beats on both axes
// (x higher is better; y higher is better when up, else lower), by x.
func paretoFront(pts []paretoPoint, up bool) []paretoPoint {
	better := func(a, b float64) bool { // a beats b on y
		if up {
			return a > b
		}
		return a < b
	}
	cand := slices.Clone(pts)
	slices.SortFunc(cand, func(a, b paretoPoint) int {
		if c := -cmp.Compare(a.x, b.x); c != 0 {
			return c
		}
		if better(a.y, b.y) {
			return -1
		}
		if better(b.y, a.y) {
			return 1
		}
		return 0
	})
	var front []paretoPoint
	for _, p := range cand {
		if len(front) == 0 || better(p.y, front[len(front)-1].y) {
			front = append(front, p)
		}
	}
	slices.Reverse(front)
	return front
}

// paretoChart: LLM runs draw per-user tokens/s (1000 ÷ the median TPOT in
// ms) against output tokens/s, every trusted point, a colour per
// configuration, the front of points no other beats on both; encoder runs
// draw p99 against throughput the same way.
func (v *view) paretoChart() (*figure, string) {
	llm := v.isLLM()
	xy := func(r *record.Record) (float64, float64, bool) {
		if !succeeded(r) {
			return 0, 0, false
		}
		if llm {
			if r.LLM == nil || r.LLM.TPOT.N == 0 || r.LLM.TPOT.P50 <= 0 {
				return 0, 0, false
			}
			return 1000 / r.LLM.TPOT.P50, r.LLM.OutputTokensPerS, true
		}
		return r.Throughput, r.Latency.P99.Ms(), r.Latency.P99 > 0
	}
	type group struct {
		label string
		pts   []paretoPoint
	}
	var groups []*group
	at := map[string]*group{}
	var all []paretoPoint
	flagged := false
	for _, r := range v.recs {
		x, y, ok := xy(r)
		if !ok {
			continue
		}
		label := v.configLabel(r)
		g, seen := at[label]
		if !seen {
			g = &group{label: label}
			at[label] = g
			groups = append(groups, g)
		}
		pt := paretoPoint{x: x, y: y, r: r}
		g.pts = append(g.pts, pt)
		if trusted(r) {
			all = append(all, pt)
		} else {
			flagged = true
		}
	}
	if len(all) < 2 {
		return nil, "fewer than two trusted points to compare"
	}
	var p *plot.Plot
	if llm {
		p = newPlot("Output tokens/s against each user's tokens/s", "tokens/s per user (1000 ÷ median TPOT in ms)", "output tokens/s (all users)")
	} else {
		p = newPlot("p99 latency against throughput", "throughput (successful requests/s)", "p99 latency (ms)")
	}
	f := &figure{panels: []*plot.Plot{p}}
	xlo, xmax, ylo, yhi := math.Inf(1), 0.0, math.Inf(1), 0.0
	for i, g := range groups {
		col := color.Color(workerColors[i%len(workerColors)])
		if llm {
			col = v.llmColor(llmSeriesOf(g.pts[0].r.Point))
		} else if isNaive(g.pts[0].r) {
			col = naiveColor
		}
		slices.SortFunc(g.pts, func(a, b paretoPoint) int { return compareLoad(a.r.Point.Load, b.r.Point.Load) })
		xys := make(plotter.XYs, len(g.pts))
		for j, pt := range g.pts {
			xys[j] = plotter.XY{X: pt.x, Y: pt.y}
			xlo, xmax, ylo, yhi = min(xlo, pt.x), max(xmax, pt.x), min(ylo, pt.y), max(yhi, pt.y)
		}
		pts := g.pts
		faded := color.NRGBA{A: 110}
		if rgba, ok := col.(color.RGBA); ok {
			faded = color.NRGBA{R: rgba.R, G: rgba.G, B: rgba.B, A: 110}
		}
		p.Add(&plotter.Line{XYs: xys, LineStyle: line(faded, 1)},
			&plotter.Scatter{XYs: xys, GlyphStyleFunc: func(j int) draw.GlyphStyle { return glyph(col, circle, !trusted(pts[j].r), 4) }})
		gl := glyph(col, circle, false, 4.5)
		f.add(g.label, lineThumb(line(col, 1), &gl))
	}
	front := paretoFront(all, llm)
	fxys := make(plotter.XYs, len(front))
	var lx, ly []float64
	var lt []string
	var lm []int
	ring := draw.GlyphStyle{Color: color.Black, Radius: vg.Points(7), Shape: marker{shape: circle, outline: true}}
	rings := &markers{}
	for i, pt := range front {
		fxys[i] = plotter.XY{X: pt.x, Y: pt.y}
		rings.add(pt.x, pt.y, ring)
		lx, ly, lt, lm = append(lx, pt.x), append(ly, pt.y), append(lt, v.configLabel(pt.r)+" "+shortLoad(pt.r.Point.Load)), append(lm, i)
	}
	p.Add(&plotter.Line{XYs: fxys, LineStyle: line(color.Black, 1.8)}, rings)
	names := newLabels(lx, ly, lt, 9, 9, 3, draw.XLeft)
	names.avoid, names.marks, names.mark = true, rings, lm // keep off the front's rings
	p.Add(names)
	slo := v.run.Manifest.SLO
	if !llm && slo.P99 > 0 {
		names.keepOff = append(names.keepOff, sloLine(p, slo.P99.Ms()))
		ylo, yhi = min(ylo, slo.P99.Ms()), max(yhi, slo.P99.Ms())
		f.add("SLO "+sloText(record.SLO{P99: slo.P99}), lineThumb(line(sloColor, 1.5, 3, 3), nil))
	}
	linearAxis(&p.X, 0, xmax, 0.08)
	if llm && xlo > 0.3*xmax { // per-user speeds bunch up: their range
		pad := max(0.08*(xmax-xlo), 0.02*xmax)
		p.X.Min, p.X.Max = niceRange(xlo-pad, xmax+pad)
	}
	if !llm && needsLog(ylo, yhi) {
		logAxis(&p.Y, ylo, yhi, false)
	} else {
		linearAxis(&p.Y, 0, yhi, 0.1)
	}
	f.add("Pareto front", lineThumb(line(color.Black, 1.8), &ring))
	if flagged {
		addFlaggedLegend(f)
	}
	if llm {
		f.note("Each point is a configuration at one load level. Up is more tokens/s for the server, right is a faster stream for each user (vLLM's plot_pareto view); the front joins the trusted points no other beats on both, each named with its load: the best trade-offs.")
	} else {
		f.note("Each point is a configuration at one load level. Right is more throughput, down is a lower p99; the front joins the trusted points no other beats on both, each named with its load: the best trade-offs.")
	}
	return f, ""
}

// writeCapacity writes summary.md's ranking of the configurations by
// their capacity under the SLO.
func (v *view) writeCapacity(b *strings.Builder) {
	caps := v.capacities()
	if len(caps) == 0 {
		return
	}
	ranked := slices.Clone(caps)
	slices.SortStableFunc(ranked, func(a, b record.Capacity) int {
		return cmp.Or(-cmp.Compare(a.Capacity, b.Capacity), cmp.Compare(a.Config, b.Config))
	})
	b.WriteString("## Capacity under the SLO\n\n")
	fmt.Fprintf(b, "Each configuration's highest load meeting the SLO (%s), found by a search that grows the load until it misses, then halves the bracket between the highest level that met it and the lowest that missed it (`load.search`). Highest first.\n\n", sloText(v.run.Manifest.SLO))
	llm := v.isLLM()
	b.WriteString("| # | configuration | capacity | bracket | at capacity | probes (measurements) | time | how it ended |\n|---|---|---|---|---|---|---|---|\n")
	for i, c := range ranked {
		rank := fmt.Sprint(i + 1)
		capText := "**" + levelText(c.Over, c.Capacity) + "**"
		if c.Capacity == 0 {
			rank, capText = "–", "none"
		}
		if c.Partial {
			capText += " (partial)"
		}
		bracket := "–"
		switch {
		case c.Capacity > 0 && c.Failed > 0:
			bracket = num(c.Capacity) + "–" + levelText(c.Over, c.Failed)
		case c.Capacity > 0:
			bracket = "≥ " + levelText(c.Over, c.Capacity)
		case c.Failed > 0:
			bracket = "< " + levelText(c.Over, c.Failed)
		}
		at := "–"
		if c.Index >= 0 && c.Capacity > 0 {
			at = record.Short(c.Throughput) + " req/s"
			if llm {
				at = record.Short(c.OutputTokensPerS) + " tokens/s, " + num(c.Throughput) + " req/s"
			}
		}
		took := "–"
		if c.Elapsed > 0 {
			took = fmtDur(c.Elapsed)
		}
		why := c.Why
		if why == "" {
			why = "cut short"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %d (%d) | %s | %s |\n", rank, c.Name, capText, bracket, at, c.Probes, c.Measurements, took, why)
	}
	b.WriteString("\n")
}
