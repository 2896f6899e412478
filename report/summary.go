package report

import (
	"cmp"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/inferhq/infer/loadgen/record"
)

// summary renders summary.md.
func (v *view) summary(res *Result) string {
	var b strings.Builder
	m := &v.run.Manifest
	name := m.Scenario
	if name == "" {
		name = filepath.Base(filepath.Clean(v.run.Dir))
	}
	title := fmt.Sprintf("# Bench report: %s\n\n", name)
	if v.isLLM() {
		return v.llmSummary(res, title)
	}
	b.WriteString(title)
	if c := res.Comparison; c != nil {
		fmt.Fprintf(&b, "**Against baseline `%s`: %s** (%s).\n\n", c.Baseline, strings.ToUpper(c.Verdict.String()), c.counts())
	}
	v.writeFacts(&b)
	v.writeWarnings(&b)
	v.writeBest(&b)
	v.writeCapacity(&b)
	v.writeModels(&b)
	v.writePolicies(&b)
	v.writeBucketing(&b)
	v.writeInjected(&b)
	writeCharts(&b, res.Charts)
	v.writePoints(&b)
	v.writeOffline(&b)
	if res.Comparison != nil {
		v.writeComparison(&b, res.Comparison)
	}
	return b.String()
}

func (v *view) writeFacts(b *strings.Builder) {
	m := &v.run.Manifest
	b.WriteString("## Run\n\n")
	if m.Start.IsZero() && m.Scenario == "" {
		fmt.Fprintf(b, "No %s in `%s`: the run's scenario, versions and machine are unknown.\n", record.ManifestFile, v.run.Dir)
	} else {
		b.WriteString("| | |\n|---|---|\n")
		row := func(k, val string) {
			if val != "" {
				fmt.Fprintf(b, "| %s | %s |\n", k, val)
			}
		}
		var scen []string
		if m.Scenario != "" {
			scen = append(scen, "`"+m.Scenario+"`")
		}
		if m.ScenarioFile != "" {
			scen = append(scen, "from `"+m.ScenarioFile+"`")
		}
		row("Scenario", strings.Join(scen, " "))
		row("infer", strings.TrimSpace(m.InferVersion+paren("commit "+m.InferCommit, m.InferCommit != "")))
		model := m.Model
		if m.ModelHash != "" {
			model += " (sha256 `" + m.ModelHash[:min(12, len(m.ModelHash))] + "`)"
		}
		row("Model", model)
		row("Runtime", m.Runtime)
		var mach []string
		for _, s := range []string{m.Host, m.OS, plural(m.Cores, "core"), m.GoVersion} {
			if s != "" && s != "0 cores" {
				mach = append(mach, s)
			}
		}
		row("Machine", strings.Join(mach, " · "))
		if !m.Start.IsZero() {
			row("Started", m.Start.UTC().Format("2006-01-02 15:04:05 MST"))
		}
		switch {
		case !m.End.IsZero():
			row("Ended", m.End.UTC().Format("2006-01-02 15:04:05 MST")+" (took "+m.End.Sub(m.Start).Round(time.Second).String()+")")
		case m.Interrupted:
			row("Ended", "interrupted")
		}
		row("SLO", sloText(m.SLO))
	}
	flagged, partial := 0, 0
	for _, r := range v.recs {
		if !r.Valid {
			flagged++
		}
		if r.Partial {
			partial++
		}
	}
	fmt.Fprintf(b, "\n%s recorded: %d flagged, %d cut short.\n\n", plural(len(v.recs), "point"), flagged, partial)
}

