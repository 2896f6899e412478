package target

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestBucketQuantile(t *testing.T) {
	cum := map[float64]float64{0.001: 0, 0.002: 10, 0.004: 90, 0.008: 100, math.Inf(1): 100}
	for _, tc := range []struct{ q, want float64 }{
		{0.5, 0.002 + 0.002*40/80}, // in (2ms, 4ms]: 40 of its 80
		{0.05, 0.001 + 0.001*5/10},
		{0.99, 0.004 + 0.004*9/10},
	} {
		if got := bucketQuantile(tc.q, cum); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("bucketQuantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if got := bucketQuantile(0.99, map[float64]float64{0.1: 1, math.Inf(1): 10}); got != 0.1 {
		t.Errorf("in +Inf's bucket: %v, want the highest finite bound 0.1", got)
	}
	if got := bucketQuantile(0.5, map[float64]float64{math.Inf(1): 0}); got != 0 {
		t.Errorf("empty: %v, want 0", got)
	}
}

const genText = `infer_gen_batching_info{kv_tokens="65536",max_batched_tokens="2048",max_latency="100ms",max_seqs="32",policy="continuous"} 1
infer_gen_model_info{backend="sim",model="sim-lm",params="step=8ms per_seq=250µs per_prefill_token=20µs kv_tokens=65536 context=4096"} 1
infer_gen_time_to_first_token_seconds_bucket{endpoint="v1",le="0.001"} 0
infer_gen_time_to_first_token_seconds_bucket{endpoint="v1",le="0.002"} %[1]v
infer_gen_time_to_first_token_seconds_bucket{endpoint="v1",le="+Inf"} %[1]v
infer_gen_time_to_first_token_seconds_sum{endpoint="v1"} %[2]v
infer_gen_time_to_first_token_seconds_count{endpoint="v1"} %[1]v
infer_gen_time_to_first_token_seconds_count{endpoint="static"} 99
infer_gen_generation_tokens_total{endpoint="v1"} %[3]v
infer_gen_request_success_total{endpoint="v1",finished_reason="length"} %[1]v
infer_gen_num_requests_running{endpoint="v1"} 7
infer_gen_kv_cache_usage_perc{endpoint="v1"} 0.25
infer_gen_step_duration_seconds_sum{endpoint="v1"} %[2]v
infer_gen_step_duration_seconds_count{endpoint="v1"} %[1]v
`

func genSamples(t *testing.T, n, sum, tokens float64) []Sample {
	t.Helper()
	s, err := parseMetrics(strings.NewReader(strings.NewReplacer("%[1]v", ftoa(n), "%[2]v", ftoa(sum), "%[3]v", ftoa(tokens)).Replace(genText)), "infer_")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func ftoa(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

func TestGenMetrics(t *testing.T) {
	begin := genSamples(t, 10, 0.015, 100)
	end := genSamples(t, 30, 0.045, 500)
	g := GenInfoOf(end)
	if !g.OK || g.Policy != "continuous" || g.MaxSeqs != 32 || g.MaxBatchedTokens != 2048 || g.KVTokens != 65536 || g.MaxLatency != 100*time.Millisecond || g.Model != "sim-lm" {
		t.Errorf("info = %+v", g)
	}
	step, perSeq, perPrefill, ok := SimCosts(g.Params)
	if !ok || step != 8*time.Millisecond || perSeq != 250*time.Microsecond || perPrefill != 20*time.Microsecond {
		t.Errorf("SimCosts(%q) = %v %v %v %v", g.Params, step, perSeq, perPrefill, ok)
	}
	a, okA := GenOf(begin, "v1")
	b, okB := GenOf(end, "v1")
	if !okA || !okB || b.Running != 7 || b.KV != 0.25 {
		t.Fatalf("GenOf: %+v %v %v", b, okA, okB)
	}
	if _, ok := GenOf(end, "naive"); ok {
		t.Error("GenOf(naive) found samples of no such endpoint")
	}
	d := GenDelta(a, b, 2*time.Second)
	if d.Requests != 20 || d.TTFTMean != 1.5 || d.OutputTokensPerS != 200 || d.TTFTP50 != 1.5 {
		t.Errorf("delta = %+v; want 20 requests, TTFT mean 1.5ms, p50 1.5ms (mid-bucket), 200 tokens/s", d)
	}
	if d.StepMean != 1.5 || d.StepBusy != 0.015 { // 20 steps of 1.5 ms in 2 s
		t.Errorf("steps: mean %v ms, busy %v; want 1.5 ms, 0.015", d.StepMean, d.StepBusy)
	}
	// The acceptance load's ideal (DESIGN.md): about 1,850 tokens/s.
	if got := IdealTokens(step, perSeq, perPrefill, 32, 138, 272); math.Abs(got-1850) > 10 {
		t.Errorf("IdealTokens = %.0f, want about 1850", got)
	}
	if _, _, _, ok := SimCosts("fixed=77ms"); ok {
		t.Error("SimCosts of an encoder's params: ok")
	}
}
