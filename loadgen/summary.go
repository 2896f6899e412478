package loadgen

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/inferhq/infer/loadgen/record"
	"github.com/inferhq/infer/loadgen/scenario"
)

// Row summarises one point's record.
type Row struct {
	Index int    `json:"index"`
	Name  string `json:"name"`
	Sent  int    `json:"sent"`
	// Rate is the nominal open-loop level; TargetRate what the schedule
	// asked in the measured time (with random arrivals, the draws' rate).
	Rate         float64         `json:"rate,omitempty"`
	TargetRate   float64         `json:"target_rate,omitempty"`
	AchievedRate float64         `json:"achieved_rate"`
	Throughput   float64         `json:"throughput"`
	ItemsPerSec  float64         `json:"items_per_sec"`
	P50          record.Duration `json:"p50"`
	P99          record.Duration `json:"p99"`
	ErrorRate    float64         `json:"error_rate"`
	// Batch is the server's mean batch size, each batch counted once
	// (record.Record.MeanBatch); ResponseBatch counts each response once.
	Batch         float64  `json:"mean_batch,omitempty"`
	ResponseBatch float64  `json:"response_batch,omitempty"`
	Valid         bool     `json:"valid"`
	Flags         []string `json:"flags,omitempty"`
	Partial       bool     `json:"partial,omitempty"`
	// In open loop: the schedule lag (how late requests went out against
	// the schedule) and the p99 latency from the intended send time.
	LagP99          record.Duration `json:"schedule_lag_p99,omitzero"`
	LagMax          record.Duration `json:"schedule_lag_max,omitzero"`
	P99FromSchedule record.Duration `json:"p99_from_schedule,omitzero"`
	// Errors counts the failed requests by cause (transport error, HTTP
	// status with the server's code, or why an answer was invalid).
	Errors map[string]int `json:"errors,omitempty"`
	// Violations lists the SLO thresholds the point missed.
	Violations []string `json:"violations,omitempty"`
	// Caveats are the record's (record.Record.Caveats).
	Caveats []string `json:"-"`
	// LLM points: their figures, inline in JSON.
	*LLMRow
}

// LLMRow is what a streaming LLM point adds to its row: the latency
// summaries (mean, p50, p90, p99… in ms) and rates of its record.LLM, the
// failures by cause, and when known the server's own mean TTFT and a
// simulated model's ideal tokens/s.
type LLMRow struct {
	TTFT             record.MsStats `json:"ttft_ms"`
	TPOT             record.MsStats `json:"tpot_ms"`
	ITL              record.MsStats `json:"itl_ms"`
	E2EL             record.MsStats `json:"e2el_ms"`
	RequestsPerS     float64        `json:"requests_per_s"`
	OutputTokensPerS float64        `json:"output_tokens_per_s"`
	GoodputPerS      float64        `json:"goodput_per_s"`
	IdealTokensPerS  float64        `json:"ideal_tokens_per_s,omitempty"`
	ServerTTFTMean   float64        `json:"server_ttft_mean_ms,omitempty"`
	Failures         map[string]int `json:"failures,omitempty"`
	// Unfinished counts the window's requests still streaming when the
	// drain ended (cut off; neither completed nor failed).
	Unfinished int `json:"unfinished,omitempty"`
	// TTFTFromIntendedP99 is the p99 TTFT from the intended send (open
	// loop), against which the schedule lag is judged.
	TTFTFromIntendedP99 float64 `json:"ttft_from_intended_p99_ms,omitempty"`
}

