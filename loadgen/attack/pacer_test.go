package attack

import (
	"testing"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/inferhq/infer/loadgen/record"
)

func TestConstantPacer(t *testing.T) {
	for _, tc := range []struct {
		rate float64
		want vegeta.ConstantPacer
	}{
		{1000, vegeta.ConstantPacer{Freq: 1000, Per: time.Second}},
		{2.5, vegeta.ConstantPacer{Freq: 2500, Per: 1000 * time.Second}},
	} {
		got := constantPacer(tc.rate)
		if got != tc.want {
			t.Errorf("constantPacer(%v) = %v, want %v", tc.rate, got, tc.want)
		}
		if r := got.Rate(0); r < tc.rate*0.999 || r > tc.rate*1.001 {
			t.Errorf("constantPacer(%v).Rate = %v", tc.rate, r)
		}
	}
}

// hitsBy replays a pacer as vegeta's attack loop would, with an exact clock,
// and returns the hits sent by each of the given times.
func hitsBy(p vegeta.Pacer, at ...time.Duration) []uint64 {
	var out []uint64
	var elapsed time.Duration
	var hits uint64
	for _, t := range at {
		for {
			wait, stop := p.Pace(elapsed, hits)
			if stop || elapsed+wait > t {
				break
			}
			elapsed += wait
			hits++
		}
		out = append(out, hits)
	}
	return out
}

func TestPacers(t *testing.T) {
	ramp := newPacer(record.Load{Mode: "open", Pacer: "ramp", RampFrom: 10, Rate: 110}, 2*time.Second, 10*time.Second)
	// Warm-up at 10/s for 2s: 20 hits. Then 10→110/s over 10s: 600 more.
	got := hitsBy(ramp, 2*time.Second, 7*time.Second, 12*time.Second)
	want := []uint64{20, 20 + 175, 20 + 600}
	for i := range want {
		if d := int64(got[i]) - int64(want[i]); d < -2 || d > 2 {
			t.Errorf("ramp hits by %d: %d, want %d±2", i, got[i], want[i])
		}
	}
	if r := ramp.Rate(7 * time.Second); r < 59.9 || r > 60.1 {
		t.Errorf("ramp rate at the window's middle = %v, want 60", r)
	}
	c := newPacer(record.Load{Mode: "open", Pacer: "constant", Rate: 5000}, 0, 0)
	if got := hitsBy(c, time.Second, 10*time.Second); got[0] != 5000 || got[1] != 50000 {
		t.Errorf("constant 5000/s hits by 1s, 10s = %v, want [5000 50000]", got)
	}
	closed := newPacer(record.Load{Mode: "closed", Concurrency: 4}, 0, 0)
	if wait, stop := closed.Pace(time.Second, 1e9); wait != 0 || stop {
		t.Errorf("closed-loop pacer waits %v (stop %v), want 0: the clients set the pace", wait, stop)
	}
	// Random arrivals, for LLM loads, at the level's rate.
	for _, l := range []record.Load{{Mode: "open", Rate: 40, Arrival: "poisson", Burstiness: 1}, {Mode: "open", Rate: 40, Arrival: "gamma", Burstiness: 0.5}} {
		p, err := NewPacer(l, time.Second, 10*time.Second, 1)
		if g, ok := p.(*GammaPacer); err != nil || !ok || g.rate != 40 || g.shape != l.Burstiness {
			t.Errorf("NewPacer(%+v) = %v, %v; want a gamma pacer of its rate and burstiness", l, p, err)
		}
	}
	if _, err := NewPacer(record.Load{Mode: "open", Rate: 40, Arrival: "gamma"}, 0, time.Second, 1); err == nil {
		t.Error("NewPacer of gamma arrivals without burstiness: no error")
	}
	if p, err := NewPacer(record.Load{Mode: "open", Rate: 40}, 0, time.Second, 1); err != nil || p.Rate(0) != 40 {
		t.Errorf("NewPacer of constant arrivals = %v, %v", p, err)
	}
}

func TestTargetRate(t *testing.T) {
	ramp := record.Load{Mode: "open", Pacer: "ramp", RampFrom: 100, Rate: 300}
	for _, tc := range []struct {
		load record.Load
		t    time.Duration
		want float64
	}{
		{ramp, -time.Second, 100},
		{ramp, 5 * time.Second, 200},
		{ramp, 20 * time.Second, 300},
		{record.Load{Mode: "open", Rate: 50}, time.Second, 50},
		{record.Load{Mode: "closed", Concurrency: 8}, time.Second, 0},
	} {
		if got := TargetRate(tc.load, tc.t, 10*time.Second); got != tc.want {
			t.Errorf("TargetRate(%+v, %v) = %v, want %v", tc.load, tc.t, got, tc.want)
		}
	}
}

// sendTimes replays a pacer as vegeta's attack loop does, with an exact
// clock and nothing holding sending back, and returns when each of the
// first n hits goes out.
func sendTimes(p vegeta.Pacer, n int) []time.Duration {
	var out []time.Duration
	var elapsed time.Duration
	for hits := uint64(0); len(out) < n; hits++ {
		wait, stop := p.Pace(elapsed, hits)
		if stop {
			break
		}
		elapsed += max(wait, 0)
		out = append(out, elapsed)
	}
	return out
}

// TestSchedules: each open-loop pacer says when it meant every hit to go,
// which is when vegeta sends it on time; the closed loop has no schedule.
func TestSchedules(t *testing.T) {
	for _, tc := range []struct {
		name             string
		load             record.Load
		warmup, duration time.Duration
		// vegeta's ramp waits by a linear step at the current rate, off the
		// exact curve by a fraction of an interval (100 ms at 10/s).
		tol time.Duration
	}{
		{"constant", record.Load{Mode: "open", Pacer: "constant", Rate: 200}, 0, 0, 0},
		{"constant, fractional", record.Load{Mode: "open", Pacer: "constant", Rate: 2.5}, 0, 0, 0},
		{"ramp", record.Load{Mode: "open", Pacer: "ramp", RampFrom: 10, Rate: 110}, 2 * time.Second, 10 * time.Second, 20 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pacer := newPacer(tc.load, tc.warmup, tc.duration)
			p, ok := pacer.(schedule)
			if !ok {
				t.Fatalf("%T is no schedule", pacer)
			}
			for n, at := range sendTimes(p, 500) {
				if got := p.Intended(uint64(n)); got < at-tc.tol || got > at+tc.tol {
					t.Fatalf("Intended(%d) = %v; vegeta sends it at %v", n, got, at)
				}
			}
		})
	}
	if _, ok := newPacer(record.Load{Mode: "closed", Concurrency: 4}, 0, 0).(schedule); ok {
		t.Error("the closed loop has a schedule")
	}
}
