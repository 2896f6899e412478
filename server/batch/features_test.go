package batch

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestEstimatorFitsLinearCost(t *testing.T) {
	var e estimator
	for _, n := range []int{1, 8, 64, 32, 16, 64, 2} {
		e.observe(n, 77*time.Millisecond+time.Duration(n)*1160*time.Microsecond)
	}
	a, per, ok := e.cost()
	if !ok || math.Abs(a-0.077) > 1e-6 || math.Abs(per-0.00116) > 1e-8 {
		t.Errorf("cost() = %v, %v, %v; want 0.077, 0.00116", a, per, ok)
	}
	if d, _ := e.batchTime(64); d.Round(time.Microsecond) != 151240*time.Microsecond {
		t.Errorf("batchTime(64) = %v, want 151.24ms", d)
	}
	// Capacity of 2 workers at batch 64 is 2·64/0.15124 ≈ 846 items/s.
	if got := e.clear(846, 64, 2); got < 990*time.Millisecond || got > 1010*time.Millisecond {
		t.Errorf("clear(846) = %v, want ~1s", got)
	}
}

func TestEstimatorSameSizeBatches(t *testing.T) {
	var e estimator
	for range 5 {
		e.observe(64, 150*time.Millisecond)
	}
	a, per, ok := e.cost()
	if !ok || per != 0 || math.Abs(a-0.150) > 1e-9 {
		t.Errorf("cost() = %v, %v, %v; want 0.150, 0 (no slope from one size)", a, per, ok)
	}
}

// steadyRate makes e as if items had arrived at rate for a long time.
func steadyRate(e *estimator, rate float64, now time.Time) {
	e.first = now.Add(-time.Hour)
	e.slow = decayed{tau: slowTau, count: rate * slowTau.Seconds(), at: now}
	e.fast = decayed{tau: fastTau, count: rate * fastTau.Seconds(), at: now}
}

func TestEstimatorRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEstimator()
		arrive := func(d time.Duration, every time.Duration) {
			for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(every) {
				e.arrive(time.Now())
			}
		}
		arrive(200*time.Millisecond, 2*time.Millisecond) // 500/s, a short history
		if got := e.rate(time.Now()); got < 450 || got > 550 {
			t.Errorf("after 200ms at 500/s: rate() = %.1f, want ~500 (no start-up bias)", got)
		}
		arrive(10*time.Second, 2*time.Millisecond)
		if got := e.rate(time.Now()); got < 490 || got > 510 {
			t.Errorf("after 10s at 500/s: rate() = %.1f, want ~500", got)
		}
		arrive(300*time.Millisecond, 500*time.Microsecond) // a rise to 2000/s shows within 300ms
		if got := e.rate(time.Now()); got < 1800 {
			t.Errorf("300ms into a rise to 2000/s: rate() = %.1f, want ≥ 1800", got)
		}
	})
}

func TestAdaptiveTarget(t *testing.T) {
	for _, tc := range []struct {
		name          string
		workers, busy int
		rate          float64 // items/s
		want          int
	}{
		{"one worker: greedy", 1, 0, 1000, 1},
		{"last idle worker waits for its share", 4, 3, 1000, 32}, // 1000·0.077/(3.6−1.16) = 31.6, up
		{"two idle: share rounded down", 4, 2, 1000, 31},
		{"low rate, two idle: at once", 4, 2, 50, 1}, // 50·0.077/(3.6−0.058) = 1.09, down
		{"low rate, last idle: two", 4, 3, 50, 2},    // up
		{"overload: full batches", 4, 3, 4000, 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := New[int, int](Config{Policy: Adaptive})
			b.nworkers.Store(int32(tc.workers))
			b.busy.Store(int32(tc.busy))
			for _, n := range []int{1, 64, 8} {
				b.est.observe(n, 77*time.Millisecond+time.Duration(n)*1160*time.Microsecond)
			}
			now := time.Now()
			steadyRate(&b.est, tc.rate, now)
			if got := b.adaptiveTarget(b.cfg.Load()); got != tc.want {
				t.Errorf("adaptiveTarget() = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestAdaptiveNeverWaitsPastMaxLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := recorder{gate: make(chan struct{}, 100)}
		b := New(Config{MaxBatch: 64, MaxLatency: 50 * time.Millisecond, Policy: Adaptive}, r.fn, r.fn)
		for _, n := range []int{1, 64, 8} { // a slow accelerator, and a high rate
			b.est.observe(n, 77*time.Millisecond+time.Duration(n)*1160*time.Microsecond)
		}
		steadyRate(&b.est, 2000, time.Now())
		stop := start(t, b)
		defer stop()

		t0 := time.Now()
		var wg sync.WaitGroup
		wg.Go(func() { b.Submit(context.Background(), 1) })
		synctest.Wait()
		time.Sleep(time.Hour)
		_, starts := r.snapshot()
		if len(starts) != 1 {
			t.Fatalf("%d batches started, want 1", len(starts))
		}
		if got := starts[0].Sub(t0); got != 50*time.Millisecond {
			t.Errorf("a lone item waited %v for company that pays, want exactly MaxLatency 50ms", got)
		}
		close(r.gate)
		wg.Wait()
	})
}

func TestAdaptiveOneWorkerSendsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r recorder
		b := New(Config{MaxBatch: 64, MaxLatency: 100 * time.Millisecond, Policy: Adaptive}, r.fn)
		stop := start(t, b)
		defer stop()
		t0 := time.Now()
		b.Submit(context.Background(), 1)
		if got := time.Since(t0); got != 0 {
			t.Errorf("lone request waited %v with one idle worker, want 0", got)
		}
	})
}

