package batch

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// sleeper is a worker whose batches take d of the bubble's clock; it records
// the items it computed.
type sleeper struct {
	d    time.Duration
	mu   sync.Mutex
	seen []int
}

func (s *sleeper) fn(_ context.Context, in, out []int) error {
	s.mu.Lock()
	s.seen = append(s.seen, in...)
	s.mu.Unlock()
	time.Sleep(s.d)
	copy(out, in)
	return nil
}

// Admission counts the time left of the batch running now: an item arriving
// 100 ms into a 200 ms batch, with 250 ms to live, cannot finish in time
// (100 ms + its own 200 ms) and is refused at once; one arriving 160 ms in
// can (40 + 200 ms).
func TestAdmissionCountsTheRunningBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &sleeper{d: 200 * time.Millisecond}
		b := New(Config{MaxBatch: 64, Policy: Immediate}, s.fn)
		for _, n := range []int{1, 64, 1} {
			b.Observe(n, 200*time.Millisecond)
		}
		stop := start(t, b)
		defer stop()
		var wg sync.WaitGroup
		wg.Go(func() { b.Submit(context.Background(), 1) })
		time.Sleep(100 * time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
		t0 := time.Now()
		if _, err := b.Submit(ctx, 2); !errors.Is(err, ErrWouldMissDeadline) || time.Since(t0) != 0 {
			t.Errorf("100ms into the running batch: Submit() = %v after %v, want ErrWouldMissDeadline at once", err, time.Since(t0))
		}
		cancel()
		time.Sleep(60 * time.Millisecond)
		ctx, cancel = context.WithTimeout(context.Background(), 250*time.Millisecond)
		defer cancel()
		t0 = time.Now()
		if _, err := b.Submit(ctx, 3); err != nil || time.Since(t0) != 240*time.Millisecond {
			t.Errorf("160ms into the running batch: Submit() = %v after %v, want its answer after 240ms", err, time.Since(t0))
		}
		wg.Wait()
	})
}

// With several workers busy, the backlog ahead is shared among them.
func TestAdmissionCountsTheBacklogAhead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &sleeper{d: 100 * time.Millisecond}
		b := New(Config{MaxBatch: 2, Policy: Immediate}, s.fn, s.fn)
		for _, n := range []int{1, 2, 1} {
			b.Observe(n, 100*time.Millisecond)
		}
		stop := start(t, b)
		defer stop()
		var wg sync.WaitGroup
		wg.Go(func() { b.Do(context.Background(), []int{1, 2}) })
		wg.Go(func() { b.Do(context.Background(), []int{3, 4}) })
		synctest.Wait() // both workers busy until 100ms
		wg.Go(func() { b.Do(context.Background(), []int{5, 6, 7, 8}) })
		synctest.Wait() // two full batches queued: the workers take them at 100ms, done at 200ms
		for _, tc := range []struct {
			ttl  time.Duration
			want error
		}{
			{250 * time.Millisecond, ErrWouldMissDeadline}, // runs 200-300ms
			{310 * time.Millisecond, nil},
		} {
			ctx, cancel := context.WithTimeout(context.Background(), tc.ttl)
			_, err := b.Submit(ctx, 9)
			cancel()
			if !errors.Is(err, tc.want) {
				t.Errorf("deadline %v behind two busy workers and two full batches: %v, want %v", tc.ttl, err, tc.want)
			}
		}
		wg.Wait()
	})
}

// An item admitted all the same (the model runs slower than its estimate)
// is not computed when its batch would end after its deadline: it fails at
// its batch's start, with an error wrapping context.DeadlineExceeded.
func TestLateItemsAreNotComputed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &sleeper{d: 300 * time.Millisecond} // the model says 100ms
		b := New(Config{MaxBatch: 64, Policy: Immediate}, s.fn)
		for _, n := range []int{1, 64, 1} {
			b.Observe(n, 100*time.Millisecond)
		}
		stop := start(t, b)
		defer stop()
		var wg sync.WaitGroup
		wg.Go(func() { b.Submit(context.Background(), 1) })
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 350*time.Millisecond)
		defer cancel()
		t0 := time.Now()
		_, err := b.Submit(ctx, 2) // admitted: 100 + 100 < 350ms; starts at 300ms, would end at 400
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(t0) != 300*time.Millisecond {
			t.Errorf("Submit() = %v after %v, want DeadlineExceeded when its batch starts at 300ms", err, time.Since(t0))
		}
		wg.Wait()
		s.mu.Lock()
		defer s.mu.Unlock()
		if slices.Contains(s.seen, 2) {
			t.Errorf("worker computed %v, want the late item never computed", s.seen)
		}
	})
}

// AdmitLate turns both off.
func TestAdmitLateComputesEverything(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &sleeper{d: 300 * time.Millisecond}
		b := New(Config{MaxBatch: 64, Policy: Immediate, AdmitLate: true}, s.fn)
		for _, n := range []int{1, 64, 1} {
			b.Observe(n, 300*time.Millisecond)
		}
		stop := start(t, b)
		defer stop()
		var wg sync.WaitGroup
		wg.Go(func() { b.Submit(context.Background(), 1) })
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		if _, err := b.Submit(ctx, 2); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Submit() = %v, want the deadline to pass while it computes", err)
		}
		wg.Wait()
		synctest.Wait()
		s.mu.Lock()
		defer s.mu.Unlock()
		if !slices.Contains(s.seen, 2) {
			t.Errorf("worker computed %v, want the late item computed under AdmitLate", s.seen)
		}
	})
}
