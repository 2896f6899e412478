package report

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/inferhq/infer/loadgen/record"
)

// Verdict is the outcome of comparing a run with a baseline, per point and
// overall.
type Verdict int

const (
	// Pass: no change beyond the noise band in the worse direction.
	Pass Verdict = iota
	// Warn: worse beyond the noise band, but one of the two measurements is
	// flagged (coordinated omission, saturated generator, cut short) or
	// there was nothing to compare, so the change cannot be trusted.
	Warn
	// Regression: worse beyond the noise band on trustworthy measurements.
	Regression
)

func (v Verdict) String() string {
	switch v {
	case Pass:
		return "pass"
	case Warn:
		return "warn"
	case Regression:
		return "regression"
	}
	return fmt.Sprintf("Verdict(%d)", int(v))
}

// Noise is the band within which a change between two runs counts as
// noise. The zero value of a field takes its default.
//
// The defaults suit shared machines. Throughput is an average over many
// requests and moves with the machine (CPU steal, frequency scaling, a
// neighbour's load): runs of the same sweep on shared CI hosts commonly
// differ by 5–10 %, hence ±10 %. A p99 from a point of a few thousand
// requests rests on a few dozen of the slowest ones: the sampling error of
// the 99th percentile alone is around ±10 % for a tail like a queue's, and
// the machine's noise comes on top, hence ±20 %. The error rate is an
// absolute share; one point more than the baseline (0.01) is the default.
//
// When both points carry repeats, the band is instead the larger of the
// two runs' spreads (max − min over the mean of the repeats), floored at
// half the default band: three repeats that happen to agree are weak
// evidence of a quiet machine. (Closed-loop p99s of the same code on a
// shared 2-core machine moved by 13 % to 200 % from run to run, their
// throughputs by 3 % to 18 %.) The p99s compared are then the medians of
// the repeats' p99s, the statistic that spread describes: the point's own
// p99, over all its requests, leans towards its worst repeat, so that one
// slow repeat moved it by more than the band that repeat had widened (CI
// on unchanged code: repeats of 48, 73 and 58 ms against 45, 44 and 46 ms,
// the point's p99 +53 %, the median's +31 %, the band ±41 %).
//
// A p99 also has a sampling error of its own, which the spread of few
// repeats does not show: a p99 is worse beyond the band only when the low
// end of the run's p99 sampling interval is beyond the band above the high
// end of the baseline's (see p99Interval). So a point of a few hundred
// requests, or one whose slowest percent straddles a gap in the latencies,
// is not judged on its two slowest requests.
type Noise struct {
	Throughput float64 // relative change of throughput; default 0.10
	P99        float64 // relative change of p99 latency; default 0.20
	ErrorRate  float64 // absolute change of the error rate; default 0.01
}

// Defaults of Noise.
const (
	DefaultNoiseThroughput = 0.10
	DefaultNoiseP99        = 0.20
	DefaultNoiseErrorRate  = 0.01
)

func (n Noise) withDefaults() Noise {
	if n.Throughput <= 0 {
		n.Throughput = DefaultNoiseThroughput
	}
	if n.P99 <= 0 {
		n.P99 = DefaultNoiseP99
	}
	if n.ErrorRate <= 0 {
		n.ErrorRate = DefaultNoiseErrorRate
	}
	return n
}

// Change is one point of the run matched with its baseline point.
type Change struct {
	Base, Cur *record.Record
	// Throughput and P99 are relative changes, (now − base) / base: −0.15
	// is 15 % less. NaN where the baseline value is zero. For LLM points
	// they are those of output tokens/s and of p99 TTFT, and TPOT is the
	// change of p99 TPOT (judged in the default p99 band); NaN for other
	// points.
	Throughput, P99, TPOT float64
	// BaseP99 and CurP99 are the p99s that P99 compares, in ms: the
	// medians of the repeats' p99s when FromRepeats, else the points' own.
	BaseP99, CurP99 float64
	// P99Least is an encoder point's p99 change at the least by the p99s'
	// sampling: from the high end of the baseline's 99 % interval to the
	// low end of the run's. A P99 beyond the band counts as worse only if
	// P99Least is beyond it too. NaN for LLM points and without latencies.
	P99Least float64
	// ErrorRate is the absolute change of the error rate.
	ErrorRate float64
	// Band is the noise band applied; FromRepeats says whether it came
	// from the repeats' spread rather than the defaults.
	Band        Noise
	FromRepeats bool
	Verdict     Verdict
	// Reason says what decided the verdict, e.g. "throughput −15.2 %
	// beyond ±10.0 %".
	Reason string
}

// Comparison is a run compared with a baseline run.
type Comparison struct {
	Baseline string // the baseline's directory
	Changes  []Change
	// OnlyRun and OnlyBaseline are the points without a match in the
	// other run; they do not affect the verdict.
	OnlyRun, OnlyBaseline []*record.Record
	// Verdict is the worst verdict of the changes, or Warn when no point
	// matched.
	Verdict Verdict
	Default Noise // the band used where repeats give none
}

