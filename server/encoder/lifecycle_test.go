package encoder_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/sim"
	"github.com/inferhq/infer/server"
	"github.com/inferhq/infer/server/batch"
	"github.com/inferhq/infer/server/encoder"
	"github.com/inferhq/infer/server/servertest"
)

// slowFactory delays New until release is closed: the server is loading.
type slowFactory struct {
	models.Factory
	release chan struct{}
}

func (f slowFactory) New(ctx context.Context, i int) (models.Model, error) {
	<-f.release
	return f.Factory.New(ctx, i)
}

func TestReadinessAndDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		f := slowFactory{simModel(t, 100*time.Millisecond, 0), release}
		svc := newService(t, encoder.Config{Batch: batch.Config{MaxLatency: 10 * time.Millisecond}}, f)
		ts := servertest.StartWith(t, server.Config{}, servertest.Options{InMemory: true, NoWait: true}, svc)

		if r := do(t, ts, "GET", "/healthz", "", ""); r.status != 200 {
			t.Errorf("healthz while loading = %d, want 200", r.status)
		}
		if r := do(t, ts, "GET", "/readyz", "", ""); r.status != 503 {
			t.Errorf("readyz while loading = %d, want 503", r.status)
		}
		if r := do(t, ts, "POST", "/batched", "text/plain", "early"); r.status != 503 || r.code() != "not_ready" {
			t.Errorf("request while loading = %d %s, want 503 not_ready", r.status, r.raw)
		}
		close(release)
		ts.WaitReady(t)
		if r := do(t, ts, "GET", "/readyz", "", ""); r.status != 200 {
			t.Errorf("readyz when loaded = %d, want 200", r.status)
		}

		// Admit a load, then drain in the middle of it.
		var wg sync.WaitGroup
		var ok, other atomic.Int64
		for i := range 40 {
			wg.Go(func() {
				r, err := try(ts, "POST", "/batched", "text/plain", fmt.Sprint("item ", i))
				if err == nil && r.status == 200 {
					ok.Add(1)
					return
				}
				other.Add(1)
				t.Errorf("admitted before the drain: %d %s %v", r.status, r.raw, err)
			})
		}
		synctest.Wait() // all 40 admitted: the first batch runs, the rest wait
		if err := ts.Stop(); err != nil {
			t.Errorf("Serve() = %v, want nil after a clean drain", err)
		}
		wg.Wait()
		if ok.Load() != 40 {
			t.Errorf("ok %d of 40 admitted requests (other %d)", ok.Load(), other.Load())
		}
	})
}

func TestBadInputDuringLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := start(t, encoder.Config{Batch: batch.Config{MaxLatency: 2 * time.Millisecond}}, simModel(t, time.Millisecond, 10*time.Microsecond))
		var wg sync.WaitGroup
		var good, bad atomic.Int64
		for i := range 8 {
			wg.Go(func() {
				for j := range 25 {
					text := fmt.Sprintf("valid %d %d", i, j)
					r, err := try(ts, "POST", "/batched", "application/json", fmt.Sprintf(`{"inputs": [%q]}`, text))
					if err != nil || r.status != 200 || !strings.Contains(r.raw, sim.Predict(text).Label) {
						t.Errorf("valid request: %d %s %v", r.status, r.raw, err)
					}
					good.Add(1)
				}
			})
		}
		bodies := []string{`{`, `{"inputs": [1]}`, `{"inputs": []}`, `null`, `{"inputs": "` + strings.Repeat("x", 2<<20) + `"}`}
		for i := range 8 {
			wg.Go(func() {
				for j := range 10 {
					r, err := try(ts, "POST", "/batched", "application/json", bodies[(i+j)%len(bodies)])
					if err != nil || r.status < 400 || r.status >= 500 {
						t.Errorf("bad request got %d %v", r.status, err)
					}
					bad.Add(1)
				}
			})
		}
		wg.Wait()
		if good.Load() != 200 || bad.Load() != 80 {
			t.Errorf("good %d bad %d", good.Load(), bad.Load())
		}
	})
}

// A client that half-closes after its request never gets an empty 200, on
// /batched or /naive: an answer, or the connection closed without one.
func TestHalfClosedClientNeverGetsAnEmpty200(t *testing.T) {
	ts := servertest.Start(t, server.Config{}, newService(t, encoder.Config{}, simModel(t, 20*time.Millisecond, time.Millisecond)))
	for _, path := range []string{"/batched", "/naive"} {
		body := `{"inputs":["Paris is the [MASK] of France."]}`
		raw := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, len(body), body)
		if r := servertest.HalfClosed(t, ts.URL, raw); r != nil && r.Status != 200 {
			t.Errorf("%s: %d %s, want an answer or none", path, r.Status, r.Body)
		}
	}
}
