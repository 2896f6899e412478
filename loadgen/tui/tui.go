// Package tui shows a bench run as it goes: a live terminal view (bubbletea)
// and, without a terminal, plain progress lines. Both are fed the
// aggregated snapshots that loadgen publishes a few times a second; neither
// holds any load logic.
package tui

import (
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/spinner"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/term"

	"github.com/inferhq/infer/loadgen"
	"github.com/inferhq/infer/loadgen/llm"
	"github.com/inferhq/infer/loadgen/record"
	"github.com/inferhq/infer/loadgen/target"
)

// IsTerminal reports whether f is a terminal.
func IsTerminal(f *os.File) bool { return term.IsTerminal(f.Fd()) }

// Width returns the columns of the terminal f, or 0 when f is not one.
func Width(f *os.File) int {
	w, _, err := term.GetSize(f.Fd())
	if err != nil {
		return 0
	}
	return w
}

// Feed carries snapshots from a run to a view: Put never blocks, and a
// snapshot not yet read is replaced by a newer one. One goroutine may Put.
type Feed struct{ ch chan loadgen.Snapshot }

// NewFeed returns an empty feed.
func NewFeed() *Feed { return &Feed{ch: make(chan loadgen.Snapshot, 1)} }

// Put offers s, dropping an unread older snapshot.
func (f *Feed) Put(s loadgen.Snapshot) {
	for {
		select {
		case f.ch <- s:
			return
		default:
		}
		select {
		case <-f.ch:
		default:
		}
	}
}

// Close ends the feed: the view shows the last snapshot and exits.
func (f *Feed) Close() { close(f.ch) }

// Run shows the live view on a terminal until the feed is closed. The first
// q or Ctrl-C calls stop (the run then finishes its current point partially,
// writes its results and closes the feed); a second one leaves at once.
func Run(in io.Reader, out io.Writer, feed *Feed, stop func()) error {
	p := tea.NewProgram(New(feed, stop), tea.WithInput(in), tea.WithOutput(out), tea.WithoutSignalHandler())
	_, err := p.Run()
	return err
}

// Model is the bubbletea model of the live view.
type Model struct {
	feed     <-chan loadgen.Snapshot
	stop     func()
	snap     loadgen.Snapshot
	have     bool // a snapshot has arrived
	stopping bool // the user asked to stop
	done     bool // the feed is closed
	width    int
	spin     spinner.Model
}

// New returns the view of the snapshots from feed; stop is called when the
// user asks to stop.
func New(feed *Feed, stop func()) Model {
	return Model{feed: feed.ch, stop: stop, width: 80, spin: spinner.New(spinner.WithSpinner(spinner.MiniDot))}
}

type snapshotMsg loadgen.Snapshot

type doneMsg struct{}

// next reads one snapshot from the feed.
func next(feed <-chan loadgen.Snapshot) tea.Cmd {
	return func() tea.Msg {
		s, ok := <-feed
		if !ok {
			return doneMsg{}
		}
		return snapshotMsg(s)
	}
}

// Init starts reading the feed.
func (m Model) Init() tea.Cmd { return tea.Batch(next(m.feed), m.spin.Tick) }

// Update handles keys, resizes and snapshots.
func (m Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.KeyMsg:
		switch msg.String() {
		case "q", "ctrl+c", "esc":
			if m.stopping {
				return m, tea.Quit
			}
			m.stopping = true
			stop := m.stop
			return m, func() tea.Msg { stop(); return nil }
		}
	case tea.WindowSizeMsg:
		m.width = msg.Width
	case snapshotMsg:
		m.snap, m.have = loadgen.Snapshot(msg), true
		return m, next(m.feed)
	case doneMsg:
		m.done = true
		return m, tea.Quit
	case spinner.TickMsg:
		var cmd tea.Cmd
		m.spin, cmd = m.spin.Update(msg)
		return m, cmd
	}
	return m, nil
}

var (
	titleStyle = lipgloss.NewStyle().Bold(true)
	dimStyle   = lipgloss.NewStyle().Faint(true)
	warnStyle  = lipgloss.NewStyle().Foreground(lipgloss.Color("3"))
	badStyle   = lipgloss.NewStyle().Foreground(lipgloss.Color("1"))
	labelStyle = lipgloss.NewStyle().Faint(true).Width(9)
	barStyle   = lipgloss.NewStyle().Foreground(lipgloss.Color("63"))
)

// finishedRows is how many finished points the view lists.
const finishedRows = 8

