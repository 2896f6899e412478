package route

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestHealthChecksEjectAndReadmit(t *testing.T) {
	a, b := newFake(t), newFake(t)
	tr := startRouter(t, Config{}, a, b)
	ra := tr.replica(a)
	if ra.State() != StateReady {
		t.Fatalf("a is %v, want ready", ra.State())
	}
	a.ready.Store(false) // a drains or reloads: /readyz turns 503
	eventually(t, "a is ejected by its health checks", func() bool { return ra.State() == StateDown })
	for range 10 {
		if resp, _ := tr.post(t, "/batched", `{}`); resp.Header.Get(ReplicaHeader) != b.name() {
			t.Fatalf("a request went to %s while a was down", resp.Header.Get(ReplicaHeader))
		}
	}
	a.ready.Store(true)
	eventually(t, "a is readmitted", func() bool { return ra.State() == StateReady })
	if got := metricValue(t, tr.Router, "infer_route_ejections_total", a.name(), ""); got != 1 {
		t.Errorf("infer_route_ejections_total{replica=a} = %v, want 1", got)
	}
}

func TestHealthPathIsFoundPerReplica(t *testing.T) {
	// A vLLM-like replica: no /readyz, a /health.
	var mu sync.Mutex
	var paths []string
	vllm := newFake(t)
	vllm.setHandler(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		if r.URL.Path != "/health" {
			http.NotFound(w, r)
		}
	})
	vllm.ready.Store(false) // its /readyz answers 503 … so make it 404 instead:
	orig := vllm.Config.Handler
	vllm.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			http.NotFound(w, r)
			return
		}
		orig.ServeHTTP(w, r)
	})
	tr := startRouter(t, Config{}, vllm)
	if s := tr.replica(vllm).State(); s != StateReady {
		t.Fatalf("a replica with /health only is %v, want ready", s)
	}
	tr.replica(vllm).mu.Lock()
	got := tr.replica(vllm).healthPath
	tr.replica(vllm).mu.Unlock()
	if got != "/health" {
		t.Errorf("health path %q, want /health", got)
	}
}

func TestFailedAnswersEjectAReplicaUntilItRecovers(t *testing.T) {
	a, b := newFake(t), newFake(t)
	fail := true
	var mu sync.Mutex
	a.setHandler(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if fail {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		io.WriteString(w, "{}")
	})
	tr := startRouter(t, Config{Policy: Hash, Health: HealthConfig{Failures: 3, EjectBase: 200 * time.Millisecond}}, a, b)
	key := keyFor(t, tr, a)
	for i := range 3 {
		resp, _ := tr.post(t, "/batched", `{}`, DefaultKeyHeader, key)
		if resp.StatusCode != http.StatusInternalServerError || resp.Header.Get(ReplicaHeader) != a.name() {
			t.Fatalf("request %d: %d from %s, want a's 500 (not retried)", i, resp.StatusCode, resp.Header.Get(ReplicaHeader))
		}
	}
	ra := tr.replica(a)
	if ra.State() != StateDown {
		t.Fatalf("after 3 failed answers a is %v, want down", ra.State())
	}
	resp, _ := tr.post(t, "/batched", `{}`, DefaultKeyHeader, key)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(ReplicaHeader) != b.name() {
		t.Errorf("while a is out: %d from %s, want b", resp.StatusCode, resp.Header.Get(ReplicaHeader))
	}
	// Its health check passes (it answers /readyz): back after the backoff.
	ejected := time.Now()
	mu.Lock()
	fail = false
	mu.Unlock()
	eventually(t, "a is readmitted", func() bool { return ra.State() == StateReady })
	if d := time.Since(ejected); d < 150*time.Millisecond {
		t.Errorf("readmitted after %v, want after the 200ms backoff", d)
	}
	if resp, _ := tr.post(t, "/batched", `{}`, DefaultKeyHeader, key); resp.Header.Get(ReplicaHeader) != a.name() {
		t.Errorf("after readmission the key went to %s, want a", resp.Header.Get(ReplicaHeader))
	}
}

