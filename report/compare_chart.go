package report

import (
	"cmp"
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// maxComparisonRows is the most points comparison.png draws: the most
// severe ones, when there are more.
const maxComparisonRows = 30

// judged is one change the verdict weighs, a panel of comparison.png.
type judged struct {
	title, axis string
	// value is the change, band its noise band's half-width: relative
	// (0.1 is 10 %), or absolute for the error rate. NaN: not measured.
	value, band func(Change) float64
	worseUp     bool // a rise is worse (latency, errors); else a fall (throughput)
	// least, where set, is the change at the least by the p99s'
	// sampling, which must be beyond the band too for a worse verdict.
	least func(Change) float64
}

// status is what a change does to its point's verdict, as drawn.
type status int

const (
	within     status = iota // within its band
	betterOut                // better beyond its band
	sampling                 // worse beyond its band, but not by the p99s' sampling: pass
	flaggedOut               // worse beyond its band, on a flagged measurement: warn
	worseOut                 // worse beyond its band: regression
)

var statusColor = map[status]color.RGBA{
	within:     {150, 150, 150, 255},
	betterOut:  {78, 121, 167, 255},
	sampling:   {176, 122, 161, 255},
	flaggedOut: verdictColor[Warn],
	worseOut:   verdictColor[Regression],
}

var statusLabel = map[status]string{
	within:     "within its band",
	betterOut:  "better beyond its band",
	sampling:   "worse, within p99 sampling: pass",
	flaggedOut: "worse, but flagged: warn",
	worseOut:   "worse: regression",
}

// statusOf places ch's change on m against ch's band for m. A change
// beyond the band in the worse direction takes the point's verdict: it
// is what made the point warn or regress, and a point that passes with
// it did so by the p99s' sampling alone.
func statusOf(ch Change, m judged) status {
	v, b := m.value(ch), m.band(ch)
	if !m.worseUp {
		v = -v
	}
	switch {
	case v > b:
		switch ch.Verdict {
		case Regression:
			return worseOut
		case Warn:
			return flaggedOut
		}
		return sampling
	case v < -b:
		return betterOut
	}
	return within
}

// metricsOf returns the changes the verdict weighs in this comparison:
// throughput and p99 (output tokens/s and TTFT p99, and TPOT p99 in the
// default band, for LLM points), and the error rate where a point has
// errors.
func (v *view) metricsOf(c *Comparison, chs []Change) []judged {
	ms := []judged{{title: "Throughput (req/s)", axis: "change (%)",
		value: func(ch Change) float64 { return ch.Throughput }, band: func(ch Change) float64 { return ch.Band.Throughput }}}
	p99 := judged{title: "p99 latency", axis: "change (%)", worseUp: true,
		value: func(ch Change) float64 { return ch.P99 }, band: func(ch Change) float64 { return ch.Band.P99 }}
	if v.isLLM() {
		ms[0].title, p99.title = "Output tokens/s", "TTFT p99"
		ms = append(ms, p99, judged{title: "TPOT p99", axis: "change (%)", worseUp: true,
			value: func(ch Change) float64 { return ch.TPOT }, band: func(Change) float64 { return c.Default.P99 }})
	} else {
		p99.least = func(ch Change) float64 { return ch.P99Least }
		ms = append(ms, p99)
	}
	if slices.ContainsFunc(chs, func(ch Change) bool { return ch.Base.ErrorRate() > 0 || ch.Cur.ErrorRate() > 0 }) {
		ms = append(ms, judged{title: "Error rate", axis: "change (points)", worseUp: true,
			value: func(ch Change) float64 { return ch.ErrorRate }, band: func(ch Change) float64 { return ch.Band.ErrorRate }})
	}
	return ms
}

// severity orders the changes of a verdict: how far beyond its band the
// worst of its changes is, in bands; a point without latencies first.
func severity(ch Change, ms []judged) float64 {
	s := math.Inf(-1)
	for _, m := range ms {
		v := m.value(ch)
		if math.IsNaN(v) {
			if ch.Verdict != Pass {
				return math.Inf(1)
			}
			continue
		}
		if !m.worseUp {
			v = -v
		}
		s = max(s, v/m.band(ch))
	}
	return s
}

// comparisonChart: a row per matched point, the worst first, and a panel
// per change the verdict weighs; each row shades that point's own noise
// band and draws its change coloured by what it does to the verdict, so
// that a change beyond its band always shows as such.
func (v *view) comparisonChart(c *Comparison) (*figure, string) {
	var chs []Change // drawable: a throughput change at least
	for _, ch := range c.Changes {
		if !math.IsNaN(ch.Throughput) {
			chs = append(chs, ch)
		}
	}
	if len(chs) == 0 {
		return nil, "no matched point had successes in the baseline"
	}
	ms := v.metricsOf(c, chs)
	slices.SortStableFunc(chs, func(a, b Change) int {
		return cmp.Or(-cmp.Compare(a.Verdict, b.Verdict), -cmp.Compare(severity(a, ms), severity(b, ms)))
	})
	shown := chs[:min(len(chs), maxComparisonRows)]
	n := len(shown)
	rowY := func(i int) float64 { return float64(n - 1 - i) } // the worst at the top

	f := &figure{title: fmt.Sprintf("Against baseline %s: %s (%d regression, %d warn, %d pass)",
		filepath.Base(filepath.Clean(c.Baseline)), strings.ToUpper(c.Verdict.String()), c.Count(Regression), c.Count(Warn), c.Count(Pass)),
		cols: len(ms)}
	used := map[status]bool{}
	clipped, flagged, whiskers := false, false, false
	for k, m := range ms {
		p := newPlot(m.title, m.axis, "")
		scale, lo, hi := 100.0, -100.0, 300.0 // % of change, clipped
		if m.title == "Error rate" {
			lo, hi = -100, 100 // percentage points
		}
		clamp := func(x float64) float64 {
			y := min(max(x*scale, lo), hi)
			clipped = clipped || y != x*scale
			return y
		}
		bands := &rowBands{color: color.RGBA{222, 222, 222, 255}}
		var dots plotter.XYs
		var styles []draw.GlyphStyle
		var nx, ny []float64 // rows without this change
		xlo, xhi := 0.0, 0.0
		for i, ch := range shown {
			b := m.band(ch) * scale
			bands.y, bands.half = append(bands.y, rowY(i)), append(bands.half, b)
			xlo, xhi = min(xlo, -b), max(xhi, b)
			val := m.value(ch)
			if math.IsNaN(val) {
				nx, ny = append(nx, 0), append(ny, rowY(i))
				continue
			}
			st := statusOf(ch, m)
			used[st] = true
			x := clamp(val)
			xlo, xhi = min(xlo, x), max(xhi, x)
			if st == sampling && m.least != nil && !math.IsNaN(m.least(ch)) {
				l := clamp(m.least(ch))
				xlo, xhi = min(xlo, l), max(xhi, l)
				p.Add(&plotter.Line{XYs: plotter.XYs{{X: l, Y: rowY(i)}, {X: x, Y: rowY(i)}}, LineStyle: line(statusColor[sampling], 1.6)})
				whiskers = true
			}
			hollow := !trusted(ch.Cur) || !trusted(ch.Base)
			flagged = flagged || hollow
			dots = append(dots, plotter.XY{X: x, Y: rowY(i)})
			styles = append(styles, glyph(statusColor[st], circle, hollow, 4.5))
		}
		p.Add(bands, vline{x: 0, style: line(color.Black, 0.8)},
			&plotter.Scatter{XYs: dots, GlyphStyleFunc: func(i int) draw.GlyphStyle { return styles[i] }})
		if len(nx) > 0 {
			p.Add(newLabels(nx, ny, slices.Repeat([]string{"none: no success"}, len(nx)), 8.5, 4, -3.5, draw.XLeft))
		}
		pad := (xhi - xlo) * 0.06
		p.X.Min, p.X.Max = niceRange(xlo-pad, xhi+pad)
		var ts plot.ConstantTicks
		for i, ch := range shown {
			t := plot.Tick{Value: rowY(i)}
			if k == 0 {
				t.Label = fmt.Sprintf("%s (%s)", v.pointLabel(ch.Cur), ch.Verdict)
			}
			ts = append(ts, t)
		}
		p.Y.Tick.Marker = ts
		p.Y.Tick.Label.Font.Size = vg.Points(min(10, max(7.5, 300/float64(n))))
		p.Y.Min, p.Y.Max = -0.6, float64(n)-0.4
		f.panels = append(f.panels, p)
	}

	f.add("noise band of the point", thumb{fill: color.RGBA{222, 222, 222, 255}})
	for _, st := range []status{within, betterOut, sampling, flaggedOut, worseOut} {
		if !used[st] {
			continue
		}
		g := glyph(statusColor[st], circle, false, 4.5)
		if st == sampling && whiskers {
			f.add(statusLabel[st], lineThumb(line(statusColor[st], 1.6), &g))
			continue
		}
		f.add(statusLabel[st], thumb{glyph: &g})
	}
	if flagged {
		addFlaggedLegend(f)
	}
	f.note("Each row is a point of the run matched with the baseline's, the worst first, and each dot its change against the baseline; the shaded bar is that point's own noise band: the larger of the two runs' repeat spreads where both have repeats (at least half the default), else the default ±%s %% throughput and ±%s %% p99. summary.md has each point's figures.",
		num(c.Default.Throughput*100), num(c.Default.P99*100))
	if slices.ContainsFunc(shown, func(ch Change) bool { return ch.FromRepeats }) {
		f.note("Where both points have repeats, the p99s compared are the medians of the repeats' p99s.")
	}
	if v.isLLM() {
		f.note("TPOT p99 is judged in the default band: the repeats carry no TPOT.")
	}
	if whiskers {
		f.note("A p99 beyond its band passes when its change at the least, by the p99s' 99 %% sampling intervals, is within it: the thin line runs from there to the change.")
	}
	if len(chs) > n {
		f.note("The %d worst of %d matched points are drawn.", n, len(chs))
	}
	if clipped {
		f.note("Changes beyond −100 %%…+300 %% are drawn at the edge.")
	}
	if k := len(c.Changes) - len(chs); k > 0 {
		f.note("%s without successes in the baseline cannot be drawn as a change.", plural(k, "point"))
	}
	return f, ""
}

// rowBands shades, for each row at y, the band from −half to +half.
type rowBands struct {
	y, half []float64
	color   color.Color
}

func (b *rowBands) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	for i, y := range b.y {
		h := (trY(1) - trY(0)) * 0.32
		x0, x1 := max(trX(-b.half[i]), c.Min.X), min(trX(b.half[i]), c.Max.X)
		if x1 > x0 {
			fillBox(&c, vg.Rectangle{Min: vg.Point{X: x0, Y: trY(y) - h}, Max: vg.Point{X: x1, Y: trY(y) + h}}, b.color, false)
		}
	}
}
