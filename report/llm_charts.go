package report

import (
	"cmp"
	"fmt"
	"image/color"
	"math"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/inferhq/infer/loadgen/record"
)

// The charts of an LLM run:
//
//	llm-throughput.png  output tokens/s and goodput vs request rate, a line per configuration
//	llm-latency.png     TTFT and TPOT p50 and p99 vs request rate
//	ttft-cdf.png        the TTFT distribution of each configuration, a panel per load level
//	                    (one configuration: one panel, a curve per load level)
//	max-seqs.png        output tokens/s vs --max-seqs, a line per endpoint and load level
//	timeline.png        a sample of requests: queue, time to first token, decode
//	turn-ttft.png       for multi-turn sessions: TTFT p50 and p99 by turn (prefix.go)
//	route.png           through a router to replicas: the policies side by side (route.go)
var llmChartFiles = []string{"llm-throughput.png", "llm-latency.png", "ttft-cdf.png", "max-seqs.png", "timeline.png", "turn-ttft.png"}

func (v *view) llmCharts() []chart {
	cs := []chart{
		{"llm-throughput.png", "Output tokens/s and goodput vs request rate", v.llmThroughputChart},
		{"llm-latency.png", "TTFT and TPOT vs request rate", v.llmLatencyChart},
		{"ttft-cdf.png", "TTFT distribution per configuration", v.ttftCDFChart},
		{"max-seqs.png", "Output tokens/s vs max-seqs", v.maxSeqsChart},
		{"timeline.png", "Timeline of a sample of requests", v.timelineChart},
	}
	if v.hasTurns() {
		cs = append(cs, chart{"turn-ttft.png", "TTFT by turn of multi-turn sessions", v.turnChart})
	}
	if v.isRouted() {
		cs = append(cs, chart{routeFile, "Routing policies side by side", v.routeChart})
	}
	return cs
}

// rateX is a point's request rate on the x axis: the offered rate of an
// open loop (its level; a ramp's mean), the completed requests per second
// of a closed one.
func rateX(r *record.Record) float64 {
	switch l := r.Point.Load; {
	case l.Mode == "open" && l.Pacer == "ramp":
		return (l.RampFrom + l.Rate) / 2
	case l.Mode == "open":
		return l.Rate
	}
	return r.LLM.RequestsPerS
}

func (v *view) rateLabel() string {
	for _, r := range v.recs {
		if r.Point.Load.Mode != "open" {
			return "request rate (completed requests/s)"
		}
	}
	return "offered request rate (requests/s)"
}

