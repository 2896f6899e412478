package report

// The report of a streaming LLM run (records with record.LLM): its
// series, its summary.md sections, and its charts (llm_charts.go).

import (
	"cmp"
	"fmt"
	"image/color"
	"slices"
	"strings"

	"github.com/inferhq/infer/loadgen/record"
)

// isLLM reports whether the run's points are streaming LLM points.
func (v *view) isLLM() bool {
	return slices.ContainsFunc(v.recs, func(r *record.Record) bool { return r.LLM != nil })
}

// llmSeries is an LLM configuration without its load: one line on the
// charts drawn against the request rate.
type llmSeries struct {
	Model        string // the server's, when the sweep sets it
	Endpoint     string
	MaxSeqs, MBT int
	Latency      record.Duration
	Policy       string
	Cache        string // the prefix cache: "on", "off", "" when the sweep left it
	Route        string // the router's policy in front of replicas
}

func llmSeriesOf(p record.Point) llmSeries {
	return llmSeries{Model: p.Model, Endpoint: p.Endpoint, MaxSeqs: p.MaxSeqs, MBT: p.MaxBatchedTokens, Latency: p.Latency, Policy: p.Policy,
		Cache: cacheOf(p), Route: p.RoutePolicy}
}

// llmGroups groups the LLM points by series, in the order: continuous,
// static, naive, other endpoints; then max-seqs.
func (v *view) llmGroups() ([]llmSeries, map[llmSeries][]*record.Record) {
	order, groups := groupBy(v.recs, func(r *record.Record) (llmSeries, bool) { return llmSeriesOf(r.Point), r.LLM != nil })
	slices.SortStableFunc(order, func(a, b llmSeries) int {
		return cmp.Or(cmp.Compare(endpointRank(a.Endpoint), endpointRank(b.Endpoint)), cmp.Compare(a.Endpoint, b.Endpoint),
			cmp.Compare(a.MaxSeqs, b.MaxSeqs), cmp.Compare(a.MBT, b.MBT), cmp.Compare(a.Latency, b.Latency), cmp.Compare(b.Cache, a.Cache))
	})
	for _, recs := range groups {
		slices.SortFunc(recs, func(a, b *record.Record) int { return compareLoad(a.Point.Load, b.Point.Load) })
	}
	return order, groups
}

func endpointRank(e string) int {
	switch e {
	case "continuous":
		return 0
	case "static":
		return 1
	case "naive":
		return 2
	}
	return 3
}

// llmLabel names a series by what tells it apart in the run: its
// endpoint (or policy) and the settings that vary.
func (v *view) llmLabel(s llmSeries) string {
	name := s.Endpoint
	if s.Policy != "" && s.Policy != s.Endpoint && !strings.HasPrefix(s.Endpoint, "/") {
		name += " (" + s.Policy + ")"
	} else if s.Policy != "" && strings.HasPrefix(s.Endpoint, "/") {
		name += " " + s.Policy
	}
	order, _ := v.llmGroups()
	vary := func(f func(llmSeries) string) bool {
		vals := map[string]bool{}
		for _, o := range order {
			if o.Endpoint != "naive" {
				vals[f(o)] = true
			}
		}
		return len(vals) > 1
	}
	if v.vary.model {
		name = s.Model + " " + name
	}
	if s.Endpoint == "naive" {
		return name
	}
	if s.Route != "" {
		name += " route " + s.Route
	}
	if vary(func(o llmSeries) string { return fmt.Sprint(o.MaxSeqs) }) && s.MaxSeqs > 0 {
		name += fmt.Sprintf(" seqs=%d", s.MaxSeqs)
	}
	if vary(func(o llmSeries) string { return fmt.Sprint(o.MBT) }) && s.MBT > 0 {
		name += fmt.Sprintf(" mbt=%d", s.MBT)
	}
	if vary(func(o llmSeries) string { return o.Latency.D().String() }) {
		name += " max-lat " + s.Latency.D().String()
	}
	if vary(func(o llmSeries) string { return o.Cache }) && s.Cache != "" {
		name += " cache " + s.Cache
	}
	return name
}

// endpointColor is an LLM endpoint's colour on every chart: continuous
// blue, static orange, naive grey, other paths from the palette.
func endpointColor(e string, i int) color.Color {
	switch e {
	case "continuous":
		return batchedColor
	case "static":
		return workerColors[0]
	case "naive":
		return naiveColor
	}
	return workerColors[1+i%(len(workerColors)-1)]
}

