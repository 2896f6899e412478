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
	"gonum.org/v1/plot/vg/draw"

	"github.com/inferhq/infer/loadgen/record"
)

// This file compares points that differ in one server setting only: the
// batching policy (policy.png and the summary's "Policies" table) and the
// length buckets (the "Bucketing" table).

// contrast is a configuration whose points run under several values of one
// setting: for each value, its points by load level.
type contrast struct {
	base   config   // the configuration, with that setting cleared
	values []string // the setting's values, ordered
	loads  []record.Load
	at     map[string]map[record.Load]*record.Record
}

// get returns the point of value val at load l, or nil.
func (c *contrast) get(val string, l record.Load) *record.Record { return c.at[val][l] }

// A dimension is the setting a contrast varies: how to read and clear it
// in a configuration, and how to order its values.
type dimension struct {
	name  string // "policy" or "buckets", as variantParts skips it
	field func(*config) *string
	order func(a, b string) int
}

var (
	policyDim = dimension{"policy", func(c *config) *string { return &c.Policy }, comparePolicies}
	bucketDim = dimension{"buckets", func(c *config) *string { return &c.Buckets }, func(a, b string) int {
		return cmp.Or(cmp.Compare(len(a), len(b)), cmp.Compare(a, b)) // none first
	}}
)

// policyOrder is the order policies are shown in; others follow by name.
var policyOrder = []string{"fixed", "immediate", "adaptive"}

func comparePolicies(a, b string) int {
	rank := func(p string) int {
		if i := slices.Index(policyOrder, p); i >= 0 {
			return i
		}
		return len(policyOrder)
	}
	return cmp.Or(cmp.Compare(rank(a), rank(b)), cmp.Compare(a, b))
}

// contrasts returns the configurations of the served points that run under
// two values of d or more, by worker count then sweep order.
func (v *view) contrasts(d dimension) []*contrast {
	var out []*contrast
	byBase := map[config]*contrast{}
	for _, r := range v.served {
		base := configOf(r.Point)
		val := *d.field(&base)
		*d.field(&base) = ""
		c := byBase[base]
		if c == nil {
			c = &contrast{base: base, at: map[string]map[record.Load]*record.Record{}}
			byBase[base] = c
			out = append(out, c)
		}
		if c.at[val] == nil {
			c.at[val] = map[record.Load]*record.Record{}
			c.values = append(c.values, val)
		}
		if cur := c.at[val][r.Point.Load]; cur == nil || better(r, cur) {
			c.at[val][r.Point.Load] = r
		}
		if !slices.Contains(c.loads, r.Point.Load) {
			c.loads = append(c.loads, r.Point.Load)
		}
	}
	out = slices.DeleteFunc(out, func(c *contrast) bool { return len(c.values) < 2 })
	for _, c := range out {
		slices.SortFunc(c.values, d.order)
		slices.SortFunc(c.loads, compareLoad)
	}
	slices.SortStableFunc(out, func(a, b *contrast) int { return cmp.Compare(a.base.Workers, b.base.Workers) })
	return out
}

// contrastLabel names a contrast's configuration by what tells it apart:
// "b=64 w=4", with the other dimensions that vary in the run.
func (v *view) contrastLabel(c *contrast, d dimension) string {
	var parts []string
	if c.base.Batch > 0 {
		parts = append(parts, fmt.Sprintf("b=%d", c.base.Batch))
	}
	if c.base.Workers > 0 {
		parts = append(parts, fmt.Sprintf("w=%d", c.base.Workers))
	}
	b := c.base
	parts = append(parts, v.variantParts(variant{Endpoint: b.Endpoint, Latency: b.Latency, Policy: b.Policy, Buckets: b.Buckets, Items: b.Items}, d.name)...)
	if len(parts) == 0 {
		return "every configuration"
	}
	return strings.Join(parts, " ")
}

// offered is a load level's offered load: the open loop's target rate, or
// the closed loop's clients.
func offered(l record.Load) float64 {
	if l.Mode == "closed" {
		return float64(l.Concurrency)
	}
	return l.Rate
}

// loadAxis puts a tick at each load level's offered load, from 0 (or
// around the one level there is), on a log scale for client counts that
// spread widely.
func loadAxis(a *plot.Axis, loads []record.Load) {
	var ts plot.ConstantTicks
	for _, l := range loads {
		ts = append(ts, plot.Tick{Value: offered(l), Label: num(offered(l))})
	}
	a.Tick.Marker = ts
	lo, hi := offered(loads[0]), offered(loads[len(loads)-1])
	if len(loads) == 1 {
		a.Min, a.Max = hi*0.5, hi*1.5
		return
	}
	// Client counts grow by factors (1, 4, 16, 64, 256): on a linear axis
	// the first levels crowd into one tick. (Open-loop rates stay linear:
	// their throughput panel draws the offered-load diagonal from 0.)
	if loads[0].Mode == "closed" && needsLog(lo, hi) {
		logAxis(a, lo, hi, true)
		a.Tick.Marker = ts
		return
	}
	a.Min, a.Max = 0, max(hi*1.05, 1)
}

