package batch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// recorder is a worker Func that records every batch it is given.
type recorder struct {
	mu      sync.Mutex
	batches [][]int
	starts  []time.Time
	gate    chan struct{} // if set, each batch waits for a receive... of a value
}

func (r *recorder) fn(ctx context.Context, in []int, out []int) error {
	r.mu.Lock()
	r.batches = append(r.batches, slices.Clone(in))
	r.starts = append(r.starts, time.Now())
	r.mu.Unlock()
	if r.gate != nil {
		<-r.gate
	}
	for i, v := range in {
		out[i] = 2*v + 1
	}
	return nil
}

func (r *recorder) snapshot() ([][]int, []time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.batches), slices.Clone(r.starts)
}

// start runs b until the returned stop function is called; stop waits for Run.
func start[In, Out any](t *testing.T, b *Batcher[In, Out]) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v", err)
		}
	}
}

func TestDeadlineSetByFirstItemNotReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r recorder
		b := New(Config{MaxBatch: 10, Policy: Fixed, MaxLatency: 100 * time.Millisecond}, r.fn)
		stop := start(t, b)
		defer stop()

		t0 := time.Now()
		var wg sync.WaitGroup
		for _, at := range []time.Duration{0, 60 * time.Millisecond, 90 * time.Millisecond, 99 * time.Millisecond} {
			wg.Go(func() {
				time.Sleep(at)
				if _, err := b.Submit(context.Background(), int(at/time.Millisecond)); err != nil {
					t.Errorf("Submit() = %v", err)
				}
			})
		}
		wg.Wait()
		batches, starts := r.snapshot()
		if len(batches) != 1 {
			t.Fatalf("got %d batches %v, want 1", len(batches), batches)
		}
		if got, want := starts[0].Sub(t0), 100*time.Millisecond; got != want {
			t.Errorf("batch started at +%v, want +%v (deadline of the first item)", got, want)
		}
		if got := len(batches[0]); got != 4 {
			t.Errorf("batch size = %d, want 4", got)
		}
	})
}

func TestFullBatchClosesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r recorder
		b := New(Config{MaxBatch: 4, Policy: Fixed, MaxLatency: time.Hour}, r.fn)
		stop := start(t, b)
		defer stop()

		t0 := time.Now()
		outs, st, err := b.Do(context.Background(), []int{1, 2, 3, 4})
		if err != nil {
			t.Fatalf("Do() error = %v", err)
		}
		if want := []int{3, 5, 7, 9}; !slices.Equal(outs, want) {
			t.Errorf("Do() = %v, want %v", outs, want)
		}
		if got := time.Since(t0); got != 0 {
			t.Errorf("full batch ran after %v, want at once", got)
		}
		if st.BatchSize != 4 || st.Queue != 0 {
			t.Errorf("Stats = %+v, want BatchSize 4, Queue 0", st)
		}
	})
}

func TestImmediatePolicyDoesNotWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r recorder
		b := New(Config{MaxBatch: 64, MaxLatency: time.Second, Policy: Immediate}, r.fn)
		stop := start(t, b)
		defer stop()

		t0 := time.Now()
		if got, err := b.Submit(context.Background(), 20); err != nil || got != 41 {
			t.Fatalf("Submit(20) = %d, %v, want 41, nil", got, err)
		}
		if got := time.Since(t0); got != 0 {
			t.Errorf("immediate policy waited %v, want 0", got)
		}
	})
}

func TestReadyBatchFillsWhileWorkersBusy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := recorder{gate: make(chan struct{})}
		b := New(Config{MaxBatch: 8, Policy: Immediate}, r.fn)
		stop := start(t, b)
		defer stop()

		var wg sync.WaitGroup
		wg.Go(func() { b.Submit(context.Background(), 0) })
		synctest.Wait() // the worker now holds the first batch
		for i := 1; i <= 5; i++ {
			wg.Go(func() { b.Submit(context.Background(), i) })
		}
		synctest.Wait()
		r.gate <- struct{}{} // finish batch 1
		r.gate <- struct{}{} // finish batch 2
		wg.Wait()
		batches, _ := r.snapshot()
		if len(batches) != 2 || len(batches[1]) != 5 {
			t.Errorf("batches = %v, want [0] then all five waiting items together", batches)
		}
	})
}

