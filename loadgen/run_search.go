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
	elapsed := map[int]time.Duration{}
	defer func() { out.Capacities = capacities(out.Records, elapsed) }()
	index := 0 // of the next probe's record
	for ci, tpl := range tpls {
		if ctx.Err() != nil {
			return true, nil
		}
		start := time.Now()
		c := &configSearch{r: r, ctx: ctx, cfg: cfg, ci: ci, configs: len(tpls), name: ConfigName(r.sc, tpl.Point), tpl: tpl,
			w: w, out: out, index: index}
		r.mon.startSearch(ci, len(tpls), c.name, r.sc.Load.Search)
		r.mon.startPoint(tpl, 1, r.sc.Load.Warmup+r.sc.Load.Duration, 0)
		if err := r.serve(ctx, tpl); err != nil {
			if ctx.Err() != nil {
				return true, nil
			}
			return false, err
		}
		res := search.Run(cfg, c.measure, c.probed)
		c.finish(res)
		index = c.index
		elapsed[ci] = time.Since(start)
		if c.writeErr != nil {
			return false, c.writeErr
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
			r.notice("the target stopped answering during the search of %s: %v; the result is partial", c.name, tf.err)
			return false, nil
		}
		return false, res.Err
	}
	return false, nil
}

// configSearch is the search of one configuration: the callbacks of
// search.Run, and what they share.
type configSearch struct {
	r           *runner
	ctx         context.Context // the run's: a search is a call of search()
	cfg         search.Config
	ci, configs int // this configuration (from 0), of how many
	name        string
	tpl         Plan
	w           *record.Writer
	out         *Outcome
	index       int // of the next probe's record
	writeErr    error

	run      pointRun // the level being measured
	plan     Plan
	level    float64
	written  pointRun      // the run whose record was written last
	partial  *search.Probe // a probe cut short after some measurements
	perLevel time.Duration // the mean time of a measurement so far
	measured int
	// The search so far: probes decided, the bracket after them.
	probes         int
	passed, failed float64
}

// measure measures level x once (search.Measure); rep counts from 1.
func (c *configSearch) measure(x float64, rep int) (search.Measurement, error) {
	r, ctx := c.r, c.ctx
	if ctx.Err() != nil {
		return search.Measurement{}, errStopped
	}
	if rep == 1 {
		c.level, c.plan = x, atLevel(r.sc, c.tpl, x, c.index)
		c.index++
		c.run = r.newRun(c.plan)
	}
	r.mon.startPoint(c.plan, 1, r.sc.Load.Warmup+r.sc.Load.Duration, c.remaining())
	r.mon.searchLevel(x, rep)
	began := time.Now()
	stop, err := c.run.repeat(ctx, rep)
	if err != nil {
		return search.Measurement{}, err
	}
	if stop {
		return search.Measurement{}, errStopped
	}
	c.measured++
	c.perLevel += (time.Since(began) - c.perLevel) / time.Duration(c.measured)
	last, unsteady := c.run.last()
	if last.ErrorRate() > 0 || last.Sent == 0 {
		if err := target.Reachable(ctx, r.servers.URLs()); err != nil && ctx.Err() == nil {
			return search.Measurement{}, &targetFailedError{err}
		}
	}
	return search.Measurement{Margin: Margin(last, r.sc.SLO), Doubt: doubtOf(last, unsteady)}, nil
}

// remaining estimates the time the search's later measurements take: the
// probes this configuration likely needs, and a fresh search of each
// configuration after it, at the mean time of a measurement so far.
func (c *configSearch) remaining() time.Duration {
	per := c.r.sc.Load.Warmup + c.r.sc.Load.Duration
	if c.measured > 0 {
		per = c.perLevel
	}
	after := c.configs - c.ci - 1
	left := c.cfg.Left(c.probes, c.level, c.passed, c.failed) + after*c.cfg.Left(0, 0, 0, 0)
	return time.Duration(left)*per + time.Duration(after)*c.r.servers.SwitchTime()
}

// probed writes the record of a probe decided (search.Run's probed).
func (c *configSearch) probed(p search.Probe) {
	if p.Partial {
		c.partial = &p // finish writes it
		return
	}
	rec := c.run.record()
	if rec == nil {
		return
	}
	s := c.r.probeRecord(c.ci, c.name, c.cfg, p)
	if p.End != "" {
		s.Why = c.r.why(p, c.cfg, RowOf(rec, c.r.sc.SLO).Violations)
	}
	c.write(rec, p, s)
	c.probes, c.passed, c.failed = p.N, p.Passed, p.Failed
}

// finish writes the record of the level a failed search was measuring,
// as far as it was measured, partial.
func (c *configSearch) finish(res search.Result) {
	if res.End != search.Failed || c.run == nil || c.run == c.written {
		return
	}
	rec := c.run.record()
	if rec == nil {
		return
	}
	p := search.Probe{N: c.probes + 1, Level: c.level, Phase: search.Bracket, Passed: c.passed, Failed: c.failed,
		Partial: true, End: search.Failed}
	if c.failed > 0 {
		p.Phase = search.Bisect
	}
	if c.partial != nil {
		p = *c.partial
	}
	s := c.r.probeRecord(c.ci, c.name, c.cfg, p)
	s.End, s.Why = c.r.failedEnd(res.Err, p.Level)
	rec.Partial = true
	if s.End == record.EndTargetFailed {
		rec.Flags = append(rec.Flags, record.FlagTargetFailed)
		rec.Valid = false
	}
	c.write(rec, p, s)
}

// write writes a probe's record and shows it.
func (c *configSearch) write(rec *record.Record, p search.Probe, s *record.Search) {
	r := c.r
	rec.Flags = append(rec.Flags, record.FlagSearch)
	rec.Search = s
	if err := c.w.Write(rec); err != nil && c.writeErr == nil {
		c.writeErr = fmt.Errorf("write results: %w", err)
	}
	c.written = c.run
	c.out.Records = append(c.out.Records, *rec)
	r.mon.finishPoint(RowOf(rec, r.sc.SLO))
	r.mon.probed(p, s)
	r.cfg.Logger.Info("probe done", "config", c.name, "level", p.Level, "pass", s.Pass, "margin", s.Margin,
		"bracket", fmt.Sprintf("%v–%v", p.Passed, p.Failed), "end", s.End)
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