// llmColor is series s's colour: its endpoint's, and for several
// max-seqs of one endpoint a shade per value.
func (v *view) llmColor(s llmSeries) color.Color {
	order, _ := v.llmGroups()
	var same []llmSeries
	others := 0
	for _, o := range order {
		if o.Endpoint == s.Endpoint {
			same = append(same, o)
		}
		if endpointRank(o.Endpoint) == 3 && o.Endpoint < s.Endpoint {
			others++
		}
	}
	base := endpointColor(s.Endpoint, others)
	i := slices.IndexFunc(same, func(o llmSeries) bool { return o == s })
	if len(same) < 2 || i <= 0 {
		return base
	}
	// Darker shades for the later ones.
	r, g, b, _ := base.RGBA()
	f := 1 - 0.45*float64(i)/float64(len(same)-1)
	return color.RGBA{uint8(float64(r>>8) * f), uint8(float64(g>>8) * f), uint8(float64(b>>8) * f), 255}
}

// llmSummary renders summary.md for an LLM run.
func (v *view) llmSummary(res *Result, title string) string {
	var b strings.Builder
	b.WriteString(title)
	if c := res.Comparison; c != nil {
		fmt.Fprintf(&b, "**Against baseline `%s`: %s** (%s).\n\n", c.Baseline, strings.ToUpper(c.Verdict.String()), c.counts())
	}
	v.writeFacts(&b)
	v.writeWarnings(&b)
	v.writeLLMBest(&b)
	v.writeCapacity(&b)
	v.writeModels(&b)
	v.routeSummary(&b)
	v.writeEndpoints(&b)
	v.writeIdeal(&b)
	v.writeServerSide(&b)
	v.writePrefix(&b)
	v.writeTurns(&b)
	writeCharts(&b, res.Charts)
	v.writeLLMPoints(&b)
	if res.Comparison != nil {
		v.writeComparison(&b, res.Comparison)
	}
	return b.String()
}

// llmConfig names an LLM point's configuration in full: "continuous
// (policy continuous), max-seqs 32, max-batched-tokens 2048".
func (v *view) llmConfig(r *record.Record) string {
	p := r.Point
	s := p.Endpoint
	if p.Policy != "" && p.Policy != p.Endpoint {
		s += " (policy " + p.Policy + ")"
	}
	if isNaive(r) {
		return s
	}
	if p.MaxSeqs > 0 {
		s += fmt.Sprintf(", max-seqs %d", p.MaxSeqs)
	}
	if p.MaxBatchedTokens > 0 {
		s += fmt.Sprintf(", max-batched-tokens %d", p.MaxBatchedTokens)
	}
	if p.Latency > 0 && (p.Endpoint == "static" || p.Policy == "static") {
		s += ", max-latency " + p.Latency.D().String()
	}
	if p.RoutePolicy != "" {
		s += ", route " + p.RoutePolicy
	}
	return s
}

// llmFigures renders a point's main figures: "1830 tokens/s, 13.9 req/s,
// goodput 13.9/s, TTFT p50 41 ms p99 120 ms, TPOT p99 10.3 ms, errors 0 %".
func llmFigures(r *record.Record) string {
	l := r.LLM
	return fmt.Sprintf("%s output tokens/s, %s req/s, goodput %s/s, TTFT p50 %s p99 %s, TPOT p50 %s p99 %s, errors %s",
		record.Short(l.OutputTokensPerS), num(l.RequestsPerS), num(l.GoodputPerS), msOrDash(l.TTFT.P50), msOrDash(l.TTFT.P99),
		msOrDash(l.TPOT.P50), msOrDash(l.TPOT.P99), pctAbs(r.ErrorRate()))
}

func msOrDash(ms float64) string {
	if ms <= 0 {
		return "–"
	}
	return fmtMs(ms)
}

