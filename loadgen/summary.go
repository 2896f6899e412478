package loadgen

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/inferhq/infer/loadgen/record"
)

// Row summarises one point's record.
type Row struct {
	Index        int             `json:"index"`
	Name         string          `json:"name"`
	Sent         int             `json:"sent"`
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
	// Violations lists the SLO thresholds the point missed.
	Violations []string `json:"violations,omitempty"`
	// Caveats are the record's (record.Record.Caveats).
	Caveats []string `json:"-"`
}

// RowOf summarises r against slo.
func RowOf(r *record.Record, slo SLO) Row {
	row := Row{
		Index: r.Index, Name: r.Point.Name, Sent: r.Sent,
		TargetRate: r.TargetRate, AchievedRate: r.AchievedRate,
		Throughput: r.Throughput, ItemsPerSec: r.ItemsPerSec,
		P50: r.Latency.P50, P99: r.Latency.P99,
		ErrorRate: r.ErrorRate(), Batch: r.MeanBatch(), ResponseBatch: r.Server.ResponseBatch,
		Valid: r.Valid, Flags: r.Flags, Partial: r.Partial, Caveats: r.Caveats(),
	}
	switch {
	case slo.P99 == 0:
	case r.Throughput == 0:
		row.Violations = append(row.Violations, "p99 unknown: no successful request")
	case r.Latency.P99.D() > slo.P99:
		row.Violations = append(row.Violations, fmt.Sprintf("p99 %v > %v", Round(r.Latency.P99.D()), slo.P99))
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
	Scenario    string `json:"scenario"`
	Dir         string `json:"dir"`
	Points      int    `json:"points"` // planned
	Rows        []Row  `json:"rows"`
	Interrupted bool   `json:"interrupted,omitempty"`
	SLO         struct {
		record.SLO
		Require string `json:"require,omitempty"`
	} `json:"slo"`
	// Passed is the thresholds' verdict: with Require "all", every
	// complete point passed; with "any", some point did. A run without
	// thresholds passes.
	Passed  bool   `json:"passed"`
	Verdict string `json:"verdict"`
}

// Summarize judges the outcome of a run against the scenario's SLO.
// Partial points are shown but not judged.
func Summarize(o *Outcome, slo SLO) Summary {
	s := Summary{Scenario: o.Manifest.Scenario, Dir: o.Dir, Points: o.Points, Interrupted: o.Interrupted}
	s.SLO.SLO, s.SLO.Require = slo.Record(), slo.Require
	judged, passed := 0, 0
	for i := range o.Records {
		row := RowOf(&o.Records[i], slo)
		s.Rows = append(s.Rows, row)
		if !row.Partial {
			judged++
			if len(row.Violations) == 0 {
				passed++
			}
		}
	}
	switch {
	case slo.P99 == 0 && slo.MaxErrorRate == 0 && slo.MinThroughput == 0:
		s.Passed, s.Verdict = true, "no thresholds set"
	case judged == 0:
		s.Passed, s.Verdict = true, "no complete point to judge"
	case slo.Require == "any":
		s.Passed = passed > 0
		s.Verdict = fmt.Sprintf("%d of %d points meet the SLO (any must)", passed, judged)
	default:
		s.Passed = passed == judged
		s.Verdict = fmt.Sprintf("%d of %d points meet the SLO (all must)", passed, judged)
	}
	return s
}

// WriteText writes the summary as a table.
func (s Summary) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POINT\tSENT\tRATE/s\tOK/s\tITEMS/s\tP50\tP99\tERRORS\tBATCH\tNOTES")
	for _, r := range s.Rows {
		rate := fmt.Sprintf("%.1f", r.AchievedRate)
		if r.TargetRate > 0 {
			rate += fmt.Sprintf(" of %.0f", r.TargetRate)
		}
		batch := "-"
		if r.Batch > 0 {
			batch = fmt.Sprintf("%.1f", r.Batch)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%.1f\t%.1f\t%v\t%v\t%.2f%%\t%s\t%s\n", r.Name, r.Sent, rate, r.Throughput, r.ItemsPerSec,
			Round(r.P50.D()), Round(r.P99.D()), 100*r.ErrorRate, batch, r.Notes())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var b strings.Builder
	if s.Interrupted {
		done := 0
		for _, r := range s.Rows {
			if !r.Partial {
				done++
			}
		}
		fmt.Fprintf(&b, "stopped: %d of %d points done\n", done, s.Points)
	}
	verdict := "PASS"
	if !s.Passed {
		verdict = "FAIL"
	}
	if th := s.thresholds(); th != "" {
		fmt.Fprintf(&b, "SLO %s: %s, %s\n", th, verdict, s.Verdict)
	}
	fmt.Fprintf(&b, "results in %s\n", s.Dir)
	_, err := io.WriteString(w, b.String())
	return err
}

// Notes joins a row's caveats and violations for a table cell.
func (r Row) Notes() string {
	return strings.Join(append(slices.Clip(r.Caveats), r.Violations...), "; ")
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
	return strings.Join(th, ", ")
}

// Round shortens a duration for display to about 3 significant digits.
func Round(d time.Duration) time.Duration {
	switch {
	case d >= 100*time.Second:
		return d.Round(time.Second)
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond)
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= 100*time.Millisecond:
		return d.Round(time.Millisecond)
	case d >= 10*time.Millisecond:
		return d.Round(100 * time.Microsecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	default:
		return d.Round(time.Microsecond)
	}
}
