package report

import (
	"bytes"
	"fmt"
	"image/color"
	"image/png"
	"math"
	"slices"
	"strconv"
	"strings"

	stdfont "golang.org/x/image/font"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// This file is the drawing kit the charts share: fonts, colours, markers,
// axes, and a figure that lays out panels with the legend and the notes
// outside the plotting area, so that a legend never covers data.

const dpi = 96 // pixels per inch of the PNGs; 12 pt text is 16 px high

var (
	sans = font.Font{Typeface: "Liberation", Variant: "Sans"}
	bold = font.Font{Typeface: "Liberation", Variant: "Sans", Weight: stdfont.WeightBold}
)

func textStyle(f font.Font, size float64, c color.Color) text.Style {
	return text.Style{Color: c, Font: font.From(f, vg.Points(size)), Handler: plot.DefaultTextHandler}
}

// Colours. A worker count keeps its colour on every chart of a run; the
// naive endpoint is grey and the best batched configuration blue
// everywhere. The palette is Tableau 10's, which stays distinct for the
// colour-blind in its first six.
var (
	workerColors = []color.RGBA{
		{242, 142, 43, 255},  // orange
		{89, 161, 79, 255},   // green
		{225, 87, 89, 255},   // red
		{176, 122, 161, 255}, // purple
		{118, 183, 178, 255}, // teal
		{156, 117, 95, 255},  // brown
		{255, 157, 167, 255}, // pink
		{237, 201, 72, 255},  // yellow
	}
	naiveColor   = color.RGBA{110, 110, 110, 255}
	batchedColor = color.RGBA{78, 121, 167, 255}
	sloColor     = color.RGBA{200, 30, 30, 255}
	gridColor    = color.RGBA{225, 225, 225, 255}
	noteColor    = color.RGBA{60, 60, 60, 255}
	verdictColor = map[Verdict]color.RGBA{
		Pass:       {89, 161, 79, 255},
		Warn:       {242, 142, 43, 255},
		Regression: {225, 87, 89, 255},
	}
)

func (v *view) workerColor(w int) color.Color {
	for i, x := range v.workers {
		if x == w {
			return workerColors[i%len(workerColors)]
		}
	}
	return naiveColor
}

// shape is a marker's outline; a variant of the series (endpoint,
// max-latency, policy, items per request) keeps its shape on every chart.
type shape int

const (
	circle shape = iota
	square
	triangle
	diamond
	nShapes
	// cross marks the naive endpoint where it shares a panel with
	// batched points: drawn over them, it stays visible where it
	// coincides with one.
	cross
)

func (v *view) shapeOf(vr variant) shape {
	for i, x := range v.vars {
		if x == vr {
			return shape(i) % nShapes
		}
	}
	return circle
}

// marker draws a shape, filled, or hollow (white inside, thick outline)
// for a point whose measurement is flagged, or as an outline alone, to
// ring another marker.
type marker struct {
	shape   shape
	hollow  bool
	outline bool
}

func (m marker) DrawGlyph(c *draw.Canvas, sty draw.GlyphStyle, pt vg.Point) {
	r := sty.Radius
	var p vg.Path
	switch m.shape {
	case square:
		s := r * 0.85
		p.Move(vg.Point{X: pt.X - s, Y: pt.Y - s})
		p.Line(vg.Point{X: pt.X + s, Y: pt.Y - s})
		p.Line(vg.Point{X: pt.X + s, Y: pt.Y + s})
		p.Line(vg.Point{X: pt.X - s, Y: pt.Y + s})
	case triangle:
		p.Move(vg.Point{X: pt.X, Y: pt.Y + r*1.15})
		p.Line(vg.Point{X: pt.X - r, Y: pt.Y - r*0.75})
		p.Line(vg.Point{X: pt.X + r, Y: pt.Y - r*0.75})
	case diamond:
		p.Move(vg.Point{X: pt.X, Y: pt.Y + r*1.2})
		p.Line(vg.Point{X: pt.X + r, Y: pt.Y})
		p.Line(vg.Point{X: pt.X, Y: pt.Y - r*1.2})
		p.Line(vg.Point{X: pt.X - r, Y: pt.Y})
	case cross: // an ×, stroked: white under it, so that it reads on a marker
		s := r * 1.1
		arms := [][2]vg.Point{{{X: pt.X - s, Y: pt.Y - s}, {X: pt.X + s, Y: pt.Y + s}}, {{X: pt.X - s, Y: pt.Y + s}, {X: pt.X + s, Y: pt.Y - s}}}
		width := vg.Points(2.6)
		if m.hollow {
			width = vg.Points(1.6)
		}
		for _, ls := range []draw.LineStyle{{Color: color.White, Width: width + vg.Points(2)}, {Color: sty.Color, Width: width}} {
			for _, a := range arms {
				c.StrokeLine2(ls, a[0].X, a[0].Y, a[1].X, a[1].Y)
			}
		}
		return
	default:
		p.Move(vg.Point{X: pt.X + r, Y: pt.Y})
		p.Arc(pt, r, 0, 2*math.Pi)
	}
	p.Close()
	if m.hollow || m.outline {
		if !m.outline {
			c.SetColor(color.White)
			c.Fill(p)
		}
		c.SetLineStyle(draw.LineStyle{Color: sty.Color, Width: vg.Points(1.8)})
		c.Stroke(p)
		return
	}
	c.SetColor(sty.Color)
	c.Fill(p)
}

// markers draws points whose markers stay visible where they would cover
// one another: a marker that would hide one drawn before it moves aside to
// the first free place around its point, one marker's width away, on a
// thin leader line from its true position. Where no place that near is
// free (a crowd of points), it stays where it is: moved farther, it would
// misplace the data. Points are drawn in the order added: add the ones to
// keep in place first.
type markers struct {
	xys    plotter.XYs
	styles []draw.GlyphStyle
}

func (m *markers) add(x, y float64, sty draw.GlyphStyle) {
	m.xys = append(m.xys, plotter.XY{X: x, Y: y})
	m.styles = append(m.styles, sty)
}

// covers reports whether markers of radii ra and rb centred d apart
// overlap enough to hide one: by more than a third of the smaller one's
// width.
func covers(d, ra, rb vg.Length) bool { return d < ra+rb-2*min(ra, rb)/3 }

// places returns where each marker is drawn on c, and whether it moved.
func (m *markers) places(c draw.Canvas, p *plot.Plot) (at []vg.Point, moved []bool) {
	trX, trY := p.Transforms(&c)
	at, moved = make([]vg.Point, len(m.xys)), make([]bool, len(m.xys))
	free := func(i int, pt vg.Point) bool {
		for j := range i {
			if covers(dist(pt, at[j]), m.styles[i].Radius, m.styles[j].Radius) {
				return false
			}
		}
		return true
	}
	for i, xy := range m.xys {
		at[i] = vg.Point{X: trX(xy.X), Y: trY(xy.Y)}
		if free(i, at[i]) {
			continue
		}
		// Around the point, right first, then left, up, down and the
		// diagonals.
		home, step := at[i], markerStep(m.styles[i])
		for _, a := range []float64{0, 180, 90, 270, 45, 135, 225, 315} {
			rad := a * math.Pi / 180
			pt := vg.Point{X: home.X + step*vg.Length(math.Cos(rad)), Y: home.Y + step*vg.Length(math.Sin(rad))}
			if c.Contains(pt) && free(i, pt) {
				at[i], moved[i] = pt, true
				break
			}
		}
	}
	return at, moved
}

// markerStep is how far a marker moves aside: its width and a little.
func markerStep(sty draw.GlyphStyle) vg.Length { return sty.Radius*2 + vg.Points(2) }

func dist(a, b vg.Point) vg.Length {
	return vg.Length(math.Hypot(float64(a.X-b.X), float64(a.Y-b.Y)))
}

func (m *markers) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	at, moved := m.places(c, p)
	for i, pt := range at {
		if moved[i] {
			home := vg.Point{X: trX(m.xys[i].X), Y: trY(m.xys[i].Y)}
			c.StrokeLine2(draw.LineStyle{Color: m.styles[i].Color, Width: vg.Points(1)}, home.X, home.Y, pt.X, pt.Y)
		}
	}
	for i, pt := range at {
		c.DrawGlyph(m.styles[i], pt)
	}
}

