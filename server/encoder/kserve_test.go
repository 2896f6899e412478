package encoder_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/inferhq/infer/models/sim"
	"github.com/inferhq/infer/server/batch"
	"github.com/inferhq/infer/server/encoder"
)

func TestKServeV2(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := start(t, encoder.Config{Batch: batch.Config{MaxLatency: time.Millisecond}}, simModel(t, time.Millisecond, 0))
		for _, p := range []string{"/v2", "/v2/health/live", "/v2/health/ready", "/v2/models/sim", "/v2/models/sim/ready", "/v2/models/sim/versions/1/ready"} {
			if r := do(t, ts, "GET", p, "", ""); r.status != 200 {
				t.Errorf("GET %s = %d: %s", p, r.status, r.raw)
			}
		}
		r := do(t, ts, "GET", "/v2/models/sim", "", "")
		if r.body["name"] != "sim" || r.body["inputs"] == nil {
			t.Errorf("model metadata = %s", r.raw)
		}

		body := `{"id": "req-1", "inputs": [{"name": "text", "shape": [2, 1], "datatype": "BYTES", "data": [["a"], ["b"]]}]}`
		r = do(t, ts, "POST", "/v2/models/sim/infer", "application/json", body)
		if r.status != 200 {
			t.Fatalf("infer = %d: %s", r.status, r.raw)
		}
		if r.body["id"] != "req-1" || r.body["model_name"] != "sim" {
			t.Errorf("response = %s", r.raw)
		}
		out := r.body["outputs"].([]any)[0].(map[string]any)
		data := out["data"].([]any)
		var p sim.Prediction
		if err := json.Unmarshal([]byte(data[1].(string)), &p); err != nil || p != sim.Predict("b") {
			t.Errorf("output 1 = %v (%v), want %+v", data[1], err, sim.Predict("b"))
		}
		if out["datatype"] != "BYTES" || fmt.Sprint(out["shape"]) != "[2]" {
			t.Errorf("output tensor = %v", out)
		}
		if r.header.Get("Server-Timing") == "" {
			t.Error("no Server-Timing on v2 infer")
		}

		for _, tc := range []struct {
			name, path, body string
			status           int
		}{
			{"unknown model", "/v2/models/other/infer", body, 404},
			{"unknown version", "/v2/models/sim/versions/7/infer", body, 404},
			{"wrong datatype", "/v2/models/sim/infer", `{"inputs": [{"name": "text", "shape": [1], "datatype": "FP32", "data": [1.0]}]}`, 400},
			{"shape mismatch", "/v2/models/sim/infer", `{"inputs": [{"name": "text", "shape": [3], "datatype": "BYTES", "data": ["a"]}]}`, 400},
			{"non-string data", "/v2/models/sim/infer", `{"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": [1]}]}`, 422},
			{"malformed", "/v2/models/sim/infer", `{"inputs": [`, 400},
		} {
			r := do(t, ts, "POST", tc.path, "application/json", tc.body)
			if r.status != tc.status {
				t.Errorf("%s: status = %d, want %d: %s", tc.name, r.status, tc.status, r.raw)
				continue
			}
			if msg, _ := r.body["error"].(string); msg == "" {
				t.Errorf("%s: body = %s, want {\"error\": message}", tc.name, r.raw)
			}
		}
	})
}

// The v2 decoder is strict about shapes, data and inputs.
func TestKServeV2Strict(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := start(t, encoder.Config{Batch: batch.Config{MaxLatency: time.Millisecond}}, simModel(t, time.Millisecond, 0))
		tensor := func(shape, data string) string {
			return `{"inputs": [{"name": "text", "shape": ` + shape + `, "datatype": "BYTES", "data": ` + data + `}]}`
		}
		for _, tc := range []struct {
			name, body string
			status     int
		}{
			{"flat data, 2-d shape", tensor("[2, 1]", `["a", "b"]`), 200},
			{"nested data", tensor("[2, 2]", `[["a", "b"], ["c", "d"]]`), 200},
			{"negative dimensions", tensor("[-1, -1]", `["a"]`), 400},
			{"overflowing shape", tensor("[4294967296, 4294967296, 4294967296]", `["a"]`), 400},
			{"overflow to the right size", tensor("[9223372036854775807, 2]", `["a", "b"]`), 400},
			{"ragged data", tensor("[2, 2]", `[["a", "b"], ["c"]]`), 400},
			{"ragged, right total", tensor("[2, 2]", `[["a", "b", "c"], ["d"]]`), 400},
			{"nested deeper than the shape", tensor("[1]", `[["a"]]`), 400},
			{"duplicate inputs", `{"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["a"]}, {"name": "text", "shape": [1], "datatype": "BYTES", "data": ["b"]}]}`, 400},
			{"an unexpected input", `{"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["a"]}, {"name": "mask", "shape": [1], "datatype": "BYTES", "data": ["b"]}]}`, 400},
			{"case-changed key", `{"INPUTS": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["a"]}]}`, 422},
			{"duplicate key", `{"inputs": [{"name": "text", "shape": [1], "shape": [2], "datatype": "BYTES", "data": ["a"]}]}`, 400},
			{"requested outputs and parameters", `{"id": "7", "parameters": {}, "outputs": [{"name": "classify"}], "inputs": [{"name": "t", "shape": [1], "datatype": "BYTES", "data": ["a"]}]}`, 200},
		} {
			r := do(t, ts, "POST", "/v2/models/sim/infer", "application/json", tc.body)
			if r.status != tc.status {
				t.Errorf("%s: status %d, want %d: %s", tc.name, r.status, tc.status, r.raw)
			}
		}
	})
}
