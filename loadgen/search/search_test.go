package search

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
)

// linear is a server whose every figure grows in proportion to the load:
// its margin at level x is x / capacity, the same every time.
func linear(capacity float64) Measure {
	return func(x float64, _ int) (Measurement, error) { return Measurement{Margin: x / capacity}, nil }
}

func levels(r Result) []float64 {
	var out []float64
	for _, p := range r.Probes {
		out = append(out, p.Level)
	}
	return out
}

// TestRunLinear: a deterministic server of capacity 423 req/s, from 50:
// the level doubles until it misses (800), then the bracket halves until
// it is within 5 %; levels near the bounds are measured twice (the second
// agrees, a majority of 3).
func TestRunLinear(t *testing.T) {
	var seen []Probe
	r := Run(Config{From: 50, To: 1e6}, linear(423), func(p Probe) { seen = append(seen, p) })
	want := []float64{50, 100, 200, 400, 800, 600, 500, 450, 425, 412}
	if got := levels(r); !slices.Equal(got, want) {
		t.Fatalf("levels = %v, want %v", got, want)
	}
	if r.End != Converged || r.Passed != 412 || r.Failed != 425 || r.Err != nil {
		t.Errorf("end %v, bracket %v–%v, err %v; want converged, 412–425", r.End, r.Passed, r.Failed, r.Err)
	}
	if len(seen) != len(r.Probes) {
		t.Errorf("probed %d times for %d probes", len(seen), len(r.Probes))
	}
	for i, p := range seen {
		if want := End(""); i == len(seen)-1 {
			want = Converged
			if p.End != want {
				t.Errorf("last probe's end %q, want %q", p.End, want)
			}
		} else if p.End != want {
			t.Errorf("probe %d's end %q, want none", p.N, p.End)
		}
	}
	for _, p := range r.Probes {
		near := p.Level/423 >= 1/Near && p.Level/423 <= Near
		n := 1
		if near {
			n = 2
		}
		if len(p.Measurements) != n || (p.Repeated == RepeatNear) != near {
			t.Errorf("level %v: %d measurements, repeated %q; want %d", p.Level, len(p.Measurements), p.Repeated, n)
		}
		if p.Pass != (p.Level <= 423) || p.Passed > 423 || (p.Failed != 0 && p.Failed <= 423) {
			t.Errorf("level %v: pass %v, bracket %v–%v", p.Level, p.Pass, p.Passed, p.Failed)
		}
	}
	// Each probe's bracket is the one after it: it only narrows.
	for i := 1; i < len(r.Probes); i++ {
		a, b := r.Probes[i-1], r.Probes[i]
		if b.Passed < a.Passed || (a.Failed != 0 && b.Failed > a.Failed) {
			t.Errorf("bracket widened from %v–%v to %v–%v", a.Passed, a.Failed, b.Passed, b.Failed)
		}
	}
	if r.Measurements() != 16 {
		t.Errorf("measurements = %d, want 16", r.Measurements())
	}
}

// TestRunCapacities: whatever the capacity between From and To, the
// search ends within the tolerance of it, below it, in the budget.
func TestRunCapacities(t *testing.T) {
	for _, whole := range []bool{false, true} {
		for c := 1.0; c < 5000; c *= 1.37 {
			cfg := Config{From: 1, To: 10000, Whole: whole, MaxProbes: 30}
			r := Run(cfg, linear(c), nil)
			if r.End != Converged {
				t.Errorf("whole %v, capacity %.2f: end %v after %v", whole, c, r.End, levels(r))
				continue
			}
			if r.Passed > c || r.Failed <= c || (r.Failed-r.Passed > DefaultTolerance*r.Passed && !(whole && r.Failed-r.Passed <= 1)) {
				t.Errorf("whole %v, capacity %.2f: bracket %v–%v", whole, c, r.Passed, r.Failed)
			}
			for _, x := range levels(r) {
				if whole && x != math.Trunc(x) {
					t.Errorf("whole %v: level %v", whole, x)
				}
			}
		}
	}
}

