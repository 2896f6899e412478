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

// logAxis puts a on a log scale over [lo, hi] with ticks at 1, 2 and 5
// times powers of ten, and says so in its label: "latency (ms)" becomes
// "latency (ms, log scale)". lo and hi must be positive.
func logAxis(a *plot.Axis, lo, hi float64) {
	a.Scale = plot.LogScale{}
	a.Tick.Marker = logTicks{}
	a.Min, a.Max = lo/1.2, hi*1.2
	if t := a.Label.Text; strings.HasSuffix(t, ")") {
		a.Label.Text = strings.TrimSuffix(t, ")") + ", log scale)"
	} else if t != "" {
		a.Label.Text = t + " (log scale)"
	}
}

func isLog(a plot.Axis) bool {
	_, ok := a.Scale.(plot.LogScale)
	return ok
}

// needsLog reports whether values spread over more than a factor of 20, so
// that a linear axis would crush the small ones.
func needsLog(lo, hi float64) bool { return lo > 0 && hi/lo > 20 }

type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for e := math.Floor(math.Log10(lo)); math.Pow(10, e) <= hi; e++ {
		base := math.Pow(10, e)
		for m := 1; m <= 9; m++ {
			v := float64(m) * base
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || m == 2 || m == 5 {
				t.Label = tickLabel(v)
			}
			ts = append(ts, t)
		}
	}
	return ts
}

func tickLabel(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// niceTicks labels a linear axis every 1, 2, 2.5 or 5 times a power of
// ten, five to ten labels over the range, with a minor tick between.
type niceTicks struct{}

func (niceTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) {
		return nil
	}
	raw := (hi - lo) / 7
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag * 10
	for _, m := range []float64{1, 2, 2.5, 5} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	// Labels are multiples of step/4 at most (2.5 × a power of ten, halved
	// for minor ticks), so this many decimals shows them exactly.
	decimals := max(0, 2-int(math.Floor(math.Log10(step))))
	var ts []plot.Tick
	for i := math.Ceil(lo / step * 2); i/2*step <= hi; i++ {
		v := i / 2 * step
		t := plot.Tick{Value: v}
		if int(i)%2 == 0 {
			t.Label = trimZeros(strconv.FormatFloat(math.Round(v/step*4)*step/4+0, 'f', decimals, 64)) // + 0: no "-0"
		}
		ts = append(ts, t)
	}
	return ts
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
	_, trY := p.Transforms(&c)
	y := trY(l.y)
	if y < c.Min.Y || y > c.Max.Y {
		return
	}
	sty := textStyle(sans, 9.5, l.col)
	sty.XAlign, sty.YAlign = draw.XRight, draw.YBottom
	pt := vg.Point{X: c.Max.X - vg.Points(4), Y: y + vg.Points(2)}
	if pt.Y+sty.Height(l.text) > c.Max.Y { // no room above: below the line
		sty.YAlign = draw.YTop
		pt.Y = y - vg.Points(2)
	}
	textOnPatch(c, sty, pt, l.text)
}

// sloLine draws the p99 threshold across p with its value written on it.
func sloLine(p *plot.Plot, ms float64) {
	p.Add(hline(ms, line(sloColor, 1.5, 3, 3)), lineLabel{y: ms, text: "SLO p99 " + fmtMs(ms), col: sloColor})
}

// labels draws texts at data points, offset by dx, dy points, each on a
// white patch so that it stays readable over bars and lines. With avoid,
// a label that would overlap one drawn before it (or leave the panel)
// tries the other side of its point, then above and below, and is left
// out when all collide: list the labels most important first.
type labels struct {
	x, y   []float64
	texts  []string
	style  text.Style
	dx, dy float64
	avoid  bool
}

func newLabels(x, y []float64, texts []string, size, dx, dy float64, align draw.XAlignment) *labels {
	sty := textStyle(sans, size, noteColor)
	sty.XAlign = align
	return &labels{x: x, y: y, texts: texts, style: sty, dx: dx, dy: dy}
}

func (l *labels) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	var placed []vg.Rectangle
	for i, t := range l.texts {
		at := vg.Point{X: trX(l.x[i]), Y: trY(l.y[i])}
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
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Points(18), PadY: vg.Points(14)}
	for i, p := range f.panels {
		p.Draw(tiles.At(dc, i%cols, i/cols))
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
