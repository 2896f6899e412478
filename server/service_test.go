package server_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inferhq/infer/server"
	"github.com/inferhq/infer/server/servertest"
)

// A service shares the host's lifecycle: readiness waits for it, /metrics
// and /readyz name its model, and the drain stops it.
func TestServiceSharesTheLifecycle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newProbe()
		p.load = make(chan struct{})
		ts := servertest.StartWith(t, server.Config{}, servertest.Options{InMemory: true, NoWait: true}, p)
		if r := do(t, ts, "GET", "/healthz", "", ""); r.Status != 200 {
			t.Errorf("healthz while the service loads = %d, want 200", r.Status)
		}
		if r := do(t, ts, "GET", "/readyz", "", ""); r.Status != 503 || !strings.Contains(r.Body, `"loading"`) {
			t.Errorf("readyz while the service loads = %d %s, want 503 loading", r.Status, r.Body)
		}
		close(p.load)
		ts.WaitReady(t)
		if r := do(t, ts, "GET", "/hello", "", ""); r.Status != 200 || r.Body != "hi" {
			t.Errorf("GET /hello = %d %q", r.Status, r.Body)
		}
		if r := do(t, ts, "GET", "/readyz", "", ""); r.Status != 200 || r.Body != `{"model":"hello","status":"ready"}`+"\n" {
			t.Errorf("readyz = %d %s, want 200 naming the service's model", r.Status, r.Body)
		}
		m := do(t, ts, "GET", "/metrics", "", "").Body
		for _, want := range []string{"infer_connections_open", "infer_ready 1", `infer_model_info{backend="test",model="hello",task="greet"} 1`, "go_goroutines"} {
			if !strings.Contains(m, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
		if err := ts.Stop(); err != nil {
			t.Errorf("Stop() = %v", err)
		}
		select {
		case <-p.drained:
		default:
			t.Error("the service's Run did not see the drain")
		}
	})
}

// A service without a model (a router) is ready with no model named, and
// the host's 404 names the paths the services gave.
func TestServiceWithoutModel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newProbe()
		p.model = nil
		ts := start(t, server.Config{}, p)
		if r := do(t, ts, "GET", "/readyz", "", ""); r.Status != 200 || r.Body != `{"status":"ready"}`+"\n" {
			t.Errorf("readyz = %d %s, want 200 without a model", r.Status, r.Body)
		}
		if m := do(t, ts, "GET", "/metrics", "", "").Body; strings.Contains(m, "infer_model_info{") {
			t.Errorf("/metrics names a model:\n%s", m)
		}
		if r := do(t, ts, "GET", "/nope", "", ""); r.Status != 404 || !strings.Contains(r.Body, `"message":"no endpoint /nope"`) {
			t.Errorf("GET /nope = %d %s, want 404 no endpoint /nope", r.Status, r.Body)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		ts := start(t, server.Config{}, newProbe(), &paths{"/a", "/b"}, &paths{"/c"})
		if r := do(t, ts, "GET", "/nope", "", ""); r.Status != 404 || !strings.Contains(r.Body, `"message":"no endpoint /nope; see /a, /b, /c"`) {
			t.Errorf("GET /nope = %d %s, want 404 naming every service's paths", r.Status, r.Body)
		}
	})
}

// paths is a service that only names paths for the host's 404.
type paths []string

func (p *paths) Mount(m *server.Mount) { m.Paths(*p...) }
func (p *paths) Run(ctx context.Context, ready func()) error {
	ready()
	<-ctx.Done()
	return nil
}

// A ready service that says it cannot serve turns /readyz and infer_ready
// down, with its reason; the host's own readiness (Ready) does not change.
func TestServiceReadinessCheck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newProbe()
		ts := start(t, server.Config{}, p)
		for _, tc := range []struct {
			err  error
			want string
		}{
			{server.Errorf(http.StatusServiceUnavailable, "no_workers", "no live worker"), `{"reason":"no live worker","status":"no_workers"}`},
			{fmt.Errorf("wrapped: %w", server.Errorf(http.StatusServiceUnavailable, "no_replicas", "no replica is up")), `{"reason":"no replica is up","status":"no_replicas"}`},
			{errors.New("cannot serve"), `{"reason":"cannot serve","status":"unavailable"}`},
		} {
			p.down.Store(&tc.err)
			if r := do(t, ts, "GET", "/readyz", "", ""); r.Status != 503 || r.Body != tc.want+"\n" {
				t.Errorf("readyz with %v = %d %s, want 503 %s", tc.err, r.Status, r.Body, tc.want)
			}
			if got := servertest.Sample(do(t, ts, "GET", "/metrics", "", "").Body, "infer_ready"); got != 0 {
				t.Errorf("infer_ready with %v = %v, want 0", tc.err, got)
			}
			if !ts.Ready() {
				t.Error("Ready() = false: a readiness check changed the host's own readiness")
			}
		}
		p.down.Store(nil)
		if r := do(t, ts, "GET", "/readyz", "", ""); r.Status != 200 {
			t.Errorf("readyz once the check passes = %d %s", r.Status, r.Body)
		}
	})
}

func TestServiceFailureFailsTheServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newProbe()
		p.fail = errors.New("no weights")
		ts := servertest.StartWith(t, server.Config{}, servertest.Options{InMemory: true, NoWait: true}, p, &paths{"/a"})
		time.Sleep(time.Second)
		if err := ts.Stop(); err == nil || !strings.Contains(err.Error(), "no weights") {
			t.Errorf("Stop() = %v, want the service's error", err)
		}
	})
}

// The admin routes of a service exist only behind the host's token.
func TestServiceAdminNeedsTheToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := start(t, server.Config{}, newProbe())
		if r := do(t, ts, "GET", "/admin/probe", "", ""); r.Status != 404 {
			t.Errorf("no token: admin = %d %s, want 404", r.Status, r.Body)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		ts := start(t, server.Config{AdminToken: "s3cret"}, newProbe())
		for _, tc := range []struct {
			auth   string
			status int
		}{{"", 401}, {"Bearer wrong", 401}, {"s3cret", 401}, {"Bearer s3cret", 200}} {
			r := do(t, ts, "GET", "/admin/probe", "", "", "Authorization", tc.auth)
			if r.Status != tc.status {
				t.Errorf("Authorization %q: %d %s, want %d", tc.auth, r.Status, r.Body, tc.status)
			}
			if r.Status == 401 && (r.Header.Get("WWW-Authenticate") == "" || !strings.Contains(r.Body, `"code":"unauthorized"`)) {
				t.Errorf("Authorization %q: 401 without WWW-Authenticate or the JSON error: %v %s", tc.auth, r.Header, r.Body)
			}
		}
	})
}

// What a service mounts wrongly fails New with an error naming it, rather
// than a panic or a silent loss.
func TestMountErrors(t *testing.T) {
	counter := func() prometheus.Collector {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: "probe_total", Help: "A test counter."})
	}
	for _, tc := range []struct {
		name  string
		mount func(m *server.Mount)
		want  string
	}{
		{"host's route", func(m *server.Mount) { m.Handle("/healthz", http.NotFoundHandler()) }, `route "/healthz"`},
		{"another service's route", func(m *server.Mount) { m.Handle("GET /hello", http.NotFoundHandler()) }, `route "GET /hello"`},
		{"malformed pattern", func(m *server.Mount) { m.Handle("/x/{a", http.NotFoundHandler()) }, `route "/x/{a"`},
		{"metric twice", func(m *server.Mount) { m.Collect(counter(), counter()) }, "metrics:"},
		{"host's metric", func(m *server.Mount) {
			m.Collect(prometheus.NewCounter(prometheus.CounterOpts{Name: "infer_ready", Help: "Clash."}))
		}, "metrics:"},
	} {
		_, err := server.New(server.Config{}, newProbe(), mounter(tc.mount))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "server_test.mounter") {
			t.Errorf("%s: New() = %v, want an error naming the service and %s", tc.name, err, tc.want)
		}
	}
}

// mounter is a service that only mounts.
type mounter func(m *server.Mount)

func (f mounter) Mount(m *server.Mount) { f(m) }
func (f mounter) Run(ctx context.Context, ready func()) error {
	ready()
	<-ctx.Done()
	return nil
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  server.Config
		want string
	}{
		{server.Config{}, ""},
		{server.Config{MaxBody: server.MaxBodyLimit}, ""},
		{server.Config{MaxBody: server.MaxBodyLimit + 1}, "max body"},
		{server.Config{MaxBody: -1}, "max body"},
		{server.Config{MaxConns: server.MaxConnsLimit + 1}, "max conns"},
		{server.Config{DrainTimeout: -time.Second}, "drain timeout -1s: must not be negative"},
		{server.Config{HeaderTimeout: -time.Second}, "header timeout"},
		{server.Config{MaxConnsPerAddr: -1}, "max conns per address -1"},
	} {
		err := tc.cfg.Validate()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v.Validate() = %v, want %q", tc.cfg, err, tc.want)
		}
		if _, nerr := server.New(tc.cfg, newProbe()); (err == nil) != (nerr == nil) {
			t.Errorf("New(%+v) = %v, want Validate's %v", tc.cfg, nerr, err)
		}
	}
}
