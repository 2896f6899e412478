package loadgen

import (
	"fmt"
	"strings"

	"github.com/inferhq/infer/loadgen/record"
)

// ModelRow is one model of a sweep of models (sweep.model), side by side
// with the others: its best throughput over its complete points, the p99
// latency of that point, and its server's peak resident memory.
type ModelRow struct {
	Model string `json:"model"`
	// Point names the point of the best throughput.
	Point       string          `json:"point"`
	ItemsPerSec float64         `json:"items_per_sec"`
	P99         record.Duration `json:"p99"`
	// RSSBytes is the largest resident memory its server had at the end
	// of a point; 0 when not known.
	RSSBytes int64 `json:"rss_bytes,omitempty"`
	// Accuracy says how closely its outputs follow the first model's
	// (infer models compare), when the caller measured it: "top-1
	// agreement 0.97, top-5 overlap 0.93".
	Accuracy string `json:"accuracy,omitempty"`
}

// modelRows returns the rows of the models of records, in the order of
// their first point; nil when the sweep has no models.
func modelRows(records []record.Record) []ModelRow {
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
			rows = append(rows, ModelRow{Model: m})
		}
		row := &rows[k]
		row.RSSBytes = max(row.RSSBytes, r.Server.RSSBytes)
		if r.Partial || r.ItemsPerSec <= row.ItemsPerSec {
			continue
		}
		row.Point, row.ItemsPerSec, row.P99 = strings.TrimPrefix(r.Point.Name, m+" "), r.ItemsPerSec, r.Latency.P99
	}
	return rows
}

// modelsTable writes the models side by side, each with its ratios to the
// first model's.
func (s Summary) modelsTable(b *strings.Builder) {
	if len(s.Models) < 2 {
		return
	}
	first := s.Models[0]
	ratio := func(v, base float64) string {
		if base == 0 || v == 0 {
			return ""
		}
		return fmt.Sprintf(" (%.2f×)", v/base)
	}
	b.WriteString("models side by side (ratios to " + first.Model + "):\n")
	for _, m := range s.Models {
		line := fmt.Sprintf("  %s: %s items/s%s, p99 %s%s", m.Model, short(m.ItemsPerSec), ratio(m.ItemsPerSec, first.ItemsPerSec),
			msText(m.P99.D().Seconds()*1e3), ratio(m.P99.D().Seconds(), first.P99.D().Seconds()))
		if m.RSSBytes > 0 {
			line += fmt.Sprintf(", RSS %d MiB%s", m.RSSBytes>>20, ratio(float64(m.RSSBytes), float64(first.RSSBytes)))
		}
		if m.Point != "" {
			line += " at " + m.Point
		}
		b.WriteString(line + "\n")
		if m.Accuracy != "" {
			fmt.Fprintf(b, "    against %s: %s\n", first.Model, m.Accuracy)
		}
	}
}
