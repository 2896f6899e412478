package report

import (
	"strings"

	"github.com/inferhq/infer/loadgen/record"
)

// writeModels writes the models of a sweep of models (sweep.model) side by
// side, as the bench's summary does: each one's best throughput, its p99
// there and its server's peak RSS, with ratios to the first model, and how
// closely each follows the first (infer models compare, run by infer bench
// after the sweep).
func (v *view) writeModels(b *strings.Builder) {
	rows := record.Models(v.run.Records, v.run.Manifest.Accuracy)
	if len(rows) < 2 {
		return
	}
	first := rows[0]
	b.WriteString("## Models side by side\n\n")
	b.WriteString("Each model's best throughput over its complete points, the p99 latency of that point and its server's peak resident memory, with ratios to " +
		"`" + first.Model + "`; then how closely its outputs follow the first model's (`infer models compare`).\n\n")
	for _, m := range rows {
		b.WriteString("- " + m.Line(first) + "\n")
		if a := m.AccuracyLine(first); a != "" {
			b.WriteString("  - " + a + "\n")
		}
	}
	b.WriteString("\n")
}
