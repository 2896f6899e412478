package route

import (
	"testing"
)

const inferMetrics = `# HELP infer_gen_num_requests_waiting Requests waiting to start.
# TYPE infer_gen_num_requests_waiting gauge
infer_gen_num_requests_waiting{endpoint="naive"} 1
infer_gen_num_requests_waiting{endpoint="static"} 0
infer_gen_num_requests_waiting{endpoint="v1"} 7
infer_gen_num_requests_running{endpoint="v1"} 32
infer_gen_num_requests_running{endpoint="naive"} 1
infer_gen_kv_cache_usage_perc{endpoint="v1"} 0.75
infer_gen_kv_cache_usage_perc{endpoint="naive"} 0.01
infer_gen_time_to_first_token_seconds_bucket{endpoint="v1",le="0.001"} 3
`

const vllmMetrics = `# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 4.0
vllm:num_requests_running{engine="0",model_name="m} \" {x"} 12.0 1712345678000
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.42
`

func TestParseLoad(t *testing.T) {
	for _, tc := range []struct {
		name string
		text string
		want Sample
	}{
		{"infer", inferMetrics, Sample{Waiting: 8, Running: 33, KV: 0.75, HasQueue: true, HasKV: true}},
		{"vllm", vllmMetrics, Sample{Waiting: 4, Running: 12, KV: 0.42, HasQueue: true, HasKV: true}},
		{"sglang", "sglang:num_queue_reqs{tp_rank=\"0\"} 2\nsglang:token_usage 0.3\n", Sample{Waiting: 2, KV: 0.3, HasQueue: true, HasKV: true}},
		{"encoder", "infer_requests_total{endpoint=\"batched\",code=\"200\"} 5\n", Sample{}},
		{"garbage", "infer_gen_num_requests_waiting{x=\"1\" 5\ninfer_gen_num_requests_waiting NaN\ninfer_gen_num_requests_waiting 1 2 3\n{} 4\n", Sample{}},
	} {
		if got := parseLoad([]byte(tc.text)); got != tc.want {
			t.Errorf("%s: parseLoad = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func FuzzParseLoad(f *testing.F) {
	f.Add([]byte(inferMetrics))
	f.Add([]byte(vllmMetrics))
	f.Add([]byte("vllm:num_requests_waiting{a=\"\\\"}\"} 1e308\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s := parseLoad(b)
		if s.Waiting != s.Waiting || s.KV != s.KV || s.Running != s.Running {
			t.Fatalf("parseLoad gave NaN: %+v", s)
		}
	})
}
