package sim

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/inferhq/infer/models"
)

func TestCost(t *testing.T) {
	c := Config{Fixed: 77 * time.Millisecond, PerItem: 1160 * time.Microsecond}
	for _, tc := range []struct {
		n    int
		want time.Duration
	}{{0, 77 * time.Millisecond}, {1, 78160 * time.Microsecond}, {64, 151240 * time.Microsecond}} {
		if got := c.Cost(tc.n); got != tc.want {
			t.Errorf("Cost(%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
}

func TestPredictIsDeterministic(t *testing.T) {
	f, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	m, _ := f.New(context.Background(), 0)
	in := []models.Input{{Text: "a"}, {Text: "b"}, {Text: "a"}}
	out := make([]models.Output, len(in))
	if err := m.Predict(context.Background(), in, out); err != nil {
		t.Fatal(err)
	}
	if out[0] != out[2] {
		t.Errorf("same text, different outputs: %v, %v", out[0], out[2])
	}
	if out[0] == out[1] {
		t.Errorf("different texts, same output %v (hash collision in a 3-item test is unlikely)", out[0])
	}
	if got := Predict("a"); got != out[0] {
		t.Errorf("Predict(a) = %v, instance gave %v", got, out[0])
	}
	p := Predict("x")
	if p.Score < 0 || p.Score >= 1 {
		t.Errorf("score %v out of [0, 1)", p.Score)
	}
}

func TestNegativeCostRefused(t *testing.T) {
	if _, err := New(Config{Fixed: -time.Millisecond}); err == nil {
		t.Error("New with negative fixed cost succeeded")
	}
}

// The simulated accelerator must wait without using the CPU: waiting 200 ms
// should cost at most a few ms of CPU time.
func TestWaitDoesNotUseCPU(t *testing.T) {
	var w waiter
	before := cpuTime(t)
	start := time.Now()
	for range 4 {
		w.wait(50 * time.Millisecond)
	}
	wall := time.Since(start)
	used := cpuTime(t) - before
	if wall < 190*time.Millisecond {
		t.Errorf("4 waits of 50ms took %v", wall)
	}
	if used > 20*time.Millisecond {
		t.Errorf("waiting %v used %v of CPU", wall, used)
	}
}

func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkWait reports how far a simulated batch's wall time lands from its
// target, on average and at worst: the simulation's precision.
func BenchmarkWait(b *testing.B) {
	for _, d := range []time.Duration{4 * time.Millisecond, 10400 * time.Microsecond, 78160 * time.Microsecond} {
		b.Run(fmt.Sprint(d), func(b *testing.B) {
			var w waiter
			var sum, worst time.Duration
			for b.Loop() {
				start := time.Now()
				w.wait(d)
				e := time.Since(start) - d
				sum += e
				worst = max(worst, e.Abs())
			}
			b.ReportMetric(float64(sum.Microseconds())/float64(b.N), "µs-mean-error")
			b.ReportMetric(float64(worst.Microseconds()), "µs-worst-error")
		})
	}
}

func TestFailOnFailsTheWholeBatch(t *testing.T) {
	f, _ := New(Config{FailOn: "poison"})
	m, _ := f.New(context.Background(), 0)
	in := []models.Input{{Text: "fine"}, {Text: "a poison pill"}, {Text: "also fine"}}
	err := m.Predict(context.Background(), in, make([]models.Output, 3))
	if !errors.Is(err, ErrInjected) {
		t.Errorf("Predict() = %v, want ErrInjected", err)
	}
	if err := m.Predict(context.Background(), in[:1], make([]models.Output, 1)); err != nil {
		t.Errorf("Predict() without the text = %v", err)
	}
}

// With GoSleep a batch takes exactly its cost on a synctest bubble's clock.
func TestGoSleepFollowsTheBubbleClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, err := New(Config{Fixed: 77 * time.Millisecond, PerItem: time.Millisecond, GoSleep: true})
		if err != nil {
			t.Fatal(err)
		}
		m, _ := f.New(context.Background(), 0)
		in := make([]models.Input, 3)
		start := time.Now()
		if err := m.Predict(context.Background(), in, make([]models.Output, 3)); err != nil {
			t.Fatal(err)
		}
		if got := time.Since(start); got != 80*time.Millisecond {
			t.Errorf("batch of 3 took %v, want exactly 80ms", got)
		}
	})
}
