package loadgen

// The points of request/response endpoints (encoder servers, or any HTTP
// server): each repeat is package attack's, with the server's /metrics
// and CPU read at the measured window's edges.

import (
	"context"
	"fmt"
	"time"

	"github.com/inferhq/infer/loadgen/attack"
	"github.com/inferhq/infer/loadgen/record"
	"github.com/inferhq/infer/loadgen/target"
)

// classicRun is a point of a request/response endpoint being measured,
// repeat by repeat.
type classicRun struct {
	r        *runner
	p        Plan
	pt       record.Point // as the first repeat found the server
	inject   string
	total    attack.Tally
	answered int
	m        measure
	repeats  []record.Repeat
	first    time.Time
	ticks    []record.Tick
	partial  bool
	// The latest repeat, alone, and whether each repeat drifted.
	lastRes  *attack.Result
	lastM    measure
	unsteady []bool
}

func (r *runner) newClassicRun(p Plan) *classicRun {
	c := &classicRun{r: r, p: p}
	if in := r.sc.Payload.Inject; in != nil {
		c.inject = in.Text
	}
	return c
}

// resolve returns the point as the server it now runs against has it:
// what the sweep leaves to the server, from its /metrics.
func (c *classicRun) resolve(ctx context.Context) record.Point {
	r, pt := c.r, c.p.Point
	// Record the batching settings in effect where the sweep left them to
	// the server.
	if samples, err := target.Scrape(ctx, r.client, r.servers.Replicas()[0]); err == nil {
		r.info = target.InfoOf(samples)
	}
	if info := r.info; pt.Endpoint != "naive" {
		if pt.Batch == 0 {
			pt.Batch = info.Batch
		}
		if pt.Workers == 0 {
			pt.Workers = info.Workers
		}
		if !c.p.LatencySet {
			pt.Latency = record.Duration(info.MaxLatency)
		}
		if pt.Policy == "" {
			pt.Policy = info.Policy
		}
	}
	pt.Expect = r.sc.Payload.Expectation(pt.Endpoint, r.inferServer())
	return pt
}

func (c *classicRun) repeat(ctx context.Context, rep int) (stop bool, err error) {
	r := c.r
	if rep == 1 {
		c.pt = c.resolve(ctx)
	}
	pt := c.pt
	// The traffic anew: an interleaved sweep restarts the server, on
	// another port, between repeats.
	tr, err := attack.NewTraffic(attack.TrafficConfig{URLs: r.servers.URLs(), Endpoint: pt.Endpoint, Model: r.servers.Model(),
		Format: r.sc.Payload.Format, Expect: pt.Expect, Items: r.sc.Payload.Items, N: r.sc.Payload.N, Inject: c.inject})
	if err != nil {
		return false, fmt.Errorf("point %q: %w", pt.Name, err)
	}
	if rep == 1 {
		c.pt.Targets = tr.URLs()
	}
	a := attack.Config{Traffic: tr, Load: pt.Load, Warmup: r.sc.Load.Warmup, Duration: r.sc.Load.Duration,
		Timeout: r.sc.Load.Timeout, MaxInFlight: r.sc.Load.MaxInFlight}
	r.mon.startAttack(rep, pt.Load, a.Warmup, a.Duration)
	r.mon.setPhase(PhaseWarmup)
	var begin, end reading
	res := attack.Run(ctx, a, r.mon.add, func(isEnd bool) {
		rd := r.read(context.WithoutCancel(ctx), pt.Endpoint)
		if isEnd {
			end = rd
		} else {
			begin = rd
		}
	})
	if res.Window <= 0 {
		c.partial = true
		return true, nil
	}
	if c.first.IsZero() {
		c.first = res.Start
		c.ticks = res.Timeline.Ticks(pt.Load, a.Duration)
	}
	c.total.Merge(&res.Tally)
	c.answered += res.Answered
	c.m.add(res.Window, begin, end)
	c.lastRes, c.lastM = &res, measure{}
	c.lastM.add(res.Window, begin, end)
	c.unsteady = append(c.unsteady, drifted(pt.Load, res.Timeline.Answered(res.Window)))
	secs := res.Window.Seconds()
	c.repeats = append(c.repeats, record.Repeat{
		Throughput:   float64(res.Answered) / secs,
		AchievedRate: float64(res.Tally.Sent()) / secs,
		P50:          record.Duration(res.Tally.Latency().Quantile(0.5)),
		P99:          record.Duration(res.Tally.Latency().Quantile(0.99)),
	})
	if res.Stopped {
		c.partial = true
		return true, nil
	}
	return false, nil
}