func offeredAxis(l record.Load) string {
	if l.Mode == "closed" {
		return "offered load (closed-loop clients)"
	}
	return "offered load (requests/s)"
}

// The adaptive policy's bars: at every load level its p99 within
// adaptiveP99Bar of the better of the other policies, and at the highest
// level its throughput at least adaptiveThroughputBar of fixed's.
const (
	adaptiveP99Bar        = 1.1
	adaptiveThroughputBar = 0.97
)

var policyColors = map[string]color.RGBA{
	"fixed":     {78, 121, 167, 255}, // blue
	"immediate": {242, 142, 43, 255}, // orange
	"adaptive":  {89, 161, 79, 255},  // green
}

func policyColor(p string) color.Color {
	if c, ok := policyColors[p]; ok {
		return c
	}
	return naiveColor
}

const maxPolicyRows = 3 // configurations drawn in policy.png at most

// policyChart: for each configuration run under several policies, p99
// (solid) and p50 (dashed) latency against offered load, a line per
// policy, and beside it throughput against offered load.
func (v *view) policyChart() (*figure, string) {
	cs := v.contrasts(policyDim)
	if len(cs) == 0 {
		return nil, "no points differ only by policy"
	}
	shown := cs[:min(len(cs), maxPolicyRows)]
	f := &figure{title: "Batching policies: latency and throughput vs offered load", cols: 2}
	flagged, open := false, false
	var policies []string
	for _, c := range shown {
		label := v.contrastLabel(c, policyDim)
		lat := newPlot(label+": latency", offeredAxis(c.loads[0]), "latency (ms)")
		thr := newPlot(label+": throughput", offeredAxis(c.loads[0]), "throughput (successful requests/s)")
		lo, hi, xmax, ymax := math.Inf(1), 0.0, 0.0, 0.0
		for _, pol := range c.values {
			if !slices.Contains(policies, pol) {
				policies = append(policies, pol)
			}
			col := policyColor(pol)
			var recs []*record.Record
			for _, l := range c.loads {
				if r := c.get(pol, l); r != nil && succeeded(r) {
					recs = append(recs, r)
				}
				xmax = max(xmax, offered(l))
			}
			for _, q := range []struct {
				get    func(*record.Record) float64
				dashes []float64
				radius float64
			}{
				{func(r *record.Record) float64 { return r.Latency.P99.Ms() }, nil, 4.5},
				{func(r *record.Record) float64 { return r.Latency.P50.Ms() }, []float64{7, 4}, 3},
			} {
				var xys plotter.XYs
				var hollow []bool
				for _, r := range recs {
					if y := q.get(r); y > 0 { // a log axis has no zero
						xys = append(xys, plotter.XY{X: offered(r.Point.Load), Y: y})
						hollow = append(hollow, !trusted(r))
						lo, hi = min(lo, y), max(hi, y)
					}
				}
				lat.Add(&plotter.Line{XYs: xys, LineStyle: line(col, 2, q.dashes...)},
					&plotter.Scatter{XYs: xys, GlyphStyleFunc: func(i int) draw.GlyphStyle { return glyph(col, circle, hollow[i], q.radius) }})
			}
			xys := make(plotter.XYs, len(recs))
			for i, r := range recs {
				xys[i] = plotter.XY{X: offered(r.Point.Load), Y: r.Throughput}
				ymax = max(ymax, r.Throughput)
				flagged = flagged || !trusted(r)
			}
			thr.Add(&plotter.Line{XYs: xys, LineStyle: line(col, 2)},
				&plotter.Scatter{XYs: xys, GlyphStyleFunc: func(i int) draw.GlyphStyle { return glyph(col, circle, !trusted(recs[i]), 4.5) }})
		}
		if c.loads[0].Mode != "closed" { // open loop: throughput can reach the offered load at most
			open = true
			thr.Add(diagonal(line(naiveColor, 1.2, 2, 3)))
			ymax = max(ymax, xmax)
		}
		for _, p := range []*plot.Plot{lat, thr} {
			loadAxis(&p.X, c.loads)
		}
		linearAxis(&thr.Y, 0, ymax, 0.08)
		switch {
		case hi == 0:
			lat.Y.Min, lat.Y.Max = 0, 1
		case hi/lo > 4: // log: the policies' ratios show as equal gaps at every load
			logAxis(&lat.Y, lo, hi, false)
		default:
			linearAxis(&lat.Y, 0, hi, 0.1)
		}
		f.panels = append(f.panels, lat, thr)
	}
	slices.SortFunc(policies, comparePolicies)
	for _, pol := range policies {
		g := glyph(policyColor(pol), circle, false, 4.5)
		f.add(pol, lineThumb(line(policyColor(pol), 2), &g))
	}
	f.add("p99", lineThumb(line(color.Black, 2), nil))
	f.add("p50", lineThumb(line(color.Black, 2, 7, 4), nil))
	if open {
		f.add("offered load", lineThumb(line(naiveColor, 1.2, 2, 3), nil))
		f.note("Where a policy's throughput leaves the dotted diagonal, the server no longer keeps up with the offered load.")
	}
	if flagged {
		addFlaggedLegend(f)
	}
	if len(cs) > len(shown) {
		f.note("%d of the run's %d configurations run under several policies are drawn; summary.md has every one.", len(shown), len(cs))
	}
	return f, ""
}