// llmLines draws, on p, one line per series of y against the request
// rate, and adds to marks their markers of shape mark, hollow for flagged
// points (a zero y is drawn only with zero: on latencies it means none
// was measured); it returns the y range drawn and whether a point was
// flagged. The caller adds marks to p over every line.
func (v *view) llmLines(p *plot.Plot, marks *markers, order []llmSeries, groups map[llmSeries][]*record.Record, y func(*record.Record) float64, dashes []float64, mark shape, zero bool) (lo, hi float64, flagged bool) {
	lo, hi = math.Inf(1), 0
	for _, s := range order {
		var xys plotter.XYs
		var hollow []bool
		for _, r := range groups[s] {
			if r.LLM == nil || !succeeded(r) {
				continue
			}
			yv := y(r)
			if !(yv > 0) && !(zero && yv == 0) {
				continue
			}
			xys = append(xys, plotter.XY{X: rateX(r), Y: yv})
			hollow = append(hollow, !trusted(r))
			lo, hi = min(lo, yv), max(hi, yv)
			flagged = flagged || !trusted(r)
		}
		if len(xys) == 0 {
			continue
		}
		slices.SortStableFunc(xys, func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
		col := v.llmColor(s)
		p.Add(&plotter.Line{XYs: xys, LineStyle: line(col, 2, dashes...)})
		for i, xy := range xys {
			marks.add(xy.X, xy.Y, glyph(col, mark, hollow[i], 4))
		}
	}
	return lo, hi, flagged
}

func (v *view) addLLMLegend(f *figure, order []llmSeries) {
	for _, s := range order {
		col := v.llmColor(s)
		g := glyph(col, circle, false, 4)
		f.add(v.llmLabel(s), lineThumb(line(col, 2), &g))
	}
}

// rateAxis fits the x axis to the request rates, on a log scale when they
// spread widely.
func rateAxis(p *plot.Plot, recs []*record.Record) {
	lo, hi := math.Inf(1), 0.0
	for _, r := range recs {
		if r.LLM != nil && succeeded(r) {
			x := rateX(r)
			if x > 0 {
				lo, hi = min(lo, x), max(hi, x)
			}
		}
	}
	if hi <= 0 {
		return
	}
	if needsLog(lo, hi) {
		logAxis(&p.X, lo, hi, true)
		return
	}
	linearAxis(&p.X, 0, hi, 0.08)
}

func (v *view) llmThroughputChart() (*figure, string) {
	order, groups := v.llmGroups()
	if len(order) == 0 {
		return nil, "no LLM point"
	}
	x := v.rateLabel()
	tp := newPlot("Output tokens/s", x, "output tokens/s")
	gp := newPlot("Goodput", x, "good requests/s")
	f := &figure{panels: []*plot.Plot{tp, gp}, cols: 2}
	tmarks, gmarks := &markers{}, &markers{}
	_, thi, flagged := v.llmLines(tp, tmarks, order, groups, func(r *record.Record) float64 { return r.LLM.OutputTokensPerS }, nil, circle, true)
	// The simulated model's ideal, once per slot count (it depends on the
	// slots and the lengths served, not on the scheduler): that of the
	// first configuration with those slots.
	ideal := false
	drawnSlots := map[int]bool{}
	var lx, ly []float64
	var lt []string
	var lm []int
	for _, s := range order {
		var xys plotter.XYs
		slots := s.MaxSeqs
		if s.Endpoint == "naive" {
			slots = 1
		}
		if drawnSlots[slots] {
			continue
		}
		for _, r := range groups[s] {
			if r.LLM != nil && r.LLM.Ideal > 0 && succeeded(r) {
				xys = append(xys, plotter.XY{X: rateX(r), Y: r.LLM.Ideal})
				thi = max(thi, r.LLM.Ideal)
			}
		}
		if len(xys) > 0 {
			drawnSlots[slots] = true
			slices.SortStableFunc(xys, func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
			tp.Add(&plotter.Line{XYs: xys, LineStyle: line(noteColor, 1.2, 2, 3)})
			for _, xy := range xys {
				tmarks.add(xy.X, xy.Y, glyph(noteColor, cross, true, 3.5))
			}
			last := xys[len(xys)-1]
			lx, ly, lt, lm = append(lx, last.X), append(ly, last.Y), append(lt, "ideal, "+plural(slots, "slot")), append(lm, len(tmarks.xys)-1)
			ideal = true
		}
	}
	tp.Add(tmarks)
	if ideal {
		l := newLabels(lx, ly, lt, 9.5, -6, 6, draw.XRight)
		l.avoid, l.marks, l.mark = true, tmarks, lm
		tp.Add(l)
	}
	_, ghi, gflagged := v.llmLines(gp, gmarks, order, groups, func(r *record.Record) float64 { return r.LLM.GoodputPerS }, nil, circle, true)
	if thi == 0 {
		return nil, "no LLM point completed a request"
	}
	// Every completed request, for reference on the goodput panel: the
	// diagonal in closed loop, whose x is the completed rate.
	closed := v.rateLabel() != "offered request rate (requests/s)"
	if closed {
		gp.Add(diagonal(line(color.Black, 1.2, 2, 3)))
	} else {
		v.llmLines(gp, gmarks, order, groups, func(r *record.Record) float64 { return r.LLM.RequestsPerS }, []float64{2, 3}, triangle, true)
	}
	gp.Add(gmarks)
	for _, r := range v.recs {
		if r.LLM != nil {
			ghi = max(ghi, r.LLM.RequestsPerS)
		}
	}
	linearAxis(&tp.Y, 0, thi, 0.1)
	linearAxis(&gp.Y, 0, max(ghi, 0.1), 0.1)
	rateAxis(tp, v.recs)
	rateAxis(gp, v.recs)
	v.addLLMLegend(f, order)
	if ideal {
		g := glyph(noteColor, cross, true, 3.5)
		f.add("sim-lm's ideal (×, left)", lineThumb(line(noteColor, 1.2, 2, 3), &g))
	}
	if closed {
		f.add("all completed (y = x, right)", lineThumb(line(color.Black, 1.2, 2, 3), nil))
	} else {
		g := glyph(color.Black, triangle, false, 4)
		f.add("all completed (▲, right)", lineThumb(line(color.Black, 2, 2, 3), &g))
	}
	slo := v.run.Manifest.SLO
	if slo.TTFTP99 == 0 && slo.TPOTP99 == 0 && slo.E2ELP99 == 0 {
		f.note("The scenario sets no per-request latency bound, so goodput counts every completed request.")
	} else {
		f.note("Goodput counts the requests that met every latency bound of the SLO (%s), per second; the dotted line is every completed request.", sloText(slo))
	}
	if flagged || gflagged {
		addFlaggedLegend(f)
	}
	return f, ""
}

func (v *view) llmLatencyChart() (*figure, string) {
	order, groups := v.llmGroups()
	if len(order) == 0 {
		return nil, "no LLM point"
	}
	f := &figure{title: "TTFT and TPOT (p50 solid ●, p99 dashed ▲)", cols: 2}
	slo := v.run.Manifest.SLO
	flagged, sloDrawn := false, false
	for _, m := range []struct {
		title, name string
		p50         func(*record.Record) float64
		p99         func(*record.Record) float64
		slo         record.Duration
	}{
		{"Time to first token", "TTFT", func(r *record.Record) float64 { return r.LLM.TTFT.P50 }, func(r *record.Record) float64 { return r.LLM.TTFT.P99 }, slo.TTFTP99},
		{"Time per output token", "TPOT", func(r *record.Record) float64 { return r.LLM.TPOT.P50 }, func(r *record.Record) float64 { return r.LLM.TPOT.P99 }, slo.TPOTP99},
	} {
		p := newPlot(m.title, v.rateLabel(), "latency (ms)")
		marks := &markers{}
		lo1, hi1, f1 := v.llmLines(p, marks, order, groups, m.p50, nil, circle, false)
		lo2, hi2, f2 := v.llmLines(p, marks, order, groups, m.p99, []float64{7, 4}, triangle, false)
		p.Add(marks)
		flagged = flagged || f1 || f2
		lo, hi := min(lo1, lo2), max(hi1, hi2)
		if hi == 0 {
			continue
		}
		if ms := m.slo.Ms(); ms > 0 {
			lo, hi = min(lo, ms), max(hi, ms)
			p.Add(hline(ms, line(sloColor, 1.5, 3, 3)), lineLabel{y: ms, text: "SLO " + m.name + " p99 " + fmtMs(ms), col: sloColor})
			sloDrawn = true
		}
		if needsLog(lo, hi) {
			logAxis(&p.Y, lo, hi, false)
		} else {
			linearAxis(&p.Y, 0, hi, 0.1)
		}
		rateAxis(p, v.recs)
		f.panels = append(f.panels, p)
	}
	if len(f.panels) == 0 {
		return nil, "no LLM point completed a request"
	}
	v.addLLMLegend(f, order)
	g50, g99 := glyph(color.Black, circle, false, 4), glyph(color.Black, triangle, false, 4)
	f.add("p50", lineThumb(line(color.Black, 2), &g50))
	f.add("p99", lineThumb(line(color.Black, 2, 7, 4), &g99))
	if sloDrawn {
		f.add("SLO bound", lineThumb(line(sloColor, 1.5, 3, 3), nil))
	}
	if flagged {
		addFlaggedLegend(f)
	}
	return f, ""
}

// cdfQuantiles are where a CDF is read from a histogram.
var cdfQuantiles = func() []float64 {
	var qs []float64
	for q := 0.005; q < 0.995; q += 0.005 {
		qs = append(qs, q)
	}
	return append(qs, 0.995, 0.999, 1)
}()

// ttftCDFChart draws each point's TTFT distribution: a panel per load
// level with a curve per configuration, or, for a run of one
// configuration, one panel with a curve per load level.
func (v *view) ttftCDFChart() (*figure, string) {
	order, groups := v.llmGroups()
	kept := func(r *record.Record) bool {
		return r.LLM != nil && r.LLM.Histograms != nil && r.LLM.Histograms.TTFT != nil && r.LLM.Histograms.TTFT.Count() > 0
	}
	type curve struct {
		r     *record.Record
		col   color.Color
		label string
	}
	var panels [][]curve
	var titles []string
	f := &figure{title: "TTFT distribution (CDF)"}
	var loads []record.Load
	if len(order) == 1 {
		loads = panelLoads(v.loads, len(workerColors))
		var cs []curve
		for i, l := range loads {
			for _, r := range atLoad(groups[order[0]], l) {
				if kept(r) {
					cs = append(cs, curve{r, workerColors[i%len(workerColors)], "at " + loadLabel(l)})
				}
			}
		}
		if len(cs) > 0 {
			panels, titles = append(panels, cs), append(titles, v.llmLabel(order[0]))
		}
	} else {
		loads = panelLoads(v.loads, maxPanels)
		for _, l := range loads {
			var cs []curve
			for _, s := range order {
				for _, r := range atLoad(groups[s], l) {
					if kept(r) {
						cs = append(cs, curve{r, v.llmColor(s), v.llmLabel(s)})
					}
				}
			}
			if len(cs) > 0 {
				panels, titles = append(panels, cs), append(titles, "at "+loadLabel(l))
			}
		}
	}
	if len(panels) == 0 {
		return nil, "no LLM point kept its TTFT histogram"
	}
	f.cols = min(len(panels), 2)
	lo, hi := math.Inf(1), 0.0
	dashed := false
	var legend []curve
	for i, cs := range panels {
		p := newPlot(titles[i], "time to first token (ms)", "share of requests")
		for _, c := range cs {
			h := c.r.LLM.Histograms.TTFT
			var xys plotter.XYs
			for _, q := range cdfQuantiles {
				ms := h.Quantile(q).Seconds() * 1e3
				if ms > 0 {
					xys = append(xys, plotter.XY{X: ms, Y: q})
					lo, hi = min(lo, ms), max(hi, ms)
				}
			}
			ls := line(c.col, 2)
			if !trusted(c.r) {
				ls.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
				dashed = true
			}
			p.Add(&plotter.Line{XYs: xys, LineStyle: ls})
			if !slices.ContainsFunc(legend, func(o curve) bool { return o.label == c.label }) {
				legend = append(legend, c)
			}
		}
		p.Y.Min, p.Y.Max = 0, 1
		f.panels = append(f.panels, p)
	}
	// The axis fits the curves; the SLO widens it only when it lies near
	// them, else a note says where it is.
	slo := v.run.Manifest.SLO.TTFTP99.Ms()
	sloDrawn := slo > 0 && slo <= hi*1.5 && slo >= lo/1.5
	if sloDrawn {
		lo, hi = min(lo, slo), max(hi, slo)
	}
	p99Line := line(color.RGBA{170, 170, 170, 255}, 1.2, 4, 3)
	for _, p := range f.panels {
		if needsLog(lo, hi) {
			logAxis(&p.X, lo, hi, len(f.panels) > 1)
		} else {
			linearAxis(&p.X, 0, hi, 0.05)
		}
		p.Add(hline(0.99, p99Line))
		if sloDrawn {
			p.Add(vline{x: slo, style: line(sloColor, 1.5, 3, 3)})
		}
	}
	for _, c := range legend {
		f.add(c.label, lineThumb(line(c.col, 2), nil))
	}
	f.add("0.99: the p99", lineThumb(p99Line, nil))
	switch {
	case sloDrawn:
		f.add("SLO TTFT p99 "+fmtMs(slo), lineThumb(line(sloColor, 1.5, 3, 3), nil))
	case slo > hi:
		f.note("The SLO's TTFT p99 bound, %s, lies right of every curve, beyond the axis.", fmtMs(slo))
	case slo > 0:
		f.note("The SLO's TTFT p99 bound, %s, lies left of every curve, below the axis.", fmtMs(slo))
	}
	f.note("Each curve is one point's TTFT over its completed requests: the share of requests (y) whose first token came within x.")
	if dashed {
		f.note("Dashed curves are flagged measurements.")
	}
	if len(loads) < len(v.loads) {
		f.note("%d of the run's %d load levels are drawn; summary.md lists every point.", len(loads), len(v.loads))
	}
	return f, ""
}

func (v *view) maxSeqsChart() (*figure, string) {
	var seqs []int
	for _, r := range v.recs {
		if r.LLM != nil && !isNaive(r) && r.Point.MaxSeqs > 0 && !slices.Contains(seqs, r.Point.MaxSeqs) {
			seqs = append(seqs, r.Point.MaxSeqs)
		}
	}
	if len(seqs) < 2 {
		return nil, "the sweep runs one max-seqs (sweep.max_seqs lists one value or none)"
	}
	slices.Sort(seqs)
	p := newPlot("Output tokens/s vs max-seqs", "max sequences per step (--max-seqs, log scale)", "output tokens/s")
	f := &figure{panels: []*plot.Plot{p}}
	type line_ struct {
		endpoint string
		load     record.Load
		mbt      int
		lat      record.Duration
	}
	lines := map[line_][]*record.Record{}
	var order []line_
	for _, r := range v.recs {
		if r.LLM == nil || isNaive(r) || r.Point.MaxSeqs == 0 || !succeeded(r) {
			continue
		}
		k := line_{r.Point.Endpoint, r.Point.Load, r.Point.MaxBatchedTokens, r.Point.Latency}
		if _, ok := lines[k]; !ok {
			order = append(order, k)
		}
		lines[k] = append(lines[k], r)
	}
	slices.SortStableFunc(order, func(a, b line_) int {
		return cmp.Or(cmp.Compare(endpointRank(a.endpoint), endpointRank(b.endpoint)), compareLoad(a.load, b.load))
	})
	hi, flagged := 0.0, false
	dashes := [][]float64{nil, {7, 4}, {2, 3}, {10, 3, 2, 3}}
	loadIdx := func(l record.Load) int { return slices.Index(v.loads, l) }
	for _, k := range order {
		recs := lines[k]
		slices.SortFunc(recs, func(a, b *record.Record) int { return cmp.Compare(a.Point.MaxSeqs, b.Point.MaxSeqs) })
		var xys plotter.XYs
		var hollow []bool
		for _, r := range recs {
			xys = append(xys, plotter.XY{X: float64(r.Point.MaxSeqs), Y: r.LLM.OutputTokensPerS})
			hollow = append(hollow, !trusted(r))
			hi = max(hi, r.LLM.OutputTokensPerS)
			flagged = flagged || !trusted(r)
		}
		col := endpointColor(k.endpoint, 0)
		p.Add(&plotter.Line{XYs: xys, LineStyle: line(col, 2, dashes[loadIdx(k.load)%len(dashes)]...)},
			&plotter.Scatter{XYs: xys, GlyphStyleFunc: func(i int) draw.GlyphStyle { return glyph(col, circle, hollow[i], 4) }})
		g := glyph(col, circle, false, 4)
		f.add(fmt.Sprintf("%s at %s", k.endpoint, loadLabel(k.load)), lineThumb(line(col, 2, dashes[loadIdx(k.load)%len(dashes)]...), &g))
	}
	// The naive endpoint has one slot: its best tokens/s for reference.
	if nb := v.bestNaive(); nb != nil && nb.LLM != nil && nb.LLM.OutputTokensPerS > 0 {
		ls := line(naiveColor, 2, 8, 5)
		p.Add(hline(nb.LLM.OutputTokensPerS, ls))
		f.add(fmt.Sprintf("naive: %s tokens/s", num(nb.LLM.OutputTokensPerS)), lineThumb(ls, nil))
		hi = max(hi, nb.LLM.OutputTokensPerS)
	}
	if hi == 0 {
		return nil, "no point with a max-seqs completed a request"
	}
	batchAxis(&p.X, seqs)
	linearAxis(&p.Y, 0, hi, 0.1)
	if flagged {
		addFlaggedLegend(f)
	}
	return f, ""
}

// timelineSpans is how many sampled requests a timeline panel shows.
const timelineSpans = 48

// timelineChart draws, for each configuration at one load level, a sample
// of consecutive requests as bars on a time axis: the wait for a stream
// slot in the client (intended → actual send), the wait for the first
// token (send → first token), then decoding (first → last token). Static
// batching shows as blocks of requests whose first tokens come together
// and whose next block starts only when the block's longest answer ends:
// the shorter answers' slots sit idle until then.
func (v *view) timelineChart() (*figure, string) {
	order, groups := v.llmGroups()
	// The load level to draw: the highest one at which the most batching
	// configurations kept up (trusted, nothing failed or cut off at the
	// drain), where the schedulers' ways show rather than an overload's
	// backlog; the naive endpoint is drawn there whatever its state.
	clean := map[record.Load]int{}
	sampled := map[record.Load]bool{}
	for _, s := range order {
		for _, r := range groups[s] {
			if r.LLM == nil || len(r.LLM.Timeline) == 0 {
				continue
			}
			sampled[r.Point.Load] = true
			if !isNaive(r) && trusted(r) && r.LLM.Failed == 0 && r.LLM.Unfinished == 0 {
				clean[r.Point.Load]++
			}
		}
	}
	var load record.Load
	best := -1
	for _, l := range v.loads {
		if sampled[l] && clean[l] >= best {
			load, best = l, clean[l]
		}
	}
	if best < 0 {
		return nil, "no LLM point sampled its requests"
	}
	var recs []*record.Record
	var series []llmSeries
	for _, s := range order {
		for _, r := range groups[s] {
			if r.Point.Load == load && r.LLM != nil && len(r.LLM.Timeline) > 0 && len(recs) < maxPanels {
				recs, series = append(recs, r), append(series, s)
			}
		}
	}
	f := &figure{title: "A sample of requests at " + loadLabel(load), cols: min(len(recs), 2)}
	xhi := 0.0
	var bars []*spanBars
	for i, r := range recs {
		spans := timelineSlice(r.LLM.Timeline, timelineSpans)
		p := newPlot(v.llmLabel(series[i]), "time from the window's start (s)", "request (by send time)")
		sb := &spanBars{spans: spans, col: v.llmColor(series[i])}
		p.Add(sb)
		bars = append(bars, sb)
		for _, sp := range spans {
			xhi = max(xhi, sp.LastToken.D().Seconds(), sp.Sent.D().Seconds(), sp.End.D().Seconds())
		}
		p.Y.Min, p.Y.Max = -0.8, float64(len(spans))-0.2
		p.Y.Tick.Marker = plot.ConstantTicks{}
		f.panels = append(f.panels, p)
	}
	x0 := math.Inf(1)
	for _, r := range recs {
		if sp := timelineSlice(r.LLM.Timeline, timelineSpans); len(sp) > 0 {
			x0 = min(x0, sp[0].Intended.D().Seconds())
		}
	}
	for i, p := range f.panels {
		p.X.Min, p.X.Max = niceRange(max(x0-0.05*(xhi-x0), 0), xhi+0.02*(xhi-x0))
		bars[i].scale(p.X.Max - p.X.Min)
	}
	// The legend names what the panels draw, each part once.
	drawn := map[spanKind]bool{}
	for _, b := range bars {
		for _, pc := range b.pieces() {
			drawn[pc.kind] = true
		}
	}
	if drawn[queued] {
		f.add("client queue (intended → sent)", spanThumb{col: queueColor, h: spanHeight[queued]})
	}
	if drawn[waiting] {
		f.add("waiting for the first token (thin)", spanThumb{col: waitColor, h: spanHeight[waiting]})
	}
	for i, b := range bars {
		if slices.ContainsFunc(b.pieces(), func(pc spanPiece) bool { return pc.kind == decoding }) &&
			!slices.ContainsFunc(bars[:i], func(o *spanBars) bool { return o.col == b.col }) {
			f.add("decoding: "+v.llmLabel(series[i]), spanThumb{col: b.col, h: spanHeight[decoding]})
		}
	}
	if drawn[failed] {
		f.add("failed, or cut off at the drain", spanThumb{col: color.Black, h: spanHeight[failed]})
	}
	f.note("Each row is one of %d consecutive requests of the point's random sample (by intended send time), at the same load for every configuration. Static batching shows as blocks whose first tokens come together: the next block starts only when the longest answer of the last one ends, and the slots of the shorter ones sit idle in between (the white after their bars).", timelineSpans)
	return f, ""
}

// timelineSlice returns up to n consecutive spans from the middle of the
// sample, where the load is steady.
func timelineSlice(spans []record.Span, n int) []record.Span {
	if len(spans) <= n {
		return spans
	}
	start := (len(spans) - n) / 2
	return spans[start : start+n]
}

// spanBars draws spans as horizontal bars, one row each from the bottom.
type spanBars struct {
	spans []record.Span
	col   color.Color // decoding's
	// mark is the width of the mark at a failed request's end, least the
	// narrowest part drawn (narrower ones would not show), in seconds.
	mark, least float64
}

// scale sets the widths of b's marks for an axis span seconds wide.
func (b *spanBars) scale(span float64) { b.mark, b.least = 0.004*span, 0.0015*span }

// spanKind is a part of a request's bar.
type spanKind int

const (
	queued   spanKind = iota // intended → sent: waiting in the client for a stream slot
	waiting                  // sent → first token
	decoding                 // first → last token
	failed                   // a failed request's end, or its part after the last token
)

var (
	queueColor = color.RGBA{225, 87, 89, 255}
	waitColor  = color.RGBA{200, 200, 200, 255}
	// spanHeight is each part's thickness, in rows: waiting thin, so that
	// it reads apart from a grey (naive) decoding bar.
	spanHeight = map[spanKind]float64{queued: 0.3, waiting: 0.3, decoding: 0.7, failed: 0.8}
)

// spanPiece is one bar drawn for a span.
type spanPiece struct {
	kind   spanKind
	row    int
	x0, x1 float64
}

// pieces returns the bars to draw, in seconds: those wide enough to show.
func (b *spanBars) pieces() []spanPiece {
	var out []spanPiece
	add := func(k spanKind, row int, x0, x1 float64) {
		if x1-x0 >= b.least && x1 > x0 {
			out = append(out, spanPiece{k, row, x0, x1})
		}
	}
	mark := max(b.mark, b.least, 1e-9)
	for i, sp := range b.spans {
		in, sent := sp.Intended.D().Seconds(), sp.Sent.D().Seconds()
		add(queued, i, in, sent)
		if sp.FirstToken == 0 { // no token: failed, or cut off waiting
			end := max(sp.End.D().Seconds(), sent)
			add(waiting, i, sent, end)
			add(failed, i, end, end+mark)
			continue
		}
		first, last := sp.FirstToken.D().Seconds(), sp.LastToken.D().Seconds()
		add(waiting, i, sent, first)
		k := decoding
		if !sp.OK {
			k = failed
		}
		add(k, i, first, max(last, first+max(0.001, b.least))) // a token shows, however quick
		if end := sp.End.D().Seconds(); !sp.OK && end > last { // broke off after its last token
			add(failed, i, last, end)
		}
	}
	return out
}

func (b *spanBars) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	for _, pc := range b.pieces() {
		col := map[spanKind]color.Color{queued: queueColor, waiting: waitColor, decoding: b.col, failed: color.Black}[pc.kind]
		y := trY(float64(pc.row))
		half := (trY(1) - trY(0)) * vg.Length(spanHeight[pc.kind]) / 2
		r := vg.Rectangle{Min: vg.Point{X: max(trX(pc.x0), c.Min.X), Y: y - half}, Max: vg.Point{X: min(trX(pc.x1), c.Max.X), Y: y + half}}
		if r.Max.X > r.Min.X {
			fillBox(&c, r, col, false)
		}
	}
}

// spanThumb is a legend's picture of a bar of thickness h rows.
type spanThumb struct {
	col color.Color
	h   float64
}

func (t spanThumb) Thumbnail(c *draw.Canvas) {
	r := c.Rectangle
	half := (r.Max.Y - r.Min.Y) * vg.Length(t.h) / 2
	mid := (r.Min.Y + r.Max.Y) / 2
	fillBox(c, vg.Rectangle{Min: vg.Point{X: r.Min.X, Y: mid - half}, Max: vg.Point{X: r.Max.X, Y: mid + half}}, t.col, false)
}