// RowOf summarises r against slo.
func RowOf(r *record.Record, slo scenario.SLO) Row {
	row := Row{
		Index: r.Index, Name: r.Point.Name, Sent: r.Sent,
		Rate: r.Point.Load.Nominal(), TargetRate: r.TargetRate, AchievedRate: r.AchievedRate,
		Throughput: r.Throughput, ItemsPerSec: r.ItemsPerSec,
		P50: r.Latency.P50, P99: r.Latency.P99,
		ErrorRate: r.ErrorRate(), Batch: r.MeanBatch(), ResponseBatch: r.Server.ResponseBatch,
		Valid: r.Valid, Flags: r.Flags, Partial: r.Partial, Caveats: r.Caveats(), Errors: r.Errors,
	}
	if l := r.ScheduleLag; l != nil {
		row.LagP99, row.LagMax = l.P99, l.Max
	}
	if f := r.FromSchedule; f != nil {
		row.P99FromSchedule = f.P99
	}
	if l := r.LLM; l != nil {
		row.LLMRow = &LLMRow{TTFT: l.TTFT, TPOT: l.TPOT, ITL: l.ITL, E2EL: l.E2EL,
			RequestsPerS: l.RequestsPerS, OutputTokensPerS: l.OutputTokensPerS, GoodputPerS: l.GoodputPerS,
			IdealTokensPerS: l.Ideal, Failures: l.Failures, Unfinished: l.Unfinished, TTFTFromIntendedP99: l.FromIntended.TTFT.P99}
		if l.Server != nil {
			row.ServerTTFTMean = l.Server.TTFTMean
		}
		row.Violations = append(row.Violations, slo.Record().LLM().Misses(l)...)
	}
	switch {
	case slo.P99 == 0:
	case r.Throughput == 0:
		row.Violations = append(row.Violations, "p99 unknown: no successful request")
	case r.Latency.P99.D() > slo.P99:
		row.Violations = append(row.Violations, fmt.Sprintf("p99 %v > %v", record.Round(r.Latency.P99.D()), slo.P99))
	}
	if slo.MaxErrorRate > 0 && row.ErrorRate > slo.MaxErrorRate {
		row.Violations = append(row.Violations, fmt.Sprintf("errors %.2f%% > %.2f%%", 100*row.ErrorRate, 100*slo.MaxErrorRate))
	}
	if slo.MinThroughput > 0 && r.Throughput < slo.MinThroughput {
		row.Violations = append(row.Violations, fmt.Sprintf("throughput %.1f/s < %v/s", r.Throughput, slo.MinThroughput))
	}
	return row
}

// Summary is the end-of-run report: one row per finished point and the
// verdict of the SLO thresholds.
type Summary struct {
	Scenario string `json:"scenario"`
	Dir      string `json:"dir"`
	Points   int    `json:"points"` // planned
	// Shared are the settings every batched point has, which point names
	// leave out (Shared).
	Shared string `json:"shared,omitempty"`
	Rows   []Row  `json:"rows"`
	// Models are the models of a sweep of models side by side; nil
	// without sweep.model.
	Models      []record.ModelRow `json:"models,omitempty"`
	Interrupted bool              `json:"interrupted,omitempty"`
	// Notices are what the run found missing or assumed, each said once.
	Notices []string `json:"notices,omitempty"`
	SLO     struct {
		record.SLO
		Require string `json:"require,omitempty"`
	} `json:"slo"`
	// Passed is the thresholds' verdict: with Require "all", every
	// complete point passed; with "any", some point did. A run without
	// thresholds passes. A stopped run, or one with thresholds and no
	// complete point to judge, does not pass: Outcome says which.
	Passed  bool   `json:"passed"`
	Outcome string `json:"outcome"` // OutcomePass, OutcomeFail, OutcomeStopped or OutcomeUnjudged
	Verdict string `json:"verdict"`
	// Capacity ranks a capacity search's configurations (load.search) by
	// the highest load meeting the SLO; the verdict is then theirs.
	Capacity []record.Capacity `json:"capacity,omitempty"`
}

// The outcomes of a run, as the summary's last line says them.
const (
	OutcomePass     = "PASS"
	OutcomeFail     = "FAIL"
	OutcomeStopped  = "STOPPED"    // stopped before its last point: not judged
	OutcomeUnjudged = "NO VERDICT" // thresholds set, but no complete point to judge
)

