package loadgen

// A capacity search (load.search): each server configuration of the sweep
// gets a search (package search) for the highest load level that meets
// the SLO. Each level measured is a point of its own, flagged search,
// whose record carries the verdict and the bracket after it.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/inferhq/infer/loadgen/record"
	"github.com/inferhq/infer/loadgen/scenario"
	"github.com/inferhq/infer/loadgen/search"
	"github.com/inferhq/infer/loadgen/target"
)

// SearchPlans returns the configurations a capacity search of sc
// searches, one plan each, at the search's first level, in the order they
// run: those of the sweep without its load levels. Nil when sc has no
// search.
func SearchPlans(sc *scenario.Scenario) []Plan {
	s := sc.Load.Search
	if s == nil {
		return nil
	}
	one := *sc
	one.Load.Search = nil
	if s.Open() {
		one.Load.Rates = []float64{s.From}
	} else {
		one.Load.Concurrency = []int{int(s.From)}
	}
	return Plans(&one)
}

// ConfigName names a plan's configuration without its load: "batched
// b=64", "naive".
func ConfigName(sc *scenario.Scenario, p record.Point) string {
	parts := []string{p.Endpoint}
	if p.Endpoint != "naive" {
		parts = append(parts, settingParts(p, varied(sc.Sweep))...)
	}
	if p.Items > 1 {
		parts = append(parts, fmt.Sprintf("items=%d", p.Items))
	}
	return strings.Join(parts, " ")
}

// atLevel returns the plan of tpl's configuration at a search's level,
// numbered index.
func atLevel(sc *scenario.Scenario, tpl Plan, level float64, index int) Plan {
	p := tpl
	p.Index = index
	if sc.Load.Search.Open() {
		p.Point.Load.Rate = level
	} else {
		p.Point.Load.Concurrency = int(level)
	}
	p.Point.Name = pointName(p.Point, varied(sc.Sweep), p.Point.Endpoint != "naive")
	return p
}

// errStopped ends a search whose run was stopped.
var errStopped = errors.New("stopped")

// targetFailedError ends a search whose target went away.
type targetFailedError struct{ err error }

func (e *targetFailedError) Error() string { return e.err.Error() }
func (e *targetFailedError) Unwrap() error { return e.err }

