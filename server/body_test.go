package server_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/inferhq/infer/server"
)

// The host's body reader, as every service reads bodies through it: the
// limit, a body that breaks, and one that stops arriving.
func TestReadBody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := start(t, server.Config{MaxBody: 16}, newProbe())
		for _, tc := range []struct {
			name, raw string
			status    int
			code      string
		}{
			{"within the limit", post("/echo", strings.Repeat("x", 16)), 200, ""},
			{"Content-Length past the limit", post("/echo", strings.Repeat("x", 17)), 413, "body_too_large"},
			{"chunks past the limit", "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n9\r\n123456789\r\n9\r\n123456789\r\n0\r\n\r\n", 413, "body_too_large"},
			{"malformed chunk", "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400, "bad_body"},
			{"bad X-Request-Timeout", "POST /echo HTTP/1.1\r\nHost: x\r\nX-Request-Timeout: soon\r\nContent-Length: 0\r\n\r\n", 400, "bad_timeout"},
		} {
			resp, body, err := dial(t, ts).send(tc.raw)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if resp.StatusCode != tc.status || (tc.code != "" && !strings.Contains(body, `"code":"`+tc.code+`"`)) {
				t.Errorf("%s: %d %s, want %d %s", tc.name, resp.StatusCode, body, tc.status, tc.code)
			}
		}
	})
}

// A body that stops arriving is answered 408 once the host's read timeout
// (30 s) has passed, with a message that quotes no network error: those
// name the client's and the server's addresses.
func TestSlowBodyAnswered408(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := start(t, server.Config{}, newProbe())
		r, took, err := ts.DoStalled(http.MethodPost, "/echo", "", "abc", 10)
		if err != nil {
			t.Fatal(err)
		}
		var e struct{ Error server.Error }
		if err := json.Unmarshal([]byte(r.Body), &e); err != nil || r.Status != 408 || e.Error.Code != "body_timeout" || e.Error.Message != "the body did not arrive in time" {
			t.Errorf("a stalled body: %d %s, want 408 body_timeout: the body did not arrive in time", r.Status, r.Body)
		}
		if took != 30*time.Second {
			t.Errorf("answered after %v, want the read timeout, 30s", took)
		}
	})
}
