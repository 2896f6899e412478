package encoder_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/inferhq/infer/server"
	"github.com/inferhq/infer/server/batch"
	"github.com/inferhq/infer/server/encoder"
	"github.com/inferhq/infer/server/servertest"
)

const bearer = "Bearer s3cret"

func TestAdminAPI(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := startWith(t, server.Config{AdminToken: "s3cret"}, encoder.Config{Batch: batch.Config{MaxBatch: 8, MaxLatency: 5 * time.Millisecond}}, simModel(t, time.Millisecond, 0))
		patch := `{"batch": 32, "max_latency": "20ms", "policy": "fixed", "workers": 3}`

		if r := do(t, ts, "PATCH", "/admin/batching", "application/json", patch); r.status != 401 {
			t.Errorf("without token: %d, want 401", r.status)
		}
		if r := do(t, ts, "PATCH", "/admin/batching", "application/json", patch, "Authorization", "Bearer wrong"); r.status != 401 {
			t.Errorf("wrong token: %d, want 401", r.status)
		}
		if r := do(t, ts, "GET", "/admin/batching", "", "", "Authorization", bearer); r.body["batch"] != float64(8) || r.body["workers"] != float64(1) {
			t.Errorf("refused changes took effect: %s", r.raw)
		}
		r := do(t, ts, "PATCH", "/admin/batching", "application/json", patch, "Authorization", bearer)
		if r.status != 200 || r.body["batch"] != float64(32) || r.body["max_latency"] != "20ms" || r.body["policy"] != "fixed" || r.body["workers"] != float64(3) {
			t.Fatalf("PATCH = %d %s", r.status, r.raw)
		}
		if r := do(t, ts, "POST", "/batched", "text/plain", "still serving"); r.status != 200 {
			t.Errorf("inference after change: %d", r.status)
		}
		if r := do(t, ts, "PATCH", "/admin/batching", "application/json", `{"workers": 1}`, "Authorization", bearer); r.status != 200 || r.body["workers"] != float64(1) {
			t.Errorf("shrinking workers: %d %s", r.status, r.raw)
		}
		for _, bad := range []string{`{"batch": 0}`, `{"policy": "sometimes"}`, `{"max_latency": "soon"}`, `{"workers": 0}`, `{"colour": 1}`} {
			if r := do(t, ts, "PATCH", "/admin/batching", "application/json", bad, "Authorization", bearer); r.status < 400 || r.status >= 500 {
				t.Errorf("PATCH %s = %d, want 4xx", bad, r.status)
			}
		}
		if r := do(t, ts, "GET", "/admin/batching", "", "", "Authorization", bearer); r.status != 200 || r.body["workers"] != float64(1) || r.body["batch"] != float64(32) {
			t.Errorf("GET = %d %s", r.status, r.raw)
		}
		if m := do(t, ts, "GET", "/metrics", "", "").raw; !strings.Contains(m, `infer_batching_info{max_batch="32",max_latency="20ms",policy="fixed",workers="1"} 1`) {
			t.Errorf("metrics do not show the new settings:\n%s", grep(m, "batching_info"))
		}
	})
}

func TestAdminAPIAbsentWithoutToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := start(t, encoder.Config{}, simModel(t, time.Millisecond, 0))
		if r := do(t, ts, "PATCH", "/admin/batching", "application/json", `{"batch": 2}`, "Authorization", "Bearer "); r.status != 404 {
			t.Errorf("admin API without --admin-token: %d, want 404", r.status)
		}
	})
}

func adminGet(t *testing.T, ts *servertest.Server) map[string]any {
	t.Helper()
	r := do(t, ts, "GET", "/admin/batching", "", "", "Authorization", bearer)
	if r.status != 200 {
		t.Fatalf("GET /admin/batching = %d %s", r.status, r.raw)
	}
	return r.body
}

// Values beyond the bounds are refused with 422 and change nothing; the
// server keeps serving.
func TestAdminRefusesHugeValues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &counted{Factory: simModel(t, time.Millisecond, 0)}
		ts := startWith(t, server.Config{AdminToken: "s3cret"}, encoder.Config{Batch: batch.Config{MaxBatch: 8}}, f)
		before := adminGet(t, ts)
		for _, p := range []string{
			`{"batch": 9223372036854775807}`,
			`{"batch": 1000000}`,
			`{"workers": 9223372036854775807}`,
			`{"workers": 1000}`,
			`{"max_latency": "1000h"}`,
			`{"max_latency": "-1ms"}`,
			`{"batch": 16, "workers": 1000}`,
			`{"batch": 16, "policy": "sometimes"}`,
		} {
			r := do(t, ts, "PATCH", "/admin/batching", "application/json", p, "Authorization", bearer)
			if r.status != 422 {
				t.Errorf("PATCH %s = %d %s, want 422", p, r.status, r.raw)
			}
			if got := adminGet(t, ts); fmt.Sprint(got) != fmt.Sprint(before) {
				t.Errorf("after PATCH %s: GET = %v, want unchanged %v", p, got, before)
			}
		}
		if r := do(t, ts, "POST", "/batched", "text/plain", "still serving"); r.status != 200 {
			t.Errorf("inference after refused PATCHes: %d %s", r.status, r.raw)
		}
		if got := f.live(); got != 2 {
			t.Errorf("%d live instances, want 2 (one worker, naive)", got)
		}
	})
}

