package server_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/server"
	"github.com/inferhq/infer/server/servertest"
)

// hello is a Service: GET /hello, ready once loaded, stopped by the drain.
type hello struct {
	load    chan struct{} // closed when loading may end
	fail    error         // Run's error, if any
	drained chan struct{} // closed once Run saw the drain
}

func (h *hello) Mount(mux *http.ServeMux) {
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("hi"))
	})
}

func (h *hello) Info() models.Info { return models.Info{Name: "hello", Task: "greet", Backend: "test"} }

func (h *hello) Run(ctx context.Context, ready func()) error {
	<-h.load
	if h.fail != nil {
		return h.fail
	}
	ready()
	<-ctx.Done()
	close(h.drained)
	return nil
}

// Routes of a Service share the lifecycle: readiness waits for them, the
// drain stops them, and a server may have no encoder model at all.
func TestServiceSharesTheLifecycle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &hello{load: make(chan struct{}), drained: make(chan struct{})}
		ts := servertest.StartWith(t, server.Config{Services: []server.Service{h}}, nil, servertest.Options{InMemory: true, NoWait: true})
		if r := do(t, ts, "GET", "/readyz", "", ""); r.status != 503 {
			t.Errorf("readyz while the service loads = %d, want 503", r.status)
		}
		close(h.load)
		ts.WaitReady(t)
		if r := do(t, ts, "GET", "/hello", "", ""); r.status != 200 || r.raw != "hi" {
			t.Errorf("GET /hello = %d %q", r.status, r.raw)
		}
		if r := do(t, ts, "POST", "/batched", "text/plain", "x"); r.status != 404 {
			t.Errorf("no model: /batched = %d, want 404", r.status)
		}
		if r := do(t, ts, "GET", "/readyz", "", ""); r.status != 200 || !strings.Contains(r.raw, `"model":"hello"`) {
			t.Errorf("readyz = %d %s, want 200 naming the service's model", r.status, r.raw)
		}
		// Only what applies: the lifecycle's metrics and the service's
		// model, none of the encoder endpoints'.
		m := do(t, ts, "GET", "/metrics", "", "").raw
		for _, want := range []string{"infer_connections_open", "infer_ready 1", `infer_model_info{backend="test",model="hello",task="greet"} 1`} {
			if !strings.Contains(m, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
		for _, unwanted := range []string{"infer_batch_size", "infer_batching_info", "infer_requests_total", "infer_queue_depth", `model=""`} {
			if strings.Contains(m, unwanted) {
				t.Errorf("/metrics of a server without an encoder model has %s", unwanted)
			}
		}
		if err := ts.Stop(); err != nil {
			t.Errorf("Stop() = %v", err)
		}
		select {
		case <-h.drained:
		default:
			t.Error("the service's Run did not see the drain")
		}
	})
}

func TestServiceFailureFailsTheServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &hello{load: make(chan struct{}), fail: errors.New("no weights"), drained: make(chan struct{})}
		close(h.load)
		ts := servertest.StartWith(t, server.Config{Services: []server.Service{h}}, simModel(t, time.Millisecond, 0), servertest.Options{InMemory: true, NoWait: true})
		time.Sleep(time.Second)
		if err := ts.Stop(); err == nil || !strings.Contains(err.Error(), "no weights") {
			t.Errorf("Stop() = %v, want the service's error", err)
		}
	})
}
