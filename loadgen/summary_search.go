package loadgen

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/inferhq/infer/loadgen/record"
)

// rankCapacities orders capacities highest first, those found by a
// finished search before those of a search cut short, configurations
// that met the SLO at no level last.
func rankCapacities(cs []record.Capacity) []record.Capacity {
	out := slices.Clone(cs)
	slices.SortStableFunc(out, func(a, b record.Capacity) int {
		return cmp.Or(-cmp.Compare(a.Capacity, b.Capacity), cmp.Compare(b2i(a.Partial), b2i(b.Partial)), cmp.Compare(a.Config, b.Config))
	})
	return out
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// judgeSearch sets the verdict of a capacity search: with require "all",
// every configuration searched to its end meets the SLO at some level;
// with "any", one does. A target that went away fails it: the result is
// partial.
func (s *Summary) judgeSearch(o *Outcome, require string) {
	s.Capacity = rankCapacities(o.Capacities)
	judged, met := 0, 0
	var none []string
	for _, c := range o.Capacities {
		if c.End == "" || c.End == record.EndStopped || c.End == record.EndTargetFailed {
			continue
		}
		judged++
		if c.Capacity > 0 {
			met++
		} else {
			none = append(none, c.Name)
		}
	}
	switch {
	case o.TargetFailed != "":
		s.Passed, s.Verdict = false, "the target stopped answering mid-search: the result is partial"
	case judged == 0:
		s.Outcome, s.Verdict = OutcomeUnjudged, "no search finished"
	case require == "any":
		s.Passed = met > 0
		s.Verdict = fmt.Sprintf("%d of %d configurations meet the SLO at some load (any must)", met, judged)
	default:
		s.Passed = met == judged
		s.Verdict = fmt.Sprintf("%d of %d configurations meet the SLO at some load (all must)", met, judged)
	}
	if len(none) > 0 && !s.Passed {
		s.Verdict += "; no load meets the SLO for " + strings.Join(none, ", ")
	}
}

// capacityTable writes the capacities under the SLO, ranked, then how
// each search ended.
func (s Summary) capacityTable(b *strings.Builder) {
	if len(s.Capacity) == 0 {
		return
	}
	head := "capacity under the SLO"
	if th := s.thresholds(); th != "" {
		head += " (" + th + ")"
	}
	b.WriteString(head + ", highest first:\n")
	cells := [][]string{{"CONFIGURATION", "CAPACITY", "BRACKET", "PROBES", "TIME"}}
	for _, c := range s.Capacity {
		capText := LevelText(c.Over, c.Capacity)
		if c.Capacity == 0 {
			capText = "none"
		}
		if c.Partial {
			capText += "?"
		}
		took := "-"
		if c.Elapsed > 0 {
			took = fmtClock(c.Elapsed.D())
		}
		cells = append(cells, []string{c.Name, capText, bracketText(c), fmt.Sprintf("%d/%d", c.Probes, c.Measurements), took})
	}
	for _, line := range aligned(cells) {
		b.WriteString(strings.TrimRight(line, " ") + "\n")
	}
	b.WriteString("  (PROBES: levels/measurements; a capacity with ? is partial)\n")
	for _, c := range s.Capacity {
		if c.Why != "" {
			fmt.Fprintf(b, "%s: %s\n", c.Name, c.Why)
		} else {
			fmt.Fprintf(b, "%s: cut short\n", c.Name)
		}
	}
}

// bracketText renders a capacity's bracket: "412–425 req/s", "≥ 2000
// req/s", "< 50 req/s".
func bracketText(c record.Capacity) string {
	unit := strings.TrimPrefix(LevelText(c.Over, 2), "2 ")
	n := func(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }
	switch {
	case c.Capacity > 0 && c.Failed > 0:
		return n(c.Capacity) + "–" + n(c.Failed) + " " + unit
	case c.Capacity > 0:
		return "≥ " + n(c.Capacity) + " " + unit
	case c.Failed > 0:
		return "< " + n(c.Failed) + " " + unit
	}
	return "-"
}

// fmtClock renders a span like "2m05s", "48s".
func fmtClock(d time.Duration) string {
	d = d.Round(time.Second)
	if d < time.Minute {
		return strconv.Itoa(int(d.Seconds())) + "s"
	}
	return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
}