// DataRange and GlyphBoxes make room for the markers as a Scatter does.
func (m *markers) DataRange() (xmin, xmax, ymin, ymax float64) { return plotter.XYRange(m.xys) }

func (m *markers) GlyphBoxes(p *plot.Plot) []plot.GlyphBox {
	bs := make([]plot.GlyphBox, len(m.xys))
	for i, xy := range m.xys {
		r := m.styles[i].Radius
		bs[i] = plot.GlyphBox{X: p.X.Norm(xy.X), Y: p.Y.Norm(xy.Y), Rectangle: vg.Rectangle{Min: vg.Point{X: -r, Y: -r}, Max: vg.Point{X: r, Y: r}}}
	}
	return bs
}

func glyph(c color.Color, s shape, hollow bool, radius float64) draw.GlyphStyle {
	return draw.GlyphStyle{Color: c, Radius: vg.Points(radius), Shape: marker{shape: s, hollow: hollow}}
}

func line(c color.Color, width float64, dashes ...float64) draw.LineStyle {
	ls := draw.LineStyle{Color: c, Width: vg.Points(width)}
	for _, d := range dashes {
		ls.Dashes = append(ls.Dashes, vg.Points(d))
	}
	return ls
}

// thumb is a legend entry's picture: a patch of colour, a line, a marker,
// or a combination.
type thumb struct {
	fill  color.Color
	hatch bool // fill is drawn as stripes over its tint
	line  *draw.LineStyle
	glyph *draw.GlyphStyle
}

