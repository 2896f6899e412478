package encoder_test

import (
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/inferhq/infer/server/batch"
	"github.com/inferhq/infer/server/encoder"
)

func TestQueueFullIs429WithRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGated()
		ts := start(t, encoder.Config{Batch: batch.Config{MaxBatch: 2, QueueCap: 4, Policy: batch.Immediate}, MaxItems: 4}, g)

		var wg sync.WaitGroup
		codes := make(chan int, 10)
		post := func(body string) {
			wg.Go(func() {
				r, err := try(ts, "POST", "/batched", "application/json", body)
				if err != nil {
					t.Error(err)
				}
				codes <- r.status
			})
		}
		post(`{"inputs": ["a"]}`) // running
		<-g.started
		post(`{"inputs": ["c", "d", "e", "f"]}`) // fills the queue
		synctest.Wait()
		t0 := time.Now()
		r := do(t, ts, "POST", "/batched", "text/plain", "one too many")
		if took := time.Since(t0); took != 0 {
			t.Errorf("refusal took %v, want at once", took)
		}
		if r.status != 429 || r.header.Get("Retry-After") == "" || r.code() != "queue_full" {
			t.Errorf("status = %d, Retry-After = %q, %s; want 429 queue_full with Retry-After", r.status, r.header.Get("Retry-After"), r.raw)
		}
		close(g.gate)
		wg.Wait()
		close(codes)
		for c := range codes {
			if c != 200 {
				t.Errorf("admitted request got %d, want 200", c)
			}
		}
	})
}

func TestDeadlineIs504(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// AdmitLate: otherwise the late request is refused at once with 429.
		ts := start(t, encoder.Config{Batch: batch.Config{Policy: batch.Immediate, AdmitLate: true}}, simModel(t, 600*time.Millisecond, 0))
		var wg sync.WaitGroup
		for _, ep := range []string{"/batched", "/naive"} {
			wg.Go(func() { try(ts, "POST", ep, "text/plain", "occupies the instance") })
			synctest.Wait()
			t0 := time.Now()
			r := do(t, ts, "POST", ep, "text/plain", "late", "X-Request-Timeout", "100ms")
			if r.status != 504 || r.code() != "deadline_exceeded" {
				t.Errorf("%s: status = %d, want 504: %s", ep, r.status, r.raw)
			}
			if took := time.Since(t0); took != 100*time.Millisecond {
				t.Errorf("%s: 504 took %v, want the 100ms deadline, not the 600ms batch", ep, took)
			}
		}
		wg.Wait()
		// The expired item is dropped when the worker reaches it, just after
		// the batch ahead of it is answered.
		synctest.Wait()
		if got := metric(t, ts, `infer_dropped_items_total{endpoint="batched"}`); got != 1 {
			t.Errorf("batched: %v expired items counted as dropped, want 1", got)
		}
	})
}

func TestDeadlineUnreachableIs429(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := start(t, encoder.Config{Batch: batch.Config{MaxBatch: 1, Policy: batch.Immediate}}, simModel(t, 200*time.Millisecond, 0))
		// The warm-up taught the batcher the batch cost; now queue 5 behind
		// a running one.
		var wg sync.WaitGroup
		for i := range 6 {
			wg.Go(func() { try(ts, "POST", "/batched", "text/plain", fmt.Sprint("load ", i)) })
		}
		synctest.Wait()
		t0 := time.Now()
		r := do(t, ts, "POST", "/batched", "text/plain", "hurry", "X-Request-Timeout", "300ms")
		if r.status != 429 || r.header.Get("Retry-After") == "" || r.code() != "deadline_unreachable" {
			t.Errorf("status %d Retry-After %q body %s; want 429 deadline_unreachable", r.status, r.header.Get("Retry-After"), r.raw)
		}
		if took := time.Since(t0); took != 0 {
			t.Errorf("refusal took %v, want at once", took)
		}
		wg.Wait()
	})
}

// The burst: a 200 ms model at 200 req/s, X-Request-Timeout 250ms.
// Each request is answered 200 in time or refused with 429 at once, and
// nothing is computed for the refused. (A request admitted in the instant a
// batch is handed to the worker may find its own batch starting too late: it
// then gets its 504 when that batch starts, uncomputed. Rare: ≤ 1 %.)
func TestDeadlineBurstRefusedAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := start(t, encoder.Config{}, simModel(t, 200*time.Millisecond, 0))
		var wg sync.WaitGroup
		var mu sync.Mutex
		codes := map[int]int{}
		for i := range 400 { // 2 s at 200/s
			wg.Go(func() {
				t0 := time.Now()
				r, err := try(ts, "POST", "/batched", "text/plain", fmt.Sprint("item ", i), "X-Request-Timeout", "250ms")
				took := time.Since(t0)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				codes[r.status]++
				mu.Unlock()
				switch {
				case r.status == 429 && took != 0:
					t.Errorf("429 after %v, want at once", took)
				case r.status == 200 && took > 250*time.Millisecond:
					t.Errorf("200 after %v, past its deadline", took)
				case r.status == 504 && took >= 250*time.Millisecond:
					t.Errorf("504 after %v: computed past its deadline", took)
				case r.status != 200 && r.status != 429 && r.status != 504:
					t.Errorf("status %d (%s) after %v, want 200 in time or 429 at once", r.status, r.code(), took)
				}
			})
			time.Sleep(5 * time.Millisecond)
		}
		wg.Wait()
		if codes[200] == 0 || codes[429] == 0 || codes[504] > 4 {
			t.Errorf("codes %v, want answers and refusals, at most 1 %% 504s", codes)
		}
		if got := metric(t, ts, `infer_items_total{endpoint="batched"}`); got != float64(codes[200]) {
			t.Errorf("%v items computed for %d answered requests: refused ones were computed", got, codes[200])
		}
	})
}
