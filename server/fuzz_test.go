package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/inferhq/infer/models/sim"
	"github.com/inferhq/infer/server/batch"
)

// The fuzz targets of the server's input surface. Seeds are in
// testdata/fuzz/<target>; `make fuzz` runs each for a while.

// asAPIError fails unless err is a client error of the documented shape.
func asAPIError(t *testing.T, err error) *apiError {
	t.Helper()
	var ae *apiError
	if !errors.As(err, &ae) {
		t.Fatalf("error %v (%T) is not an *apiError", err, err)
	}
	if ae.Status < 400 || ae.Status >= 500 || ae.Code == "" || ae.Message == "" {
		t.Fatalf("error %+v: want a 4xx with a code and a message", ae)
	}
	return ae
}

func checkDecoded(t *testing.T, items []string) {
	t.Helper()
	if len(items) == 0 {
		t.Fatal("no items and no error")
	}
	for i, s := range items {
		if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 || strings.TrimSpace(s) == "" {
			t.Fatalf("item %d %q: invalid, empty or with NUL, yet accepted", i, s)
		}
	}
}

func FuzzDecodeItems(f *testing.F) {
	for _, ct := range []string{"application/json", "text/plain", "application/x-www-form-urlencoded", "", "application/xml"} {
		for _, body := range []string{`{"inputs": ["a", "b"]}`, `{"inputs": "a"}`, "s=a&s=b", "Paris; the [MASK].", "100% sure", "\ufeff{\"inputs\": [\"x\"]}", `{"inputs": ["\ud800"]}`} {
			f.Add(ct, []byte(body))
		}
	}
	f.Fuzz(func(t *testing.T, contentType string, body []byte) {
		items, err := decodeItems(contentType, body)
		if err != nil {
			asAPIError(t, err)
			return
		}
		checkDecoded(t, items)
		// Round trip: the items sent back as JSON decode to themselves.
		again, err := decodeItems("application/json", mustJSON(t, map[string][]string{"inputs": items}))
		if err != nil || !slices.Equal(again, items) {
			t.Fatalf("round trip of %q: %q, %v", items, again, err)
		}
	})
}

func FuzzDecodeV2(f *testing.F) {
	for _, body := range []string{
		`{"id": "1", "inputs": [{"name": "text", "shape": [2, 1], "datatype": "BYTES", "data": [["a"], ["b"]]}]}`,
		`{"inputs": [{"name": "t", "shape": [2], "datatype": "BYTES", "data": ["a", "b"]}]}`,
		`{"inputs": [{"name": "text", "shape": [-1, -1], "datatype": "BYTES", "data": ["a"]}]}`,
		`{"inputs": [{"name": "text", "shape": [9223372036854775807, 2], "datatype": "BYTES", "data": ["a", "b"]}]}`,
		`{"inputs": [{"name": "text", "shape": [2, 2], "datatype": "BYTES", "data": [["a", "b", "c"], ["d"]]}]}`,
	} {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		items, id, err := decodeV2(body)
		if err != nil {
			asAPIError(t, err)
			return
		}
		checkDecoded(t, items)
		req := map[string]any{"id": id, "inputs": []map[string]any{{"name": "text", "shape": []int{len(items)}, "datatype": "BYTES", "data": items}}}
		again, againID, err := decodeV2(mustJSON(t, req))
		if err != nil || againID != id || !slices.Equal(again, items) {
			t.Fatalf("round trip of %q (id %q): %q (id %q), %v", items, id, again, againID, err)
		}
	})
}

func FuzzRequestTimeout(f *testing.F) {
	for _, v := range []string{"", "250ms", "0.25", "1h", "-1s", "0", "NaN", "1e300", "9223372036s", "soon"} {
		f.Add(v)
	}
	s := &Server{cfg: Config{Timeout: 30 * time.Second}}
	f.Fuzz(func(t *testing.T, v string) {
		r := &http.Request{Header: http.Header{}}
		if v != "" {
			r.Header.Set("X-Request-Timeout", v)
		}
		d, err := s.requestTimeout(r)
		if err != nil {
			if e := asAPIError(t, err); e.Code != "bad_timeout" {
				t.Fatalf("%q: code %s, want bad_timeout", v, e.Code)
			}
			return
		}
		if d <= 0 || d > s.cfg.Timeout {
			t.Fatalf("X-Request-Timeout %q = %v, want in (0, %v]", v, d, s.cfg.Timeout)
		}
		// Round trip: the duration written as Go writes it reads back.
		r.Header.Set("X-Request-Timeout", d.String())
		if again, err := s.requestTimeout(r); err != nil || again != d {
			t.Fatalf("round trip of %v: %v, %v", d, again, err)
		}
	})
}

// FuzzHandler sends arbitrary requests to the whole handler of a running
// server: every error is answered in the JSON shape, and nothing is a 500
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
	s := fuzzServer(f)
	h := s.Handler()
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

// fuzzServer runs a ready server on an instant sim model until f ends.
func fuzzServer(f *testing.F) *Server {
	factory, err := sim.New(sim.Config{})
	if err != nil {
		f.Fatal(err)
	}
	s, err := New(Config{MaxBody: 64 << 10, MaxItems: 8, Timeout: 2 * time.Second, AdminToken: "s3cret",
		Batch: batch.Config{MaxBatch: 8, Policy: batch.Immediate}}, factory)
	if err != nil {
		f.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	f.Cleanup(func() { cancel(); <-done })
	for deadline := time.Now().Add(10 * time.Second); !s.Ready(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			f.Fatal("server not ready")
		}
	}
	return s
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(fmt.Errorf("encode %v: %w", v, err))
	}
	return b
}