func TestBucketsAndPadding(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var infos []Info
		var r recorder
		b := New(Config{MaxBatch: 8, MaxLatency: 10 * time.Millisecond, Policy: Fixed, Buckets: []int{16, 64},
			OnBatch: func(i Info) { mu.Lock(); infos = append(infos, i); mu.Unlock() }}, r.fn).
			WithSize(func(v int) int { return v })
		stop := start(t, b)
		defer stop()

		var wg sync.WaitGroup
		var pads sync.Map
		for _, v := range []int{4, 60, 8, 40, 16, 100} {
			wg.Go(func() {
				_, st, err := b.Do(context.Background(), []int{v})
				if err != nil {
					t.Error(err)
				}
				pads.Store(v, st.Padding)
			})
		}
		wg.Wait()
		batches, _ := r.snapshot()
		for _, bt := range batches {
			slices.Sort(bt)
		}
		slices.SortFunc(batches, func(x, y []int) int { return x[0] - y[0] })
		if got := fmt.Sprint(batches); got != "[[4 8 16] [40 60] [100]]" {
			t.Errorf("batches = %s, want items grouped by bucket ≤16, ≤64, >64", got)
		}
		if p, _ := pads.Load(4); math.Abs(p.(float64)-3*16/28.0) > 0.001 {
			t.Errorf("padding of the small bucket = %v, want %v", p, 3*16/28.0)
		}
		mu.Lock()
		defer mu.Unlock()
		for _, i := range infos {
			if i.Padding < 1 {
				t.Errorf("Info.Padding = %v < 1", i.Padding)
			}
		}
	})
}

func TestBisectionIsolatesBadItems(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int64
		var infos []Info
		var mu sync.Mutex
		poison := errors.New("poisoned batch")
		fn := func(_ context.Context, in, out []int) error {
			calls.Add(1)
			for i, v := range in {
				if v == 13 || v == 42 {
					return poison // the whole batch fails, without saying which item
				}
				out[i] = v * 10
			}
			return nil
		}
		b := New(Config{MaxBatch: 16, MaxLatency: time.Millisecond, Policy: Fixed,
			OnBatch: func(i Info) { mu.Lock(); infos = append(infos, i); mu.Unlock() }}, fn)
		stop := start(t, b)
		defer stop()

		ins := make([]int, 16)
		for i := range ins {
			ins[i] = i + 10
		}
		ins[9] = 42
		outs, _, err := b.Do(context.Background(), ins)
		var ie *ItemsError
		if !errors.As(err, &ie) {
			t.Fatalf("Do() error = %v, want *ItemsError", err)
		}
		for i, v := range ins {
			bad := v == 13 || v == 42
			if (ie.Errs[i] != nil) != bad {
				t.Errorf("item %d (%d): error %v, want failed=%v", i, v, ie.Errs[i], bad)
			}
			if !bad && outs[i] != v*10 {
				t.Errorf("item %d: output %d, want %d", i, outs[i], v*10)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if len(infos) != 1 || infos[0].Calls != int(calls.Load()) || infos[0].Calls < 3 || infos[0].Failed != 2 {
			t.Errorf("infos = %+v, calls %d", infos, calls.Load())
		}
	})
}