func TestEjectionBackoffDoubles(t *testing.T) {
	h := HealthConfig{EjectBase: time.Second, EjectMax: 5 * time.Second}.withDefaults()
	r := replicas(1)[0]
	now := time.Unix(0, 0)
	for i, want := range []time.Duration{1, 2, 4, 5, 5} {
		if !r.eject(h, now, "test") {
			t.Fatalf("ejection %d: not ejected", i)
		}
		if got := r.downUntil.Sub(now); got != want*time.Second {
			t.Errorf("ejection %d: out for %v, want %v", i, got, want*time.Second)
		}
		if _, after := r.checked(h, now.Add(want*time.Second-time.Millisecond), nil, false); after != StateDown {
			t.Errorf("ejection %d: readmitted before its backoff", i)
		}
		if _, after := r.checked(h, now.Add(want*time.Second), nil, false); after != StateReady {
			t.Errorf("ejection %d: not readmitted after its backoff", i)
		}
		now = now.Add(want * time.Second)
	}
	// Ready for EjectMax: the count is forgotten.
	r.checked(h, now.Add(h.EjectMax), nil, false)
	r.eject(h, now.Add(h.EjectMax), "test")
	if got := r.downUntil.Sub(now.Add(h.EjectMax)); got != time.Second {
		t.Errorf("after a long healthy spell: out for %v, want 1s", got)
	}
}

// fakeResolver answers lookups from a map it can change.
type fakeResolver struct {
	mu      sync.Mutex
	answers map[string][]string
}

func (f *fakeResolver) LookupHost(_ context.Context, host string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.answers[host]...), nil
}

func (f *fakeResolver) set(host string, addrs ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answers[host] = addrs
}

func TestDNSAnswersAreFollowed(t *testing.T) {
	// Two fakes on 127.0.0.1 and 127.0.0.2 would need the port to be the
	// same; instead two listeners on 127.0.0.1 and 127.0.0.2 share one port.
	a := newFake(t)
	port := a.URL[strings.LastIndex(a.URL, ":")+1:]
	b := newFakeAt(t, "127.0.0.2:"+port)
	res := &fakeResolver{answers: map[string][]string{"replicas.test": {"127.0.0.1"}}}
	up, err := ParseUpstream("dns://replicas.test:" + port)
	if err != nil {
		t.Fatal(err)
	}
	tr := startRouter(t, Config{Upstreams: []Upstream{up}, Resolver: res, ResolveInterval: 100 * time.Millisecond})
	if got := names2(tr.Replicas()); got != "127.0.0.1:"+port {
		t.Fatalf("replicas %s, want 127.0.0.1:%s", got, port)
	}
	res.set("replicas.test", "127.0.0.2", "127.0.0.1", "not-an-address")
	eventually(t, "the second address becomes a replica", func() bool {
		return len(tr.Replicas()) == 2 && tr.Ready() == nil && tr.Replicas()[1].State() == StateReady
	})
	res.set("replicas.test", "127.0.0.2")
	eventually(t, "the first address leaves", func() bool { return names2(tr.Replicas()) == "127.0.0.2:"+port })
	for range 5 {
		if resp, _ := tr.post(t, "/batched", `{}`); resp.Header.Get(ReplicaHeader) != "127.0.0.2:"+port {
			t.Fatalf("answered by %s, want 127.0.0.2:%s", resp.Header.Get(ReplicaHeader), port)
		}
	}
	if b.hits.Load() != 5 {
		t.Errorf("b got %d requests, want 5", b.hits.Load())
	}
	res.set("replicas.test")
	eventually(t, "no address: no replica", func() bool { return len(tr.Replicas()) == 0 })
	resp, body := tr.post(t, "/batched", `{}`)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "resolved to no address") {
		t.Errorf("no replica: %d %s", resp.StatusCode, body)
	}
}

func names2(rs []*Replica) string {
	var s []string
	for _, r := range rs {
		s = append(s, r.name)
	}
	return strings.Join(s, ",")
}