func TestRunEnds(t *testing.T) {
	boom := errors.New("target gone")
	for _, tc := range []struct {
		name           string
		cfg            Config
		measure        Measure
		end            End
		passed, failed float64
		levels         []float64
	}{
		{"the lowest level misses", Config{From: 50, To: 1000}, linear(30), NoneMeets, 0, 50, []float64{50}},
		{"the highest level meets", Config{From: 50, To: 300}, linear(1000), AboveRange, 300, 0, []float64{50, 100, 200, 300}},
		{"out of probes", Config{From: 50, To: 1000, MaxProbes: 3}, linear(423), Budget, 200, 0, []float64{50, 100, 200}},
		{"a clients range", Config{From: 4, To: 64, Whole: true, Tolerance: 0.1}, linear(37.5), Converged, 36, 38,
			[]float64{4, 8, 16, 32, 64, 48, 40, 36, 38}},
		{"the measure fails", Config{From: 50, To: 1000}, func(x float64, _ int) (Measurement, error) {
			if x > 100 {
				return Measurement{}, boom
			}
			return Measurement{Margin: 0.1}, nil
		}, Failed, 100, 0, []float64{50, 100}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Run(tc.cfg, tc.measure, nil)
			if r.End != tc.end || r.Passed != tc.passed || r.Failed != tc.failed || !slices.Equal(levels(r), tc.levels) {
				t.Errorf("end %v, bracket %v–%v, levels %v; want %v, %v–%v, %v", r.End, r.Passed, r.Failed, levels(r),
					tc.end, tc.passed, tc.failed, tc.levels)
			}
			if (r.Err != nil) != (tc.end == Failed) || (r.Err != nil && !errors.Is(r.Err, boom)) {
				t.Errorf("err = %v", r.Err)
			}
			if last := r.Probes[len(r.Probes)-1]; tc.end != Failed && last.End != tc.end {
				t.Errorf("last probe's end %q, want %q", last.End, tc.end)
			}
		})
	}
}

// script is a fake whose measurements at each level are given in turn.
type script map[float64][]Measurement

func (s script) measure(t *testing.T) Measure {
	return func(x float64, rep int) (Measurement, error) {
		ms, ok := s[x]
		if !ok || rep > len(ms) {
			t.Fatalf("measurement %d of level %v not scripted", rep, x)
		}
		return ms[rep-1], nil
	}
}

// TestRunNoisyBoundary: near the bounds the median of the repeats
// decides, and a clear first measurement is not repeated.
func TestRunNoisyBoundary(t *testing.T) {
	m := func(v ...float64) []Measurement {
		var out []Measurement
		for _, x := range v {
			out = append(out, Measurement{Margin: x})
		}
		return out
	}
	s := script{
		100: m(0.3),              // clear: once
		200: m(1.05, 0.9, 0.95),  // a noisy miss, then two passes: passes
		400: m(0.95, 1.1, 1.2),   // a lucky pass, then two misses: misses
		300: m(0.99, 0.97),       // two passes agree: no third
		350: m(5),                // clear miss
		325: m(1.02, 0.98, 1.01), // misses, by the median
	}
	r := Run(Config{From: 100, To: 1000, Tolerance: 0.1}, s.measure(t), nil)
	if want := []float64{100, 200, 400, 300, 350, 325}; !slices.Equal(levels(r), want) {
		t.Fatalf("levels = %v, want %v", levels(r), want)
	}
	if r.End != Converged || r.Passed != 300 || r.Failed != 325 {
		t.Errorf("end %v, bracket %v–%v; want converged, 300–325", r.End, r.Passed, r.Failed)
	}
	for _, tc := range []struct {
		level          float64
		pass           bool
		margin, lo, hi float64
		repeated       string
	}{
		{100, true, 0.3, 0.3, 0.3, ""},
		{200, true, 0.95, 0.9, 1.05, RepeatNear},
		{400, false, 1.1, 0.95, 1.2, RepeatNear},
		{300, true, 0.98, 0.97, 0.99, RepeatNear},
		{325, false, 1.01, 0.98, 1.02, RepeatNear},
	} {
		i := slices.IndexFunc(r.Probes, func(p Probe) bool { return p.Level == tc.level })
		p := r.Probes[i]
		lo, hi := p.Spread()
		if p.Pass != tc.pass || math.Abs(p.Margin-tc.margin) > 1e-12 || lo != tc.lo || hi != tc.hi || p.Repeated != tc.repeated {
			t.Errorf("level %v: pass %v margin %v spread %v–%v repeated %q; want %v %v %v–%v %q",
				tc.level, p.Pass, p.Margin, lo, hi, p.Repeated, tc.pass, tc.margin, tc.lo, tc.hi, tc.repeated)
		}
	}
}