func TestDisableIsolation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fn := func(_ context.Context, in, out []int) error { return errors.New("down") }
		b := New(Config{MaxBatch: 4, DisableIsolation: true}, fn)
		stop := start(t, b)
		defer stop()
		_, _, err := b.Do(context.Background(), []int{1, 2, 3})
		var ie *ItemsError
		if !errors.As(err, &ie) || ie.Errs[0] == nil || ie.Errs[2] == nil {
			t.Errorf("Do() = %v, want every item failed", err)
		}
	})
}

func TestDeadlineAwareAdmission(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := recorder{gate: make(chan struct{}, 100)}
		b := New(Config{MaxBatch: 4, Policy: Immediate}, r.fn)
		for _, n := range []int{1, 2, 4} { // t(n) = 100ms + 100ms·n: a batch of 4 takes 500ms
			b.est.observe(n, 100*time.Millisecond+time.Duration(n)*100*time.Millisecond)
		}
		stop := start(t, b)
		defer stop()

		var wg sync.WaitGroup
		wg.Go(func() { b.Do(context.Background(), []int{1, 2, 3, 4}) })
		synctest.Wait()
		wg.Go(func() { b.Do(context.Background(), []int{5, 6, 7, 8, 9, 10, 11, 12}) }) // 8 queued
		synctest.Wait()

		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		t0 := time.Now()
		_, err := b.Submit(ctx, 99) // behind 8 items: ~1 s of work
		if !errors.Is(err, ErrWouldMissDeadline) || !errors.Is(err, ErrQueueFull) {
			t.Errorf("Submit() = %v, want ErrWouldMissDeadline (an ErrQueueFull)", err)
		}
		if time.Since(t0) != 0 {
			t.Error("refusal was not immediate")
		}
		if got := b.Backlog(); got < 900*time.Millisecond || got > 1100*time.Millisecond {
			t.Errorf("Backlog() = %v, want ~1s for 8 items at 8 items/s", got)
		}
		lenient, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel2()
		wg.Go(func() {
			if _, err := b.Submit(lenient, 100); err != nil {
				t.Errorf("Submit() with a reachable deadline = %v", err)
			}
		})
		synctest.Wait()
		close(r.gate)
		wg.Wait()
	})
}

func TestReconfigureAndWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := recorder{gate: make(chan struct{}, 100)}
		b := New(Config{MaxBatch: 2, Policy: Immediate}, r.fn)
		stop := start(t, b)
		defer stop()

		if err := b.Reconfigure(Config{MaxBatch: 3, Policy: Immediate}); err != nil {
			t.Fatal(err)
		}
		if err := b.Reconfigure(Config{Policy: "never"}); err == nil {
			t.Error("Reconfigure accepted an unknown policy")
		}
		var wg sync.WaitGroup
		wg.Go(func() { b.Do(context.Background(), []int{1}) }) // worker 0 busy
		synctest.Wait()
		wg.Go(func() { b.Do(context.Background(), []int{2, 3, 4, 5}) })
		synctest.Wait()
		if _, err := b.RemoveWorker(context.Background()); err == nil {
			t.Error("removed the last worker")
		}
		b.AddWorker(r.fn) // takes the waiting batch at once
		synctest.Wait()
		batches, _ := r.snapshot()
		if got := fmt.Sprint(batches); got != "[[1] [2 3 4]]" {
			t.Errorf("batches = %s, want the new size 3 and the added worker busy", got)
		}
		if b.Workers() != 2 {
			t.Errorf("Workers() = %d, want 2", b.Workers())
		}
		done := make(chan error)
		go func() { _, err := b.RemoveWorker(context.Background()); done <- err }()
		synctest.Wait()
		select {
		case <-done:
			t.Error("RemoveWorker returned while its worker was still computing")
		default:
		}
		close(r.gate)
		if err := <-done; err != nil {
			t.Error(err)
		}
		wg.Wait()
		if b.Workers() != 1 {
			t.Errorf("Workers() = %d after removal, want 1", b.Workers())
		}
	})
}