// Count returns the number of changes with verdict v.
func (c *Comparison) Count(v Verdict) int {
	n := 0
	for _, ch := range c.Changes {
		if ch.Verdict == v {
			n++
		}
	}
	return n
}

// Line is the verdict in one line, for a terminal or a CI log:
// "regression: 12 regression, 3 warn, 101 pass; 2 points unmatched".
func (c *Comparison) Line() string { return c.Verdict.String() + ": " + c.counts() }

func (c *Comparison) counts() string {
	s := fmt.Sprintf("%d regression, %d warn, %d pass", c.Count(Regression), c.Count(Warn), c.Count(Pass))
	if n := len(c.OnlyRun) + len(c.OnlyBaseline); n > 0 {
		s += "; " + plural(n, "point") + " unmatched"
	}
	if len(c.Changes) == 0 {
		s += " (no point of the run matches one of the baseline)"
	}
	return s
}

// Compare matches the points of run with those of baseline by
// configuration (the model: a sweep.model run's, or the server.model of a
// run of one; endpoint, batch, workers, max-latency, policy, items per
// request) and load level, and judges each change against the noise band.
// Points are matched in sweep order when a configuration appears more than
// once. noise's zero fields take the defaults.
func Compare(run, baseline *record.Run, noise Noise) *Comparison {
	noise = noise.withDefaults()
	c := &Comparison{Baseline: baseline.Dir, Default: noise}
	cur, base := newView(run), newView(baseline)
	curKey, baseKey := modelKeys(run, baseline), modelKeys(baseline, run)
	pending := map[key][]*record.Record{}
	for _, r := range base.recs {
		pending[baseKey(r)] = append(pending[baseKey(r)], r)
	}
	for _, r := range cur.recs {
		k := curKey(r)
		if len(pending[k]) == 0 {
			c.OnlyRun = append(c.OnlyRun, r)
			continue
		}
		b := pending[k][0]
		pending[k] = pending[k][1:]
		c.Changes = append(c.Changes, judge(b, r, noise))
	}
	for _, r := range base.recs {
		if rest := pending[baseKey(r)]; len(rest) > 0 && rest[0] == r {
			c.OnlyBaseline = append(c.OnlyBaseline, r)
			pending[baseKey(r)] = rest[1:]
		}
	}
	c.Verdict = Pass
	if len(c.Changes) == 0 {
		c.Verdict = Warn
	}
	for _, ch := range c.Changes {
		c.Verdict = max(c.Verdict, ch.Verdict)
	}
	return c
}

// modelKeys returns the key of run's points for Compare with other:
// keyOf's, and when other swept models (sweep.model: its points name
// theirs) but run did not, with run's model from its manifest (the
// server.model infer started, or the model a target reported), so that
// the points of a run of one model match that model's in a sweep of
// several.
func modelKeys(run, other *record.Run) func(*record.Record) key {
	swept := func(r *record.Run) bool {
		return slices.ContainsFunc(r.Records, func(r record.Record) bool { return r.Point.Model != "" })
	}
	m := ""
	if swept(other) && !swept(run) {
		m = run.Manifest.Model
	}
	return func(r *record.Record) key {
		k := keyOf(r.Point)
		if k.Model == "" {
			k.Model = m
		}
		return k
	}
}

