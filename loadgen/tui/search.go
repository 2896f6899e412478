package tui

// The live view of a capacity search (load.search): the configuration
// searched, the level measured, and the bracket narrowing probe by probe
// around the capacity.

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/inferhq/infer/loadgen"
	"github.com/inferhq/infer/loadgen/record"
)

// searchSteps is how many probes the bracket picture shows at most.
const searchSteps = 8

// searchHead is the header's progress for a search: "config 2/3 · probe
// 5".
func searchHead(s *loadgen.SearchLive) string {
	return fmt.Sprintf("config %d/%d · probe %d", s.Config, s.Configs, max(s.Probe, len(s.Steps)))
}

// searchDone is the share of a search done: the configurations finished,
// and of the current one the probes decided against those left.
func searchDone(s *loadgen.SearchLive) float64 {
	cur := 0.0
	if n := len(s.Steps); n+s.Left > 0 {
		cur = float64(n) / float64(n+s.Left)
	}
	return fraction(float64(s.Config-1)+cur, float64(s.Configs))
}

// searchView renders the search: the level measured, then the bracket
// after each recent probe on a log scale of the levels, then what the
// finished configurations carry.
func searchView(s *loadgen.SearchLive, width int) string {
	var b strings.Builder
	line := func(label, text string) { b.WriteString("  " + labelStyle.Render(label) + text + "\n") }
	now := fmt.Sprintf("%s · probe %d of ≤%d at %s", s.Name, max(s.Probe, 1), s.MaxProbes, loadgen.LevelText(s.Over, s.Level))
	if s.Repeat > 1 {
		now += fmt.Sprintf(" · measurement %d", s.Repeat)
	}
	line("search", truncate(now, max(width-11, 20)))
	line("bracket", bracketText(s.Passed, s.Failed, s.Over)+dimStyle.Render(fmt.Sprintf("  to within %s %%", num(100*s.Tolerance))))
	steps := s.Steps
	skip := max(len(steps)-searchSteps, 0)
	if len(steps) > 0 {
		lo, hi := s.From, s.Level
		for _, st := range steps {
			lo, hi = math.Min(lo, st.Level), math.Max(hi, st.Level)
		}
		barW := max(min(width-36, 40), 10)
		for i, st := range steps[skip:] {
			mark := "✓"
			if !st.Pass {
				mark = "✗"
			}
			if st.Partial {
				mark = "…"
			}
			note := ""
			if st.Measured > 1 {
				note = fmt.Sprintf(" ×%d", st.Measured)
			}
			if st.Doubtful {
				note += " in doubt"
			}
			row := fmt.Sprintf("%3d %9s %s %5s ", skip+i+1, num(st.Level), mark, marginText(st.Margin)) +
				ladder(lo, hi, st.Passed, st.Failed, st.Level, barW) + dimStyle.Render(note)
			if !st.Pass {
				row = warnStyle.Render(row)
			}
			b.WriteString("  " + row + "\n")
		}
	}
	for _, c := range s.Found {
		text := c.Name + ": "
		switch {
		case c.Capacity > 0 && c.Failed > 0:
			text += fmt.Sprintf("%s (%s missed)", loadgen.LevelText(c.Over, c.Capacity), num(c.Failed))
		case c.Capacity > 0:
			text += "at least " + loadgen.LevelText(c.Over, c.Capacity)
		default:
			text += "no level meets the SLO"
		}
		line("found", truncate(text, max(width-11, 20)))
	}
	return b.String()
}

// ladder draws the bracket [passed, failed] on a log scale of lo…hi,
// width cells: ━ inside it, the probe's level as ┃; an open end (0)
// reaches the edge.
func ladder(lo, hi, passed, failed, level float64, width int) string {
	if !(hi > lo) {
		hi = lo * 2
	}
	x := func(v float64) int {
		f := (math.Log(v) - math.Log(lo)) / (math.Log(hi) - math.Log(lo))
		return min(max(int(math.Round(f*float64(width-1))), 0), width-1)
	}
	from, to := 0, width-1
	if passed > 0 {
		from = x(passed)
	}
	if failed > 0 {
		to = x(failed)
	}
	cells := []rune(strings.Repeat("·", width))
	for i := from; i <= to; i++ {
		cells[i] = '━'
	}
	cells[x(level)] = '┃'
	return "▕" + string(cells) + "▏"
}

// bracketText renders a bracket of a search over over: "400 ✓ … 800 ✗
// req/s (100 % wide)", "≥ 400 req/s", "< 2 clients".
func bracketText(passed, failed float64, over string) string {
	switch {
	case passed > 0 && failed > 0:
		return fmt.Sprintf("%s ✓ … %s ✗ %s (%s %% wide)", num(passed), num(failed), unitOf(over), num(math.Round(100*(failed-passed)/passed)))
	case passed > 0:
		return "≥ " + loadgen.LevelText(over, passed)
	case failed > 0:
		return "< " + loadgen.LevelText(over, failed)
	}
	return "-"
}

// marginText renders a margin to the SLO's bounds: "0.62×".
func marginText(m float64) string {
	if m >= 100 {
		return "≫1"
	}
	return strconv.FormatFloat(m, 'f', 2, 64) + "×"
}

func unitOf(over string) string {
	if over == record.OverClients {
		return "clients"
	}
	return "req/s"
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// at is a progress line's prefix for point index: "[3/7]" in a sweep,
// "[config 2/3]" in a search.
func at(s loadgen.Snapshot, index int) string {
	if s.Search != nil {
		return fmt.Sprintf("[config %d/%d]", s.Search.Config, s.Search.Configs)
	}
	return fmt.Sprintf("[%d/%d]", index+1, s.Points)
}

// searchLines writes a search's progress as plain lines: the bracket
// after each probe, and each configuration's capacity when found.
type searchLines struct {
	config, steps, found int
}

func (l *searchLines) put(w io.Writer, s *loadgen.SearchLive) {
	if s == nil {
		return
	}
	for _, c := range s.Found[min(l.found, len(s.Found)):] {
		if c.Capacity > 0 {
			fmt.Fprintf(w, "capacity of %s: %s (%s)\n", c.Name, loadgen.LevelText(c.Over, c.Capacity), bracketText(c.Capacity, c.Failed, s.Over))
		} else {
			fmt.Fprintf(w, "capacity of %s: no level meets the SLO\n", c.Name)
		}
	}
	l.found = len(s.Found)
	if s.Config != l.config {
		l.config, l.steps = s.Config, 0
	}
	for _, st := range s.Steps[min(l.steps, len(s.Steps)):] {
		verdict := "meets the SLO"
		if !st.Pass {
			verdict = "misses the SLO"
		}
		if st.Partial {
			verdict = "cut short"
		}
		fmt.Fprintf(w, "search %s: %s %s (margin %s, %d measurement%s) → bracket %s\n", s.Name, loadgen.LevelText(s.Over, st.Level), verdict,
			marginText(st.Margin), st.Measured, plural(st.Measured), bracketText(st.Passed, st.Failed, s.Over))
	}
	l.steps = len(s.Steps)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