func TestConcurrentSubmittersGetTheirOwnResults(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     Config
		workers int
	}{
		{"fixed 1 worker", Config{MaxBatch: 16, Policy: Fixed, MaxLatency: time.Millisecond}, 1},
		{"fixed 4 workers", Config{MaxBatch: 7, Policy: Fixed, MaxLatency: time.Millisecond}, 4},
		{"immediate 3 workers", Config{MaxBatch: 5, Policy: Immediate}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var seen sync.Map // item -> times computed
			var computed atomic.Int64
			fn := func(_ context.Context, in, out []int) error {
				if len(in) > tc.cfg.MaxBatch {
					t.Errorf("batch of %d items, max %d", len(in), tc.cfg.MaxBatch)
				}
				for i, v := range in {
					if _, dup := seen.LoadOrStore(v, true); dup {
						t.Errorf("item %d computed twice", v)
					}
					out[i] = -v
				}
				computed.Add(int64(len(in)))
				return nil
			}
			workers := make([]Func[int, int], tc.workers)
			for i := range workers {
				workers[i] = fn
			}
			tc.cfg.QueueCap = 1 << 20
			b := New(tc.cfg, workers...)
			stop := start(t, b)

			const submitters, each = 64, 200
			var wg sync.WaitGroup
			for g := range submitters {
				wg.Go(func() {
					for j := range each {
						v := g*each*10 + j*10 + 1
						if j%3 == 0 { // a multi-item request
							ins := []int{v, v + 1, v + 2}
							outs, _, err := b.Do(context.Background(), ins)
							if err != nil || !slices.Equal(outs, []int{-v, -v - 1, -v - 2}) {
								t.Errorf("Do(%v) = %v, %v", ins, outs, err)
							}
							continue
						}
						if got, err := b.Submit(context.Background(), v); err != nil || got != -v {
							t.Errorf("Submit(%d) = %d, %v, want %d", v, got, err, -v)
						}
					}
				})
			}
			wg.Wait()
			stop()
			want := int64(submitters * (each + 2*((each+2)/3)))
			if got := computed.Load(); got != want {
				t.Errorf("computed %d items, want %d", got, want)
			}
			if n := b.Len(); n != 0 {
				t.Errorf("Len() = %d after all done, want 0", n)
			}
		})
	}
}

func TestCancelledAndExpiredItemsNeverReachTheWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := recorder{gate: make(chan struct{})}
		b := New(Config{MaxBatch: 8, Policy: Immediate}, r.fn)
		stop := start(t, b)
		defer stop()

		var wg sync.WaitGroup
		wg.Go(func() { b.Submit(context.Background(), 1) }) // occupies the worker
		synctest.Wait()

		cancelled, cancel := context.WithCancel(context.Background())
		expiring, cancel2 := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel2()
		errs := make(chan error, 2)
		wg.Go(func() { _, err := b.Submit(cancelled, 100); errs <- err })
		wg.Go(func() { _, err := b.Submit(expiring, 200); errs <- err })
		wg.Go(func() { b.Submit(context.Background(), 3) })
		synctest.Wait()
		cancel()
		time.Sleep(20 * time.Millisecond) // the second deadline passes
		for range 2 {
			if err := <-errs; !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Submit() error = %v, want the context's error", err)
			}
		}
		r.gate <- struct{}{}
		r.gate <- struct{}{}
		wg.Wait()
		batches, _ := r.snapshot()
		if want := [][]int{{1}, {3}}; fmt.Sprint(batches) != fmt.Sprint(want) {
			t.Errorf("worker saw %v, want %v", batches, want)
		}
	})
}

func TestQueueFullRefusesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := recorder{gate: make(chan struct{})}
		b := New(Config{MaxBatch: 2, QueueCap: 4, Policy: Immediate}, r.fn)
		stop := start(t, b)
		defer stop()

		var wg sync.WaitGroup
		// One item, so the running batch is known: the items of one request
		// reach the dispatcher one by one, and an idle worker under
		// Immediate may take the first alone.
		wg.Go(func() { b.Submit(context.Background(), 1) }) // running
		synctest.Wait()
		wg.Go(func() { b.Do(context.Background(), []int{3, 4, 5}) }) // queued: 3 of 4
		synctest.Wait()
		if got := b.Len(); got != 3 {
			t.Errorf("Len() = %d, want 3", got)
		}
		if _, _, err := b.Do(context.Background(), []int{6, 7}); !errors.Is(err, ErrQueueFull) {
			t.Errorf("Do() over capacity = %v, want ErrQueueFull", err)
		}
		if _, _, err := b.Do(context.Background(), make([]int, 5)); !errors.Is(err, ErrTooLarge) {
			t.Errorf("Do() of 5 items with capacity 4 = %v, want ErrTooLarge", err)
		}
		wg.Go(func() {
			if _, err := b.Submit(context.Background(), 8); err != nil { // fits: 4 of 4
				t.Errorf("Submit() at capacity = %v", err)
			}
		})
		synctest.Wait()
		close(r.gate)
		wg.Wait()
	})
}

func TestMultiItemRequestSpansBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r recorder
		b := New(Config{MaxBatch: 4, Policy: Fixed, MaxLatency: time.Millisecond}, r.fn)
		stop := start(t, b)
		defer stop()

		ins := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
		outs, st, err := b.Do(context.Background(), ins)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range ins {
			if outs[i] != 2*v+1 {
				t.Errorf("outs[%d] = %d, want %d", i, outs[i], 2*v+1)
			}
		}
		batches, _ := r.snapshot()
		if fmt.Sprint(batches) != "[[0 1 2 3] [4 5 6 7] [8 9]]" {
			t.Errorf("batches = %v", batches)
		}
		if st.BatchSize != 4 {
			t.Errorf("Stats.BatchSize = %d, want the largest, 4", st.BatchSize)
		}
	})
}