// judge compares one point with its baseline.
func judge(base, cur *record.Record, def Noise) Change {
	ch := Change{Base: base, Cur: cur, Band: def,
		Throughput: rel(tput(base), tput(cur)),
		BaseP99:    p99Of(base),
		CurP99:     p99Of(cur),
		TPOT:       math.NaN(),
		P99Least:   math.NaN(),
		ErrorRate:  cur.ErrorRate() - base.ErrorRate(),
	}
	llm := base.LLM != nil && cur.LLM != nil
	if llm {
		ch.TPOT = rel(base.LLM.TPOT.P99, cur.LLM.TPOT.P99)
	}
	if len(base.Repeats) > 1 && len(cur.Repeats) > 1 {
		ch.FromRepeats = true
		t, p := thr, p99
		if llm {
			t, p = tokensThr, ttftP99
		}
		ch.Band.Throughput = max(spread(base.Repeats, t), spread(cur.Repeats, t), def.Throughput/2)
		ch.Band.P99 = max(spread(base.Repeats, p), spread(cur.Repeats, p), def.P99/2)
		ch.BaseP99, ch.CurP99 = median(base.Repeats, p), median(cur.Repeats, p)
	}
	ch.P99 = rel(ch.BaseP99, ch.CurP99)
	flagged := func() string {
		var why []string
		for _, r := range []*record.Record{base, cur} {
			if trusted(r) {
				continue
			}
			which := "baseline"
			if r == cur {
				which = "run"
			}
			why = append(why, which+" point "+strings.Join(r.Caveats(), ", "))
		}
		return strings.Join(why, "; ")
	}
	bs, cs := succeeded(base), succeeded(cur)
	if !bs || !cs {
		ch.P99, ch.TPOT = math.NaN(), math.NaN() // no latencies on one side
	} else if !llm {
		_, baseHi := p99Interval(base)
		curLo, _ := p99Interval(cur)
		ch.P99Least = rel(baseHi, curLo)
	}
	switch {
	case !bs && !cs:
		ch.Verdict, ch.Reason = Warn, "no request succeeded in either run"
		return ch
	case !cs && cur.Partial:
		ch.Verdict, ch.Reason = Warn, "no request succeeded, but the point was cut short"
		return ch
	case !cs:
		ch.Verdict, ch.Reason = Regression, "no request succeeded (the baseline had successes)"
		return ch
	case !bs:
		ch.Verdict, ch.Reason = Pass, "succeeds where the baseline failed"
		return ch
	}
	var worse []string
	thrName, p99Name := "throughput", "p99"
	if llm {
		thrName, p99Name = "tokens/s", "TTFT p99"
	}
	if ch.Throughput < -ch.Band.Throughput {
		worse = append(worse, fmt.Sprintf("%s %s beyond ±%.1f %%", thrName, pct(ch.Throughput), ch.Band.Throughput*100))
	}
	if llm {
		if ch.P99 > ch.Band.P99 {
			worse = append(worse, fmt.Sprintf("%s %s beyond ±%.1f %%", p99Name, pct(ch.P99), ch.Band.P99*100))
		}
		// The repeats carry no TPOT, so their spread says nothing of its
		// noise: it is judged in the default band.
		if ch.TPOT > def.P99 {
			worse = append(worse, fmt.Sprintf("TPOT p99 %s beyond ±%.1f %%", pct(ch.TPOT), def.P99*100))
		}
	} else {
		// A p99 is worse only when the low end of its sampling interval
		// is beyond the band above the baseline's high end, too.
		if least := ch.P99Least; ch.P99 > ch.Band.P99 && least > ch.Band.P99 {
			why := fmt.Sprintf("p99 %s beyond ±%.1f %%", pct(ch.P99), ch.Band.P99*100)
			if least < ch.P99-0.0005 {
				why += fmt.Sprintf(" (%s at the least, by the p99s' sampling)", pct(least))
			}
			worse = append(worse, why)
		}
	}
	if ch.ErrorRate > ch.Band.ErrorRate {
		worse = append(worse, fmt.Sprintf("error rate +%.1f points beyond %.1f", ch.ErrorRate*100, ch.Band.ErrorRate*100))
	}
	switch f := flagged(); {
	case len(worse) == 0:
		ch.Verdict, ch.Reason = Pass, "within noise or better"
	case f != "":
		ch.Verdict, ch.Reason = Warn, strings.Join(worse, "; ")+", but "+f
	default:
		ch.Verdict, ch.Reason = Regression, strings.Join(worse, "; ")
	}
	return ch
}

// rel returns (cur − base) / base, or NaN when base is zero.
func rel(base, cur float64) float64 {
	if base == 0 {
		return math.NaN()
	}
	return (cur - base) / base
}

func thr(r record.Repeat) float64       { return r.Throughput }
func p99(r record.Repeat) float64       { return r.P99.Ms() }
func tokensThr(r record.Repeat) float64 { return r.OutputTokensPerS }
func ttftP99(r record.Repeat) float64   { return r.TTFTP99.Ms() }

// spread returns (max − min) / mean of f over the repeats.
func spread(reps []record.Repeat, f func(record.Repeat) float64) float64 {
	lo, hi, sum := math.Inf(1), math.Inf(-1), 0.0
	for _, r := range reps {
		v := f(r)
		lo, hi, sum = min(lo, v), max(hi, v), sum+v
	}
	if sum <= 0 {
		return 0
	}
	return (hi - lo) / (sum / float64(len(reps)))
}

// median returns the median of f over the repeats.
func median(reps []record.Repeat, f func(record.Repeat) float64) float64 {
	vs := make([]float64, len(reps))
	for i, r := range reps {
		vs[i] = f(r)
	}
	slices.Sort(vs)
	if n := len(vs); n%2 == 0 {
		return (vs[n/2-1] + vs[n/2]) / 2
	}
	return vs[len(vs)/2]
}

// p99Interval returns the 99 % confidence interval of r's p99 in ms, read
// off its own latency histogram: of n requests, the rank of the 99th
// percentile moves by z·√(n·0.99·0.01) between samples of the same
// distribution (z = 2.58), so the p99 could as well have been any latency
// between those ranks. Without a histogram it is the p99 alone.
func p99Interval(r *record.Record) (lo, hi float64) {
	p := r.Latency.P99.Ms()
	h := r.Histogram
	if h == nil || h.Count() == 0 {
		return p, p
	}
	d := 2.58 * math.Sqrt(0.99*0.01/float64(h.Count()))
	lo = float64(h.Quantile(max(0, 0.99-d))) / 1e6
	hi = float64(h.Quantile(min(1, 0.99+d))) / 1e6
	return min(lo, p), max(hi, p)
}

// pct formats a relative change: "+12.3 %", "−4.0 %", "n/a".
func pct(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "n/a"
	}
	if v < 0 {
		return fmt.Sprintf("−%.1f %%", -v*100)
	}
	return fmt.Sprintf("+%.1f %%", v*100)
}