func (v *view) writeLLMBest(b *strings.Builder) {
	slo := v.run.Manifest.SLO
	ok, more := v.writeBestIntro(b, bestIntro{
		noSLO:   "The scenario sets no SLO, so every trusted point qualifies and the most output tokens/s wins; goodput counts every completed request.",
		withSLO: "SLO: %s. A request is good when it meets each latency bound; goodput is good requests per second.",
		none:    "No point qualifies: none has a trusted measurement with a completed request.",
		nearer: func(r, than *record.Record) bool {
			return r.LLM != nil && (than == nil || r.LLM.GoodputPerS > than.LLM.GoodputPerS)
		},
		closest: func(closest *record.Record) string {
			return fmt.Sprintf(" The most goodput was at %s: %s; it missed %s.", v.pointLabel(closest), llmFigures(closest),
				strings.Join(slo.LLM().Misses(closest.LLM), ", "))
		},
	})
	if len(ok) == 0 {
		return
	}
	best := ok[0]
	fmt.Fprintf(b, "**%s** at %s: %s.\n\n", v.llmConfig(best), loadLabel(best.Point.Load), llmFigures(best))
	// Against each other endpoint's best.
	_, groups := v.llmGroups()
	bestOf := map[string]*record.Record{}
	for s, recs := range groups {
		for _, r := range recs {
			if trusted(r) && succeeded(r) && (bestOf[s.Endpoint] == nil || better(r, bestOf[s.Endpoint])) {
				bestOf[s.Endpoint] = r
			}
		}
	}
	for _, e := range slices.SortedFunc(func(yield func(string) bool) {
		for e := range bestOf {
			if !yield(e) {
				return
			}
		}
	}, func(a, b string) int { return cmp.Or(cmp.Compare(endpointRank(a), endpointRank(b)), cmp.Compare(a, b)) }) {
		o := bestOf[e]
		if e == best.Point.Endpoint || tput(o) <= 0 {
			continue
		}
		more = append(more, fmt.Sprintf("That is %.1f× %s's most output tokens/s (%s, at %s).", tput(best)/tput(o), e, record.Short(tput(o)), loadLabel(o.Point.Load)))
	}
	if len(more) > 0 {
		b.WriteString(strings.Join(more, " ") + "\n\n")
	}
}

// writeEndpoints compares the endpoints (schedulers) at each load level
// they share: the question an LLM sweep asks, such as continuous against
// static batching on the same load.
func (v *view) writeEndpoints(b *strings.Builder) {
	order, groups := v.llmGroups()
	if len(order) < 2 {
		return
	}
	b.WriteString("## Endpoints side by side\n\n")
	b.WriteString("Each configuration at each load level: output tokens/s, goodput, p99 TTFT and p99 TPOT; × is the ratio to the first configuration at the same load (tokens/s: higher is better; TTFT: lower is better). Flagged measurements are marked *.\n\n")
	b.WriteString("| load | configuration | tokens/s | × | goodput/s | TTFT p99 | × | TPOT p99 |\n|---|---|--:|--:|--:|--:|--:|--:|\n")
	for _, l := range v.loads {
		var ref *record.Record
		for _, s := range order {
			for _, r := range groups[s] {
				if r.Point.Load != l || r.LLM == nil {
					continue
				}
				if ref == nil {
					ref = r
				}
				tr, ttft := "–", "–"
				if tput(ref) > 0 {
					tr = fmt.Sprintf("%.2f", tput(r)/tput(ref))
				}
				if ref.LLM.TTFT.P99 > 0 && r.LLM.TTFT.P99 > 0 {
					ttft = fmt.Sprintf("%.2f", r.LLM.TTFT.P99/ref.LLM.TTFT.P99)
				}
				mark := ""
				if !trusted(r) {
					mark = " *"
				}
				fmt.Fprintf(b, "| %s | %s%s | %s | %s | %s | %s | %s | %s |\n", loadLabel(l), v.llmLabel(s), mark,
					record.Short(r.LLM.OutputTokensPerS), tr, num(r.LLM.GoodputPerS), msOrDash(r.LLM.TTFT.P99), ttft, msOrDash(r.LLM.TPOT.P99))
			}
		}
	}
	b.WriteString("\n")
}

// writeIdeal sets the measured tokens/s of a simulated model's points
// next to the model's steady-state ideal at their slots, from the mean
// prompt and output tokens they were served.
func (v *view) writeIdeal(b *strings.Builder) {
	recs := keep(v.recs, func(r *record.Record) bool { return r.LLM != nil && r.LLM.Ideal > 0 })
	if len(recs) == 0 {
		return
	}
	b.WriteString("## Against the simulated model's ideal\n\n")
	params := ""
	if s := recs[0].LLM.Server; s != nil {
		params = " (" + s.Params + ")"
	}
	fmt.Fprintf(b, "The ideal is sim-lm's steady state at B slots%s: Lo / (Lo·(step/B + per_seq) + per_prefill_token·Lp) tokens/s, for the mean output (Lo) and prompt (Lp) tokens of the point's completed requests (Lp without the tokens found in a prefix cache, which cost no prefill); B is --max-seqs (1 for naive); behind a router, the ideal is each replica's times the replicas. A saturated continuous batcher sits near it; static batching falls below on mixed lengths; an open loop below saturation is bound by its offered load instead.\n\n", params)
	b.WriteString("| point | B | Lo | Lp | ideal tokens/s | measured | measured / ideal |\n|---|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range recs {
		l := r.LLM
		slots := r.Point.MaxSeqs
		if isNaive(r) {
			slots = 1
		}
		fmt.Fprintf(b, "| %s | %d | %.1f | %.1f | %s | %s | %.2f |\n", v.pointLabel(r), slots,
			float64(l.OutputTokens)/float64(l.Completed), l.ComputedPrompt(),
			record.Short(l.Ideal), record.Short(l.OutputTokensPerS), l.OutputTokensPerS/l.Ideal)
	}
	b.WriteString("\n")
}