func (t thumb) Thumbnail(c *draw.Canvas) {
	if t.fill != nil {
		r := c.Rectangle
		h := (r.Max.Y - r.Min.Y) * 0.8
		mid := (r.Min.Y + r.Max.Y) / 2
		box := vg.Rectangle{Min: vg.Point{X: r.Min.X, Y: mid - h/2}, Max: vg.Point{X: r.Max.X, Y: mid + h/2}}
		fillBox(c, box, t.fill, t.hatch)
	}
	if t.line != nil {
		y := c.Center().Y
		c.StrokeLine2(*t.line, c.Min.X, y, c.Max.X, y)
	}
	if t.glyph != nil {
		c.DrawGlyphNoClip(*t.glyph, c.Center())
	}
}

// fillBox fills r with col, or, hatched, with col's tint crossed by
// diagonal stripes of col.
func fillBox(c *draw.Canvas, r vg.Rectangle, col color.Color, hatched bool) {
	pts := []vg.Point{r.Min, {X: r.Max.X, Y: r.Min.Y}, r.Max, {X: r.Min.X, Y: r.Max.Y}}
	if !hatched {
		c.FillPolygon(col, pts)
		return
	}
	c.FillPolygon(tint(col), pts)
	ls := draw.LineStyle{Color: col, Width: vg.Points(1.6)}
	h := r.Max.Y - r.Min.Y
	for k := r.Min.X - h; k < r.Max.X; k += vg.Points(5) {
		// The stripe y − r.Min.Y = x − k, clipped to r.
		x0, x1 := max(r.Min.X, k), min(r.Max.X, k+h)
		if x1 > x0 {
			c.StrokeLine2(ls, x0, r.Min.Y+(x0-k), x1, r.Min.Y+(x1-k))
		}
	}
}

func lineThumb(ls draw.LineStyle, g *draw.GlyphStyle) thumb { return thumb{line: &ls, glyph: g} }

// newPlot returns a panel with readable fonts and a light grid.
func newPlot(title, xLabel, yLabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font = font.From(bold, vg.Points(13))
	p.Title.Padding = vg.Points(8)
	p.X.Label.Text, p.Y.Label.Text = xLabel, yLabel
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font = font.From(sans, vg.Points(12))
		a.Label.Padding = vg.Points(4)
		a.Tick.Label.Font = font.From(sans, vg.Points(11))
		a.Tick.Marker = niceTicks{}
	}
	g := plotter.NewGrid()
	g.Vertical.Color, g.Horizontal.Color = gridColor, gridColor
	p.Add(g)
	return p
}

// logAxis puts a on a log scale from the labelled tick (1, 2 or 5 times a
// power of ten) at or below lo/1.1 to the one at or above hi·1.1, so that
// the data lie between labelled ticks, and says so in its label: "latency
// (ms)" becomes "latency (ms, log scale)". lo and hi must be positive.
//
// narrow spaces the labels wider, for the x axis of a panel that shares
// the figure's width with others.
func logAxis(a *plot.Axis, lo, hi float64, narrow bool) {
	a.Scale = plot.LogScale{}
	a.Tick.Marker = logTicks{narrow: narrow}
	a.Min, a.Max = logRange(lo, hi, narrow)
	if t := a.Label.Text; strings.HasSuffix(t, ")") {
		a.Label.Text = strings.TrimSuffix(t, ")") + ", log scale)"
	} else if t != "" {
		a.Label.Text = t + " (log scale)"
	}
}

