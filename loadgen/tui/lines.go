package tui

import (
	"fmt"
	"io"
	"time"

	"github.com/inferhq/infer/loadgen"
)

// Lines writes a run's progress as plain lines, for logs and pipes: one
// when a point starts, one every Every while it runs, and one when it
// finishes. Put it in loadgen.Config.Progress.
type Lines struct {
	W     io.Writer
	Every time.Duration // default 5s

	started  bool
	index    int
	finished int
	notices  int
	last     time.Duration // Elapsed at the last progress line
	stopping bool
	search   searchLines
}

// Put writes the lines the snapshot calls for.
func (l *Lines) Put(s loadgen.Snapshot) {
	every := l.Every
	if every <= 0 {
		every = 5 * time.Second
	}
	for _, r := range s.Finished[min(l.finished, len(s.Finished)):] {
		if g := r.LLMRow; g != nil {
			fmt.Fprintf(l.W, "%s done %s: %.2f req/s, %.0f tokens/s, TTFT p50 %s p99 %s, TPOT p99 %s, errors %.2f%%%s\n",
				at(s, r.Index), r.Name, g.RequestsPerS, g.OutputTokensPerS, fmtMs(g.TTFT.P50), fmtMs(g.TTFT.P99), fmtMs(g.TPOT.P99), 100*r.ErrorRate, notes(r))
			continue
		}
		fmt.Fprintf(l.W, "%s done %s: %.1f ok/s, %.1f items/s, p50 %s, p99 %s, errors %.2f%%%s\n",
			at(s, r.Index), r.Name, r.Throughput, r.ItemsPerSec, fmtLat(r.P50.D()), fmtLat(r.P99.D()), 100*r.ErrorRate, notes(r))
	}
	l.finished = len(s.Finished)
	l.search.put(l.W, s.Search)
	for _, n := range s.Notices[min(l.notices, len(s.Notices)):] {
		fmt.Fprintf(l.W, "note: %s\n", n)
	}
	l.notices = len(s.Notices)
	if s.Stopping && !l.stopping {
		l.stopping = true
		fmt.Fprintln(l.W, "stopping: finishing the current point and writing results…")
	}
	if s.Phase == loadgen.PhaseDone || s.Done >= s.Points {
		return
	}
	if !l.started || s.Index != l.index {
		l.started, l.index, l.last = true, s.Index, s.Elapsed
		fmt.Fprintf(l.W, "%s %s: %s · ETA %s\n", at(s, s.Index), s.Point.Name, s.Phase, fmtDur(s.ETA))
		return
	}
	if s.Elapsed-l.last < every {
		return
	}
	l.last = s.Elapsed
	line := fmt.Sprintf("%s %s: %s", at(s, s.Index), s.Point.Name, s.Phase)
	if s.Repeats > 1 {
		line += fmt.Sprintf(" (repeat %d/%d)", s.Repeat, s.Repeats)
	}
	if g := s.LLM; g != nil {
		if s.PhaseTotal > 0 {
			line += fmt.Sprintf(" %s of %s", fmtDur(s.PhaseElapsed), fmtDur(s.PhaseTotal))
		}
		line += fmt.Sprintf(" · %d open · %.0f tokens/s, %.2f req/s over %s · TTFT p50 %s p99 %s · TPOT p50 %s p99 %s",
			g.Open, g.TokensPerS, g.RequestsPerS, fmtDur(g.Window), fmtLat(g.TTFT.P50), fmtLat(g.TTFT.P99), fmtLat(g.TPOT.P50), fmtLat(g.TPOT.P99))
		if v := g.Server; v != nil {
			line += fmt.Sprintf(" · server %.0f running, %.0f waiting, KV %.0f%%", v.Running, v.Waiting, 100*v.KV)
		}
		if g.Failed > 0 {
			line += fmt.Sprintf(" · %d failed", g.Failed)
		}
		fmt.Fprintf(l.W, "%s · ETA %s\n", line, fmtDur(s.ETA))
		return
	}
	line += fmt.Sprintf(" %s of %s · %.1f answers/s over %s", fmtDur(s.PhaseElapsed), fmtDur(s.PhaseTotal), s.RPS, fmtDur(s.Window))
	if s.TargetRate > 0 {
		line += fmt.Sprintf(" (target %.0f/s)", s.TargetRate)
	}
	if s.Phase == loadgen.PhaseMeasuring {
		line += fmt.Sprintf(" · %.1f ok/s so far", s.MeasuredRPS)
	}
	line += fmt.Sprintf(" · p50 %s p99 %s", fmtLat(s.P50), fmtLat(s.P99))
	if s.TargetRate > 0 && s.LagP99 > 10*time.Millisecond {
		line += fmt.Sprintf(" · sends %s behind schedule (p99)", fmtLat(s.LagP99))
	}
	if s.Batch > 0 {
		line += fmt.Sprintf(" · batch %.1f", s.Batch)
	}
	if bad := failures(s.Status); bad > 0 {
		line += fmt.Sprintf(" · %d failed", bad)
	}
	fmt.Fprintf(l.W, "%s · ETA %s\n", line, fmtDur(s.ETA))
}

func notes(r loadgen.Row) string {
	if n := r.Notes(); n != "" {
		return " [" + n + "]"
	}
	return ""
}

func failures(status map[string]int) int {
	n := 0
	for k, v := range status {
		if k != "200" {
			n += v
		}
	}
	return n
}

// fmtMs formats milliseconds like fmtLat.
func fmtMs(ms float64) string { return fmtLat(time.Duration(ms * float64(time.Millisecond))) }