// search runs the capacity search of each configuration in tpls, writing
// each probe's record as soon as it is decided. It reports whether ctx
// cut it short; a target that went away ends it too, with out.TargetFailed
// set.
func (r *runner) search(ctx context.Context, tpls []Plan, w *record.Writer, out *Outcome) (interrupted bool, err error) {
	cfg := r.sc.Load.Search.Config().WithDefaults()
	index := 0
	elapsed := map[int]time.Duration{}
	defer func() { out.Capacities = capacities(out.Records, elapsed) }()
	for ci, tpl := range tpls {
		if ctx.Err() != nil {
			return true, nil
		}
		start := time.Now()
		name := ConfigName(r.sc, tpl.Point)
		r.mon.startSearch(ci, len(tpls), name, r.sc.Load.Search)
		r.mon.startPoint(tpl, 1, r.sc.Load.Warmup+r.sc.Load.Duration, 0)
		if err := r.serve(ctx, tpl); err != nil {
			if ctx.Err() != nil {
				return true, nil
			}
			return false, err
		}
		var (
			run      pointRun
			plan     Plan
			level    float64       // plan's
			perLevel time.Duration // the mean time of a measurement so far
			measured int
			writeErr error
			// The search so far: probes decided, the bracket after them.
			probes         int
			passed, failed float64
		)
		measure := func(x float64, rep int) (search.Measurement, error) {
			if ctx.Err() != nil {
				return search.Measurement{}, errStopped
			}
			if rep == 1 {
				level = x
				plan = atLevel(r.sc, tpl, level, index)
				index++
				run = r.newRun(plan)
			}
			left := cfg.Left(probes, level, passed, failed)
			fresh := cfg.Left(0, 0, 0, 0)
			per := r.sc.Load.Warmup + r.sc.Load.Duration
			if measured > 0 {
				per = perLevel
			}
			remaining := time.Duration(left+fresh*(len(tpls)-ci-1))*per + time.Duration(len(tpls)-ci-1)*r.servers.SwitchTime()
			r.mon.startPoint(plan, 1, r.sc.Load.Warmup+r.sc.Load.Duration, remaining)
			r.mon.searchLevel(level, rep)
			began := time.Now()
			stop, err := run.repeat(ctx, rep)
			if err != nil {
				return search.Measurement{}, err
			}
			if stop {
				return search.Measurement{}, errStopped
			}
			measured++
			perLevel += (time.Since(began) - perLevel) / time.Duration(measured)
			last, unsteady := run.last()
			doubt := doubtOf(last, unsteady)
			if last.ErrorRate() > 0 || last.Sent == 0 {
				if err := target.Reachable(ctx, r.servers.URLs()); err != nil && ctx.Err() == nil {
					return search.Measurement{}, &targetFailedError{err}
				}
			}
			return search.Measurement{Margin: Margin(last, r.sc.SLO), Doubt: doubt}, nil
		}
		var written pointRun // the run whose record was written last
		write := func(rec *record.Record, p search.Probe, s *record.Search) {
			rec.Flags = append(rec.Flags, record.FlagSearch)
			rec.Search = s
			if err := w.Write(rec); err != nil && writeErr == nil {
				writeErr = fmt.Errorf("write results: %w", err)
			}
			written = run
			out.Records = append(out.Records, *rec)
			r.mon.finishPoint(RowOf(rec, r.sc.SLO))
			r.mon.probed(p, s)
			r.cfg.Logger.Info("probe done", "config", name, "level", p.Level, "pass", s.Pass, "margin", s.Margin,
				"bracket", fmt.Sprintf("%v–%v", p.Passed, p.Failed), "end", s.End)
		}
		var partial *search.Probe // a probe cut short after some measurements
		probed := func(p search.Probe) {
			if p.Partial {
				partial = &p
				return
			}
			rec := run.record()
			if rec == nil {
				return
			}
			s := r.probeRecord(ci, name, cfg, p)
			if p.End != "" {
				s.Why = r.why(p, cfg, RowOf(rec, r.sc.SLO).Violations)
			}
			write(rec, p, s)
			probes, passed, failed = p.N, p.Passed, p.Failed
		}
		res := search.Run(cfg, measure, probed)
		if res.End == search.Failed && run != nil && run != written {
			// The level measured when the search failed: what it measured
			// of it, partial.
			p := search.Probe{N: probes + 1, Level: level, Phase: search.Bracket, Passed: passed, Failed: failed, Partial: true, End: search.Failed}
			if failed > 0 {
				p.Phase = search.Bisect
			}
			if partial != nil {
				p = *partial
			}
			if rec := run.record(); rec != nil {
				s := r.probeRecord(ci, name, cfg, p)
				s.End, s.Why = r.failedEnd(res.Err, p.Level)
				rec.Partial = true
				if s.End == record.EndTargetFailed {
					rec.Flags = append(rec.Flags, record.FlagTargetFailed)
					rec.Valid = false
				}
				write(rec, p, s)
			}
		}
		elapsed[ci] = time.Since(start)
		if writeErr != nil {
			return false, writeErr
		}
		if res.End != search.Failed {
			continue
		}
		var tf *targetFailedError
		switch {
		case errors.Is(res.Err, errStopped) || ctx.Err() != nil:
			return true, nil
		case errors.As(res.Err, &tf):
			out.TargetFailed = tf.Error()
			r.notice("the target stopped answering during the search of %s: %v; the result is partial", name, tf.err)
			return false, nil
		}
		return false, res.Err
	}
	return false, nil
}