// logRange widens [lo/1.1, hi·1.1] to the ticks of logTicks around it: to
// a labelled one, or to a minor one far enough from the labelled ones for
// a label of its own (see logTicks), rather than waste most of a decade.
func logRange(lo, hi float64, narrow bool) (float64, float64) {
	down, up := lo/1.1, hi*1.1
	for range 4 { // a wider axis takes a wider gap: until it holds
		gap, only10 := logLabelGap(down, up, narrow)
		labelled, nearest := is125, next125
		if only10 {
			labelled, nearest = isPow10, nextPow10
		}
		u := nextLogTick(hi*1.1, 1)
		for !labelled(u) && u/nearest(u, -1) < gap {
			u = nextLogTick(u*1.001, 1)
		}
		d := nextLogTick(lo/1.1, -1)
		for !labelled(d) && nearest(d, 1)/d < gap {
			d = nextLogTick(d*0.999, -1)
		}
		if d == down && u == up {
			break
		}
		down, up = d, u
	}
	return down, up
}

// nextPow10 returns the first power of ten above v (dir 1) or below it
// (dir −1).
func nextPow10(v float64, dir int) float64 {
	if dir > 0 {
		return math.Pow(10, math.Floor(math.Log10(v)+1e-9)+1)
	}
	return math.Pow(10, math.Ceil(math.Log10(v)-1e-9)-1)
}

// logLabelGap returns the least ratio between two labels of a log axis
// over [lo, hi], so that they keep apart: a factor of 2, or a tenth of the
// axis's decades when it spans more (a seventh, narrow); in which case
// only the powers of ten (and the ends) are labelled.
func logLabelGap(lo, hi float64, narrow bool) (gap float64, only10 bool) {
	d := math.Log10(hi/lo) / 10
	if narrow {
		d = math.Log10(hi/lo) / 7
	}
	if d <= math.Log10(2) {
		return 2, false
	}
	return math.Pow(10, d), true
}

// nextLogTick returns the first tick of logTicks (m × 10^e, m = 1…9) at or
// above v (dir 1), or at or below it (dir −1).
func nextLogTick(v float64, dir int) float64 {
	e := math.Floor(math.Log10(v))
	base := math.Pow(10, e)
	m := v / base // in [1, 10)
	if dir > 0 {
		c := math.Ceil(m - 1e-9)
		if c > 9 {
			return 10 * base
		}
		return c * base
	}
	return math.Floor(m+1e-9) * base
}

// next125 returns the first labelled tick of logTicks (1, 2 or 5 times a
// power of ten) above v (dir 1) or below it (dir −1).
func next125(v float64, dir int) float64 {
	e := math.Floor(math.Log10(v))
	best := math.NaN()
	for k := e - 1; k <= e+1; k++ {
		for _, m := range []float64{1, 2, 5} {
			c := m * math.Pow(10, k)
			switch {
			case dir > 0 && c > v*(1+1e-9) && !(c >= best):
				best = c
			case dir < 0 && c < v*(1-1e-9) && !(c <= best):
				best = c
			}
		}
	}
	return best
}

// isPow10 reports whether v is a power of ten.
func isPow10(v float64) bool {
	e := math.Log10(v)
	return math.Abs(e-math.Round(e)) < 1e-9
}

// is125 reports whether v is 1, 2 or 5 times a power of ten.
func is125(v float64) bool {
	m := v / math.Pow(10, math.Floor(math.Log10(v)+1e-9))
	for _, x := range []float64{1, 2, 5, 10} {
		if math.Abs(m-x) < 1e-6 {
			return true
		}
	}
	return false
}

func isLog(a plot.Axis) bool {
	_, ok := a.Scale.(plot.LogScale)
	return ok
}

// needsLog reports whether values spread over more than a factor of 20, so
// that a linear axis would crush the small ones.
func needsLog(lo, hi float64) bool { return lo > 0 && hi/lo > 20 }