func sloText(s record.SLO) string {
	var parts []string
	if s.P99 > 0 {
		parts = append(parts, "p99 ≤ "+fmtMs(s.P99.Ms()))
	}
	if s.MaxErrorRate > 0 {
		parts = append(parts, fmt.Sprintf("error rate ≤ %s %%", num(s.MaxErrorRate*100)))
	}
	if s.MinThroughput > 0 {
		parts = append(parts, "throughput ≥ "+num(s.MinThroughput)+" req/s")
	}
	for _, d := range []struct {
		name string
		v    record.Duration
	}{{"TTFT", s.TTFTP99}, {"TPOT", s.TPOTP99}, {"E2EL", s.E2ELP99}} {
		if d.v > 0 {
			parts = append(parts, d.name+" p99 ≤ "+fmtMs(d.v.Ms()))
		}
	}
	if s.MinGoodputFraction > 0 {
		parts = append(parts, "good requests ≥ "+num(100*s.MinGoodputFraction)+" %")
	}
	if s.MinGoodput > 0 {
		parts = append(parts, "goodput ≥ "+num(s.MinGoodput)+" req/s")
	}
	if len(parts) == 0 {
		return "none set"
	}
	return strings.Join(parts, " · ")
}

// warning kinds, in the order the summary lists them.
var warnings = []struct {
	flag, title, meaning string
}{
	{"partial", "Cut short", "the user stopped the run during these points; they were measured for less than planned"},
	{record.FlagNoSuccess, "No success", "every request failed, so these points have no latencies and count as zero throughput"},
	{record.FlagCoordinatedOmission, "Coordinated omission", "the generator sent less than 95 % of the target rate because the server held it back, so the latencies understate what clients at that rate would see"},
	{record.FlagScheduleLag, "Behind schedule", "requests went out late against the open loop's schedule, enough that the p99 measured from their intended send passes the service time's by over 10 % and 10 ms, as when a stall holds sending back and a burst catches up: the average rate looks right, but the latencies (service times, from the actual send) understate what clients on schedule saw; the p99 from the intended send is given"},
	{record.FlagGeneratorSaturated, "Load generator saturated", "the generator used (nearly) all the CPU it had, so the server may be faster than measured"},
	{record.FlagNoUsage, "No usage", "some streams carried no usage chunk, so their output tokens (and TPOT, tokens/s) were counted by the client: with the model's tokenizer where known (GPT-2's), else one per content chunk, which may disagree with the server's count"},
	{record.FlagNotStreamed, "Not streamed", "streaming was asked for but some answers came as one body, so their TTFT is their E2EL"},
	{record.FlagErrors, "Errors", "some requests failed (429: the queue was full and admission refused; 503: not ready or draining; 504: deadline passed; error: no HTTP answer)"},
}

func (v *view) writeWarnings(b *strings.Builder) {
	var out []string
	flagged := false // a warning about trust, not just failures
	if v.run.Manifest.Interrupted {
		out = append(out, fmt.Sprintf("- **Run interrupted**: the run was stopped before its last point; the sweep is incomplete (%s recorded).", plural(len(v.recs), "point")))
	}
	for _, w := range warnings {
		var pts []string
		for _, r := range v.recs {
			has := slices.Contains(r.Flags, w.flag) || (w.flag == "partial" && r.Partial)
			if !has || (w.flag == record.FlagErrors && slices.Contains(r.Flags, record.FlagNoSuccess)) {
				continue
			}
			label := v.pointLabel(r)
			if w.flag == record.FlagErrors || w.flag == record.FlagNoSuccess {
				label += " (" + statusText(r) + ")"
			}
			if w.flag == record.FlagCoordinatedOmission && r.TargetRate > 0 {
				label += fmt.Sprintf(" (%s of %s req/s)", num(r.AchievedRate), num(r.TargetRate))
			}
			if w.flag == record.FlagScheduleLag && r.ScheduleLag != nil {
				label += fmt.Sprintf(" (lag p99 %s, max %s", fmtMs(r.ScheduleLag.P99.Ms()), fmtMs(r.ScheduleLag.Max.Ms()))
				if f := r.FromSchedule; f != nil {
					label += fmt.Sprintf("; p99 %s from the intended send, %s from the actual one", fmtMs(f.P99.Ms()), fmtMs(r.Latency.P99.Ms()))
				}
				label += ")"
			}
			if w.flag == record.FlagGeneratorSaturated {
				label += fmt.Sprintf(" (%s cores)", num(r.GeneratorCPU))
			}
			pts = append(pts, label)
		}
		if len(pts) == 0 {
			continue
		}
		const show = 8
		list := strings.Join(pts[:min(len(pts), show)], "; ")
		if len(pts) > show {
			list += fmt.Sprintf("; and %d more (see the table of points)", len(pts)-show)
		}
		out = append(out, fmt.Sprintf("- **%s** (%s): %s: %s.", w.title, plural(len(pts), "point"), w.meaning, list))
		flagged = flagged || w.flag != record.FlagErrors
	}
	if len(out) == 0 {
		return
	}
	b.WriteString("## Warnings\n\n")
	b.WriteString(strings.Join(out, "\n") + "\n\n")
	if flagged {
		b.WriteString("Flagged points are drawn hollow on the charts and are not candidates for the best configuration.\n\n")
	}
}