// A PATCH applies all of its fields or none: when a new worker fails to
// load, the batch size stays too and the loaded instances are closed.
func TestAdminPatchIsAllOrNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &counted{Factory: simModel(t, time.Millisecond, 0), failAt: 4} // 2 at start, then 2 more
		ts := startWith(t, server.Config{AdminToken: "s3cret"}, encoder.Config{Batch: batch.Config{MaxBatch: 8}}, f)
		r := do(t, ts, "PATCH", "/admin/batching", "application/json", `{"batch": 16, "workers": 4}`, "Authorization", bearer)
		if r.status < 500 {
			t.Errorf("PATCH with a failing load = %d %s, want 5xx", r.status, r.raw)
		}
		if got := adminGet(t, ts); got["batch"] != float64(8) || got["workers"] != float64(1) {
			t.Errorf("after a failed PATCH: GET = %v, want batch 8, workers 1", got)
		}
		if got := f.live(); got != 2 {
			t.Errorf("%d live instances after the failed PATCH, want 2", got)
		}
	})
}

// A PATCH whose client gave up while new workers loaded is not applied.
func TestAdminCancelledPatchIsNotApplied(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &counted{Factory: simModel(t, time.Millisecond, 0), hold: make(chan struct{}, 10)}
		f.hold <- struct{}{}
		f.hold <- struct{}{} // the worker and the naive instance load at once
		ts := startWith(t, server.Config{AdminToken: "s3cret"}, encoder.Config{Batch: batch.Config{MaxBatch: 8}}, f)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		if _, err := tryCtx(ctx, ts, "PATCH", "/admin/batching", "application/json", `{"batch": 16, "workers": 3}`, "Authorization", bearer); err == nil {
			t.Fatal("PATCH answered while its instances could not load")
		}
		f.hold <- struct{}{}
		f.hold <- struct{}{}
		time.Sleep(time.Second) // the abandoned PATCH loads and warms its first instance
		synctest.Wait()
		if got := adminGet(t, ts); got["batch"] != float64(8) || got["workers"] != float64(1) {
			t.Errorf("after a cancelled PATCH: GET = %v, want batch 8, workers 1", got)
		}
		if got := f.live(); got != 2 {
			t.Errorf("%d live instances after the cancelled PATCH, want 2", got)
		}
	})
}

// Workers removed by a PATCH whose client gave up are gone for good, and
// their instances are closed once their batches end: GET tells the truth and
// later PATCHes work.
func TestAdminWorkersStayTruthful(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &counted{Factory: simModel(t, time.Second, 0)}
		ts := startWith(t, server.Config{AdminToken: "s3cret"}, encoder.Config{Workers: 3, Batch: batch.Config{MaxBatch: 1, Policy: batch.Immediate}}, f)
		var wg sync.WaitGroup
		for i := range 3 { // keep all three workers busy for 1s
			wg.Go(func() { try(ts, "POST", "/batched", "text/plain", fmt.Sprint("busy ", i)) })
		}
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		tryCtx(ctx, ts, "PATCH", "/admin/batching", "application/json", `{"workers": 1}`, "Authorization", bearer)
		cancel()
		synctest.Wait() // the server sees its client gone
		if got := adminGet(t, ts)["workers"]; got != float64(1) {
			t.Errorf("after a PATCH to 1 worker cut short: GET workers = %v, want 1", got)
		}
		wg.Wait()
		synctest.Wait()
		if got := f.live(); got != 2 {
			t.Errorf("%d live instances once the removed workers' batches ended, want 2", got)
		}
		for _, n := range []int{3, 1, 2} {
			r := do(t, ts, "PATCH", "/admin/batching", "application/json", fmt.Sprintf(`{"workers": %d}`, n), "Authorization", bearer)
			if r.status != 200 || r.body["workers"] != float64(n) {
				t.Errorf("PATCH workers %d = %d %s", n, r.status, r.raw)
			}
			if got := f.live(); got != n+1 {
				t.Errorf("after PATCH workers %d: %d live instances, want %d", n, got, n+1)
			}
		}
		if err := ts.Stop(); err != nil {
			t.Fatal(err)
		}
		if got := f.live(); got != 0 {
			t.Errorf("%d instances left open after shutdown, want 0", got)
		}
	})
}
