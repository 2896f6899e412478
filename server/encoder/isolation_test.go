package encoder_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/inferhq/infer/models/sim"
	"github.com/inferhq/infer/server/batch"
	"github.com/inferhq/infer/server/encoder"
)

// A batch that fails as a whole is bisected: only the bad request gets 500.
func TestFailedBatchIsolatesTheBadRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, _ := sim.New(sim.Config{Fixed: 2 * time.Millisecond, FailOn: "poison", GoSleep: true})
		ts := start(t, encoder.Config{Batch: batch.Config{MaxBatch: 16, MaxLatency: 30 * time.Millisecond, Policy: batch.Fixed}}, f)
		var wg sync.WaitGroup
		var mu sync.Mutex
		got := map[string]int{}
		for i := range 12 {
			text := fmt.Sprintf("request %d", i)
			if i == 5 {
				text = "a poison request"
			}
			wg.Go(func() {
				r, _ := try(ts, "POST", "/batched", "text/plain", text)
				mu.Lock()
				got[text] = r.status
				mu.Unlock()
			})
		}
		wg.Wait()
		for text, code := range got {
			want := 200
			if strings.Contains(text, "poison") {
				want = 500
			}
			if code != want {
				t.Errorf("%q: %d, want %d", text, code, want)
			}
		}
		if got := metric(t, ts, `infer_isolation_calls_total{endpoint="batched"}`); got < 2 {
			t.Errorf("isolation cost: %v extra calls counted, want ≥ 2 (one batch of 12, bisected)", got)
		}
	})
}

// A model that names its failing items fails only those; a panic is a clean
// 500; an item too long for the model is a 413.
func TestModelErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGated()
		close(g.gate)
		g.fail, g.panicOn = "bad", "explode"
		ts := start(t, encoder.Config{Batch: batch.Config{MaxBatch: 8, MaxLatency: 50 * time.Millisecond, Policy: batch.Fixed}}, g)
		r := do(t, ts, "POST", "/batched", "application/json", `{"inputs": ["good", "bad"]}`)
		if r.status != 500 || r.code() != "model_error" || !strings.Contains(r.raw, "item 1") {
			t.Errorf("a request with a failing item: %d %s, want 500 naming item 1", r.status, r.raw)
		}
		if r := do(t, ts, "POST", "/batched", "text/plain", "good"); r.status != 200 {
			t.Errorf("a good request: %d %s", r.status, r.raw)
		}
		for _, ep := range []string{"/naive", "/batched"} {
			if r := do(t, ts, "POST", ep, "text/plain", "explode"); r.status != 500 || strings.Contains(r.raw, "goroutine") {
				t.Errorf("%s, panicking model: %d %s, want a clean 500", ep, r.status, r.raw)
			}
			if r := do(t, ts, "POST", ep, "text/plain", "[TOO LONG] text"); r.status != 413 || r.code() != "input_too_long" {
				t.Errorf("%s, too long input: %d %s, want 413 input_too_long", ep, r.status, r.raw)
			}
		}
	})
}
