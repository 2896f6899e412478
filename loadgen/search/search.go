// Package search finds the highest load level that meets an SLO. It
// brackets the level, growing it geometrically from a start until a level
// misses the SLO, then bisects between the highest level that met it and
// the lowest that missed it until the two are within a tolerance. A
// measurement near the SLO's bounds is repeated and the median of the
// repeats decides; one in doubt (unsteady, by Drift, or otherwise
// flagged) is repeated before it is trusted. The package measures nothing itself: the caller's function
// does, so the logic is tested with fakes, exactly, in no time.
package search

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Config bounds a search. The zero values of Growth, Tolerance, MaxProbes
// and Repeats take the defaults below.
type Config struct {
	// From is the lowest level tried and the search's first; To the
	// highest it may try. 0 < From ≤ To.
	From, To float64
	// Whole says levels are whole numbers (closed-loop clients).
	Whole bool
	// Growth is the factor from one bracketing level to the next. Default
	// 2; 1.1 to 10.
	Growth float64
	// Tolerance is how close the bracket must get: the search ends when
	// the lowest level that missed the SLO is within Tolerance of the
	// highest that met it (relative to it). Default 0.05; 0.001 to 0.5.
	Tolerance float64
	// MaxProbes bounds the levels measured. Default 12; 2 to 100.
	MaxProbes int
	// Repeats bounds the measurements of one level: a level whose
	// measurement is in doubt or near the SLO's bounds is measured again,
	// up to Repeats times in all. Default 3; 1 (never again) to 9.
	Repeats int
}

// Defaults and bounds of Config.
const (
	DefaultGrowth    = 2.0
	DefaultTolerance = 0.05
	DefaultMaxProbes = 12
	DefaultRepeats   = 3

	MinGrowth, MaxGrowth       = 1.1, 10.0
	MinTolerance, MaxTolerance = 0.001, 0.5
	MinProbes, MaxProbes       = 2, 100
	MaxRepeats                 = 9
)

// Near is how close to the SLO's bounds a measurement is near them: a
// margin (Measurement.Margin) within a factor Near of 1, from 0.67 to 1.5.
// A shared machine's stalls move a p99 by that much.
const Near = 1.5

// MaxMargin caps a margin: a level with no successful request, whose
// latency is unknown, misses its bounds by this factor.
const MaxMargin = 1000

// WithDefaults returns c with its zero fields set to the defaults.
func (c Config) WithDefaults() Config {
	if c.Growth == 0 {
		c.Growth = DefaultGrowth
	}
	if c.Tolerance == 0 {
		c.Tolerance = DefaultTolerance
	}
	if c.MaxProbes == 0 {
		c.MaxProbes = DefaultMaxProbes
	}
	if c.Repeats == 0 {
		c.Repeats = DefaultRepeats
	}
	return c
}

// Validate reports the first field of c (defaults applied) out of its
// bounds.
func (c Config) Validate() error {
	c = c.WithDefaults()
	switch {
	case !(c.From > 0) || math.IsInf(c.From, 0):
		return fmt.Errorf("from %v: want a positive level", c.From)
	case !(c.To >= c.From) || math.IsInf(c.To, 0):
		return fmt.Errorf("to %v: want a level of at least from (%v)", c.To, c.From)
	case c.Whole && (c.From != math.Trunc(c.From) || c.To != math.Trunc(c.To)):
		return fmt.Errorf("from %v, to %v: want whole numbers", c.From, c.To)
	case !(c.Growth >= MinGrowth && c.Growth <= MaxGrowth):
		return fmt.Errorf("growth %v: want %v to %v", c.Growth, MinGrowth, MaxGrowth)
	case !(c.Tolerance >= MinTolerance && c.Tolerance <= MaxTolerance):
		return fmt.Errorf("tolerance %v: want %v to %v", c.Tolerance, MinTolerance, MaxTolerance)
	case c.MaxProbes < MinProbes || c.MaxProbes > MaxProbes:
		return fmt.Errorf("max_points %d: want %d to %d", c.MaxProbes, MinProbes, MaxProbes)
	case c.Repeats < 1 || c.Repeats > MaxRepeats:
		return fmt.Errorf("repeats %d: want 1 to %d", c.Repeats, MaxRepeats)
	}
	return nil
}

// Measurement is what one measurement of a level found.
type Measurement struct {
	// Margin is the worst of the SLO's ratios of a measured figure to its
	// bound (p99 ÷ its bound, error rate ÷ the most allowed, the least
	// good share allowed ÷ the good share…): at most 1 meets every
	// bound. At most MaxMargin.
	Margin float64
	// Doubt says why the measurement's figures are in doubt ("" when
	// they are not): "unsteady" (its throughput drifted across its
	// window, Drift), or a flag such as "schedule-lag". Such a level is
	// measured again, and a measurement without doubt outvotes it.
	Doubt string
}

