package attack

import (
	"math"
	"testing"
	"time"
)

// gaps replays p for n hits, as vegeta's attack loop would with an exact
// clock, and returns the gaps between sends.
func gaps(p interface {
	Pace(time.Duration, uint64) (time.Duration, bool)
}, n int) []time.Duration {
	var out []time.Duration
	var elapsed, last time.Duration
	for hits := uint64(0); len(out) < n; {
		wait, stop := p.Pace(elapsed, hits)
		if stop {
			break
		}
		if wait > 0 {
			elapsed += wait
			continue
		}
		out = append(out, elapsed-last)
		last = elapsed
		hits++
	}
	return out
}

func meanCV(gs []time.Duration) (mean, cv float64) {
	var sum, sq float64
	for _, g := range gs {
		sum += g.Seconds()
	}
	mean = sum / float64(len(gs))
	for _, g := range gs {
		d := g.Seconds() - mean
		sq += d * d
	}
	return mean, math.Sqrt(sq/float64(len(gs))) / mean
}

func TestGammaPacer(t *testing.T) {
	const n = 200000
	for _, tc := range []struct {
		burstiness, cv float64
	}{
		{1, 1}, {0.25, 2}, {4, 0.5}, {math.Inf(1), 0},
	} {
		p, err := NewGammaPacer(100, tc.burstiness, 7)
		if err != nil {
			t.Fatal(err)
		}
		mean, cv := meanCV(gaps(p, n))
		if math.Abs(mean-0.01) > 0.0002 {
			t.Errorf("burstiness %v: mean gap %.5fs, want 0.01s ±2%%", tc.burstiness, mean)
		}
		if math.Abs(cv-tc.cv) > 0.02+0.02*tc.cv {
			t.Errorf("burstiness %v: gaps' CV %.3f, want %.3f (1/√burstiness)", tc.burstiness, cv, tc.cv)
		}
		if p.Rate(time.Hour) != 100 {
			t.Errorf("Rate = %v, want 100", p.Rate(time.Hour))
		}
	}
}

func TestPoissonPacerCounts(t *testing.T) {
	p, err := NewPoissonPacer(1000, 1)
	if err != nil {
		t.Fatal(err)
	}
	// hitsBy (pacer_test.go) replays the pacer with an exact clock.
	got := hitsBy(p, 10*time.Second)[0]
	// A Poisson count of mean 10,000 has a standard deviation of 100.
	if got < 9600 || got > 10400 {
		t.Errorf("Poisson at 1000/s: %d hits in 10s, want 10000 ± 4 standard deviations", got)
	}
}

// TestGammaPacerDeterministic: the schedule depends on the seed only, not
// on the elapsed times Pace is asked at, and rewinds.
func TestGammaPacerDeterministic(t *testing.T) {
	a, _ := NewGammaPacer(50, 0.5, 42)
	b, _ := NewGammaPacer(50, 0.5, 42)
	c, _ := NewGammaPacer(50, 0.5, 43)
	ga, gb, gc := gaps(a, 1000), gaps(b, 1000), gaps(c, 1000)
	for i := range ga {
		if ga[i] != gb[i] {
			t.Fatalf("same seed, gap %d: %v vs %v", i, ga[i], gb[i])
		}
	}
	same := 0
	for i := range ga {
		if ga[i] == gc[i] {
			same++
		}
	}
	if same > 10 {
		t.Errorf("seeds 42 and 43 share %d of 1000 gaps", same)
	}
	// Asked late (a busy sender), the due time is the same: wait 0 now,
	// and hit 1's wait counts from the schedule, not from the late ask.
	d, _ := NewGammaPacer(50, 0.5, 42)
	if wait, _ := d.Pace(time.Hour, 0); wait != 0 {
		t.Errorf("hit 0 asked an hour late: wait %v, want 0", wait)
	}
	if wait, _ := d.Pace(ga[0], 1); wait != ga[1] {
		t.Errorf("hit 1 at hit 0's time: wait %v, want the gap %v", wait, ga[1])
	}
	if wait, _ := d.Pace(0, 0); wait != ga[0] {
		t.Errorf("rewound to hit 0: wait %v, want %v", wait, ga[0])
	}
}

