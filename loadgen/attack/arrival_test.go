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
