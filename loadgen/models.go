package loadgen

import (
	"strings"
)

// modelsTable writes the models side by side, each with its ratios to the
// first model's.
func (s Summary) modelsTable(b *strings.Builder) {
	if len(s.Models) < 2 {
		return
	}
	first := s.Models[0]
	b.WriteString("models side by side (ratios to " + first.Model + "):\n")
	for _, m := range s.Models {
		b.WriteString("  " + m.Line(first) + "\n")
		if a := m.AccuracyLine(first); a != "" {
			b.WriteString("    " + a + "\n")
		}
	}
}