func TestAdminDrainsAndListsReplicas(t *testing.T) {
	a, b := newFake(t), newFake(t)
	tr := startRouter(t, Config{}, a, b)
	if resp, err := http.Post(tr.URL+"/admin/replicas/"+a.name()+"/drain", "", nil); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("drain without the token: %v %v, want 401", resp, err)
	}
	if resp, body := tr.admin(t, http.MethodPost, "/admin/replicas/"+a.name()+"/drain"); resp.StatusCode != http.StatusOK {
		t.Fatalf("drain: %d %s", resp.StatusCode, body)
	}
	for range 6 {
		if resp, _ := tr.post(t, "/batched", `{}`); resp.Header.Get(ReplicaHeader) != b.name() {
			t.Fatalf("a drained replica was picked")
		}
	}
	_, body := tr.admin(t, http.MethodGet, "/admin/replicas")
	var list struct {
		Policy   string
		Replicas []ReplicaStatus
	}
	json.Unmarshal([]byte(body), &list)
	if list.Policy != "round-robin" || len(list.Replicas) != 2 {
		t.Fatalf("list %+v", list)
	}
	for _, r := range list.Replicas {
		if r.Drained != (r.Name == a.name()) || r.State != "ready" {
			t.Errorf("%+v: want only a drained, both ready", r)
		}
	}
	tr.admin(t, http.MethodPost, "/admin/replicas/"+a.name()+"/undrain")
	if a.hits.Load() != 0 {
		t.Fatal("a got requests while drained")
	}
	tr.post(t, "/batched", `{}`)
	tr.post(t, "/batched", `{}`)
	if a.hits.Load() == 0 {
		t.Error("a got no request after undrain")
	}
	if resp, _ := tr.admin(t, http.MethodPost, "/admin/replicas/nope:1/drain"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("draining an unknown replica: %d, want 404", resp.StatusCode)
	}
	if resp, _ := tr.admin(t, http.MethodGet, "/admin/replicas/"+a.name()+"/drain"); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET drain: %d, want 405", resp.StatusCode)
	}
	// Everything drained: no replica ready, and the host's /readyz says so.
	tr.admin(t, http.MethodPost, "/admin/replicas/"+a.name()+"/drain")
	tr.admin(t, http.MethodPost, "/admin/replicas/"+b.name()+"/drain")
	if err := tr.Ready(); err == nil || !strings.Contains(err.Error(), "2 drained") {
		t.Errorf("Ready() = %v, want 2 drained", err)
	}
	resp, err := http.Get(tr.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	ready, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(ready), "no_replica") || !strings.Contains(string(ready), "2 drained") {
		t.Errorf("/readyz with every replica drained: %d %s, want 503 no_replica naming 2 drained", resp.StatusCode, ready)
	}
}

func TestScoredReadsReplicasMetrics(t *testing.T) {
	a, b := newFake(t), newFake(t)
	busy := "vllm:num_requests_waiting{model_name=\"m\"} 40\nvllm:kv_cache_usage_perc{model_name=\"m\"} 0.95\n"
	idle := "infer_gen_num_requests_waiting{endpoint=\"v1\"} 0\ninfer_gen_kv_cache_usage_perc{endpoint=\"v1\"} 0.1\n"
	a.metrics.Store(&busy)
	b.metrics.Store(&idle)
	tr := startRouter(t, Config{Policy: Scored, Score: ScoreConfig{Queue: 1, KV: 1, Interval: 20 * time.Millisecond}}, a, b)
	eventually(t, "both sampled", func() bool { return tr.replica(a).Sample() != nil && tr.replica(b).Sample() != nil })
	for range 10 {
		if resp, _ := tr.post(t, "/v1/completions", `{"prompt":"x"}`); resp.Header.Get(ReplicaHeader) != b.name() {
			t.Fatalf("picked %s, want b (a reports 40 waiting, 95%% KV)", resp.Header.Get(ReplicaHeader))
		}
	}
	a.metrics.Store(&idle)
	b.metrics.Store(&busy)
	eventually(t, "the new samples are followed", func() bool {
		resp, _ := tr.post(t, "/v1/completions", `{"prompt":"x"}`)
		return resp.Header.Get(ReplicaHeader) == a.name()
	})
}

func TestDrainRefusesNewRequestsAndWaitsForThoseInFlight(t *testing.T) {
	a := newFake(t)
	release := make(chan struct{})
	a.setHandler(func(w http.ResponseWriter, r *http.Request) { <-release; io.WriteString(w, "{}") })
	tr := startRouter(t, Config{}, a)
	done := make(chan int)
	go func() {
		resp, _ := tr.post(t, "/batched", `{}`)
		done <- resp.StatusCode
	}()
	eventually(t, "the request is in flight", func() bool { return tr.replica(a).InFlight() == 1 })
	tr.cancel() // the host drains: it stops listening, and the router's Run ends
	eventually(t, "draining", func() bool { return tr.Ready() != nil })
	if err := tr.Ready(); !strings.Contains(err.Error(), "draining") {
		t.Errorf("Ready() = %v, want draining", err)
	}
	rec := httptest.NewRecorder() // a request that reached the router after the drain began
	tr.proxy(&endpoint{route: "/batched", api: apiEncoder}).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/batched", strings.NewReader(`{}`)))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "draining") {
		t.Errorf("during the drain: %d %s, want 503 draining", rec.Code, rec.Body)
	}
	select {
	case <-tr.done:
		t.Fatal("Run returned with a request in flight")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if code := <-done; code != http.StatusOK {
		t.Errorf("the request in flight: %d, want 200", code)
	}
	<-tr.done
}

