package servertest_test

import (
	"io"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/inferhq/infer/models/sim"
	"github.com/inferhq/infer/server"
	"github.com/inferhq/infer/server/encoder"
	"github.com/inferhq/infer/server/servertest"
)

// simService is the encoder API over a sim model.
func simService(t *testing.T, c sim.Config) *encoder.Service {
	t.Helper()
	f, err := sim.New(c)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := encoder.New(encoder.Config{}, f)
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

func get(t *testing.T, s *servertest.Server, path string) (int, string) {
	t.Helper()
	resp, err := s.Client.Get(s.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestStartOnLoopback(t *testing.T) {
	s := servertest.Start(t, server.Config{}, simService(t, sim.Config{}))
	if !s.Ready() {
		t.Fatal("Start returned before the server was ready")
	}
	if code, body := get(t, s, "/readyz"); code != 200 {
		t.Errorf("readyz = %d %s", code, body)
	}
	if err := s.Stop(); err != nil {
		t.Errorf("Stop() = %v", err)
	}
	if err := s.Stop(); err != nil {
		t.Errorf("second Stop() = %v", err)
	}
}

// In memory, a server runs inside a synctest bubble: a batch of a 1 s model
// takes exactly 1 s of the bubble's clock.
func TestStartInMemory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		svc := simService(t, sim.Config{Fixed: time.Second, GoSleep: true})
		s := servertest.StartWith(t, server.Config{}, servertest.Options{InMemory: true, NoWait: true}, svc)
		s.WaitReady(t)
		t0 := time.Now()
		resp, err := s.Client.Post(s.URL+"/batched", "text/plain", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if took := time.Since(t0); resp.StatusCode != 422 || took != 0 {
			t.Errorf("empty body: %d after %v, want 422 at once", resp.StatusCode, took)
		}
		code, _ := get(t, s, "/healthz")
		if code != 200 {
			t.Errorf("healthz = %d", code)
		}
		t0 = time.Now()
		r, err := s.Client.Post(s.URL+"/naive", "text/plain", strings.NewReader("one"))
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if took := time.Since(t0); r.StatusCode != 200 || took != time.Second {
			t.Errorf("a 1 s batch: %d after %v, want 200 after exactly 1s", r.StatusCode, took)
		}
	})
}

func TestSample(t *testing.T) {
	exposition := "# HELP x_total X.\n# TYPE x_total counter\nx_total{a=\"1\"} 3\nx_total{a=\"2\"} 4.5 1700000000000\ny 7\n"
	for _, tc := range []struct {
		sample string
		want   float64
	}{{`x_total{a="1"}`, 3}, {`x_total{a="2"}`, 4.5}, {"y", 7}, {"x_total", -1}, {"z", -1}} {
		if got := servertest.Sample(exposition, tc.sample); got != tc.want {
			t.Errorf("Sample(%s) = %v, want %v", tc.sample, got, tc.want)
		}
	}
}