// TestRunDoubts: a measurement in doubt (unsteady, say) is measured again
// and set aside once one without doubt exists; a level never free of
// doubt is decided by all of its measurements, and says so.
func TestRunDoubts(t *testing.T) {
	u := func(m float64) Measurement { return Measurement{Margin: m, Doubt: "unsteady"} }
	st := func(m float64) Measurement { return Measurement{Margin: m} }
	s := script{
		100: {u(2), st(0.4)},            // unsteady miss, then a clear steady pass: passes
		200: {u(0.5), u(0.6), u(3)},     // never steady: the median of all, 0.6, passes
		400: {st(1.1), u(0.9), st(1.2)}, // near: the unsteady one does not vote
		300: {u(0.2), st(1.1), st(1.15)},
		250: {st(0.5)},
	}
	r := Run(Config{From: 100, To: 1000, Tolerance: 0.2}, s.measure(t), nil)
	if want := []float64{100, 200, 400, 300, 250}; !slices.Equal(levels(r), want) {
		t.Fatalf("levels = %v, want %v", levels(r), want)
	}
	for _, tc := range []struct {
		level    float64
		pass     bool
		doubtful bool
		n        int
		repeated string
	}{
		{100, true, false, 2, "unsteady"},
		{200, true, true, 3, "unsteady"},
		{400, false, false, 3, RepeatNear},
		{300, false, false, 3, "unsteady, " + RepeatNear},
		{250, true, false, 1, ""},
	} {
		p := r.Probes[slices.IndexFunc(r.Probes, func(p Probe) bool { return p.Level == tc.level })]
		if p.Pass != tc.pass || p.Doubtful != tc.doubtful || len(p.Measurements) != tc.n || p.Repeated != tc.repeated {
			t.Errorf("level %v: pass %v doubtful %v, %d measurements, repeated %q; want %v %v %d %q",
				tc.level, p.Pass, p.Doubtful, len(p.Measurements), p.Repeated, tc.pass, tc.doubtful, tc.n, tc.repeated)
		}
	}
	if r.End != Converged || r.Passed != 250 || r.Failed != 300 {
		t.Errorf("end %v, bracket %v–%v; want converged, 250–300", r.End, r.Passed, r.Failed)
	}
	// With one repeat allowed, nothing is measured twice.
	r = Run(Config{From: 100, To: 1000, Repeats: 1}, func(x float64, rep int) (Measurement, error) {
		if rep > 1 {
			t.Fatalf("level %v measured %d times with repeats 1", x, rep)
		}
		return Measurement{Margin: x / 420, Doubt: "schedule-lag"}, nil
	}, nil)
	if r.End != Converged || !r.Probes[0].Doubtful {
		t.Errorf("end %v, first probe %+v", r.End, r.Probes[0])
	}
}

// TestRunCutShort: a measure that fails mid-probe ends the search with
// the probe marked partial and the bracket as it stood.
func TestRunCutShort(t *testing.T) {
	boom := errors.New("gone")
	var seen []Probe
	r := Run(Config{From: 100, To: 1000}, func(x float64, rep int) (Measurement, error) {
		if x == 400 && rep == 2 {
			return Measurement{}, boom
		}
		return Measurement{Margin: x / 420}, nil
	}, func(p Probe) { seen = append(seen, p) })
	last := r.Probes[len(r.Probes)-1]
	if r.End != Failed || !errors.Is(r.Err, boom) || !last.Partial || last.End != Failed || last.Level != 400 || len(last.Measurements) != 1 ||
		last.Passed != 200 || last.Failed != 0 || r.Passed != 200 || len(seen) != 3 {
		t.Errorf("end %v err %v, last probe %+v, bracket %v–%v, %d probed", r.End, r.Err, last, r.Passed, r.Failed, len(seen))
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{From: 0, To: 10}, "from 0"},
		{Config{From: 10, To: 5}, "to 5"},
		{Config{From: 1.5, To: 5, Whole: true}, "whole numbers"},
		{Config{From: 1, To: 5, Growth: 20}, "growth 20"},
		{Config{From: 1, To: 5, Tolerance: 0.9}, "tolerance 0.9"},
		{Config{From: 1, To: 5, MaxProbes: 1}, "max_points 1"},
		{Config{From: 1, To: 5, Repeats: 10}, "repeats 10"},
		{Config{From: math.NaN(), To: 5}, "from NaN"},
		{Config{From: 1, To: 5}, ""},
	} {
		err := tc.cfg.Validate()
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: Validate() = %v, want %q", tc.cfg, err, tc.want)
		}
	}
	if r := Run(Config{From: 1, To: 0}, linear(1), nil); r.End != Failed || !errors.Is(r.Err, ErrConfig) || len(r.Probes) != 0 {
		t.Errorf("Run with a bad config = %+v", r)
	}
}

