package batch

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// The online fit is the offline one (models/ceiling): with a negative
// intercept the slope is refitted through the origin, Σn·t / Σn².
func TestEstimatorNegativeIntercept(t *testing.T) {
	var e estimator
	e.observe(1, 500*time.Microsecond)
	e.observe(10, 20*time.Millisecond)
	a, per, ok := e.cost()
	// Equal weights up to the decay: 0.95 for the first, 1 for the second.
	want := (0.95*1*0.0005 + 10*0.020) / (0.95*1 + 100)
	if !ok || a != 0 || math.Abs(per-want) > 1e-12 {
		t.Errorf("cost() = %v, %v, %v; want 0, %v", a, per, ok, want)
	}
}

// closedLoop runs clients that call b.Do with one item each, again rtt(i)
// after each answer, until stop is closed; each answer's Stats go to got.
func closedLoop(b *Batcher[int, int], clients int, rtt func(i int) time.Duration, stop <-chan struct{}, got func(client int, st Stats)) *sync.WaitGroup {
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, st, err := b.Do(context.Background(), []int{i})
				if err != nil {
					panic(err)
				}
				got(i, st)
				time.Sleep(rtt(i))
			}
		})
	}
	return &wg
}

// costWorker is a worker that takes a + b·n for a batch of n.
func costWorker(a, per time.Duration) Func[int, int] {
	return func(_ context.Context, in, out []int) error {
		time.Sleep(a + time.Duration(len(in))*per)
		return nil
	}
}

// Sixteen closed-loop callers and one worker: immediate would send the
// first caller back alone and split every burst in two; fixed would wait
// its whole MaxLatency for a batch of 64. Adaptive, once it has seen the
// callers come back as a pool, sends each burst whole, as soon as its last
// caller is back.
func TestAdaptiveGathersClosedLoopBurst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var infos []Info
		b := New(Config{MaxBatch: 64, MaxLatency: 100 * time.Millisecond, Policy: Adaptive,
			OnBatch: func(i Info) { mu.Lock(); infos = append(infos, i); mu.Unlock() }},
			costWorker(77*time.Millisecond, 1160*time.Microsecond))
		b.Observe(1, 78160*time.Microsecond)
		b.Observe(64, 151240*time.Microsecond)
		stop := start(t, b)
		defer stop()

		// Caller i comes back 100µs + i·20µs after its answer: the whole
		// burst is back within 400µs.
		done := make(chan struct{})
		wg := closedLoop(b, 16, func(i int) time.Duration { return 100*time.Microsecond + time.Duration(i)*20*time.Microsecond },
			done, func(int, Stats) {})
		time.Sleep(3 * time.Second)
		close(done)
		wg.Wait()

		mu.Lock()
		defer mu.Unlock()
		late := infos[len(infos)/2:] // the pool is known by then
		for _, i := range late {
			if i.Size != 16 || i.Wait > 400*time.Microsecond {
				t.Fatalf("batch of %d after waiting %v, want all 16 callers, sent when the last is back (≤ 400µs): %+v", i.Size, i.Wait, late)
			}
		}
	})
}

// A lone request is never held longer than the echo window (a quarter of
// the fixed cost a), nor MaxLatency: here four callers form a pool, then
// three leave, so the batcher expects three callers that never come.
func TestAdaptiveHoldIsBounded(t *testing.T) {
	for _, tc := range []struct {
		maxLatency, want time.Duration
	}{
		{100 * time.Millisecond, 20 * time.Millisecond}, // a/4 with a = 80ms
		{5 * time.Millisecond, 5 * time.Millisecond},
	} {
		t.Run(tc.maxLatency.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := New(Config{MaxBatch: 64, MaxLatency: tc.maxLatency, Policy: Adaptive}, costWorker(80*time.Millisecond, time.Millisecond))
				b.Observe(1, 81*time.Millisecond)
				b.Observe(64, 144*time.Millisecond)
				stop := start(t, b)
				defer stop()

				var mu sync.Mutex
				var queue []time.Duration // of caller 0, after the others left
				leave := make(chan struct{})
				left := false
				rtt := func(int) time.Duration { return 200 * time.Microsecond }
				others := closedLoop(b, 3, rtt, leave, func(int, Stats) {})
				lone := make(chan struct{})
				first := closedLoop(b, 1, rtt, lone, func(_ int, st Stats) {
					mu.Lock()
					if left {
						queue = append(queue, st.Queue)
					}
					mu.Unlock()
				})
				time.Sleep(2 * time.Second)
				close(leave)
				others.Wait()
				mu.Lock()
				left = true
				mu.Unlock()
				time.Sleep(3 * time.Second)
				close(lone)
				first.Wait()

				mu.Lock()
				defer mu.Unlock()
				if len(queue) < 10 {
					t.Fatalf("%d answers after the others left", len(queue))
				}
				if slices.Max(queue) != tc.want {
					t.Errorf("the lone caller waited up to %v, want at most (and, while the pool is remembered, exactly) %v: %v", slices.Max(queue), tc.want, queue)
				}
				if last := queue[len(queue)-1]; last != 0 {
					t.Errorf("3 s after the others left the lone caller still waits %v, want 0 (the pool forgotten)", last)
				}
			})
		})
	}
}

func TestEchoShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := 10 * time.Millisecond
		// Closed loop: every arrival within 1 ms of a finish, finishes
		// every 50 ms.
		var closed echoes
		for range 100 {
			closed.finish(time.Now(), 8, 0, w)
			time.Sleep(time.Millisecond)
			for range 8 {
				closed.arrive(time.Now())
			}
			time.Sleep(49 * time.Millisecond)
		}
		if got := closed.share(); got < 0.95 {
			t.Errorf("closed loop: share() = %.3f, want ≥ 0.95", got)
		}
		// Open loop: arrivals every 5 ms whatever the finishes.
		var open echoes
		for i := range 1000 {
			if i%10 == 0 {
				open.finish(time.Now(), 8, 0, w)
			}
			open.arrive(time.Now())
			time.Sleep(5*time.Millisecond + time.Duration(i%7)*100*time.Microsecond)
		}
		if got := open.share(); got > 0.1 {
			t.Errorf("open loop: share() = %.3f, want ≈ 0", got)
		}
	})
}

// Sixteen callers, two workers of batch 8: the full house. The callers'
// round trips spread over 1–16 ms, far beyond the echo window (5 ms), so
// their echo is not seen, and sized from their rate the share rule would
// send batches of about 5. Because the pool would fill both workers'
// batches, every batch waits for its 8 instead. With 11 callers, fewer
// than ¾ of 16, the house is not full, and the batches stay smaller.
func TestAdaptiveFullHouse(t *testing.T) {
	for _, tc := range []struct {
		clients int
		full    bool
	}{{16, true}, {11, false}} {
		t.Run(fmt.Sprintf("clients=%d", tc.clients), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var mu sync.Mutex
				var items, batches int
				measure := false
				b := New(Config{MaxBatch: 8, MaxLatency: 50 * time.Millisecond, Policy: Adaptive,
					OnBatch: func(i Info) {
						mu.Lock()
						if measure {
							items, batches = items+i.Size, batches+1
						}
						mu.Unlock()
					}},
					costWorker(20*time.Millisecond, time.Millisecond), costWorker(20*time.Millisecond, time.Millisecond))
				b.Observe(1, 21*time.Millisecond)
				b.Observe(8, 28*time.Millisecond)
				stop := start(t, b)
				defer stop()

				done := make(chan struct{})
				rtt := func(i int) time.Duration { return time.Millisecond + time.Duration(i*7%16)*time.Millisecond }
				wg := closedLoop(b, tc.clients, rtt, done, func(int, Stats) {})
				time.Sleep(2 * time.Second)
				mu.Lock()
				measure = true
				mu.Unlock()
				time.Sleep(3 * time.Second)
				b.est.mu.Lock()
				share := b.est.echoes.share()
				b.est.mu.Unlock()
				close(done)
				wg.Wait()

				mu.Lock()
				defer mu.Unlock()
				mean := float64(items) / float64(batches)
				t.Logf("echo share %.2f, mean batch %.2f over %d batches", share, mean, batches)
				if share >= echoPool {
					t.Fatalf("echo share %.2f: the echo was seen, so this does not test the full house", share)
				}
				if tc.full && mean < 7.5 {
					t.Errorf("mean batch %.2f, want ≥ 7.5 of 8: a full house waits for full batches", mean)
				}
				if !tc.full && mean > 7 {
					t.Errorf("mean batch %.2f, want the share rule's smaller batches without a full house", mean)
				}
			})
		})
	}
}
