package encoder_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/inferhq/infer/models/sim"
	"github.com/inferhq/infer/server"
	"github.com/inferhq/infer/server/batch"
	"github.com/inferhq/infer/server/encoder"
	"github.com/inferhq/infer/server/servertest"
)

// FuzzHandler sends arbitrary requests to the whole handler of a running
// host with the encoder API: every error is answered in the JSON shape, and nothing is a 500
// (the sim model never fails).
func FuzzHandler(f *testing.F) {
	for _, tc := range [][5]string{
		{"POST", "/batched", "application/json", `{"inputs": ["a"]}`, ""},
		{"POST", "/naive", "text/plain", "Paris is the [MASK].", "250ms"},
		{"POST", "/v2/models/sim/infer", "application/json", `{"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["a"]}]}`, ""},
		{"GET", "/v2/models/sim", "", "", ""},
		{"PATCH", "/admin/batching", "application/json", `{"batch": 9223372036854775807}`, ""},
		{"GET", "/nope", "", "", "x"},
	} {
		f.Add(tc[0], tc[1], tc[2], []byte(tc[3]), tc[4])
	}
	factory, err := sim.New(sim.Config{})
	if err != nil {
		f.Fatal(err)
	}
	svc := newService(f, encoder.Config{MaxItems: 8, Batch: batch.Config{MaxBatch: 8, Policy: batch.Immediate}}, factory)
	h := servertest.Start(f, server.Config{MaxBody: 64 << 10, Timeout: 2 * time.Second, AdminToken: "s3cret"}, svc).Handler()
	f.Fuzz(func(t *testing.T, method, path, contentType string, body []byte, timeout string) {
		u, err := url.Parse(path)
		if err != nil || !strings.HasPrefix(u.Path, "/") || strings.ContainsAny(method, " \t\r\n") || method == "" {
			return // not a request net/http would hand to a handler
		}
		r := (&http.Request{Method: method, URL: u, Header: http.Header{}, Body: io.NopCloser(bytes.NewReader(body)),
			ContentLength: int64(len(body)), Host: "x", RemoteAddr: "192.0.2.1:1234"}).WithContext(context.Background())
		r.Header.Set("Content-Type", contentType)
		r.Header.Set("X-Request-Timeout", timeout)
		r.Header.Set("Authorization", "Bearer s3cret")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code >= 500 && rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("%s %s: %d %s", method, path, rec.Code, rec.Body)
		}
		if rec.Code >= 400 {
			var e struct {
				Error json.RawMessage `json:"error"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || len(e.Error) == 0 {
				t.Fatalf("%s %s: %d with a body that is not a JSON error: %q", method, path, rec.Code, rec.Body)
			}
		}
	})
}