// Summarize judges the outcome of a run against the scenario's SLO.
// Partial points are shown but not judged; a complete point whose
// measurement is not trusted (record.Record.Valid) is judged as missing
// the SLO, since nothing says it met it. A stopped run is not judged.
func Summarize(o *Outcome, slo scenario.SLO) Summary {
	s := Summary{Scenario: o.Manifest.Scenario, Dir: o.Dir, Points: o.Points, Shared: o.Shared, Interrupted: o.Interrupted,
		Notices: o.Manifest.Notices}
	s.SLO.SLO, s.SLO.Require = slo.Record(), slo.Require
	s.Models = record.Models(o.Records, o.Manifest.Accuracy)
	judged, passed := 0, 0
	for i := range o.Records {
		row := RowOf(&o.Records[i], slo)
		if slo.Set() && !o.Records[i].Valid && !row.Partial {
			row.Violations = append(row.Violations, "untrusted measurement")
		}
		s.Rows = append(s.Rows, row)
		if !row.Partial {
			judged++
			if len(row.Violations) == 0 {
				passed++
			}
		}
	}
	switch {
	case o.Interrupted && o.Search:
		s.Capacity = rankCapacities(o.Capacities)
		s.Outcome = OutcomeStopped
		s.Verdict = "stopped before the end, the capacities marked ? are partial, not judged"
	case o.Interrupted:
		s.Outcome = OutcomeStopped
		s.Verdict = fmt.Sprintf("stopped before the end, %d of %d points done, not judged", judged, o.Points)
	case o.Search:
		s.judgeSearch(o, slo.Require)
	case !slo.Set():
		s.Passed, s.Outcome, s.Verdict = true, OutcomePass, "no thresholds set"
	case judged == 0:
		s.Outcome, s.Verdict = OutcomeUnjudged, "no complete point to judge"
	case slo.Require == "any":
		s.Passed = passed > 0
		s.Verdict = fmt.Sprintf("%d of %d points meet the SLO (any must)", passed, judged)
	default:
		s.Passed = passed == judged
		s.Verdict = fmt.Sprintf("%d of %d points meet the SLO (all must)", passed, judged)
	}
	if s.Outcome == "" {
		s.Outcome = OutcomeFail
		if s.Passed {
			s.Outcome = OutcomePass
		}
	}
	return s
}

// tableWidth is the width the summary table keeps to: a row's notes go on
// a line of their own below it when they would pass it.
const tableWidth = 80

// WriteText writes the summary as a table that fits 80 columns, then the
// causes of failed requests, the notices, the verdict and the run
// directory.
func (s Summary) WriteText(w io.Writer) error {
	var b strings.Builder
	llm := slices.ContainsFunc(s.Rows, func(r Row) bool { return r.LLMRow != nil })
	if s.Shared != "" {
		fmt.Fprintln(&b, SharedText(s.Shared, llm))
	}
	if llm {
		s.llmTable(&b)
	} else {
		s.table(&b)
	}
	s.capacityTable(&b)
	s.modelsTable(&b)
	s.tail(&b)
	_, err := io.WriteString(w, b.String())
	return err
}

// table writes the rows of encoder points.
func (s Summary) table(b *strings.Builder) {
	// Items/s says more than OK/s only when requests carry several
	// items; the send rate, only in open loop.
	items := slices.ContainsFunc(s.Rows, func(r Row) bool { return r.ItemsPerSec != r.Throughput })
	open := slices.ContainsFunc(s.Rows, func(r Row) bool { return r.TargetRate > 0 })
	head := []string{"POINT", "SENT"}
	if open {
		head = append(head, "SENT/s")
	}
	head = append(head, "OK/s")
	if items {
		head = append(head, "ITEMS/s")
	}
	head = append(head, "P50", "P99", "ERRORS", "BATCH")
	cells := [][]string{head}
	for _, r := range s.Rows {
		row := []string{r.Name, strconv.Itoa(r.Sent)}
		if open {
			row = append(row, r.sentRate())
		}
		row = append(row, record.Short(r.Throughput))
		if items {
			row = append(row, record.Short(r.ItemsPerSec))
		}
		batch := "-"
		if r.Batch > 0 {
			batch = fmt.Sprintf("%.1f", r.Batch)
		}
		row = append(row, record.Round(r.P50.D()).String(), record.Round(r.P99.D()).String(), fmt.Sprintf("%.1f%%", 100*r.ErrorRate), batch)
		cells = append(cells, row)
	}
	s.writeCells(b, cells)
	for _, r := range s.Rows {
		if why := topErrors(r.Errors, 3); why != "" {
			fmt.Fprintf(b, "failed in %s: %s\n", r.Name, why)
		}
		if slices.Contains(r.Flags, record.FlagScheduleLag) {
			fmt.Fprintf(b, "behind schedule in %s: sends lagged p99 %v, max %v; p99 from the intended send %v (service time %v)\n",
				r.Name, record.Round(r.LagP99.D()), record.Round(r.LagMax.D()), record.Round(r.P99FromSchedule.D()), record.Round(r.P99.D()))
		}
	}
}