// writePolicies writes the "Policies" section: for each configuration run
// under several policies, every policy's p50, p99 and throughput at each
// load level, and how adaptive compares.
func (v *view) writePolicies(b *strings.Builder) {
	cs := v.contrasts(policyDim)
	if len(cs) == 0 {
		return
	}
	b.WriteString("## Policies\n\n")
	fmt.Fprintf(b, "Points that differ only by batching policy. Each cell: p50 / p99 latency · throughput (req/s); * marks a flagged measurement. Where adaptive ran, its p99 is divided by the better p99 of the other policies, and its throughput by fixed's: the adaptive policy is to stay within %s× on p99 at every load level and reach %s× of fixed's throughput at the highest.\n\n",
		num(adaptiveP99Bar), num(adaptiveThroughputBar))
	for _, c := range cs {
		fmt.Fprintf(b, "### %s\n\n", v.contrastLabel(c, policyDim))
		adaptive := slices.Contains(c.values, "adaptive") && len(c.values) > 1
		fixed := slices.Contains(c.values, "fixed")
		b.WriteString("| load |")
		for _, pol := range c.values {
			b.WriteString(" " + pol + " |")
		}
		align := strings.Repeat("--:|", len(c.values))
		if adaptive {
			b.WriteString(" adaptive p99 ÷ best other |")
			align += "--:|"
		}
		if adaptive && fixed {
			b.WriteString(" adaptive req/s ÷ fixed |")
			align += "--:|"
		}
		b.WriteString("\n|---|" + align + "\n")
		worst, atTop := 0.0, math.NaN()
		var worstLoad record.Load
		within, judged := 0, 0
		for _, l := range c.loads {
			fmt.Fprintf(b, "| %s |", loadLabel(l))
			for _, pol := range c.values {
				b.WriteString(" " + cellText(c.get(pol, l)) + " |")
			}
			if adaptive {
				ratio := adaptiveP99(c, l)
				b.WriteString(" " + ratioText(ratio) + " |")
				if !math.IsNaN(ratio) {
					judged++
					if ratio <= adaptiveP99Bar {
						within++
					}
					if ratio > worst {
						worst, worstLoad = ratio, l
					}
				}
			}
			if adaptive && fixed {
				r := throughputRatio(c.get("adaptive", l), c.get("fixed", l))
				b.WriteString(" " + ratioText(r) + " |")
				if l == c.loads[len(c.loads)-1] {
					atTop = r
				}
			}
			b.WriteString("\n")
		}
		b.WriteString("\n")
		var verdict []string
		if adaptive && judged > 0 {
			verdict = append(verdict, fmt.Sprintf("Adaptive's p99 is within %s× of the better other policy's at %d of %s (%s; worst %s at %s).",
				num(adaptiveP99Bar), within, plural(judged, "load level"), meets(within == judged), ratioText(worst), loadLabel(worstLoad)))
		}
		if adaptive && fixed && !math.IsNaN(atTop) {
			verdict = append(verdict, fmt.Sprintf("At the highest load level (%s) its throughput is %s fixed's (%s: ≥ %s×).",
				loadLabel(c.loads[len(c.loads)-1]), ratioText(atTop), meets(atTop >= adaptiveThroughputBar), num(adaptiveThroughputBar)))
		}
		if len(verdict) > 0 {
			b.WriteString(strings.Join(verdict, " ") + "\n\n")
		}
	}
}

// adaptiveP99 is adaptive's p99 at l divided by the lowest p99 of the other
// policies there; NaN when a side has no latency.
func adaptiveP99(c *contrast, l record.Load) float64 {
	a := c.get("adaptive", l)
	if a == nil || !succeeded(a) || a.Latency.P99 <= 0 {
		return math.NaN()
	}
	best := math.Inf(1)
	for _, pol := range c.values {
		if r := c.get(pol, l); pol != "adaptive" && r != nil && succeeded(r) && r.Latency.P99 > 0 {
			best = min(best, r.Latency.P99.Ms())
		}
	}
	if math.IsInf(best, 1) {
		return math.NaN()
	}
	return a.Latency.P99.Ms() / best
}

