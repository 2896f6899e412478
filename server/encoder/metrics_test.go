package encoder_test

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/server/batch"
	"github.com/inferhq/infer/server/encoder"
)

func TestMetricsExposed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := start(t, encoder.Config{Batch: batch.Config{MaxLatency: time.Millisecond}}, simModel(t, time.Millisecond, 0))
		r := do(t, ts, "POST", "/batched", "text/plain", "hello")
		do(t, ts, "POST", "/naive", "text/plain", "hello")
		do(t, ts, "POST", "/v2/models/sim/infer", "application/json", `{"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["hello"]}]}`)
		if st := r.header.Get("Server-Timing"); strings.Contains(st, "pad;") {
			t.Errorf("Server-Timing %q reports padding for a model without tokens", st)
		}
		m := do(t, ts, "GET", "/metrics", "", "").raw
		for _, want := range []string{
			`infer_requests_total{code="200",endpoint="batched"} 1`,
			`infer_requests_total{code="200",endpoint="naive"} 1`,
			`infer_batch_size_count{endpoint="batched"}`,
			`infer_queue_duration_seconds_count{endpoint="batched"} 1`,
			`infer_queue_duration_seconds_count{endpoint="v2"} 1`,
			`infer_requests_total{code="200",endpoint="v2"} 1`,
			`infer_batch_size_count{endpoint="batched"} 2`, // v2 runs in the batched endpoint's batches
			`infer_compute_duration_seconds_count{endpoint="naive"}`,
			`infer_queue_depth{endpoint="batched"} 0`,
			`infer_in_flight_requests{endpoint="batched"} 0`,
			`infer_ready 1`,
			`infer_model_info{`,
			`go_goroutines`,
		} {
			if !strings.Contains(m, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
	})
}

// tokens is a factory whose inputs carry one token per word, so batches
// have padding.
type tokens struct{ models.Factory }

func (f tokens) Prepare(text string) (models.Input, error) {
	return models.Input{Text: text, Tokens: make([]int32, len(strings.Fields(text)))}, nil
}

func TestPaddingReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := start(t, encoder.Config{Batch: batch.Config{MaxBatch: 8, MaxLatency: time.Second, Policy: batch.Fixed}}, tokens{simModel(t, time.Millisecond, 0)})
		r := do(t, ts, "POST", "/batched", "application/json", `{"inputs": ["one", "one two three four"]}`)
		if st := r.header.Get("Server-Timing"); !strings.Contains(st, "pad;desc=1.60") { // 2 × 4 ÷ 5
			t.Errorf("Server-Timing %q, want pad;desc=1.60", st)
		}
		if got := metric(t, ts, `infer_padding_ratio_count{endpoint="batched"}`); got != 1 {
			t.Errorf("padding_ratio_count = %v, want 1", got)
		}
	})
}