func TestGammaPacerBounds(t *testing.T) {
	for _, tc := range []struct{ rate, burstiness float64 }{
		{0, 1}, {-1, 1}, {math.NaN(), 1}, {2e6, 1}, {math.Inf(1), 1}, {10, 0}, {10, -1}, {10, math.NaN()},
	} {
		if _, err := NewGammaPacer(tc.rate, tc.burstiness, 0); err == nil {
			t.Errorf("NewGammaPacer(%v, %v) accepted", tc.rate, tc.burstiness)
		}
	}
	// A schedule past what a Duration holds stops instead of wrapping.
	p, _ := NewGammaPacer(1e-9, 1, 0)
	if _, stop := p.Pace(0, 50); !stop {
		t.Errorf("hit 50 at 1e-9/s (centuries away): not stopped")
	}
}

// TestGammaPacerWindows: each window holds exactly round(rate × length)
// arrivals, inside it, in order, whatever the seed; the gaps after the
// windows run on at the rate.
func TestGammaPacerWindows(t *testing.T) {
	for _, tc := range []struct {
		rate, burstiness float64
		warmup, window   time.Duration
	}{
		{2, 1, 5 * time.Second, 20 * time.Second},
		{4, 1, 0, 20 * time.Second},
		{8, 0.5, 3 * time.Second, 10 * time.Second},
		{2.5, 4, time.Second, 3 * time.Second}, // 7.5 rounds to 8
		{100, math.Inf(1), time.Second, time.Second},
	} {
		for seed := range uint64(20) {
			p, err := NewGammaPacer(tc.rate, tc.burstiness, seed, tc.warmup, tc.window)
			if err != nil {
				t.Fatal(err)
			}
			wantW := int(math.Round(tc.rate * tc.warmup.Seconds()))
			wantM := int(math.Round(tc.rate * tc.window.Seconds()))
			var inW, inM, after int
			var at, last time.Duration
			for _, g := range gaps(p, wantW+wantM+50) {
				at += g
				if at < last {
					t.Fatalf("%+v seed %d: arrival %v before %v", tc, seed, at, last)
				}
				last = at
				switch {
				case at < tc.warmup:
					inW++
				case at < tc.warmup+tc.window:
					inM++
				default:
					after++
				}
			}
			if inW != wantW || inM != wantM || after != 50 {
				t.Errorf("rate %v burstiness %v seed %d: %d arrivals in the warm-up, %d in the window; want %d and %d",
					tc.rate, tc.burstiness, seed, inW, inM, wantW, wantM)
			}
		}
	}
}

// TestPoissonPacerMeanRate: in a window of 1,000 arrivals, the schedule
// a bench uses, the mean rate is the rate for every seed. Unscaled, 1,000
// gaps' sum has a standard deviation of √1000/rate: every seed stays
// within 4 of them (±12.6 %), and the seeds' deviations spread as a
// standard normal's, as a sound generator's do.
func TestPoissonPacerMeanRate(t *testing.T) {
	for _, rate := range []float64{2, 4, 8} {
		var far, sq float64
		const seeds = 200
		for seed := range uint64(seeds) {
			window := time.Duration(1000 / rate * float64(time.Second))
			w, _ := NewPoissonPacer(rate, seed, 0, window)
			if got := hitsBy(w, window)[0]; got != 1000 {
				t.Errorf("Poisson at %v/s, seed %d, a window of 1,000 arrivals: %d in it", rate, seed, got)
			}
			p, _ := NewPoissonPacer(rate, seed)
			var sum time.Duration
			for _, g := range gaps(p, 1000) {
				sum += g
			}
			z := (sum.Seconds() - 1000/rate) / (math.Sqrt(1000) / rate)
			if math.Abs(z) > 4 {
				t.Errorf("Poisson at %v/s, seed %d: 1,000 arrivals at %.3f/s, %.1f standard deviations off", rate, seed, 1000/sum.Seconds(), z)
			}
			if math.Abs(z) > 2 {
				far++
			}
			sq += z * z
		}
		// A normal passes 2 deviations 4.6 % of the time; its variance is 1.
		if far > 0.1*seeds || sq/seeds < 0.7 || sq/seeds > 1.3 {
			t.Errorf("Poisson at %v/s: %v of %d seeds past 2 deviations, variance %.2f; want about 4.6%% and 1", rate, far, seeds, sq/seeds)
		}
	}
}

// TestGammaPacerWindowsBounds: a negative window is refused; windows of
// more than maxFitted arrivals are not scaled (the rate holds by itself).
func TestGammaPacerWindowsBounds(t *testing.T) {
	if _, err := NewGammaPacer(10, 1, 0, -time.Second); err == nil {
		t.Error("a negative window accepted")
	}
	p, err := NewGammaPacer(MaxArrivalRate, 1, 0, time.Hour)
	if err != nil || p.windows != nil {
		t.Errorf("a window of %v arrivals: %v, windows %v; want unscaled", MaxArrivalRate*3600, err, p.windows)
	}
}
