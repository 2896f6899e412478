package loadgen

import (
	"context"
	"fmt"
	"time"

	"github.com/inferhq/infer/loadgen/record"
	"github.com/inferhq/infer/loadgen/scenario"
)

// A pointRun is a point being measured, one repeat at a time, against the
// server the runner holds when each repeat starts.
type pointRun interface {
	// repeat measures repeat rep (from 1); stop reports that ctx cut it
	// short, after which no repeat of any point runs.
	repeat(ctx context.Context, rep int) (stop bool, err error)
	// record builds the point's record from the repeats measured, marked
	// partial when fewer than planned finished; nil when none measured
	// anything.
	record() *record.Record
	// last returns the record of the latest repeat alone and whether its
	// throughput drifted; nil before the first.
	last() (*record.Record, bool)
}

func (r *runner) newRun(p Plan) pointRun {
	if r.sc.Payload.LLM != nil {
		return r.newLLMRun(p)
	}
	return r.newClassicRun(p)
}

// blocks groups the plans of s, by index, into the sets whose repeats run
// together. By default each plan is its own block: its repeats run one
// after another. With load.interleave, the plans of one endpoint and load
// level form a block, and its rounds run repeat 1 of every server
// configuration, then repeat 2 of every one, and so on: configurations
// compared at a level then see the same machine, whatever it does over
// minutes. Blocks are in the order of their first plan.
func blocks(s *scenario.Scenario, plans []Plan) [][]int {
	if !s.Load.Interleave {
		out := make([][]int, len(plans))
		for i := range plans {
			out[i] = []int{i}
		}
		return out
	}
	type key struct {
		endpoint string
		level    int
	}
	at := map[key]int{}
	var out [][]int
	for i, p := range plans {
		k := key{p.Point.Endpoint, p.level}
		b, ok := at[k]
		if !ok {
			b = len(out)
			at[k] = b
			out = append(out, nil)
		}
		out[b] = append(out[b], i)
	}
	return out
}

// unit is one repeat of one plan, in the order they run.
type unit struct{ plan, rep int }

// units lists the repeats of the blocks in the order they run.
func units(s *scenario.Scenario, blocks [][]int) []unit {
	var out []unit
	for _, b := range blocks {
		for rep := 1; rep <= s.Load.Repeats; rep++ {
			for _, i := range b {
				out = append(out, unit{i, rep})
			}
		}
	}
	return out
}

// sweep runs the plans' repeats in the order of their blocks, writing each
// point's record once its block is done; it reports whether ctx cut it
// short.
func (r *runner) sweep(ctx context.Context, plans []Plan, w *record.Writer, out *Outcome) (interrupted bool, err error) {
	bs := blocks(r.sc, plans)
	todo := units(r.sc, bs) // those not yet run
	for _, b := range bs {
		n := len(b) * r.sc.Load.Repeats // this block's, at the head of todo
		runs := map[int]pointRun{}      // by plan
		stopped := false
		for k, u := range todo[:n] {
			if ctx.Err() != nil {
				stopped = true
				break
			}
			p := plans[u.plan]
			if k == 0 || todo[k-1].plan != u.plan {
				r.mon.startPoint(p, r.sc.Load.Repeats, r.sc.Load.Warmup+r.sc.Load.Duration, r.remaining(plans, todo[k+1:], u.plan, p.Group))
			}
			if err := r.serve(ctx, p); err != nil {
				if ctx.Err() != nil {
					stopped = true
					break
				}
				return false, err
			}
			run, ok := runs[u.plan]
			if !ok {
				run = r.newRun(p)
				runs[u.plan] = run
			}
			stop, err := run.repeat(ctx, u.rep)
			if err != nil {
				return false, err
			}
			if stopped = stop; stopped {
				break
			}
		}
		todo = todo[n:]
		for _, i := range b {
			run, ok := runs[i]
			if !ok {
				continue
			}
			rec := run.record()
			if rec == nil {
				continue
			}
			if err := w.Write(rec); err != nil {
				return false, fmt.Errorf("write results: %w", err)
			}
			out.Records = append(out.Records, *rec)
			r.mon.finishPoint(RowOf(rec, r.sc.SLO))
			r.cfg.Logger.Info("point done", "index", rec.Index, "name", rec.Point.Name, "throughput", rec.Throughput,
				"p99", rec.Latency.P99.D(), "flags", rec.Flags)
		}
		if stopped {
			return true, nil
		}
	}
	return false, nil
}

// serve gives the servers the configuration of p's group, unless they
// have it: a server infer starts is started anew, existing targets are
// set through their admin API (when the sweep sets their settings).
func (r *runner) serve(ctx context.Context, p Plan) error {
	if !r.servers.Pending(p.Group) {
		return nil
	}
	if r.sc.Server == nil {
		r.mon.setPhase(PhaseConfiguring)
		return r.servers.Use(ctx, p.Group, p.Settings)
	}
	r.mon.setPhase(PhaseStarting)
	if err := r.servers.Use(ctx, p.Group, p.Settings); err != nil {
		return err
	}
	r.fresh = true
	if r.sc.Payload.LLM != nil {
		return r.checkGenServer(ctx)
	}
	return nil
}

// remaining estimates the time the units after the current one take,
// leaving out the current point's own later repeats (the monitor counts
// those): their load, and a change of the servers' configuration, at the
// mean time one took so far, wherever the group changes.
func (r *runner) remaining(plans []Plan, rest []unit, current, group int) time.Duration {
	perRepeat := r.sc.Load.Warmup + r.sc.Load.Duration
	var d time.Duration
	for _, u := range rest {
		if u.plan != current {
			d += perRepeat
		}
		if g := plans[u.plan].Group; g != group {
			d += r.servers.SwitchTime()
			group = g
		}
	}
	return d
}

// Switches counts the times the sweep of s gives the server a
// configuration, the first included, in the order its repeats run: the
// servers a scenario with a server section starts, or the admin API's
// applies.
func Switches(s *scenario.Scenario, plans []Plan) int {
	n, group := 0, -1
	for _, u := range units(s, blocks(s, plans)) {
		if g := plans[u.plan].Group; g != group {
			n++
			group = g
		}
	}
	return n
}