// doubtOf says why a measurement's figures are in doubt, for a search to
// measure its level again: its throughput drifted, its sends fell behind
// their schedule, or the load generator saturated; "" when none. A held
// back open loop (coordinated omission) and failures are no doubt: they
// are what the SLO judges.
func doubtOf(r *record.Record, unsteady bool) string {
	if unsteady {
		return record.FlagUnsteady
	}
	for _, f := range r.Flags {
		if f == record.FlagScheduleLag || f == record.FlagGeneratorSaturated {
			return f
		}
	}
	return ""
}

// probeRecord is the Search of a probe's record.
func (r *runner) probeRecord(ci int, name string, cfg search.Config, p search.Probe) *record.Search {
	s := &record.Search{Config: ci, Name: name, Over: r.sc.Load.Search.Over, Probe: p.N, Phase: string(p.Phase), Level: p.Level,
		Pass: p.Pass && !p.Partial, Margin: round3(p.Margin), Repeated: p.Repeated, Passed: p.Passed, Failed: p.Failed,
		Tolerance: cfg.Tolerance, End: string(p.End)}
	if len(p.Measurements) > 1 {
		for _, m := range p.Measurements {
			s.Margins = append(s.Margins, round3(m.Margin))
		}
	}
	return s
}

// failedEnd words a search that failed at level.
func (r *runner) failedEnd(err error, level float64) (end, why string) {
	var tf *targetFailedError
	if errors.As(err, &tf) {
		return record.EndTargetFailed, fmt.Sprintf("the target stopped answering at %s (%v): the result is partial", r.levelText(level), tf.err)
	}
	return record.EndStopped, fmt.Sprintf("stopped at %s: the result is partial", r.levelText(level))
}

// why says in a sentence how a search ended at probe p; misses are the
// SLO thresholds its record missed.
func (r *runner) why(p search.Probe, cfg search.Config, misses []string) string {
	lv := r.levelText
	switch p.End {
	case search.Converged:
		return fmt.Sprintf("%s met the SLO and %s missed it: within %s", lv(p.Passed), lv(p.Failed), pctText(cfg.Tolerance))
	case search.NoneMeets:
		w := fmt.Sprintf("even the lowest level, %s, misses the SLO", lv(p.Level))
		if len(misses) > 0 {
			w += " (" + strings.Join(misses, "; ") + ")"
		}
		return w
	case search.AboveRange:
		return fmt.Sprintf("the highest level allowed, %s (load.search.to), meets the SLO: the capacity is above it", lv(p.Level))
	case search.Budget:
		if p.Failed == 0 {
			return fmt.Sprintf("load.search.max_points (%d) measured: the capacity is at least %s", cfg.MaxProbes, lv(p.Passed))
		}
		return fmt.Sprintf("load.search.max_points (%d) measured: the capacity is between %s and %s", cfg.MaxProbes, lv(p.Passed), lv(p.Failed))
	}
	return string(p.End)
}

// levelText renders a search level with its unit: "412 req/s", "37
// clients".
func (r *runner) levelText(x float64) string { return LevelText(r.sc.Load.Search.Over, x) }

// LevelText renders a level of a search over over: "412 req/s", "37
// clients".
func LevelText(over string, x float64) string {
	if over == record.OverClients {
		if x == 1 {
			return "1 client"
		}
		return strconv.FormatFloat(x, 'f', -1, 64) + " clients"
	}
	return strconv.FormatFloat(x, 'f', -1, 64) + " req/s"
}

func pctText(share float64) string { return strconv.FormatFloat(100*share, 'f', -1, 64) + " %" }

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// capacities gathers the searches' capacities from the records, with the
// time each took.
func capacities(recs []record.Record, elapsed map[int]time.Duration) []record.Capacity {
	cs := record.Capacities(recs)
	for i := range cs {
		cs[i].Elapsed = record.Duration(elapsed[cs[i].Config])
	}
	return cs
}