// TestLeft: the estimate of probes left never passes the budget and is
// exact once bisecting.
func TestLeft(t *testing.T) {
	c := Config{From: 50, To: 1e6}
	var probes []Probe
	Run(c, linear(423), func(p Probe) { probes = append(probes, p) })
	for i, p := range probes {
		left := c.Left(i+1, p.Level, p.Passed, p.Failed)
		if actual := len(probes) - i - 1; p.Failed > 0 && left != actual {
			t.Errorf("after probe %d (%v–%v): Left = %d, actually %d", i+1, p.Passed, p.Failed, left, actual)
		}
		if left > DefaultMaxProbes-i-1 {
			t.Errorf("after probe %d: Left = %d, past the budget", i+1, left)
		}
	}
	if n := c.Left(0, 0, 0, 0); n < 3 || n > DefaultMaxProbes {
		t.Errorf("Left before the first probe = %d", n)
	}
	if n := c.Left(1, 50, 0, 50); n != 0 {
		t.Errorf("Left after the lowest level missed = %d, want 0", n)
	}
}

func TestDrift(t *testing.T) {
	ramp := func(n int, from, to float64) []float64 {
		out := make([]float64, n)
		for i := range out {
			out[i] = from + (to-from)*float64(i)/float64(n-1)
		}
		return out
	}
	noisy := func(v []float64, amp float64) []float64 {
		out := slices.Clone(v)
		for i := range out {
			out[i] += amp * []float64{1, -1, 0.5, -0.5, 0.8, -0.8, 0.2}[i%7]
		}
		return out
	}
	flat := ramp(10, 400, 400)
	for _, tc := range []struct {
		name     string
		v        []float64
		unsteady bool
	}{
		{"flat", flat, false},
		{"flat with noise", noisy(flat, 40), false},
		{"rising 20 % across the window", ramp(10, 360, 440), true},
		{"falling 20 %, with noise", noisy(ramp(10, 440, 360), 8), true},
		{"rising 3 %: within the bound", ramp(10, 394, 406), false},
		{"rising 20 %, drowned in noise", noisy(ramp(10, 360, 440), 400), false},
		{"too short to judge", ramp(3, 100, 400), false},
		// Seconds that wander together (an AR(1) series, correlation 0.9:
		// long requests' tokens span seconds) fit a slope of 30 % that
		// would be 3.9 standard errors from flat if they were
		// independent: 1.3 once their correlation is counted.
		{"correlated seconds that wander", []float64{113, 126, 124, 114, 102, 102, 91, 78, 82, 85, 92, 84, 86, 86, 73, 81, 86, 111,
			112, 109, 121, 121, 128, 121, 121, 129, 133, 131, 117, 120, 119, 124, 124, 132, 129, 128, 132, 118, 112, 106}, false},
		{"nothing measured", ramp(10, 0, 0), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			share, tstat := Drift(tc.v)
			if got := Unsteady(tc.v); got != tc.unsteady {
				t.Errorf("Unsteady(%v) = %v (drift %.3f, t %.1f), want %v", tc.v, got, share, tstat, tc.unsteady)
			}
		})
	}
	// The drift is the fitted change across the window over the mean:
	// 10 seconds rising 8 a second from 364 (mean 400) change by 80, 20 %.
	if share, tstat := Drift(ramp(10, 364, 436)); math.Abs(share-0.2) > 1e-9 || !math.IsInf(tstat, 1) {
		t.Errorf("Drift of an exact ramp = %v, %v; want 0.2, +Inf", share, tstat)
	}
}