// View renders the current snapshot. Once the run is over it shows the
// header and the bar alone: the summary that follows on the terminal holds
// the results table.
func (m Model) View() string {
	if !m.have {
		return "infer bench: starting…\n"
	}
	s := m.snap
	w := max(m.width, 40)
	over := m.done || s.Phase == loadgen.PhaseDone
	var b strings.Builder
	done := sweepDone(s)
	progress, stopped := fmt.Sprintf("%.0f%% · %d/%d points done", 100*done, s.Done, s.Points), s.Done < s.Points
	if s.Search != nil {
		done, stopped = searchDone(s.Search), s.Stopping
		progress = fmt.Sprintf("%.0f%% · %s", 100*done, searchHead(s.Search))
	}
	head := titleStyle.Render("infer bench · "+s.Scenario) + fmt.Sprintf("   %s · %s elapsed", progress, fmtDur(s.Elapsed))
	switch {
	case over && stopped:
		head += " · " + warnStyle.Render("stopped")
	case over:
		head += " · done"
	default:
		head += " · ETA " + fmtDur(s.ETA)
	}
	b.WriteString(head + "\n")
	b.WriteString(bar(done, min(w-2, 70)) + "\n")
	if over {
		return b.String()
	}
	if s.Shared != "" {
		b.WriteString(dimStyle.Render(truncate(loadgen.SharedText(s.Shared, s.LLM != nil), w)) + "\n")
	}
	if l := loadgen.Legend(s.Point.Name); l != "" && s.Done < s.Points {
		b.WriteString(dimStyle.Render(truncate(l, w)) + "\n")
	}
	b.WriteString("\n")

	if s.Done < s.Points {
		title := fmt.Sprintf("%d/%d %s", s.Index+1, s.Points, s.Point.Name)
		if s.Search != nil {
			title = s.Point.Name
		}
		b.WriteString(m.spin.View() + " " + titleStyle.Render(truncate(title, w-2)) + "\n")
		phase := string(s.Phase)
		if s.Repeats > 1 && s.Repeat > 0 {
			phase += fmt.Sprintf(" · repeat %d/%d", s.Repeat, s.Repeats)
		}
		if s.PhaseTotal > 0 {
			phase += fmt.Sprintf(" · %s of %s", fmtDur(s.PhaseElapsed), fmtDur(s.PhaseTotal))
		}
		b.WriteString("  " + dimStyle.Render(phase) + "\n")
		b.WriteString(m.live(s))
		if s.Search != nil {
			b.WriteString(searchView(s.Search, w))
		}
	}
	if m.stopping || s.Stopping {
		b.WriteString("\n" + warnStyle.Render(truncate("stopping: finishing the current point and writing results… (q again to leave now)", w)) + "\n")
	}
	if len(s.Finished) > 0 && s.Search == nil { // a search's probes are in its ladder
		b.WriteString("\n" + finishedTable(s.Finished, w))
	}
	foot := "results in " + s.Dir
	if !m.stopping {
		foot = "q stop · " + foot
	}
	b.WriteString("\n" + dimStyle.Render(foot) + "\n")
	return b.String()
}

// live renders the current point's live numbers.
func (m Model) live(s loadgen.Snapshot) string {
	var b strings.Builder
	line := func(label, text string) { b.WriteString("  " + labelStyle.Render(label) + text + "\n") }
	if s.LLM != nil {
		m.liveLLM(s, line)
	} else {
		m.liveAnswers(s, line)
	}
	if s.LastError != "" {
		line("error", badStyle.Render(truncate(s.LastError, max(m.width-14, 20))))
	}
	for _, n := range s.Notices {
		for i, l := range wrapWords(n, max(m.width-12, 20)) {
			label := "note"
			if i > 0 {
				label = ""
			}
			line(label, warnStyle.Render(l))
		}
	}
	return b.String()
}

