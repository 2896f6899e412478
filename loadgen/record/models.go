package record

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ModelRow is one model of a sweep of models (sweep.model), side by side
// with the others: its best throughput over its complete points, the p99
// latency of that point, and its server's peak resident memory. The bench
// summary and the report both show them, from Models.
type ModelRow struct {
	Model string `json:"model"`
	// Point names the point of the best throughput.
	Point       string   `json:"point"`
	ItemsPerSec float64  `json:"items_per_sec"`
	P99         Duration `json:"p99"`
	// RSSBytes is the largest resident memory its server had at the end
	// of a point; 0 when not known.
	RSSBytes int64 `json:"rss_bytes,omitempty"`
	// Accuracy says how closely its outputs follow the first model's
	// (infer models compare), when it was measured: "fill-mask top-1
	// agreement 0.97, top-5 overlap 0.93 over 275 masks".
	Accuracy string `json:"accuracy,omitempty"`
	// Complete counts its points measured to the end; with none (a run
	// stopped in its first point) it has no throughput to show.
	Complete int `json:"complete_points"`
}

// Models returns the rows of the models of records, in the order of their
// first point, with their accuracy from accuracy (by model; Manifest's);
// nil when the sweep has no models.
func Models(records []Record, accuracy map[string]string) []ModelRow {
	var rows []ModelRow
	index := map[string]int{}
	for i := range records {
		r := &records[i]
		m := r.Point.Model
		if m == "" {
			continue
		}
		k, ok := index[m]
		if !ok {
			k, index[m] = len(rows), len(rows)
			rows = append(rows, ModelRow{Model: m, Accuracy: accuracy[m]})
		}
		row := &rows[k]
		row.RSSBytes = max(row.RSSBytes, r.Server.RSSBytes)
		if r.Partial {
			continue
		}
		row.Complete++
		if r.ItemsPerSec <= row.ItemsPerSec && row.Complete > 1 {
			continue
		}
		row.Point, row.ItemsPerSec, row.P99 = strings.TrimPrefix(r.Point.Name, m+" "), r.ItemsPerSec, r.Latency.P99
	}
	return rows
}

// Line says what r measured, with its ratios to first's: "bert-base-int8:
// 1.33 items/s (5.00×), p99 59.8s (0.32×), RSS 498 MiB (0.60×) at batched
// c=64".
func (r ModelRow) Line(first ModelRow) string {
	ratio := func(v, base float64) string {
		if base == 0 || v == 0 {
			return ""
		}
		return fmt.Sprintf(" (%.2f×)", v/base)
	}
	p99 := "-"
	if r.P99 > 0 {
		p99 = Round(r.P99.D()).String()
	}
	line := fmt.Sprintf("%s: %s items/s%s, p99 %s%s", r.Model, Short(r.ItemsPerSec), ratio(r.ItemsPerSec, first.ItemsPerSec),
		p99, ratio(r.P99.D().Seconds(), first.P99.D().Seconds()))
	if r.Complete == 0 {
		line = r.Model + ": no complete point (the run stopped before one ended)"
	}
	if r.RSSBytes > 0 {
		line += fmt.Sprintf(", RSS %d MiB%s", r.RSSBytes>>20, ratio(float64(r.RSSBytes), float64(first.RSSBytes)))
	}
	if r.Point != "" {
		line += " at " + r.Point
	}
	return line
}

// AccuracyLine says how closely r follows first: "against bert-base:
// fill-mask top-1 agreement 0.96, …"; "" when not measured.
func (r ModelRow) AccuracyLine(first ModelRow) string {
	if r.Accuracy == "" {
		return ""
	}
	return "against " + first.Model + ": " + r.Accuracy
}

// Short formats a rate with three significant digits at most, without an
// exponent: "1526", "97.5", "9.93".
func Short(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
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