// logTicks ticks a log axis at 1 to 9 times each power of ten and labels
// the axis's ends, then 1, 5 and 2 times the powers of ten, each as long
// as it keeps logLabelGap from the labels before it: over many decades,
// the ends and the powers of ten alone.
type logTicks struct{ narrow bool }

func (lt logTicks) Ticks(lo, hi float64) []plot.Tick {
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*b }
	var ts []plot.Tick
	for e := math.Floor(math.Log10(lo)); math.Pow(10, e) <= hi*(1+1e-9); e++ {
		base := math.Pow(10, e)
		for m := 1; m <= 9; m++ {
			if v := float64(m) * base; (v >= lo || near(v, lo)) && (v <= hi || near(v, hi)) {
				ts = append(ts, plot.Tick{Value: v})
			}
		}
	}
	gap, only10 := logLabelGap(lo, hi, lt.narrow)
	var labelled []float64
	label := func(ok func(float64) bool) {
		for i, t := range ts {
			if t.Label != "" || !ok(t.Value) || slices.ContainsFunc(labelled, func(o float64) bool { return math.Abs(math.Log10(t.Value/o)) < math.Log10(gap)-1e-9 }) {
				continue
			}
			ts[i].Label = tickLabel(t.Value)
			labelled = append(labelled, t.Value)
		}
	}
	label(func(v float64) bool { return near(v, lo) || near(v, hi) })
	label(isPow10)
	if !only10 {
		label(is125)
	}
	return ts
}

// tickLabel writes a tick's value without float noise: 0.3, not
// 0.30000000000000004.
func tickLabel(v float64) string {
	v, _ = strconv.ParseFloat(strconv.FormatFloat(v, 'g', 12, 64), 64)
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// niceTicks labels a linear axis every 1, 2, 2.5 or 5 times a power of
// ten, five to ten labels over the range, with a minor tick between.
type niceTicks struct{}

// niceStep is niceTicks' distance between labels over [lo, hi].
func niceStep(lo, hi float64) float64 {
	raw := (hi - lo) / 7
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5} {
		if m*mag >= raw {
			return m * mag
		}
	}
	return mag * 10
}

func (niceTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) {
		return nil
	}
	step := niceStep(lo, hi)
	// Labels are multiples of step/4 at most (2.5 × a power of ten, halved
	// for minor ticks), so this many decimals shows them exactly.
	decimals := max(0, 2-int(math.Floor(math.Log10(step))))
	slack := step * 1e-9 // a range that niceRange ended on a label keeps it
	var ts []plot.Tick
	for i := math.Ceil((lo - slack) / step * 2); i/2*step <= hi+slack; i++ {
		v := i / 2 * step
		t := plot.Tick{Value: v}
		if int(i)%2 == 0 {
			t.Label = trimZeros(strconv.FormatFloat(math.Round(v/step*4)*step/4+0, 'f', decimals, 64)) // + 0: no "-0"
		}
		ts = append(ts, t)
	}
	return ts
}

// niceRange widens [lo, hi] to the nearest labelled ticks of niceTicks
// around it, so that the data on a linear axis never pass its top (or
// bottom) label. Callers leave room for markers and labels in hi: the
// range grows by one label's step at most.
func niceRange(lo, hi float64) (float64, float64) {
	if !(hi > lo) {
		return lo, hi
	}
	for range 8 { // a wider range can take a wider step: until it holds
		step := niceStep(lo, hi)
		nlo, nhi := math.Floor(lo/step+1e-9)*step, math.Ceil(hi/step-1e-9)*step
		if nlo == lo && nhi == hi {
			break
		}
		lo, hi = nlo, nhi
	}
	return lo, hi
}

// linearAxis puts a on a linear scale from 0 (or lo, when below 0) to
// hi·(1+room), widened to labelled ticks.
func linearAxis(a *plot.Axis, lo, hi, room float64) {
	lo = min(lo, 0)
	if !(hi > lo) {
		hi = lo + 1
	}
	a.Min, a.Max = niceRange(lo, hi+(hi-lo)*room)
}

// trimZeros drops a decimal number's trailing zeros: "0.60" → "0.6", "5.00" → "5".
func trimZeros(s string) string {
	if !strings.Contains(s, ".") {
		return s
	}
	return strings.TrimSuffix(strings.TrimRight(s, "0"), ".")
}