// liveLLM renders an LLM point's live numbers: tokens/s and requests/s
// over the last window, streams, TTFT, TPOT and ITL p50 and p99 since
// the point began, and an infer generation server's gauges.
func (m Model) liveLLM(s loadgen.Snapshot, line func(label, text string)) {
	g := s.LLM
	window := dimStyle.Render("last " + fmtDur(g.Window))
	rate := fmt.Sprintf("%.0f tokens/s · %.2f req/s %s", g.TokensPerS, g.RequestsPerS, window)
	if g.Window < time.Second {
		rate = dimStyle.Render("… (after the first second)")
	}
	if s.TargetRate > 0 {
		rate += fmt.Sprintf(" · target %s/s", trimRate(s.TargetRate))
	}
	line("rate", rate)
	streams := fmt.Sprintf("%d open · %d sent · %d done", g.Open, g.Sent, g.Completed)
	if g.Failed > 0 {
		streams += " · " + badStyle.Render(fmt.Sprintf("%d failed", g.Failed))
	}
	line("streams", streams)
	since := dimStyle.Render("since the point began")
	q := func(v llm.Quantiles) string { return fmt.Sprintf("p50 %-9s p99 %-9s", fmtLat(v.P50), fmtLat(v.P99)) }
	line("TTFT", q(g.TTFT)+since)
	line("TPOT", q(g.TPOT))
	line("ITL", q(g.ITL))
	if v := g.Server; v != nil {
		run := fmt.Sprintf("%.0f", v.Running)
		slots := s.Point.MaxSeqs // the sweep's, else the /v1 engine's
		if slots == 0 && target.GenLabel(s.Point.Endpoint) == "v1" {
			slots = v.MaxSeqs
		}
		if slots > 0 {
			run += fmt.Sprintf("/%d", slots)
		}
		line("server", fmt.Sprintf("%s running · %.0f waiting · KV %.0f%%", run, v.Waiting, 100*v.KV))
	}
	if g.LastError != "" {
		line("error", badStyle.Render(truncate(g.LastError, max(m.width-14, 20))))
	}
}

// trimRate formats a rate without trailing zeros: 2, 1.9.
func trimRate(r float64) string { return strconv.FormatFloat(math.Round(r*100)/100, 'f', -1, 64) }

// liveAnswers renders the live numbers of an encoder point.
func (m Model) liveAnswers(s loadgen.Snapshot, line func(label, text string)) {
	window := dimStyle.Render("last " + fmtDur(s.Window))
	rate := fmt.Sprintf("%.1f answers/s %s", s.RPS, window)
	if s.Window < time.Second {
		rate, window = dimStyle.Render("… (after the first second)"), ""
	}
	if s.TargetRate > 0 {
		rate += fmt.Sprintf(" · target %.0f/s", s.TargetRate)
		if s.Phase == loadgen.PhaseMeasuring && s.RPS < 0.95*s.TargetRate && s.Window >= time.Second {
			rate += " " + warnStyle.Render("(behind)")
		}
	}
	line("rate", rate)
	if s.Phase == loadgen.PhaseMeasuring && s.PhaseElapsed > 0 {
		line("measured", fmt.Sprintf("%.1f ok/s so far %s", s.MeasuredRPS, dimStyle.Render("(the point's throughput)")))
	}
	line("latency", fmt.Sprintf("p50 %-9s p99 %-9s %s", fmtLat(s.P50), fmtLat(s.P99), window))
	if s.TargetRate > 0 && s.LagMax > 0 {
		lag := fmt.Sprintf("p99 %-9s max %-9s", fmtLat(s.LagP99), fmtLat(s.LagMax))
		if s.LagP99 > 10*time.Millisecond {
			lag = warnStyle.Render(lag + " sends are behind the schedule")
		} else {
			lag += dimStyle.Render("sends behind the schedule")
		}
		line("lag", lag)
	}
	if s.Batch > 0 {
		line("batch", fmt.Sprintf("%.1f items per batch (server)", s.Batch))
	}
	line("status", statusLine(s.Status))
	if len(s.Spark) > 0 {
		line("p99", Sparkline(s.Spark, min(60, max(m.width-24, 10)))+dimStyle.Render(" max "+fmtLat(slices.Max(s.Spark))))
	}
}

// sweepDone is the share of the sweep done, counting the current point's
// progress.
// sweepDone is the share of the sweep done, by time: the elapsed time of
// the elapsed time plus the ETA, so that the bar, the percentage and the
// ETA agree (with interleaved repeats no point is done until its last
// repeat, so points done lag far behind).
func sweepDone(s loadgen.Snapshot) float64 {
	if s.Phase == loadgen.PhaseDone || s.Done >= s.Points {
		return fraction(float64(s.Done), float64(s.Points))
	}
	return fraction(float64(s.Elapsed), float64(s.Elapsed+s.ETA))
}

// bar draws a progress bar width cells wide, done (0…1) of it full.
func bar(done float64, width int) string {
	full := int(done*float64(width) + 0.5)
	return barStyle.Render(strings.Repeat("█", full)) + dimStyle.Render(strings.Repeat("░", width-full))
}

func fraction(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return min(max(a/b, 0), 1)
}

// statusLine renders status counts, 200 first, then by code.
func statusLine(status map[string]int) string {
	if len(status) == 0 {
		return "-"
	}
	keys := slices.Sorted(maps.Keys(status))
	var parts []string
	for _, k := range keys {
		text := fmt.Sprintf("%s: %d", k, status[k])
		if k != "200" {
			text = badStyle.Render(text)
		}
		parts = append(parts, text)
	}
	return strings.Join(parts, "  ")
}