// throughputRatio is a's throughput divided by b's; NaN when unknown.
func throughputRatio(a, b *record.Record) float64 {
	if a == nil || b == nil || b.Throughput <= 0 {
		return math.NaN()
	}
	return a.Throughput / b.Throughput
}

func ratioText(r float64) string {
	if math.IsNaN(r) {
		return "–"
	}
	return fmt.Sprintf("%.2f×", r)
}

func meets(ok bool) string {
	if ok {
		return "meets the bar"
	}
	return "**misses the bar**"
}

// cellText is a point's p50 / p99 · throughput, for the contrast tables.
func cellText(r *record.Record) string {
	switch {
	case r == nil:
		return "–"
	case !succeeded(r):
		return "failed" + flagMark(r)
	}
	return fmt.Sprintf("%s / %s · %s%s", fmtDur(r.Latency.P50), fmtDur(r.Latency.P99), record.Short(r.Throughput), flagMark(r))
}

func flagMark(r *record.Record) string {
	if trusted(r) {
		return ""
	}
	return " *"
}

// writeBucketing writes the "Bucketing" section: for each configuration
// run with several bucket settings, throughput, p99 and the server's
// padding at each load level, and the best throughput of each under the
// same p99 bound.
func (v *view) writeBucketing(b *strings.Builder) {
	cs := v.contrasts(bucketDim)
	if len(cs) == 0 {
		return
	}
	b.WriteString("## Bucketing\n\n")
	b.WriteString("Points that differ only by length buckets (`--buckets`). Each cell: throughput (req/s) · p99 · the server's mean padding (batch × longest item ÷ real tokens, from Server-Timing; 1× = none); * marks a flagged measurement.\n\n")
	for _, c := range cs {
		fmt.Fprintf(b, "### %s\n\n", v.contrastLabel(c, bucketDim))
		ref, others := c.values[0], c.values[1:]
		b.WriteString("| load |")
		for _, val := range c.values {
			b.WriteString(" " + bucketsLabel(val) + " |")
		}
		for _, val := range others {
			fmt.Fprintf(b, " req/s %s ÷ %s |", bucketsLabel(val), bucketsLabel(ref))
		}
		b.WriteString("\n|---|" + strings.Repeat("--:|", len(c.values)+len(others)) + "\n")
		for _, l := range c.loads {
			fmt.Fprintf(b, "| %s |", loadLabel(l))
			for _, val := range c.values {
				r := c.get(val, l)
				switch {
				case r == nil:
					b.WriteString(" – |")
				case !succeeded(r):
					b.WriteString(" failed" + flagMark(r) + " |")
				default:
					fmt.Fprintf(b, " %s · %s · %s%s |", record.Short(r.Throughput), fmtDur(r.Latency.P99), padText(r.Server.MeanPadding), flagMark(r))
				}
			}
			for _, val := range others {
				b.WriteString(" " + ratioText(throughputRatio(c.get(val, l), c.get(ref, l))) + " |")
			}
			b.WriteString("\n")
		}
		b.WriteString("\n")
		if bound, best := sameP99(c); bound > 0 {
			var parts []string
			for _, val := range c.values {
				parts = append(parts, fmt.Sprintf("%s req/s with %s", num(best[val]), bucketsLabel(val)))
			}
			fmt.Fprintf(b, "Under the same p99 bound (≤ %s, the lowest every setting reaches), the best throughput is %s", fmtMs(bound), strings.Join(parts, ", "))
			if best[ref] > 0 {
				var rs []string
				for _, val := range others {
					rs = append(rs, ratioText(best[val]/best[ref]))
				}
				fmt.Fprintf(b, " (%s)", strings.Join(rs, ", "))
			}
			b.WriteString(".\n\n")
		}
	}
}

// sameP99 finds the lowest p99 bound that every value of c meets at some
// trusted point, and each value's best throughput under it; 0 when a value
// has no trusted point.
func sameP99(c *contrast) (bound float64, best map[string]float64) {
	for _, val := range c.values {
		lo := math.Inf(1)
		for _, r := range c.at[val] {
			if trusted(r) && succeeded(r) && r.Latency.P99 > 0 {
				lo = min(lo, r.Latency.P99.Ms())
			}
		}
		if math.IsInf(lo, 1) {
			return 0, nil
		}
		bound = max(bound, lo)
	}
	best = map[string]float64{}
	for _, val := range c.values {
		for _, r := range c.at[val] {
			if trusted(r) && succeeded(r) && r.Latency.P99 > 0 && r.Latency.P99.Ms() <= bound {
				best[val] = max(best[val], r.Throughput)
			}
		}
	}
	return bound, best
}
