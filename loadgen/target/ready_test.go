package target

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestProbeReadiness: a /readyz that answers 501 is no readiness; 404 and
// 405 mean there is none, and the target counts as ready.
func TestProbeReadiness(t *testing.T) {
	for _, tc := range []struct {
		status  int
		wantErr string
		noReady int
	}{
		{http.StatusOK, "", 0},
		{http.StatusNotFound, "", 404},
		{http.StatusMethodNotAllowed, "", 405},
		{http.StatusNotImplemented, "not ready after 300ms (/readyz answers 501 Not Implemented)", 0},
		{http.StatusServiceUnavailable, "not ready after 300ms (/readyz answers 503 Service Unavailable)", 0},
	} {
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(tc.status) }))
		_, noReady, err := Probe(context.Background(), ts.Client(), ts.URL, 300*time.Millisecond)
		ts.Close()
		if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) || noReady != tc.noReady {
			t.Errorf("/readyz %d: no readyz %d, error %v; want %d, %q", tc.status, noReady, err, tc.noReady, tc.wantErr)
		}
	}
}
