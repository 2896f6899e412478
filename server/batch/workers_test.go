package batch

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// instance is an Instance that counts its closes and can hold its batches.
type instance struct {
	recorder
	closed atomic.Int32
	err    error // Close's error
}

func (m *instance) Predict(ctx context.Context, in []int, out []int) error { return m.fn(ctx, in, out) }
func (m *instance) Close() error {
	m.closed.Add(1)
	return m.err
}

// The batcher owns the instances given with AddInstance: a removed worker's
// instance is closed once its batch ends, even when the caller stopped
// waiting; the others when Run returns. Workers() counts the workers left.
func TestInstancesClosedByTheBatcher(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, c := &instance{recorder: recorder{gate: make(chan struct{}, 10)}}, &instance{recorder: recorder{gate: make(chan struct{}, 10)}}
		b := New[int, int](Config{MaxBatch: 1, Policy: Immediate})
		b.AddInstance(a)
		b.AddInstance(c)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- b.Run(ctx) }()

		var wg sync.WaitGroup
		for i := range 2 { // one batch each: both workers hold their batch
			wg.Go(func() { b.Submit(context.Background(), i) })
		}
		synctest.Wait()
		waitCtx, stopWaiting := context.WithTimeout(context.Background(), time.Second)
		defer stopWaiting()
		if _, err := b.RemoveWorker(waitCtx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("RemoveWorker() = %v while its worker computes past ctx, want DeadlineExceeded", err)
		}
		if got := b.Workers(); got != 1 {
			t.Errorf("Workers() = %d after a removal cut short, want 1: the removal stands", got)
		}
		if c.closed.Load() != 0 {
			t.Error("the removed worker's instance was closed while it computed")
		}
		c.gate <- struct{}{}
		a.gate <- struct{}{}
		wg.Wait()
		synctest.Wait()
		if c.closed.Load() != 1 || a.closed.Load() != 0 {
			t.Errorf("closes: removed %d, kept %d; want 1, 0", c.closed.Load(), a.closed.Load())
		}
		if _, err := b.RemoveWorker(context.Background()); !errors.Is(err, ErrLastWorker) {
			t.Errorf("removing the last worker: %v, want ErrLastWorker", err)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v", err)
		}
		if a.closed.Load() != 1 || c.closed.Load() != 1 {
			t.Errorf("after Run: closes %d, %d; want each instance closed once", a.closed.Load(), c.closed.Load())
		}
	})
}

func TestRunReturnsCloseErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New[int, int](Config{})
		b.AddInstance(&instance{err: errors.New("device lost")})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- b.Run(ctx) }()
		cancel()
		if err := <-done; err == nil || !strings.Contains(err.Error(), "device lost") {
			t.Errorf("Run() = %v, want the instance's close error", err)
		}
	})
}

func TestValidateBounds(t *testing.T) {
	for _, tc := range []struct {
		cfg Config
		ok  bool
	}{
		{Config{}, true},
		{Config{MaxBatch: MaxBatchLimit, MaxLatency: MaxLatencyLimit, QueueCap: QueueCapLimit}, true},
		{Config{MaxBatch: MaxBatchLimit + 1}, false},
		{Config{MaxBatch: 1 << 62}, false},
		{Config{MaxBatch: -1}, false},
		{Config{MaxLatency: MaxLatencyLimit + 1}, false},
		{Config{MaxLatency: -time.Millisecond}, false},
		{Config{QueueCap: QueueCapLimit + 1}, false},
		{Config{Buckets: make([]int, BucketsLimit+1)}, false},
		{Config{Buckets: []int{32, 16}}, false},
		{Config{Policy: "sometimes"}, false},
	} {
		if err := tc.cfg.Validate(); (err == nil) != tc.ok {
			t.Errorf("Validate(%+v) = %v, want ok %v", tc.cfg, err, tc.ok)
		}
	}
	for n, ok := range map[int]bool{0: false, 1: true, WorkersLimit: true, WorkersLimit + 1: false, 1 << 62: false} {
		if err := ValidateWorkers(n); (err == nil) != ok {
			t.Errorf("ValidateWorkers(%d) = %v, want ok %v", n, err, ok)
		}
	}
	if got := (Config{MaxBatch: MaxBatchLimit}).WithDefaults(WorkersLimit).QueueCap; got != QueueCapLimit {
		t.Errorf("default QueueCap at the largest batch and workers = %d, want the limit %d", got, QueueCapLimit)
	}
	if got := (Config{}).WithDefaults(2); got.Policy != Adaptive || got.MaxBatch != 64 || got.QueueCap != 2048 {
		t.Errorf("WithDefaults(2) = %+v, want adaptive, batch 64, queue 2048", got)
	}
}

// A batch is as large as its items: a huge MaxBatch allocates nothing up
// front.
func TestLargeMaxBatchAllocatesByItems(t *testing.T) {
	b := New(Config{MaxBatch: MaxBatchLimit, Policy: Immediate, QueueCap: 64}, func(_ context.Context, in []int, out []int) error { return nil })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go b.Run(ctx)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range 10 {
		if _, err := b.Submit(context.Background(), i); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 64<<10 {
		t.Errorf("10 one-item batches with MaxBatch %d allocated %d bytes, want < 64 KiB", MaxBatchLimit, got)
	}
}

// WithSize may be called while requests are being admitted (go test -race).
func TestWithSizeWhileAdmitting(t *testing.T) {
	b := New(Config{Policy: Immediate}, func(_ context.Context, in []int, out []int) error { return nil })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go b.Run(ctx)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for range 50 {
				b.Submit(context.Background(), i)
			}
		})
	}
	for range 50 {
		b.WithSize(func(v int) int { return v + 1 })
	}
	wg.Wait()
}