func (c *classicRun) record() *record.Record {
	r := c.r
	partial := c.partial || len(c.repeats) < r.sc.Load.Repeats
	if c.total.Sent() == 0 && partial {
		return nil
	}
	rec := buildRecord(c.p.Index, c.pt, c.first, &c.total, c.answered, &c.m, c.repeats, r.sc.Payload.N)
	rec.Timeline = c.ticks
	rec.Partial = partial
	if c.inject != "" {
		rec.Injected = c.total.Injected(c.inject)
	}
	judge(rec, r.cfg.Cores)
	flagUnsteady(rec, c.unsteady)
	if c.total.OK() > 0 && c.total.Timed() == 0 {
		r.notice("answers of %s carry no Server-Timing header: the server's queue and compute times are not measured", c.pt.Endpoint)
	}
	return rec
}

// measure sums the probes' deltas over the windows of a point's repeats;
// a server figure is kept only if every window had it.
type measure struct {
	window        time.Duration
	gen           time.Duration
	srv           time.Duration
	srvMissing    bool
	rss           int64
	before, after target.Counters
	countsMissing bool
}

func (m *measure) add(window time.Duration, begin, end reading) {
	m.window += window
	m.gen += end.gen - begin.gen
	m.srv += end.srv - begin.srv
	m.srvMissing = m.srvMissing || !begin.srvOK || !end.srvOK
	m.rss = max(m.rss, end.rss)
	m.before = m.before.Add(begin.counters)
	m.after = m.after.Add(end.counters)
	m.countsMissing = m.countsMissing || !begin.countsOK || !end.countsOK
}

// buildRecord turns a point's measurements into its record: t holds the
// requests sent in the measured windows, answered the successful answers
// received in them.
func buildRecord(index int, pt record.Point, start time.Time, t *attack.Tally, answered int, m *measure, repeats []record.Repeat, items int) *record.Record {
	rec := t.Record(pt, start, m.window, answered, items)
	rec.Index = index
	rec.GeneratorCPU = m.gen.Seconds() / m.window.Seconds()
	if !m.srvMissing {
		rec.Server.CPUSeconds = m.srv.Seconds()
	}
	rec.Server.RSSBytes = m.rss
	if !m.countsMissing {
		rec.Server.Metrics = m.before.Delta(m.after)
	}
	if len(repeats) > 1 {
		rec.Repeats = repeats
	}
	return rec
}

// Validity thresholds.
const (
	// An open-loop point that sent less than this share of its target
	// rate was held back by the server: coordinated omission.
	minAchieved = 0.95
	// An open-loop point whose p99 latency from the intended send times
	// passes its p99 service time by this share of it, and by maxLagFloor,
	// went out late against its schedule enough to matter: coordinated
	// omission that the average rate hides.
	maxLagShare = 0.1
	maxLagFloor = 10 * time.Millisecond
	// A generator using this share of its cores or more was the limit.
	maxGeneratorCPU = 0.9
)

// behindSchedule reports whether an open-loop point's sends lagged its
// schedule enough to matter: its p99 latency from the intended send times
// passes the p99 service time by a tenth of it and by 10 ms. A lag that
// moves the p99 less, such as a busy machine's scheduling jitter under
// slower answers, leaves the service times standing.
func behindSchedule(r *record.Record) bool {
	if r.ScheduleLag == nil || r.FromSchedule == nil {
		return false
	}
	p99 := r.Latency.P99.D()
	return r.FromSchedule.P99.D()-p99 > max(maxLagFloor, time.Duration(maxLagShare*float64(p99)))
}

// judge sets the record's validity flags.
func judge(r *record.Record, cores int) {
	r.Flags = nil
	if r.TargetRate > 0 && r.AchievedRate < minAchieved*r.TargetRate {
		r.Flags = append(r.Flags, record.FlagCoordinatedOmission)
	}
	if behindSchedule(r) {
		r.Flags = append(r.Flags, record.FlagScheduleLag)
	}
	if r.GeneratorCPU >= maxGeneratorCPU*float64(cores) {
		r.Flags = append(r.Flags, record.FlagGeneratorSaturated)
	}
	if r.Sent > r.Status["200"] {
		r.Flags = append(r.Flags, record.FlagErrors)
	}
	if r.Status["200"] == 0 {
		r.Flags = append(r.Flags, record.FlagNoSuccess)
	}
	r.Valid = true
	for _, f := range r.Flags {
		if f != record.FlagErrors {
			r.Valid = false
		}
	}
}