// Phase is a probe's part of the search.
type Phase string

// Phases.
const (
	Bracket Phase = "bracket" // growing until a level misses
	Bisect  Phase = "bisect"  // halving the bracket
)

// RepeatNear says a level was measured again because its margin was
// near the SLO's bounds; a doubt (Measurement.Doubt) is the other reason.
const RepeatNear = "near the SLO"

// Probe is a level measured, once or more.
type Probe struct {
	N            int // from 1
	Level        float64
	Phase        Phase
	Measurements []Measurement
	// Margin is the median margin of the measurements without doubt (of
	// all, when each is in doubt): it decides Pass.
	Margin float64
	Pass   bool
	// Doubtful says every measurement was in doubt: the verdict rests on
	// them.
	Doubtful bool
	// Repeated says why the level was measured more than once: the
	// doubts and RepeatNear, joined by ", "; "" when it was not.
	Repeated string
	// Passed and Failed are the bracket after this probe: the highest
	// level that met the SLO and the lowest that missed it; 0 for none.
	Passed, Failed float64
	// Partial says the probe's measurements were cut short (the measure
	// function failed): it decided nothing.
	Partial bool
	// End is set on the search's last probe: why it ended.
	End End
}

// Spread returns the smallest and largest margin of p's measurements.
func (p Probe) Spread() (lo, hi float64) {
	for i, m := range p.Measurements {
		if i == 0 || m.Margin < lo {
			lo = m.Margin
		}
		if i == 0 || m.Margin > hi {
			hi = m.Margin
		}
	}
	return lo, hi
}

// End is why a search ended.
type End string

// Ends.
const (
	// Converged: the bracket is within the tolerance.
	Converged End = "converged"
	// NoneMeets: the lowest level, From, missed the SLO.
	NoneMeets End = "none-meets"
	// AboveRange: the highest level allowed, To, met the SLO; the
	// capacity is at least To.
	AboveRange End = "above-range"
	// Budget: MaxProbes levels were measured before the bracket closed.
	Budget End = "budget"
	// Failed: the measure function failed (Result.Err).
	Failed End = "failed"
)

// Result is a finished search.
type Result struct {
	Probes []Probe
	// Passed is the highest level that met the SLO (0: none did): the
	// capacity found. Failed is the lowest level that missed it (0: none
	// did).
	Passed, Failed float64
	End            End
	Err            error // the measure function's, when End is Failed
}

// Measurements counts the measurements of every probe.
func (r Result) Measurements() int {
	n := 0
	for _, p := range r.Probes {
		n += len(p.Measurements)
	}
	return n
}

// Measure measures level once; repeat counts the level's measurements
// from 1. An error ends the search (End Failed).
type Measure func(level float64, repeat int) (Measurement, error)

// ErrConfig is wrapped by Run's error for a Config out of its bounds.
var ErrConfig = errors.New("search config")

// Run searches: it calls measure for each measurement in turn and probed
// (when not nil) as each probe is decided, or cut short by an error.
func Run(cfg Config, measure Measure, probed func(Probe)) Result {
	if err := cfg.Validate(); err != nil {
		return Result{End: Failed, Err: fmt.Errorf("%w: %v", ErrConfig, err)}
	}
	s := &state{cfg: cfg.WithDefaults()}
	return s.run(measure, probed)
}

type state struct {
	cfg            Config
	passed, failed float64
	probes         []Probe
}

func (s *state) run(measure Measure, probed func(Probe)) Result {
	level, phase := s.cfg.From, Bracket
	var end End
	var err error
	for {
		p := Probe{N: len(s.probes) + 1, Level: level, Phase: phase}
		var whys []string
		for {
			m, merr := measure(level, len(p.Measurements)+1)
			if merr != nil {
				err = merr
				break
			}
			m.Margin = min(max(m.Margin, 0), MaxMargin)
			p.Measurements = append(p.Measurements, m)
			why, again := s.again(p.Measurements)
			if !again {
				break
			}
			if !slices.Contains(whys, why) {
				whys = append(whys, why)
			}
		}
		p.Repeated = strings.Join(whys, ", ")
		if err != nil {
			end = Failed
			if len(p.Measurements) > 0 {
				p.Partial, p.End = true, Failed
				p.Passed, p.Failed = s.passed, s.failed
				s.probes = append(s.probes, p)
				if probed != nil {
					probed(p)
				}
			}
			break
		}
		p.Margin, p.Doubtful = decide(p.Measurements)
		p.Pass = p.Margin <= 1
		if p.Pass {
			s.passed = level
		} else {
			s.failed = level
		}
		p.Passed, p.Failed = s.passed, s.failed
		next, e, done := s.next(level)
		if !done && len(s.probes)+1 == s.cfg.MaxProbes {
			e, done = Budget, true
		}
		if done {
			p.End, end = e, e
		}
		s.probes = append(s.probes, p)
		if probed != nil {
			probed(p)
		}
		if done {
			break
		}
		level = next
		if s.failed > 0 {
			phase = Bisect
		}
	}
	return Result{Probes: s.probes, Passed: s.passed, Failed: s.failed, End: end, Err: err}
}