// batchAxis puts a on a log-2 scale with a tick at each batch size.
func batchAxis(a *plot.Axis, batches []int) {
	var ts plot.ConstantTicks
	for _, b := range batches {
		ts = append(ts, plot.Tick{Value: float64(b), Label: strconv.Itoa(b)})
	}
	a.Tick.Marker = ts
	lo, hi := float64(batches[0]), float64(batches[len(batches)-1])
	if lo == hi {
		a.Min, a.Max = lo/2, hi*2
	} else {
		a.Min, a.Max = lo/1.25, hi*1.25
	}
	a.Scale = plot.LogScale{}
}

// hline is a horizontal reference line across the whole panel.
func hline(y float64, ls draw.LineStyle) plot.Plotter {
	f := plotter.NewFunction(func(float64) float64 { return y })
	f.LineStyle = ls
	f.Samples = 2
	return f
}

// diagonal is the reference line y = x across the whole panel.
func diagonal(ls draw.LineStyle) plot.Plotter {
	f := plotter.NewFunction(func(x float64) float64 { return x })
	f.LineStyle = ls
	f.Samples = 2
	return f
}

// vline is a vertical reference line across the whole panel.
type vline struct {
	x     float64
	style draw.LineStyle
}

func (l vline) Plot(c draw.Canvas, p *plot.Plot) {
	trX, _ := p.Transforms(&c)
	x := trX(l.x)
	if x < c.Min.X || x > c.Max.X {
		return
	}
	c.StrokeLine2(l.style, x, c.Min.Y, x, c.Max.Y)
}

// lineLabel names a horizontal reference line at y: its text sits just
// above the line at the panel's right edge, on a white patch, so that the
// line's value reads without tick labels near it.
type lineLabel struct {
	y    float64
	text string
	col  color.Color
}

func (l lineLabel) Plot(c draw.Canvas, p *plot.Plot) {
	if sty, pt, ok := l.place(c, p); ok {
		textOnPatch(c, sty, pt, l.text)
	}
}

// place returns where l's text goes on c: at the right end of its line,
// above it (below where there is no room); false when the line is off c.
func (l lineLabel) place(c draw.Canvas, p *plot.Plot) (text.Style, vg.Point, bool) {
	_, trY := p.Transforms(&c)
	y := trY(l.y)
	sty := textStyle(sans, 9.5, l.col)
	if y < c.Min.Y || y > c.Max.Y {
		return sty, vg.Point{}, false
	}
	sty.XAlign, sty.YAlign = draw.XRight, draw.YBottom
	pt := vg.Point{X: c.Max.X - vg.Points(4), Y: y + vg.Points(2)}
	if pt.Y+sty.Height(l.text) > c.Max.Y { // no room above: below the line
		sty.YAlign = draw.YTop
		pt.Y = y - vg.Points(2)
	}
	return sty, pt, true
}

// sloLine draws the p99 threshold across p with its value written on it.
func sloLine(p *plot.Plot, ms float64) lineLabel {
	l := lineLabel{y: ms, text: "SLO p99 " + fmtMs(ms), col: sloColor}
	p.Add(hline(ms, line(sloColor, 1.5, 3, 3)), l)
	return l
}

// labels draws texts at data points, offset by dx, dy points, each on a
// white patch so that it stays readable over bars and lines. With avoid,
// a label that would overlap one drawn before it (or leave the panel)
// tries the other side of its point, then above and below, and is left
// out when all collide: list the labels most important first. With marks,
// the labels keep off those markers too, and label i names marker mark[i]
// (−1: none) where that one was moved aside. With avoid, they keep off
// the texts of keepOff too.
type labels struct {
	x, y    []float64
	texts   []string
	style   text.Style
	dx, dy  float64
	avoid   bool
	marks   *markers
	mark    []int
	keepOff []lineLabel
}

func newLabels(x, y []float64, texts []string, size, dx, dy float64, align draw.XAlignment) *labels {
	sty := textStyle(sans, size, noteColor)
	sty.XAlign = align
	return &labels{x: x, y: y, texts: texts, style: sty, dx: dx, dy: dy}
}