// finishedTable lists the last finished points in width columns: a row's
// notes go on a line of their own when they do not fit beside it.
func finishedTable(rows []loadgen.Row, width int) string {
	var b strings.Builder
	skipped := max(len(rows)-finishedRows, 0)
	title := "finished"
	if skipped > 0 {
		title += fmt.Sprintf(" (last %d of %d)", finishedRows, len(rows))
	}
	b.WriteString(titleStyle.Render(title) + "\n")
	const numbers = 8 + 8 + 8 + 7 + 4 // OK/s, P50, P99, ERRORS and their gaps
	nameW := len("POINT")
	for _, r := range rows[skipped:] {
		nameW = max(nameW, len([]rune(r.Name)))
	}
	nameW = min(nameW, max(width-2-numbers-2, 12))
	llmRows := slices.ContainsFunc(rows, func(r loadgen.Row) bool { return r.LLMRow != nil })
	head := fmt.Sprintf("  %-*s %8s %8s %8s %7s", nameW, "POINT", "OK/s", "P50", "P99", "ERRORS")
	if llmRows { // TOK/s, TTFT p99, TPOT p99 in the places of OK/s, P50, P99
		head = fmt.Sprintf("  %-*s %8s %8s %8s %7s", nameW, "POINT", "TOK/s", "TTFT99", "TPOT99", "ERRORS")
	}
	if slices.ContainsFunc(rows[skipped:], func(r loadgen.Row) bool { return r.Notes() != "" }) {
		head += "  NOTES"
	}
	b.WriteString(dimStyle.Render(head) + "\n")
	for _, r := range rows[skipped:] {
		line := fmt.Sprintf("  %-*s %8.1f %8s %8s %6.1f%%", nameW, truncate(r.Name, nameW), r.Throughput,
			fmtLat(r.P50.D()), fmtLat(r.P99.D()), 100*r.ErrorRate)
		if g := r.LLMRow; g != nil {
			line = fmt.Sprintf("  %-*s %8.0f %8s %8s %6.1f%%", nameW, truncate(r.Name, nameW), g.OutputTokensPerS,
				fmtMs(g.TTFT.P99), fmtMs(g.TPOT.P99), 100*r.ErrorRate)
		}
		if n := r.Notes(); n != "" {
			if len([]rune(line))+2+len([]rune(n)) <= width {
				line += "  " + n
			} else {
				line += "\n" + truncate("    ↳ "+n, width)
			}
		}
		if !r.Valid || len(r.Violations) > 0 {
			line = warnStyle.Render(line)
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

// Sparkline draws values as block characters, scaled to the largest, using
// at most width of the latest values.
func Sparkline(values []time.Duration, width int) string {
	const blocks = "▁▂▃▄▅▆▇█"
	runes := []rune(blocks)
	if len(values) > width {
		values = values[len(values)-width:]
	}
	top := slices.Max(values)
	var b strings.Builder
	for _, v := range values {
		i := 0
		if top > 0 {
			i = int(float64(v) / float64(top) * float64(len(runes)-1))
		}
		b.WriteRune(runes[min(max(i, 0), len(runes)-1)])
	}
	return b.String()
}

// wrapWords breaks s into lines of at most width runes, between words (a
// longer word is cut).
func wrapWords(s string, width int) []string {
	var lines []string
	cur := ""
	for _, w := range strings.Fields(s) {
		switch {
		case cur == "":
			cur = w
		case len([]rune(cur))+1+len([]rune(w)) <= width:
			cur += " " + w
		default:
			lines = append(lines, cur)
			cur = w
		}
		for len([]rune(cur)) > width {
			r := []rune(cur)
			lines = append(lines, string(r[:width]))
			cur = string(r[width:])
		}
	}
	if cur != "" {
		lines = append(lines, cur)
	}
	return lines
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:max(n-1, 0)]) + "…"
}

// fmtLat formats a latency to about 3 significant digits.
func fmtLat(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return record.Round(d).String()
}

// fmtDur formats a span of time in whole seconds: "1m05s".
func fmtDur(d time.Duration) string {
	d = d.Round(time.Second)
	if d < time.Minute {
		return strconv.Itoa(int(d.Seconds())) + "s"
	}
	h, m, sec := int(d.Hours()), int(d.Minutes())%60, int(d.Seconds())%60
	if h > 0 {
		return fmt.Sprintf("%dh%02dm%02ds", h, m, sec)
	}
	return fmt.Sprintf("%dm%02ds", m, sec)
}
