package encoder_test

import (
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/inferhq/infer/models/sim"
	"github.com/inferhq/infer/server/batch"
	"github.com/inferhq/infer/server/encoder"
)

func TestResultCache(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := start(t, encoder.Config{CacheSize: 2, Batch: batch.Config{MaxLatency: time.Millisecond}}, simModel(t, time.Millisecond, 0))
		first := do(t, ts, "POST", "/batched", "application/json", `{"inputs": ["a", "b"]}`)
		again := do(t, ts, "POST", "/batched", "application/json", `{"inputs": ["b", "a", "c"]}`)
		if first.status != 200 || again.status != 200 {
			t.Fatalf("statuses %d %d", first.status, again.status)
		}
		if got, want := labels(t, again), []string{sim.Predict("b").Label, sim.Predict("a").Label, sim.Predict("c").Label}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("outputs %v, want %v", got, want)
		}
		if st := again.header.Get("Server-Timing"); !strings.Contains(st, "cache;desc=2") {
			t.Errorf("Server-Timing %q, want cache;desc=2", st)
		}
		m := do(t, ts, "GET", "/metrics", "", "").raw
		for _, want := range []string{"infer_cache_hits_total 2", "infer_cache_misses_total 3", "infer_cache_entries 2"} {
			if !strings.Contains(m, want) {
				t.Errorf("metrics lack %q:\n%s", want, grep(m, "cache"))
			}
		}
	})
}
