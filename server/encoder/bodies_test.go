package encoder_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/inferhq/infer/models/sim"
	"github.com/inferhq/infer/server"
	"github.com/inferhq/infer/server/batch"
	"github.com/inferhq/infer/server/encoder"
)

func TestBodiesOnBothEndpoints(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := start(t, encoder.Config{Batch: batch.Config{MaxLatency: time.Millisecond}}, simModel(t, time.Millisecond, 0))
		want := []string{sim.Predict("Paris is the [MASK] of France.").Label, sim.Predict("a & b = c").Label}
		for _, ep := range []string{"/naive", "/batched"} {
			for _, tc := range []struct {
				name, ctype, body string
				want              []string
			}{
				{"json", "application/json", `{"inputs": ["Paris is the [MASK] of France.", "a & b = c"]}`, want},
				{"json one string", "application/json; charset=utf-8", `{"inputs": "Paris is the [MASK] of France."}`, want[:1]},
				{"text", "text/plain", "Paris is the [MASK] of France.\n", want[:1]},
				{"form", "application/x-www-form-urlencoded", "s=" + url.QueryEscape("Paris is the [MASK] of France.") + "&s=" + url.QueryEscape("a & b = c"), want},
				{"curl -d text", "application/x-www-form-urlencoded", "Paris is the [MASK] of France.", want[:1]},
				{"no content type, json", "", `{"inputs": ["a & b = c"]}`, want[1:]},
				// curl -d sends the form type whatever the text: decided by what it is.
				{"curl -d text with ;", "application/x-www-form-urlencoded", "Paris; the [MASK].", []string{sim.Predict("Paris; the [MASK].").Label}},
				{"curl -d text with %", "application/x-www-form-urlencoded", "100% sure [MASK]", []string{sim.Predict("100% sure [MASK]").Label}},
				{"curl -d JSON", "application/x-www-form-urlencoded", `{"inputs":["Paris is the [MASK] of France.","a & b = c"]}`, want},
				{"BOM and JSON, no content type", "", "\ufeff" + `{"inputs": ["a & b = c"]}`, want[1:]},
				{"BOM and JSON", "application/json", "\ufeff" + `{"inputs": ["a & b = c"]}`, want[1:]},
				{"surrogate pair", "application/json", `{"inputs": ["\ud83d\ude00 [MASK]"]}`, []string{sim.Predict("😀 [MASK]").Label}},
			} {
				r := do(t, ts, "POST", ep, tc.ctype, tc.body)
				if r.status != 200 {
					t.Errorf("%s %s: status %d: %s", ep, tc.name, r.status, r.raw)
					continue
				}
				if got := labels(t, r); fmt.Sprint(got) != fmt.Sprint(tc.want) {
					t.Errorf("%s %s: labels = %v, want %v", ep, tc.name, got, tc.want)
				}
				if r.body["model"] != "sim" {
					t.Errorf("%s %s: model = %v, want sim", ep, tc.name, r.body["model"])
				}
				st := r.header.Get("Server-Timing")
				for _, part := range []string{"queue;dur=", "compute;dur=", "batch;desc="} {
					if !strings.Contains(st, part) {
						t.Errorf("%s %s: Server-Timing %q lacks %s", ep, tc.name, st, part)
					}
				}
			}
		}
	})
}

