package server_test

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/inferhq/infer/server"
	"github.com/inferhq/infer/server/batch"
)

const bearer = "Bearer s3cret"

func TestAdminAPI(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := start(t, server.Config{AdminToken: "s3cret", Batch: batch.Config{MaxBatch: 8, MaxLatency: 5 * time.Millisecond}}, simModel(t, time.Millisecond, 0))
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
		ts := start(t, server.Config{}, simModel(t, time.Millisecond, 0))
		if r := do(t, ts, "PATCH", "/admin/batching", "application/json", `{"batch": 2}`, "Authorization", "Bearer "); r.status != 404 {
			t.Errorf("admin API without --admin-token: %d, want 404", r.status)
		}
	})
}