// llmTable writes the rows of LLM points: rates in requests and output
// tokens per second, TTFT p50 and p99, TPOT p99, goodput when the SLO has
// latency bounds, the error rate; then the simulated model's ideal, the
// failures by cause and the schedule lag.
func (s Summary) llmTable(b *strings.Builder) {
	open := slices.ContainsFunc(s.Rows, func(r Row) bool { return r.TargetRate > 0 })
	good := s.SLO.TTFTP99 > 0 || s.SLO.TPOTP99 > 0 || s.SLO.E2ELP99 > 0 || s.SLO.MinGoodput > 0 || s.SLO.MinGoodputFraction > 0
	head := []string{"POINT"}
	if open {
		head = append(head, "SENT/s")
	}
	head = append(head, "REQ/s", "TOK/s", "TTFT50", "TTFT99", "TPOT99")
	if good {
		head = append(head, "GOOD/s")
	}
	head = append(head, "ERRORS")
	cells := [][]string{head}
	for _, r := range s.Rows {
		row := []string{r.Name}
		if open {
			row = append(row, r.sentRate())
		}
		l := r.LLMRow
		if l == nil {
			l = &LLMRow{}
		}
		row = append(row, record.Short(l.RequestsPerS), record.Short(l.OutputTokensPerS), msText(l.TTFT.P50), msText(l.TTFT.P99), msText(l.TPOT.P99))
		if good {
			row = append(row, record.Short(l.GoodputPerS))
		}
		row = append(row, fmt.Sprintf("%.1f%%", 100*r.ErrorRate))
		cells = append(cells, row)
	}
	s.writeCells(b, cells)
	for _, r := range s.Rows {
		l := r.LLMRow
		if l == nil {
			continue
		}
		if l.IdealTokensPerS > 0 && r.TargetRate == 0 { // a closed loop saturates; summary.md has the others
			fmt.Fprintf(b, "ideal of %s: %s tokens/s measured = %.2f of the sim's %s\n", r.Name, record.Short(l.OutputTokensPerS),
				l.OutputTokensPerS/l.IdealTokensPerS, record.Short(l.IdealTokensPerS))
		}
		if why := topErrors(l.Failures, 4); why != "" {
			fmt.Fprintf(b, "failed in %s: %s\n", r.Name, why)
			if words := topErrors(r.Errors, 3); words != "" {
				fmt.Fprintf(b, "  causes: %s\n", words)
			}
		}
		if slices.Contains(r.Flags, record.FlagScheduleLag) {
			fmt.Fprintf(b, "behind schedule in %s: sends lagged p99 %v, max %v; p99 TTFT from the intended send %s (from the actual send %s)\n",
				r.Name, record.Round(r.LagP99.D()), record.Round(r.LagMax.D()), msText(l.TTFTFromIntendedP99), msText(l.TTFT.P99))
		}
	}
}

// sentRate is a row's send rate against its level: "2.80 of 2", with
// random arrivals "2.80 of 2 (drawn 2.90)" when the draws' rate differs
// from the level's by more than 0.5 %.
func (r Row) sentRate() string {
	if r.TargetRate == 0 {
		return record.Short(r.AchievedRate)
	}
	level := r.Rate
	if level == 0 {
		level = r.TargetRate
	}
	s := record.Short(r.AchievedRate) + " of " + trim(level)
	if math.Abs(r.TargetRate/level-1) > 0.005 {
		s += " (drawn " + record.Short(r.TargetRate) + ")"
	}
	return s
}