func TestErrorContract(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := startWith(t, server.Config{MaxBody: 1024}, encoder.Config{MaxItems: 3, Batch: batch.Config{MaxLatency: time.Millisecond}}, simModel(t, time.Millisecond, 0))
		for _, tc := range []struct {
			name, method, path, ctype, body string
			hdr                             []string
			status                          int
			code                            string
		}{
			{"malformed json", "POST", "/batched", "application/json", `{"inputs": [`, nil, 400, "malformed_json"},
			{"not an object", "POST", "/batched", "application/json", `["a"]`, nil, 422, "invalid_body"},
			{"no inputs", "POST", "/naive", "application/json", `{}`, nil, 422, "missing_inputs"},
			{"unknown field", "POST", "/naive", "application/json", `{"input": ["a"]}`, nil, 422, "unknown_field"},
			{"extra field", "POST", "/batched", "application/json", `{"inputs": ["a"], "parameters": {}}`, nil, 422, "unknown_field"},
			{"case-changed key", "POST", "/batched", "application/json", `{"INPUTS": ["a"]}`, nil, 422, "unknown_field"},
			{"duplicate key", "POST", "/batched", "application/json", `{"inputs": ["a"], "inputs": ["b"]}`, nil, 400, "duplicate_field"},
			{"data after the object", "POST", "/batched", "application/json", `{"inputs": ["a"]} {}`, nil, 400, "malformed_json"},
			{"invalid utf-8 in json", "POST", "/batched", "application/json", "{\"inputs\": [\"caf\xe9\"]}", nil, 400, "bad_encoding"},
			{"lone surrogate", "POST", "/batched", "application/json", `{"inputs": ["a \ud800 b"]}`, nil, 400, "bad_encoding"},
			{"lone low surrogate", "POST", "/batched", "application/json", `{"inputs": ["\udc00"]}`, nil, 400, "bad_encoding"},
			{"NUL in json", "POST", "/batched", "application/json", `{"inputs": ["a\u0000b"]}`, nil, 400, "bad_encoding"},
			{"NUL in text", "POST", "/batched", "text/plain", "a\x00b", nil, 400, "bad_encoding"},
			{"NUL in a form", "POST", "/batched", "application/x-www-form-urlencoded", "s=a%00b", nil, 400, "bad_encoding"},
			{"bad utf-8 in a form", "POST", "/batched", "application/x-www-form-urlencoded", "s=caf%E9", nil, 400, "bad_encoding"},
			{"empty inputs", "POST", "/batched", "application/json", `{"inputs": []}`, nil, 422, "no_inputs"},
			{"non-string item", "POST", "/batched", "application/json", `{"inputs": ["a", 3]}`, nil, 422, "invalid_inputs"},
			{"empty item", "POST", "/batched", "application/json", `{"inputs": ["a", " "]}`, nil, 422, "empty_input"},
			{"empty text", "POST", "/batched", "text/plain", ``, nil, 422, "empty_input"},
			{"too many items", "POST", "/batched", "application/json", `{"inputs": ["a","b","c","d"]}`, nil, 422, "too_many_items"},
			{"body too large", "POST", "/batched", "text/plain", strings.Repeat("x", 2000), nil, 413, "body_too_large"},
			{"bad utf-8", "POST", "/naive", "text/plain", "\xff\xfe", nil, 400, "bad_encoding"},
			{"unsupported type", "POST", "/batched", "application/xml", `<a/>`, nil, 415, "unsupported_media_type"},
			{"bad timeout", "POST", "/batched", "text/plain", "a", []string{"X-Request-Timeout", "soon"}, 400, "bad_timeout"},
			{"wrong method", "GET", "/batched", "", "", nil, 405, "method_not_allowed"},
			{"unknown path", "GET", "/nope", "", "", nil, 404, "not_found"},
		} {
			r := do(t, ts, tc.method, tc.path, tc.ctype, tc.body, tc.hdr...)
			if r.status != tc.status {
				t.Errorf("%s: status = %d, want %d (%s)", tc.name, r.status, tc.status, r.raw)
				continue
			}
			if e, _ := r.body["error"].(map[string]any); r.code() != tc.code || e["message"] == "" {
				t.Errorf("%s: body = %s, want error code %q with a message", tc.name, r.raw, tc.code)
			}
			if strings.Contains(r.raw, "goroutine") {
				t.Errorf("%s: body leaks a stack trace: %s", tc.name, r.raw)
			}
		}
		if r := do(t, ts, "GET", "/batched", "", ""); r.header.Get("Allow") != "POST" {
			t.Errorf("405 Allow = %q, want POST", r.header.Get("Allow"))
		}
		if r := do(t, ts, "POST", "/healthz", "", ""); r.status != 405 || r.header.Get("Allow") != "GET, HEAD" {
			t.Errorf("POST /healthz: %d Allow = %q, want 405 with GET, HEAD", r.status, r.header.Get("Allow"))
		}
	})
}

// A body that stops arriving is answered 408 once the host's read timeout
// (30 s) has passed, on every path and in each API's shape, quoting no
// network error (those name the client's and the server's addresses).
func TestSlowBodyAnswered408(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := start(t, encoder.Config{}, simModel(t, time.Millisecond, 0))
		for _, tc := range []struct{ path, want string }{
			{"/batched", `{"error":{"code":"body_timeout","message":"the body did not arrive in time"}}`},
			{"/naive", `{"error":{"code":"body_timeout","message":"the body did not arrive in time"}}`},
			{"/v2/models/sim/infer", `{"error":"the body did not arrive in time"}`},
		} {
			r, took, err := ts.DoStalled(http.MethodPost, tc.path, "application/json", `{"inputs": [`, 100)
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != 408 || strings.TrimSpace(r.Body) != tc.want {
				t.Errorf("%s: a stalled body: %d %s, want 408 %s", tc.path, r.Status, r.Body, tc.want)
			}
			if took != 30*time.Second {
				t.Errorf("%s: answered after %v, want the read timeout, 30s", tc.path, took)
			}
		}
		if got := metric(t, ts, `infer_requests_total{code="408",endpoint="batched"}`); got != 1 {
			t.Errorf(`infer_requests_total{code="408",endpoint="batched"} = %v, want 1`, got)
		}
	})
}