// next returns the level to measure after level, or why the search ends.
func (s *state) next(level float64) (float64, End, bool) {
	c := s.cfg
	switch {
	case s.passed == 0:
		return 0, NoneMeets, true
	case s.failed == 0 && level >= c.To:
		return 0, AboveRange, true
	case s.failed == 0:
		next := min(level*c.Growth, c.To)
		if c.Whole {
			next = min(max(math.Ceil(level*c.Growth), level+1), c.To)
		}
		return next, "", false
	case s.converged():
		return 0, Converged, true
	}
	return s.mid(), "", false
}

// converged reports whether the bracket is within the tolerance.
func (s *state) converged() bool {
	gap := s.failed - s.passed
	if s.cfg.Whole && gap <= 1 {
		return true
	}
	return gap <= s.cfg.Tolerance*s.passed
}

// mid returns a level strictly inside the bracket: the geometric mean of
// its ends when they are more than a factor 2 apart, else their mean; a
// whole number for whole levels, else rounded to as few significant
// digits (three at least) as keep it inside.
func (s *state) mid() float64 {
	lo, hi := s.passed, s.failed
	m := (lo + hi) / 2
	if hi > 2*lo {
		m = math.Sqrt(lo * hi)
	}
	if s.cfg.Whole {
		return math.Floor(m)
	}
	for digits := 3; digits < 16; digits++ {
		r, _ := strconv.ParseFloat(strconv.FormatFloat(m, 'g', digits, 64), 64)
		if r > lo && r < hi {
			return r
		}
	}
	return m
}

// again reports whether a level measured ms so far is measured once more,
// and why: while every measurement is in doubt; and while the median of
// those without doubt is near the SLO's bounds, until one verdict holds a
// majority of Repeats.
func (s *state) again(ms []Measurement) (string, bool) {
	if len(ms) >= s.cfg.Repeats {
		return "", false
	}
	trusted := margins(ms, true)
	if len(trusted) == 0 {
		return ms[len(ms)-1].Doubt, true
	}
	if m := median(trusted); m < 1/Near || m > Near {
		return "", false
	}
	pass := 0
	for _, m := range trusted {
		if m <= 1 {
			pass++
		}
	}
	need := s.cfg.Repeats/2 + 1
	if pass >= need || len(trusted)-pass >= need {
		return "", false
	}
	return RepeatNear, true
}

// decide returns the median margin of the measurements without doubt,
// or of all when each is in doubt (doubtful then true).
func decide(ms []Measurement) (margin float64, doubtful bool) {
	m := margins(ms, true)
	if len(m) == 0 {
		return median(margins(ms, false)), true
	}
	return median(m), false
}

// margins returns the margins of ms, of those without doubt only when
// trusted.
func margins(ms []Measurement, trusted bool) []float64 {
	var out []float64
	for _, m := range ms {
		if !trusted || m.Doubt == "" {
			out = append(out, m.Margin)
		}
	}
	return out
}

// median of v (the mean of the middle two of an even count); 0 for none.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Left estimates how many more probes a search needs, its bracket now
// passed–failed after probes probes at the last level (0 before the
// first): the bracketing steps to To or to a level twice the last, then
// the halvings to the tolerance; at most what MaxProbes leaves.
func (c Config) Left(probes int, last, passed, failed float64) int {
	c = c.WithDefaults()
	if c.From <= 0 || c.To < c.From {
		return 0
	}
	halvings := func(lo, hi float64) int {
		if lo <= 0 || hi <= lo {
			return 0
		}
		n := math.Ceil(math.Log2((hi - lo) / (c.Tolerance * lo)))
		if c.Whole {
			n = min(n, math.Ceil(math.Log2(hi-lo)))
		}
		return int(max(n, 0))
	}
	var n int
	switch {
	case probes == 0:
		// Guess: the capacity is halfway to To on a log scale, at most
		// six growths above From, and the last growth needs halving.
		grow := math.Ceil(math.Log(c.To/c.From) / math.Log(c.Growth) / 2)
		x := c.From * math.Pow(c.Growth, grow)
		n = int(min(grow, 6)) + 1 + halvings(x/c.Growth, x)
	case passed == 0:
		n = 0
	case failed == 0:
		grow := 0
		if last < c.To {
			grow = int(math.Ceil(math.Log(c.To/last) / math.Log(c.Growth))) // at most
			grow = min(grow, 2)                                             // likely
		}
		n = grow + halvings(last, last*c.Growth)
	default:
		n = halvings(passed, failed)
	}
	return max(min(n, c.MaxProbes-probes), 0)
}