// statusText summarises the statuses of a point that had failures:
// "12.3 % failed: 429 ×110, error ×2".
func statusText(r *record.Record) string {
	var parts []string
	if l := r.LLM; l != nil { // by cause: a stream that broke off had a 200
		for _, k := range slices.Sorted(maps.Keys(l.Failures)) {
			parts = append(parts, fmt.Sprintf("%s ×%d", k, l.Failures[k]))
		}
		text := pctAbs(r.ErrorRate()) + " failed"
		if len(parts) > 0 {
			text += ": " + strings.Join(parts, ", ")
		}
		if l.Unfinished > 0 {
			text += fmt.Sprintf("; %d cut off at the drain", l.Unfinished)
		}
		return text + topCauses(r.Errors)
	}
	for _, k := range slices.Sorted(maps.Keys(r.Status)) {
		if k != "200" {
			parts = append(parts, fmt.Sprintf("%s ×%d", k, r.Status[k]))
		}
	}
	return fmt.Sprintf("%s failed: %s", pctAbs(r.ErrorRate()), strings.Join(parts, ", ")) + topCauses(r.Errors)
}

// topCauses names the most frequent failures in words, from a record's
// error texts: `; "sse: event too large" ×3, "answer is not JSON: <html>…" ×1`
// (at most three, each at most 60 characters, fit for a table cell).
func topCauses(errs map[string]int) string {
	if len(errs) == 0 {
		return ""
	}
	texts := slices.SortedFunc(maps.Keys(errs), func(a, b string) int {
		if errs[a] != errs[b] {
			return errs[b] - errs[a]
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, t := range texts[:min(3, len(texts))] {
		short := strings.Join(strings.Fields(t), " ")
		if r := []rune(short); len(r) > 60 {
			short = string(r[:59]) + "…"
		}
		q := strings.ReplaceAll(strconv.Quote(short), "|", `\|`) // a table cell
		parts = append(parts, fmt.Sprintf("%s ×%d", q, errs[t]))
	}
	return "; " + strings.Join(parts, ", ")
}

// trustedCount counts the points with trusted measurements and a success.
func (v *view) trustedCount() int {
	n := 0
	for _, r := range v.recs {
		if trusted(r) && succeeded(r) {
			n++
		}
	}
	return n
}

// bestIntro is what the two "Best configuration" sections (request and
// LLM runs) say in their own words around the shared opening.
type bestIntro struct {
	noSLO   string // the paragraph when the scenario sets no SLO
	withSLO string // the paragraph's format, given the SLO's text
	none    string // the paragraph when no point has a trusted, successful measurement
	// When no point meets the SLO, the sentence on the one that came
	// closest, with a leading space: nearer reports whether r came closer
	// than than (nil: none yet), among the trusted, successful points, and
	// closest says it.
	nearer  func(r, than *record.Record) bool
	closest func(*record.Record) string
}

// writeBestIntro writes the opening of a "Best configuration" section: the
// heading, the SLO, and, when no point meets it, why not (then it returns no
// points). Otherwise it returns the qualifying points, best first, and the
// first sentences to say after the best point's line.
func (v *view) writeBestIntro(b *strings.Builder, t bestIntro) (ok []*record.Record, more []string) {
	slo := v.run.Manifest.SLO
	b.WriteString("## Best configuration under the SLO\n\n")
	ok = ranked(v.recs, slo)
	trustedN := v.trustedCount()
	noSLO := slo == (record.SLO{})
	if noSLO {
		b.WriteString(t.noSLO + "\n\n")
	} else {
		fmt.Fprintf(b, t.withSLO+"\n\n", sloText(slo))
	}
	if len(ok) == 0 {
		if trustedN == 0 {
			b.WriteString(t.none + "\n\n")
			return nil, nil
		}
		var closest *record.Record
		for _, r := range v.recs {
			if trusted(r) && succeeded(r) && t.nearer(r, closest) {
				closest = r
			}
		}
		var say string
		if closest != nil {
			say = t.closest(closest)
		}
		fmt.Fprintf(b, "**No point meets the SLO** (of %s with trusted measurements).%s\n\n", plural(trustedN, "point"), say)
		return nil, nil
	}
	if !noSLO {
		more = append(more, fmt.Sprintf("%d of %s with trusted measurements meet the SLO.", len(ok), plural(trustedN, "point")))
	}
	return ok, more
}

func (v *view) writeBest(b *strings.Builder) {
	ok, more := v.writeBestIntro(b, bestIntro{
		noSLO:   "The scenario sets no SLO, so every trusted point qualifies and the highest throughput wins.",
		withSLO: "SLO: %s.",
		none:    "No point qualifies: none has a trusted measurement with a successful request.",
		nearer:  func(r, than *record.Record) bool { return than == nil || r.Latency.P99 < than.Latency.P99 },
		closest: func(closest *record.Record) string {
			return fmt.Sprintf(" The lowest p99 was %s at %s (%s req/s, %s errors).", fmtMs(closest.Latency.P99.Ms()), v.pointLabel(closest), num(closest.Throughput), pctAbs(closest.ErrorRate()))
		},
	})
	if len(ok) == 0 {
		return
	}
	best := ok[0]
	fmt.Fprintf(b, "**%s** at %s: %s req/s (%s items/s), p50 %s, p99 %s, errors %s.\n\n",
		v.longConfig(best), loadLabel(best.Point.Load), num(best.Throughput), num(best.ItemsPerSec),
		fmtMs(best.Latency.P50.Ms()), fmtMs(best.Latency.P99.Ms()), pctAbs(best.ErrorRate()))
	if nb := v.bestNaive(); nb != nil && !isNaive(best) && nb.Throughput > 0 {
		more = append(more, fmt.Sprintf("That is %.1f× the naive endpoint's best throughput (%s req/s).", best.Throughput/nb.Throughput, num(nb.Throughput)))
	}
	// The next best configurations, each once at its best load: none
	// when every point that qualifies is the best's configuration.
	var next []*record.Record
	seen := map[config]bool{configOf(best.Point): true}
	for _, r := range ok[1:] {
		if len(next) == 4 {
			break
		}
		if !seen[configOf(r.Point)] {
			seen[configOf(r.Point)] = true
			next = append(next, r)
		}
	}
	if len(next) > 0 {
		more = append(more, "The next best configurations:")
	}
	if len(more) > 0 {
		b.WriteString(strings.Join(more, " ") + "\n\n")
	}
	if len(next) > 0 {
		b.WriteString("| configuration | load | req/s | p99 | errors |\n|---|---|--:|--:|--:|\n")
		for _, r := range next {
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s |\n", v.configLabel(r), loadLabel(r.Point.Load), num(r.Throughput), fmtMs(r.Latency.P99.Ms()), pctAbs(r.ErrorRate()))
		}
		b.WriteString("\n")
	}
}

// longConfig names a configuration with every server setting:
// "batched b=64 w=4, max-latency 50ms, policy fixed".
func (v *view) longConfig(r *record.Record) string {
	p := r.Point
	s := p.Endpoint
	if isNaive(r) {
		return s
	}
	if p.Batch > 0 {
		s += fmt.Sprintf(" b=%d", p.Batch)
	}
	if p.Workers > 0 {
		s += fmt.Sprintf(" w=%d", p.Workers)
	}
	if p.Latency > 0 {
		s += ", max-latency " + p.Latency.D().String()
	}
	if p.Policy != "" {
		s += ", policy " + p.Policy
	}
	if len(p.Buckets) > 0 {
		s += ", " + bucketsLabel(bucketsText(p.Buckets))
	}
	if p.Items > 1 {
		s += fmt.Sprintf(", %d items per request", p.Items)
	}
	return s
}

// writeInjected writes the "Injected faults" section: at each point with
// payload.inject, how the requests carrying the text fared against the
// others.
func (v *view) writeInjected(b *strings.Builder) {
	recs := keep(v.recs, func(r *record.Record) bool { return r.Injected != nil })
	if len(recs) == 0 {
		return
	}
	b.WriteString("## Injected faults\n\n")
	b.WriteString("Requests carrying the injected text (payload.inject) against the others, in the measured time, and how many of each the model failed (HTTP 500). With per-item error isolation, a batch that fails because of a carrier fails only the carriers. Refusals (429) and late answers (504) are admission and deadline outcomes: see the table of points.\n\n")
	b.WriteString("| point | text | carrying: sent | 500 | others: sent | 500 |\n|---|---|--:|--:|--:|--:|\n")
	failing := 0
	for _, r := range recs {
		in := r.Injected
		fmt.Fprintf(b, "| %s | `%s` | %d | %d | %d | %d |\n", v.pointLabel(r), in.Text, in.Sent, in.ModelFailed, in.OthersSent, in.OthersModelFailed)
		if in.OthersModelFailed > 0 {
			failing++
		}
	}
	if failing == 0 {
		fmt.Fprintf(b, "\nThe model failed no request without the text, at any of the %s.\n\n", plural(len(recs), "point"))
	} else {
		fmt.Fprintf(b, "\n**The model failed requests without the text at %d of %s.**\n\n", failing, plural(len(recs), "point"))
	}
}

func writeCharts(b *strings.Builder, charts []Chart) {
	b.WriteString("## Charts\n\n")
	var skipped []string
	for _, c := range charts {
		if c.Skipped != "" {
			skipped = append(skipped, fmt.Sprintf("- %s (`%s`): not drawn: %s.", c.Title, c.File, c.Skipped))
			continue
		}
		fmt.Fprintf(b, "### %s\n\n![%s](%s)\n\n", c.Title, c.Title, c.File)
	}
	if len(skipped) > 0 {
		b.WriteString(strings.Join(skipped, "\n") + "\n\n")
	}
}

// column is one column of the table of points.
type column struct {
	head, align string
	cell        func(*record.Record) string
}

func (v *view) writePoints(b *strings.Builder) {
	b.WriteString("## Points\n\n")
	if len(v.recs) == 0 {
		b.WriteString("The run recorded no points.\n\n")
		return
	}
	cols := []column{
		{"#", "--:", func(r *record.Record) string { return fmt.Sprint(r.Index) }},
		{"endpoint", "---", func(r *record.Record) string { return r.Point.Endpoint }},
		{"batch", "--:", func(r *record.Record) string { return orDash(r.Point.Batch) }},
		{"workers", "--:", func(r *record.Record) string { return orDash(r.Point.Workers) }},
	}
	// Settings the same on every point move from the table to a line above it.
	var same []string
	for _, c := range []struct {
		column
		label func(string) string
	}{
		{column{"max-latency", "--:", func(r *record.Record) string { return r.Point.Latency.D().String() }}, func(s string) string { return "max-latency " + s }},
		{column{"policy", "---", func(r *record.Record) string { return r.Point.Policy }}, func(s string) string { return "policy " + s }},
		{column{"buckets", "---", func(r *record.Record) string { return bucketsText(r.Point.Buckets) }}, bucketsLabel},
		{column{"items/req", "--:", func(r *record.Record) string { return fmt.Sprint(r.Point.Items) }}, func(s string) string {
			if s == "1" {
				return "1 item per request"
			}
			return s + " items per request"
		}},
		{column{"load", "---", func(r *record.Record) string { return loadMode(r.Point.Load) }}, func(s string) string { return s }},
	} {
		vals := map[string]bool{}
		for _, r := range v.served {
			vals[c.cell(r)] = true
		}
		if c.head == "load" || c.head == "items/req" {
			for _, r := range v.naive {
				vals[c.cell(r)] = true
			}
		}
		switch {
		case len(vals) > 1:
			cols = append(cols, c.column)
		case len(vals) == 1:
			for val := range vals {
				if val != "" && val != "0s" {
					same = append(same, c.label(val))
				}
			}
		}
	}
	cols = append(cols,
		column{"target", "--:", func(r *record.Record) string { return loadTarget(r) }},
		column{"achieved", "--:", func(r *record.Record) string { return num(r.AchievedRate) }},
		column{"req/s", "--:", func(r *record.Record) string { return num(r.Throughput) }},
		column{"items/s", "--:", func(r *record.Record) string { return num(r.ItemsPerSec) }},
		column{"p50", "--:", func(r *record.Record) string { return fmtDur(r.Latency.P50) }},
		column{"p90", "--:", func(r *record.Record) string { return fmtDur(r.Latency.P90) }},
		column{"p99", "--:", func(r *record.Record) string { return fmtDur(r.Latency.P99) }},
		column{"p99.9", "--:", func(r *record.Record) string { return fmtDur(r.Latency.P999) }},
	)
	if slices.ContainsFunc(v.recs, func(r *record.Record) bool { return r.FromSchedule != nil }) {
		cols = append(cols, column{"p99 from schedule", "--:", func(r *record.Record) string {
			if r.FromSchedule == nil {
				return "–"
			}
			return fmtDur(r.FromSchedule.P99)
		}})
	}
	cols = append(cols,
		column{"errors", "--:", func(r *record.Record) string { return pctAbs(r.ErrorRate()) }},
		column{"mean batch", "--:", func(r *record.Record) string {
			if r.MeanBatch() == 0 {
				return "–"
			}
			return fmt.Sprintf("%.1f", r.MeanBatch())
		}},
		column{"queue", "--:", func(r *record.Record) string { return fmtDur(r.Server.MeanQueue) }},
		column{"compute", "--:", func(r *record.Record) string { return fmtDur(r.Server.MeanCompute) }},
	)
	if slices.ContainsFunc(v.recs, func(r *record.Record) bool { return r.Server.MeanPadding > 0 }) {
		cols = append(cols, column{"padding", "--:", func(r *record.Record) string { return padText(r.Server.MeanPadding) }})
	}
	cols = append(cols,
		column{"flags", "---", func(r *record.Record) string { return strings.Join(r.Caveats(), ", ") }},
	)
	if len(same) > 0 {
		fmt.Fprintf(b, "Every point: %s. ", strings.Join(same, " · "))
	}
	b.WriteString("Rates in requests/s; latencies over successful requests, as the client saw them, from each request's actual send (service time)")
	if slices.ContainsFunc(v.recs, func(r *record.Record) bool { return r.FromSchedule != nil }) {
		b.WriteString("; p99 from schedule measures open-loop requests from their intended send instead (wrk2's correction for coordinated omission)")
	}
	b.WriteString("; mean batch is items per batch with each batch counted once (from /metrics, else Server-Timing); queue and compute are means over responses from the server's Server-Timing headers.\n\n")
	for i, c := range cols {
		b.WriteString(map[bool]string{true: "| ", false: " | "}[i == 0] + c.head)
	}
	b.WriteString(" |\n")
	for _, c := range cols {
		b.WriteString("|" + c.align)
	}
	b.WriteString("|\n")
	for _, r := range v.recs {
		for i, c := range cols {
			b.WriteString(map[bool]string{true: "| ", false: " | "}[i == 0] + c.cell(r))
		}
		b.WriteString(" |\n")
	}
	b.WriteString("\n")
}

// loadMode describes how a load was driven, without its level.
func loadMode(l record.Load) string {
	if l.Mode == "closed" {
		return "closed loop"
	}
	if l.Arrival != "" {
		return "open loop, " + l.Arrival + " arrivals"
	}
	if l.Pacer != "" {
		return "open loop, " + l.Pacer + " pacer"
	}
	return "open loop"
}

// loadTarget is the load level a point was asked for: the nominal rate,
// and beside it the rate random arrivals drew when that differs ("2
// (drawn 2.9)").
func loadTarget(r *record.Record) string {
	l := r.Point.Load
	if l.Mode == "closed" || (l.Rate == 0 && l.Concurrency > 0) {
		return plural(l.Concurrency, "client")
	}
	if l.Pacer == "ramp" {
		return num(l.RampFrom) + "→" + num(l.Rate)
	}
	if drawn, ok := r.DrawnRate(); ok {
		return num(l.Rate) + " (drawn " + num(drawn) + ")"
	}
	return num(l.Rate)
}

func (v *view) writeOffline(b *strings.Builder) {
	off := v.run.Manifest.Offline
	if len(off) == 0 {
		return
	}
	b.WriteString("## Served vs offline\n\n")
	b.WriteString("The model's own ceiling without HTTP (items/s of one instance, from `infer models bench`) against the most items/s served at that batch size, with the ratio. Several workers can exceed one instance's ceiling where the hardware has room.\n\n")
	b.WriteString("| batch | offline items/s |")
	for _, w := range v.workers {
		fmt.Fprintf(b, " served w=%d |", w)
	}
	b.WriteString("\n|--:|--:|" + strings.Repeat("--:|", len(v.workers)) + "\n")
	for _, batch := range slices.Sorted(maps.Keys(off)) {
		fmt.Fprintf(b, "| %d | %s |", batch, num(off[batch]))
		for _, w := range v.workers {
			var best *record.Record
			for _, r := range v.served {
				if r.Point.Batch == batch && r.Point.Workers == w && succeeded(r) && (best == nil || r.ItemsPerSec > best.ItemsPerSec) {
					best = r
				}
			}
			switch {
			case best == nil:
				b.WriteString(" – |")
			case off[batch] > 0:
				fmt.Fprintf(b, " %s (%.2f×)%s |", num(best.ItemsPerSec), best.ItemsPerSec/off[batch], paren("flagged", !trusted(best)))
			default:
				fmt.Fprintf(b, " %s |", num(best.ItemsPerSec))
			}
		}
		b.WriteString("\n")
	}
	if nb := v.bestNaive(); nb != nil && off[1] > 0 {
		fmt.Fprintf(b, "\nNaive endpoint: %s items/s (%.2f× the batch-1 ceiling).\n", num(nb.ItemsPerSec), nb.ItemsPerSec/off[1])
	}
	b.WriteString("\n")
}

func (v *view) writeComparison(b *strings.Builder, c *Comparison) {
	b.WriteString("## Comparison with the baseline\n\n")
	fmt.Fprintf(b, "Baseline `%s`. Verdict: **%s** (%s).\n\n", c.Baseline, strings.ToUpper(c.Verdict.String()), c.counts())
	fmt.Fprintf(b, "A point regresses when its throughput falls, its p99 rises or its error rate rises beyond the noise band, on measurements that are not flagged; beyond the band on a flagged measurement it warns. The band is the repeats' spread where both runs have repeats (at least half the default; the p99s compared are then the medians of the repeats' p99s), else ±%s %% throughput and ±%s %% p99, and an encoder point's p99 must be worse beyond it even from the low end of its sampling interval to the high end of the baseline's (99 %% intervals from the latency histograms; for LLM points tokens/s, TTFT p99 and TPOT p99 are compared); the error rate may rise by %s percentage point(s). Points are matched by model, endpoint, batch, workers, max-latency, policy, buckets, items per request and load level.\n\n",
		num(c.Default.Throughput*100), num(c.Default.P99*100), num(c.Default.ErrorRate*100))
	if len(c.Changes) > 0 {
		changes := slices.Clone(c.Changes)
		slices.SortStableFunc(changes, func(a, b Change) int { return -cmp.Compare(a.Verdict, b.Verdict) })
		thrName, p99Name := "req/s", "p99"
		if v.isLLM() {
			thrName, p99Name = "tokens/s", "TTFT p99"
			b.WriteString("For LLM points throughput is output tokens/s and p99 is TTFT's; TPOT's p99 is judged in the default p99 band, since the repeats carry no TPOT; they are matched by model, endpoint, max-seqs, max-batched-tokens, max-latency and load level.\n\n")
		}
		// With repeats on both sides the verdict compares the medians of
		// the repeats' p99s, which differ from the points' own p99s of
		// the points table: both are shown, each named.
		medians := slices.ContainsFunc(changes, func(ch Change) bool { return ch.FromRepeats })
		hdr := fmt.Sprintf("| point | %s base → now | Δ | %s base → now |", thrName, p99Name)
		align := "|---|--:|--:|--:|"
		if medians {
			fmt.Fprintf(b, "%s base → now is each point's own, as in the points table. Where both points have repeats, the verdict compares the medians of the repeats' %ss instead (compared): a point's own %s, over all its requests, leans towards its slowest repeat. Δ is the change of the one compared.\n\n", p99Name, p99Name, p99Name)
			hdr += fmt.Sprintf(" compared: repeats' median %s base → now |", p99Name)
			align += "--:|"
		}
		hdr += " Δ |"
		align += "--:|"
		if v.isLLM() {
			hdr += " TPOT p99 Δ |"
			align += "--:|"
		}
		fmt.Fprintf(b, "%s band (%s, p99) | verdict | why |\n%s--:|---|---|\n", hdr, thrName, align)
		for _, ch := range changes {
			band := fmt.Sprintf("±%s %%, ±%s %%", num(ch.Band.Throughput*100), num(ch.Band.P99*100))
			if ch.FromRepeats {
				band += " (repeats)"
			}
			row := fmt.Sprintf("| %s | %s → %s | %s | %s → %s |", v.pointLabel(ch.Cur), num(tput(ch.Base)), num(tput(ch.Cur)), pct(ch.Throughput),
				msOrDash(p99Of(ch.Base)), msOrDash(p99Of(ch.Cur)))
			if medians {
				compared := "the points' own"
				if ch.FromRepeats {
					compared = msOrDash(ch.BaseP99) + " → " + msOrDash(ch.CurP99)
				}
				row += " " + compared + " |"
			}
			row += " " + pct(ch.P99) + " |"
			if v.isLLM() {
				row += " " + pct(ch.TPOT) + " |"
			}
			fmt.Fprintf(b, "%s %s | %s | %s |\n", row, band, ch.Verdict, ch.Reason)
		}
		b.WriteString("\n")
	}
	for _, u := range []struct {
		what string
		recs []*record.Record
	}{{"Only in this run", c.OnlyRun}, {"Only in the baseline", c.OnlyBaseline}} {
		if len(u.recs) == 0 {
			continue
		}
		const show = 20
		var names []string
		for _, r := range u.recs[:min(len(u.recs), show)] {
			names = append(names, v.pointLabel(r))
		}
		if len(u.recs) > show {
			names = append(names, fmt.Sprintf("and %d more", len(u.recs)-show))
		}
		fmt.Fprintf(b, "%s (%s, not compared): %s.\n\n", u.what, plural(len(u.recs), "point"), strings.Join(names, "; "))
	}
}

// padText formats a padding ratio: "1.37×", "–" when unknown.
func padText(p float64) string {
	if p <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", p)
}

func fmtDur(d record.Duration) string {
	if d <= 0 {
		return "–"
	}
	return fmtMs(d.Ms())
}

// pctAbs formats a share: "0 %", "12.3 %".
func pctAbs(v float64) string {
	if v == 0 {
		return "0 %"
	}
	return fmt.Sprintf("%.1f %%", v*100)
}

func orDash(n int) string {
	if n == 0 {
		return "–"
	}
	return fmt.Sprint(n)
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// paren returns " (s)" when cond holds, else "".
func paren(s string, cond bool) string {
	if !cond {
		return ""
	}
	return " (" + s + ")"
}
