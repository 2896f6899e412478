package encoder_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/inferhq/infer/server/batch"
	"github.com/inferhq/infer/server/encoder"
)

// A naive request runs alone, but in model calls of at most --batch items,
// so that a large request does not take memory a batch never would.
func TestNaiveCallsAreBoundedByTheBatchSize(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGated()
		close(g.gate)
		ts := start(t, encoder.Config{Batch: batch.Config{MaxBatch: 4}}, g)
		var items []string
		for i := range 10 {
			items = append(items, fmt.Sprintf("%q", fmt.Sprint("item ", i)))
		}
		r := do(t, ts, "POST", "/naive", "application/json", `{"inputs": [`+strings.Join(items, ",")+`]}`)
		if r.status != 200 {
			t.Fatalf("status %d: %s", r.status, r.raw)
		}
		if got := fmt.Sprint(g.batchSizes()); got != "[4 4 2]" {
			t.Errorf("model calls of %s items for a 10-item request, want [4 4 2]", got)
		}
		outs := r.body["outputs"].([]any)
		for i, o := range outs {
			if o != fmt.Sprint("item ", i) {
				t.Errorf("output %d = %v, want %q: outputs out of order", i, o, fmt.Sprint("item ", i))
			}
		}
		if got := r.header.Get("Server-Timing"); got == "" || !strings.Contains(got, "batch;desc=4") {
			t.Errorf("Server-Timing %q, want batch;desc=4 (the largest call)", got)
		}
	})
}

// Naive requests whose client went away, or whose deadline passed, while they
// waited for the instance are counted as dropped, as on /batched.
func TestNaiveDropsAreCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGated()
		ts := start(t, encoder.Config{}, g)
		var wg sync.WaitGroup
		wg.Go(func() { try(ts, "POST", "/naive", "text/plain", "holds the instance") })
		<-g.started
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		if _, err := tryCtx(ctx, ts, "POST", "/naive", "application/json", `{"inputs": ["a", "b"]}`); err == nil {
			t.Error("a request whose client gave up got an answer")
		}
		cancel()
		r := do(t, ts, "POST", "/naive", "text/plain", "late", "X-Request-Timeout", "50ms")
		if r.status != 504 {
			t.Errorf("expired while waiting: %d %s, want 504", r.status, r.raw)
		}
		synctest.Wait()
		if got := metric(t, ts, `infer_dropped_items_total{endpoint="naive"}`); got != 3 {
			t.Errorf("dropped naive items = %v, want 3 (2 whose client left, 1 expired)", got)
		}
		g.gate <- struct{}{}
		wg.Wait()
	})
}