// TestCallAdmittedWhole: a call's items reach the dispatcher together, so
// that an idle worker under the immediate policy takes all of them and not
// the first alone. (Sent one by one, a dispatcher woken by the first item
// could hand it to the worker before the rest had come.)
func TestCallAdmittedWhole(t *testing.T) {
	var r recorder
	b := New(Config{MaxBatch: 64, Policy: Immediate}, r.fn)
	stop := start(t, b)
	defer stop()
	ins := []int{1, 2, 3, 4, 5, 6, 7, 8}
	for range 300 {
		if _, _, err := b.Do(context.Background(), ins); err != nil {
			t.Fatal(err)
		}
	}
	batches, _ := r.snapshot()
	for _, got := range batches {
		if len(got) != len(ins) {
			t.Fatalf("batch %v, one of %d for 300 calls: want each call's %d items in one batch", got, len(batches), len(ins))
		}
	}
}

func TestErrors(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name string
		fn   Func[int, int]
		want []bool // per item: failed?
	}{
		{"whole batch", func(_ context.Context, in, out []int) error { return boom }, []bool{true, true, true}},
		{"per item", func(_ context.Context, in, out []int) error {
			errs := make([]error, len(in))
			for i, v := range in {
				if v == 2 {
					errs[i] = boom
				}
				out[i] = v
			}
			return &ItemsError{Errs: errs}
		}, []bool{false, true, false}},
		{"panic", func(_ context.Context, in, out []int) error { panic("oops") }, []bool{true, true, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := New(Config{MaxBatch: 8}, tc.fn)
				stop := start(t, b)
				defer stop()
				outs, _, err := b.Do(context.Background(), []int{1, 2, 3})
				var ie *ItemsError
				if !errors.As(err, &ie) {
					t.Fatalf("Do() error = %v, want *ItemsError", err)
				}
				for i, failed := range tc.want {
					if got := ie.Errs[i] != nil; got != failed {
						t.Errorf("item %d failed = %v, want %v", i, got, failed)
					}
					if !failed && outs[i] != i+1 {
						t.Errorf("outs[%d] = %d, want %d", i, outs[i], i+1)
					}
				}
				// The batcher still works after a failure.
				if _, err := b.Submit(context.Background(), 1); (err != nil) != tc.want[0] {
					t.Errorf("Submit() after failure = %v", err)
				}
			})
		})
	}
}

func TestDrainFinishesAdmittedWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := recorder{gate: make(chan struct{})}
		b := New(Config{MaxBatch: 2, Policy: Fixed, MaxLatency: time.Hour}, r.fn)
		ctx, cancel := context.WithCancel(context.Background())
		runDone := make(chan error, 1)
		go func() { runDone <- b.Run(ctx) }()

		var wg sync.WaitGroup
		results := make([]int, 5)
		for i := range 5 {
			wg.Go(func() {
				v, err := b.Submit(context.Background(), i)
				if err != nil {
					t.Errorf("Submit(%d) admitted before drain = %v", i, err)
				}
				results[i] = v
			})
		}
		synctest.Wait() // one batch of 2 running; 3 items queued with an hour to wait
		cancel()
		synctest.Wait()
		if _, err := b.Submit(context.Background(), 9); !errors.Is(err, ErrClosed) {
			t.Errorf("Submit() while draining = %v, want ErrClosed", err)
		}
		close(r.gate) // let every batch finish
		wg.Wait()
		if err := <-runDone; err != nil {
			t.Errorf("Run() = %v", err)
		}
		for i, v := range results {
			if v != 2*i+1 {
				t.Errorf("result %d = %d, want %d", i, v, 2*i+1)
			}
		}
		if _, starts := r.snapshot(); time.Since(starts[0]) >= time.Hour {
			t.Errorf("drain waited for max latency")
		}
	})
}

func TestParsePolicy(t *testing.T) {
	for _, p := range Policies() {
		if got, err := ParsePolicy(string(p)); err != nil || got != p {
			t.Errorf("ParsePolicy(%q) = %q, %v", p, got, err)
		}
	}
	if _, err := ParsePolicy("sometimes"); err == nil {
		t.Error(`ParsePolicy("sometimes") succeeded, want error`)
	}
}

// BenchmarkSubmit measures the batcher's own cost per item with a no-op
// worker: many concurrent submitters, as under HTTP load.
func BenchmarkSubmit(b *testing.B) {
	for _, workers := range []int{1, 4} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			noop := func(_ context.Context, in, out []int) error {
				copy(out, in)
				return nil
			}
			fns := make([]Func[int, int], workers)
			for i := range fns {
				fns[i] = noop
			}
			bt := New(Config{MaxBatch: 64, MaxLatency: time.Millisecond, QueueCap: 1 << 16}, fns...)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { bt.Run(ctx); close(done) }()
			b.SetParallelism(64)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := bt.Submit(context.Background(), 1); err != nil {
						b.Error(err)
					}
				}
			})
			b.StopTimer()
			cancel()
			<-done
		})
	}
}