// trim formats a level as short does, without trailing zeros: "2", "2.5".
func trim(v float64) string {
	s := record.Short(v)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// msText formats milliseconds as a rounded duration; "-" for none.
func msText(ms float64) string {
	if ms <= 0 {
		return "-"
	}
	return record.Round(time.Duration(ms * float64(time.Millisecond))).String()
}

// writeCells writes a table, its first row the header: columns padded
// (the first left-aligned), each row's notes beside it, or on a line of
// their own when they would pass tableWidth.
func (s Summary) writeCells(b *strings.Builder, cells [][]string) {
	for i, text := range aligned(cells) {
		var line strings.Builder
		line.WriteString(text)
		notes := ""
		switch {
		case i > 0:
			notes = s.Rows[i-1].Notes()
		case slices.ContainsFunc(s.Rows, func(r Row) bool { return r.Notes() != "" }):
			notes = "NOTES"
		}
		switch {
		case notes == "":
		case utf8.RuneCountInString(line.String())+2+utf8.RuneCountInString(notes) <= tableWidth:
			line.WriteString("  " + notes)
		case i > 0:
			line.WriteString("\n  ↳ " + notes)
		}
		b.WriteString(strings.TrimRight(line.String(), " ") + "\n")
	}
}

// tail writes the notices, the stop, the verdict and the run directory.
func (s Summary) tail(b *strings.Builder) {
	for _, n := range s.Notices {
		fmt.Fprintf(b, "note: %s\n", n)
	}
	switch th := s.thresholds(); {
	case th != "":
		fmt.Fprintf(b, "SLO %s: %s, %s\n", th, s.Outcome, s.Verdict)
	case s.Interrupted:
		fmt.Fprintf(b, "%s: %s\n", s.Outcome, s.Verdict)
	}
	fmt.Fprintf(b, "results in %s\n", s.Dir)
}

// aligned renders each row of cells padded to its columns' widths, the
// first left-aligned, the others right-aligned, two spaces apart.
func aligned(cells [][]string) []string {
	var widths []int
	for _, row := range cells {
		for i, c := range row {
			if i == len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	out := make([]string, len(cells))
	for i, row := range cells {
		var line strings.Builder
		for j, c := range row {
			pad := strings.Repeat(" ", widths[j]-utf8.RuneCountInString(c))
			if j == 0 {
				line.WriteString(c + pad)
			} else {
				line.WriteString("  " + pad + c)
			}
		}
		out[i] = line.String()
	}
	return out
}

// topErrors renders the n most frequent causes of failure: "HTTP 429
// queue_full ×120, connection reset ×3"; "" when none failed.
func topErrors(errs map[string]int, n int) string {
	keys := slices.SortedFunc(maps.Keys(errs), func(a, b string) int { return cmp.Or(-cmp.Compare(errs[a], errs[b]), cmp.Compare(a, b)) })
	var parts []string
	for _, k := range keys[:min(n, len(keys))] {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, errs[k]))
	}
	if len(keys) > n {
		parts = append(parts, fmt.Sprintf("%d more causes", len(keys)-n))
	}
	return strings.Join(parts, ", ")
}

// Notes joins a row's caveats, its LLM requests cut off at the drain, and
// its violations, for a table cell.
func (r Row) Notes() string {
	notes := slices.Clip(r.Caveats)
	if r.LLMRow != nil && r.Unfinished > 0 {
		notes = append(notes, fmt.Sprintf("%d cut off at the drain", r.Unfinished))
	}
	return strings.Join(append(notes, r.Violations...), "; ")
}

func (s Summary) thresholds() string {
	var th []string
	if s.SLO.P99 > 0 {
		th = append(th, fmt.Sprintf("p99 ≤ %v", s.SLO.P99.D()))
	}
	if s.SLO.MaxErrorRate > 0 {
		th = append(th, fmt.Sprintf("errors ≤ %g%%", 100*s.SLO.MaxErrorRate))
	}
	if s.SLO.MinThroughput > 0 {
		th = append(th, fmt.Sprintf("throughput ≥ %g/s", s.SLO.MinThroughput))
	}
	for _, d := range []struct {
		name string
		v    record.Duration
	}{{"TTFT", s.SLO.TTFTP99}, {"TPOT", s.SLO.TPOTP99}, {"E2EL", s.SLO.E2ELP99}} {
		if d.v > 0 {
			th = append(th, fmt.Sprintf("%s p99 ≤ %v", d.name, d.v.D()))
		}
	}
	if s.SLO.MinGoodput > 0 {
		th = append(th, fmt.Sprintf("goodput ≥ %g/s", s.SLO.MinGoodput))
	}
	if s.SLO.MinGoodputFraction > 0 {
		th = append(th, fmt.Sprintf("good ≥ %g%%", 100*s.SLO.MinGoodputFraction))
	}
	return strings.Join(th, ", ")
}