func (l *labels) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	var placed []vg.Rectangle
	var marked []vg.Point
	if l.marks != nil {
		marked, _ = l.marks.places(c, p)
		for i, pt := range marked {
			r := l.marks.styles[i].Radius
			placed = append(placed, vg.Rectangle{Min: vg.Point{X: pt.X - r, Y: pt.Y - r}, Max: vg.Point{X: pt.X + r, Y: pt.Y + r}})
		}
	}
	for _, ll := range l.keepOff {
		if sty, pt, ok := ll.place(c, p); ok {
			placed = append(placed, patchOf(sty, pt, ll.text))
		}
	}
	for i, t := range l.texts {
		at := vg.Point{X: trX(l.x[i]), Y: trY(l.y[i])}
		if i < len(l.mark) && l.mark[i] >= 0 {
			at = marked[l.mark[i]]
		}
		dx, dy := vg.Points(l.dx), vg.Points(l.dy)
		h := l.style.Rectangle(t).Max.Y - l.style.Rectangle(t).Min.Y
		type try struct {
			off   vg.Point
			align draw.XAlignment
		}
		tries := []try{{vg.Point{X: dx, Y: dy}, l.style.XAlign}}
		if l.avoid { // the other side, then above and below
			step := h + 3*labelPad // clear of a neighbour's patch
			tries = append(tries, try{vg.Point{X: -dx, Y: dy}, -1 - l.style.XAlign},
				try{vg.Point{X: dx, Y: dy + step}, l.style.XAlign}, try{vg.Point{X: dx, Y: dy - step}, l.style.XAlign})
		}
		for _, try := range tries {
			sty := l.style
			sty.XAlign = try.align
			pt := at.Add(try.off)
			box := patchOf(sty, pt, t)
			if l.avoid && (slices.ContainsFunc(placed, func(o vg.Rectangle) bool { return overlap(o, box) }) || !c.Contains(box.Min) || !c.Contains(box.Max)) {
				continue
			}
			placed = append(placed, box)
			textOnPatch(c, sty, pt, t)
			break
		}
	}
}

// labelPad is the white margin around a label's text.
var labelPad = vg.Points(1.5)

// patchOf returns the white patch under text t drawn at pt.
func patchOf(sty text.Style, pt vg.Point, t string) vg.Rectangle {
	r := sty.Rectangle(t)
	return vg.Rectangle{Min: vg.Point{X: pt.X + r.Min.X - labelPad, Y: pt.Y + r.Min.Y - labelPad},
		Max: vg.Point{X: pt.X + r.Max.X + labelPad, Y: pt.Y + r.Max.Y + labelPad}}
}

// textOnPatch draws t at pt on a white patch, so that it reads over bars
// and lines.
func textOnPatch(c draw.Canvas, sty text.Style, pt vg.Point, t string) {
	box := patchOf(sty, pt, t)
	c.FillPolygon(color.NRGBA{R: 255, G: 255, B: 255, A: 230}, []vg.Point{box.Min, {X: box.Max.X, Y: box.Min.Y}, box.Max, {X: box.Min.X, Y: box.Max.Y}})
	c.FillText(sty, pt, t)
}

func overlap(a, b vg.Rectangle) bool {
	return a.Min.X < b.Max.X && b.Min.X < a.Max.X && a.Min.Y < b.Max.Y && b.Min.Y < a.Max.Y
}

// legendEntry is one line of a figure's legend.
type legendEntry struct {
	label  string
	thumbs []plot.Thumbnailer
}

// figure is one PNG: an optional title, panels in a grid, the legend in a
// column to their right, and notes under them.
type figure struct {
	title    string
	panels   []*plot.Plot
	cols     int
	legend   []legendEntry
	notes    []string
	lastNote string // a note that goes after all the others
}

func (f *figure) add(label string, thumbs ...plot.Thumbnailer) {
	f.legend = append(f.legend, legendEntry{label: label, thumbs: thumbs})
}

func (f *figure) note(format string, args ...any) {
	f.notes = append(f.notes, fmt.Sprintf(format, args...))
}

