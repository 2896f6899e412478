package route

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferhq/infer/server"
)

// fake is a replica for tests: an HTTP server that answers /readyz (while
// ready), /metrics (with metrics), and everything else with handle, by
// default a JSON echo naming the replica.
type fake struct {
	*httptest.Server
	t       *testing.T
	hits    atomic.Int64
	ready   atomic.Bool
	metrics atomic.Pointer[string]
	handle  atomic.Pointer[http.HandlerFunc]

	mu   sync.Mutex
	seen []*http.Request // the proxied requests, bodies read into seenBody
	body []string
}

func newFake(t *testing.T) *fake {
	f := &fake{t: t}
	f.ready.Store(true)
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/readyz":
			if !f.ready.Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			io.WriteString(w, `{"status":"ready"}`)
			return
		case "/metrics":
			if m := f.metrics.Load(); m != nil {
				io.WriteString(w, *m)
			}
			return
		}
		f.hits.Add(1)
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.seen = append(f.seen, r)
		f.body = append(f.body, string(b))
		f.mu.Unlock()
		if h := f.handle.Load(); h != nil {
			(*h)(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Server-Timing", "queue;dur=0.100, compute;dur=1.000, batch;desc=1")
		json.NewEncoder(w).Encode(map[string]string{"replica": f.name(), "path": r.URL.Path})
	}))
	t.Cleanup(f.Close)
	return f
}

// name is the replica's name in the router: its host:port.
func (f *fake) name() string { return strings.TrimPrefix(f.URL, "http://") }

func (f *fake) setHandler(h http.HandlerFunc) { f.handle.Store(&h) }

// lastHeader returns a header of the last proxied request.
func (f *fake) lastHeader(k string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.seen) == 0 {
		return ""
	}
	return f.seen[len(f.seen)-1].Header.Get(k)
}

// testRouter is a router over fakes, served as a service of a host
// (package server) on a loopback port, its admin API behind adminToken.
type testRouter struct {
	*Router
	URL    string
	cancel context.CancelFunc // the host drains
	done   chan struct{}      // closed when the host has stopped
}

const adminToken = "test-token"

// startRouter starts a router over the fakes with cfg, fast health checks
// unless cfg sets them, on a host with default settings, and waits until
// it has checked every replica.
func startRouter(t testing.TB, cfg Config, fakes ...*fake) *testRouter {
	t.Helper()
	return startRouterOn(t, server.Config{}, cfg, fakes...)
}

// startRouterOn is startRouter on a host configured by host.
func startRouterOn(t testing.TB, host server.Config, cfg Config, fakes ...*fake) *testRouter {
	t.Helper()
	for _, f := range fakes {
		u, err := ParseUpstream(f.URL)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Upstreams = append(cfg.Upstreams, u)
	}
	if cfg.Health.Interval == 0 {
		cfg.Health.Interval = 20 * time.Millisecond
	}
	if cfg.Health.EjectBase == 0 {
		cfg.Health.EjectBase = 50 * time.Millisecond
	}
	rt, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	host.AdminToken = adminToken
	host.DrainTimeout = 5 * time.Second
	srv, err := server.New(host, rt)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tr := &testRouter{Router: rt, URL: "http://" + ln.Addr().String(), done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	tr.cancel = cancel
	go func() {
		defer close(tr.done)
		if err := srv.Serve(ctx, ln); err != nil {
			t.Error(err)
		}
	}()
	t.Cleanup(func() { cancel(); <-tr.done })
	deadline := time.Now().Add(5 * time.Second)
	for !srv.Ready() {
		if time.Now().After(deadline) {
			t.Fatal("the router did not check its replicas within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return tr
}

// admin sends an admin API request with the token and returns the answer
// with its body read.
func (tr *testRouter) admin(t *testing.T, method, path string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, tr.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// post sends body to path through the router and returns the answer with
// its body read.
func (tr *testRouter) post(t *testing.T, path, body string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, tr.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	return resp, string(b)
}

// eventually waits up to 5s for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// replica returns the router's replica for f.
func (tr *testRouter) replica(f *fake) *Replica {
	for _, r := range tr.Replicas() {
		if r.name == f.name() {
			return r
		}
	}
	return nil
}

// newFakeAt is a fake listening on addr.
func newFakeAt(t *testing.T, addr string) *fake {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s: %v", addr, err)
	}
	f := newFake(t)
	f.Server.Close()
	f.Server = httptest.NewUnstartedServer(f.Server.Config.Handler)
	f.Server.Listener.Close()
	f.Server.Listener = ln
	f.Server.Start()
	t.Cleanup(f.Close)
	return f
}