// writeServerSide sets the client's TTFT next to the server's own, and
// the server's gauges, when the server told them.
func (v *view) writeServerSide(b *strings.Builder) {
	recs := keep(v.recs, func(r *record.Record) bool { return r.LLM != nil && (r.LLM.Server != nil || r.LLM.Timing != nil) })
	if len(recs) == 0 {
		return
	}
	b.WriteString("## Client against server\n\n")
	b.WriteString("TTFT as the client measured it (send → first content chunk) against the server's own: per request from its Server-Timing header (the same requests: their difference is the network, HTTP and parsing), and from its /metrics histogram over the measured window (requests that finished in it, whenever sent; quantiles interpolated in buckets a factor of 2 wide). Then the server's running and waiting sequences and KV use, sampled through the window (mean / max), its preemptions and its tokens/s.\n\n")
	b.WriteString("| point | client TTFT mean | Server-Timing TTFT mean | queue | /metrics TTFT mean · p50 · p99 | running | waiting | KV | preempted | server tokens/s |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range recs {
		l := r.LLM
		timing, queue := "–", "–"
		if t := l.Timing; t != nil {
			timing, queue = fmtMs(t.TTFTMean), fmtMs(t.QueueMean)
		}
		metrics, running, waiting, kv, pre, toks := "–", "–", "–", "–", "–", "–"
		if s := l.Server; s != nil {
			metrics = fmt.Sprintf("%s · %s · %s", msOrDash(s.TTFTMean), msOrDash(s.TTFTP50), msOrDash(s.TTFTP99))
			running = fmt.Sprintf("%.1f / %.0f", s.Running.Mean, s.Running.Max)
			waiting = fmt.Sprintf("%.1f / %.0f", s.Waiting.Mean, s.Waiting.Max)
			kv = fmt.Sprintf("%.0f %% / %.0f %%", 100*s.KV.Mean, 100*s.KV.Max)
			pre, toks = num(s.Preemptions), num(s.OutputTokensPerS)
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", v.pointLabel(r), msOrDash(l.TTFT.Mean),
			timing, queue, metrics, running, waiting, kv, pre, toks)
	}
	b.WriteString("\n")
}

func (v *view) writeLLMPoints(b *strings.Builder) {
	b.WriteString("## Points\n\n")
	if len(v.recs) == 0 {
		b.WriteString("The run recorded no points.\n\n")
		return
	}
	api := ""
	for _, r := range v.recs {
		if r.LLM != nil {
			api = r.LLM.API
			break
		}
	}
	fmt.Fprintf(b, "Streaming %s requests, with vLLM's definitions: TTFT from the send to the first non-empty content chunk (a role-only chunk is not a token); TPOT = (E2EL − TTFT) / (output tokens − 1), tokens from the server's usage; ITL the gaps between content chunks, pooled; E2EL from the send to the last chunk. Latencies are over the completed requests sent in the measured window; rates over what completed (tokens: what arrived) in it. Failures are counted by cause and kept out of the latencies.\n\n", api)
	b.WriteString("| # | configuration | load | sent/s | req/s | tokens/s | goodput/s | TTFT p50 | TTFT p90 | TTFT p99 | TPOT p50 | TPOT p99 | ITL p50 | ITL p99 | E2EL p50 | E2EL p99 | failed (cut off) | flags |\n")
	b.WriteString("|--:|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|---|\n")
	for _, r := range v.recs {
		l := r.LLM
		if l == nil {
			continue
		}
		failed := "0"
		if l.Failed > 0 || l.Unfinished > 0 {
			failed = statusText(r)
		}
		name := v.llmLabel(llmSeriesOf(r.Point))
		fmt.Fprintf(b, "| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			r.Index, name, loadTarget(r), num(r.AchievedRate), num(l.RequestsPerS), record.Short(l.OutputTokensPerS), num(l.GoodputPerS),
			msOrDash(l.TTFT.P50), msOrDash(l.TTFT.P90), msOrDash(l.TTFT.P99), msOrDash(l.TPOT.P50), msOrDash(l.TPOT.P99),
			msOrDash(l.ITL.P50), msOrDash(l.ITL.P99), msOrDash(l.E2EL.P50), msOrDash(l.E2EL.P99), failed, strings.Join(r.Caveats(), ", "))
	}
	b.WriteString("\n")
}