// png draws the figure at width × height pixels. gonum/plot panics on some
// degenerate inputs; that becomes an error here, never a crash.
func (f *figure) png(width, height int) (_ []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("draw: %v", r)
		}
	}()
	w, h := vg.Length(width)*vg.Inch/dpi, vg.Length(height)*vg.Inch/dpi
	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(dpi), vgimg.UseBackgroundColor(color.White))
	dc := draw.New(img)
	pad := vg.Points(10)
	dc = draw.Crop(dc, pad, -pad, pad/2, -pad)

	if f.title != "" {
		sty := textStyle(bold, 15, color.Black)
		sty.XAlign, sty.YAlign = draw.XCenter, draw.YTop
		dc.FillText(sty, vg.Point{X: (dc.Min.X + dc.Max.X) / 2, Y: dc.Max.Y}, f.title)
		dc = draw.Crop(dc, 0, 0, 0, -(sty.Height(f.title) + vg.Points(8)))
	}
	notes := f.notes
	if f.lastNote != "" {
		notes = append(slices.Clip(notes), f.lastNote)
	}
	if len(notes) > 0 {
		sty := textStyle(sans, 10.5, noteColor)
		sty.YAlign = draw.YBottom
		var lines []string
		for _, n := range notes {
			lines = append(lines, wrap(sty, n, dc.Max.X-dc.Min.X)...)
		}
		lh := sty.FontExtents().Height * 1.15
		for i, l := range lines {
			dc.FillText(sty, vg.Point{X: dc.Min.X, Y: dc.Min.Y + vg.Length(len(lines)-1-i)*lh}, l)
		}
		dc = draw.Crop(dc, 0, 0, vg.Length(len(lines))*lh+vg.Points(6), 0)
	}
	if len(f.legend) > 0 {
		l := f.fitLegend(dc)
		lw := l.Rectangle(dc).Max.X - l.Rectangle(dc).Min.X + vg.Points(8)
		top := vg.Length(0)
		if len(f.panels) > 0 && f.panels[0].Title.Text != "" {
			top = f.panels[0].Title.TextStyle.Height(f.panels[0].Title.Text) + f.panels[0].Title.Padding
		}
		l.Draw(draw.Crop(dc, dc.Max.X-dc.Min.X-lw+vg.Points(8), 0, 0, -top))
		dc = draw.Crop(dc, 0, -(lw + vg.Points(8)), 0, 0)
	}
	cols := max(f.cols, 1)
	rows := (len(f.panels) + cols - 1) / cols
	// Aligned, the panels' plotting areas are the same size whatever
	// their tick labels, so that rows and columns line up.
	grid := make([][]*plot.Plot, rows)
	for r := range grid {
		grid[r] = make([]*plot.Plot, cols)
	}
	for i, p := range f.panels {
		grid[i/cols][i%cols] = p
	}
	canvases := plot.Align(grid, draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Points(18), PadY: vg.Points(14)}, dc)
	for i, p := range f.panels {
		p.Draw(canvases[i/cols][i%cols])
	}
	// Flat-coloured charts compress well even at the fastest level, which
	// takes a third of the time of the default.
	var buf bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.BestSpeed}).Encode(&buf, img.Image()); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// fitLegend returns the legend at the largest font, from 11 pt down to
// 8 pt, whose entries fit the height of c; below that, the entries that
// fit and a last one saying how many were left out.
func (f *figure) fitLegend(c draw.Canvas) plot.Legend {
	build := func(size float64, entries []legendEntry) plot.Legend {
		l := plot.NewLegend()
		l.TextStyle = textStyle(sans, size, color.Black)
		l.Top, l.Left = true, true
		l.ThumbnailWidth = vg.Points(30)
		l.Padding = vg.Points(size * 0.45)
		for _, e := range entries {
			l.Add(e.label, e.thumbs...)
		}
		return l
	}
	fits := func(l plot.Legend) bool {
		r := l.Rectangle(c)
		return r.Max.Y-r.Min.Y <= (c.Max.Y-c.Min.Y)*0.95
	}
	for _, size := range []float64{11, 10, 9, 8} {
		if l := build(size, f.legend); fits(l) {
			return l
		}
	}
	for n := len(f.legend) - 1; n > 0; n-- {
		entries := append(f.legend[:n:n], legendEntry{label: fmt.Sprintf("… %d more", len(f.legend)-n)})
		if l := build(8, entries); fits(l) {
			return l
		}
	}
	return build(8, nil)
}

// wrap breaks s into lines no wider than width.
func wrap(sty text.Style, s string, width vg.Length) []string {
	var lines []string
	cur := ""
	for _, w := range strings.Fields(s) {
		next := strings.TrimSpace(cur + " " + w)
		if cur != "" && sty.Width(next) > width {
			lines = append(lines, cur)
			next = w
		}
		cur = next
	}
	if cur != "" {
		lines = append(lines, cur)
	}
	return lines
}