func TestMetricsCountPicksAndAnswers(t *testing.T) {
	a, b := newFake(t), newFake(t)
	a.setHandler(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) })
	tr := startRouter(t, Config{Policy: Hash}, a, b)
	key := keyFor(t, tr, a)
	tr.post(t, "/batched", `{}`, DefaultKeyHeader, key) // a refuses, b answers
	tr.replica(a).inFlight.Add(1)                       // so that b is the least loaded
	tr.post(t, "/batched", `{}`)                        // no key
	tr.replica(a).inFlight.Add(-1)
	for _, c := range []struct {
		name, replica, label string
		want                 float64
	}{
		{"infer_route_picks_total", a.name(), "affinity", 1},
		{"infer_route_picks_total", b.name(), "retry", 1},
		{"infer_route_picks_total", b.name(), "fallback", 1},
		{"infer_route_errors_total", a.name(), "refused", 1},
		{"infer_route_requests_total", b.name(), "200", 2},
		{"infer_route_ejections_total", a.name(), "", 0}, // one 503 is one failure of three
	} {
		if got := metricValue(t, tr.Router, c.name, c.replica, c.label); got != c.want {
			t.Errorf("%s{replica=%s,%s} = %v, want %v", c.name, c.replica, c.label, got, c.want)
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(tr.collectors()...)
	if _, err := reg.Gather(); err != nil {
		t.Error(err)
	}
}

// metricValue returns the value of the series of name whose replica label
// is replica and whose other label (if any) is other.
func metricValue(t *testing.T, rt *Router, name, replica, other string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(rt.collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				switch {
				case l.GetName() == "replica" && l.GetValue() != replica,
					l.GetName() != "replica" && l.GetValue() != other:
					continue series
				}
			}
			return m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return 0
}

func TestFailuresNeverEjectTheLastReplica(t *testing.T) {
	a := newFake(t)
	a.setHandler(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusBadGateway) })
	// Active checks only at start: a check racing the closed port below
	// would eject the replica before the request could, which is fine for
	// a user but not what this test is about.
	tr := startRouter(t, Config{Health: HealthConfig{Interval: time.Hour}}, a)
	for range 10 {
		if resp, _ := tr.post(t, "/batched", `{}`); resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("status %d, want the replica's 502", resp.StatusCode)
		}
	}
	if s := tr.replica(a).State(); s != StateReady {
		t.Errorf("the only replica is %v after 10 failed answers, want ready: failures alone never leave none", s)
	}
	// A refused connection is no overload: the port is closed.
	a.Close()
	resp, body := tr.post(t, "/batched", `{}`)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "upstream_unreachable") || tr.replica(a).State() != StateDown {
		t.Errorf("a closed replica: %d %s, state %v; want 502 upstream_unreachable and the replica down", resp.StatusCode, body, tr.replica(a).State())
	}
}

func TestSlowChecksOfAReplicaThatAnswersDoNotEjectIt(t *testing.T) {
	h := HealthConfig{}.withDefaults()
	r := replicas(1)[0]
	now := time.Unix(100, 0)
	r.seen(now)
	for i := range 5 {
		if _, after := r.checked(h, now.Add(time.Duration(i)*h.Interval/4), errTimedOut, false); after != StateReady {
			t.Fatalf("check %d timed out while the replica answered: %v, want ready", i, after)
		}
	}
	// Silent for longer than a check's interval and timeout: two timeouts eject it.
	later := now.Add(h.Interval + h.Timeout)
	r.checked(h, later, errTimedOut, false)
	if _, after := r.checked(h, later.Add(h.Interval), errTimedOut, false); after != StateDown {
		t.Errorf("two timed-out checks of a silent replica: %v, want down", after)
	}
	// A check that fails otherwise counts whatever the traffic.
	r = replicas(1)[0]
	r.seen(now)
	r.checked(h, now, &statusError{"/readyz", 503}, false)
	if _, after := r.checked(h, now, &statusError{"/readyz", 503}, false); after != StateDown {
		t.Errorf("two 503 checks: %v, want down", after)
	}
}
