package encoder_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/sim"
	"github.com/inferhq/infer/server"
	"github.com/inferhq/infer/server/batch"
	"github.com/inferhq/infer/server/encoder"
	"github.com/inferhq/infer/server/servertest"
)

// The tests of this package drive the service on a real host through HTTP
// only, most of them inside a testing/synctest bubble on servertest's
// in-memory listener, so that timing is exact and no test sleeps.

type reply struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

// do sends one request to ts and reads the whole answer.
func do(t testing.TB, ts *servertest.Server, method, path, contentType, body string, hdr ...string) reply {
	t.Helper()
	r, err := try(ts, method, path, contentType, body, hdr...)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// try is do returning the transport's error.
func try(ts *servertest.Server, method, path, contentType, body string, hdr ...string) (reply, error) {
	return tryCtx(context.Background(), ts, method, path, contentType, body, hdr...)
}

// code returns the error code of an error answer, "" for others.
func (r reply) code() string {
	e, _ := r.body["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

// start serves f with cfg on a host of the default settings, in memory:
// call it inside a synctest bubble.
func start(t *testing.T, cfg encoder.Config, f models.Factory) *servertest.Server {
	t.Helper()
	return startWith(t, server.Config{}, cfg, f)
}

// startWith is start on a host configured by host.
func startWith(t *testing.T, host server.Config, cfg encoder.Config, f models.Factory) *servertest.Server {
	t.Helper()
	return servertest.StartWith(t, host, servertest.Options{InMemory: true}, newService(t, cfg, f))
}

// newService is the encoder API over f's model.
func newService(t testing.TB, cfg encoder.Config, f models.Factory) *encoder.Service {
	t.Helper()
	svc, err := encoder.New(cfg, f)
	if err != nil {
		t.Fatalf("encoder.New() = %v", err)
	}
	return svc
}

// simModel is a sim model whose batches take fixed + n·perItem of the
// bubble's clock.
func simModel(t testing.TB, fixed, perItem time.Duration) models.Factory {
	t.Helper()
	f, err := sim.New(sim.Config{Fixed: fixed, PerItem: perItem, GoSleep: true})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func labels(t *testing.T, r reply) []string {
	t.Helper()
	outs, ok := r.body["outputs"].([]any)
	if !ok {
		t.Fatalf("no outputs in %s", r.raw)
	}
	var ls []string
	for _, o := range outs {
		ls = append(ls, o.(map[string]any)["label"].(string))
	}
	return ls
}

// metric returns the value of one sample line of /metrics ("name{labels}"),
// or -1 when absent.
func metric(t *testing.T, ts *servertest.Server, sample string) float64 {
	t.Helper()
	return servertest.Sample(do(t, ts, "GET", "/metrics", "", "").raw, sample)
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// gated is a model whose batches wait for a token, to hold the queue full.
// It records the size of every batch it ran.
type gated struct {
	gate    chan struct{}
	started chan struct{}
	fail    string // items with this text fail
	panicOn string

	mu    sync.Mutex
	sizes []int
}

func newGated() *gated {
	return &gated{gate: make(chan struct{}, 1000), started: make(chan struct{}, 1000)}
}

const warmText = "Warm up the [MASK] before serving."

func (g *gated) Info() models.Info {
	return models.Info{Name: "gated", Task: "classify", Backend: "test"}
}
func (g *gated) Prepare(s string) (models.Input, error) {
	if strings.Contains(s, "[TOO LONG]") {
		return models.Input{}, fmt.Errorf("%w: 999 tokens, limit 128", models.ErrInputTooLong)
	}
	return models.Input{Text: s}, nil
}
func (g *gated) New(context.Context, int) (models.Model, error) { return gatedInstance{g}, nil }
func (g *gated) Close() error                                   { return nil }

func (g *gated) batchSizes() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]int(nil), g.sizes...)
}

type gatedInstance struct{ g *gated }

func (m gatedInstance) Close() error { return nil }

func (m gatedInstance) Predict(_ context.Context, in []models.Input, out []models.Output) error {
	g := m.g
	if in[0].Text == warmText {
		return nil
	}
	g.mu.Lock()
	g.sizes = append(g.sizes, len(in))
	g.mu.Unlock()
	g.started <- struct{}{}
	<-g.gate
	errs := make([]error, len(in))
	failed := false
	for i, x := range in {
		if x.Text == g.panicOn {
			panic("model exploded")
		}
		if x.Text == g.fail {
			errs[i], failed = errors.New("cannot compute this item"), true
		}
		out[i] = x.Text
	}
	if failed {
		return &batch.ItemsError{Errs: errs}
	}
	return nil
}

// tryCtx is try with a context: the client gives up when ctx ends.
func tryCtx(ctx context.Context, ts *servertest.Server, method, path, contentType, body string, hdr ...string) (reply, error) {
	rp, err := ts.Do(ctx, method, path, contentType, body, hdr...)
	if err != nil {
		return reply{}, err
	}
	r := reply{status: rp.Status, header: rp.Header, raw: rp.Body}
	_ = json.Unmarshal([]byte(rp.Body), &r.body)
	return r, nil
}

// counted wraps a factory and counts the instances it made and the ones
// closed. With hold set, New waits for a token from it (a slow load); with
// failAt > 0, the failAt-th call of New fails.
type counted struct {
	models.Factory
	hold   chan struct{}
	failAt int

	mu           sync.Mutex
	made, closed int
}

func (f *counted) New(ctx context.Context, worker int) (models.Model, error) {
	if f.hold != nil {
		<-f.hold
	}
	f.mu.Lock()
	f.made++
	n := f.made
	f.mu.Unlock()
	if n == f.failAt {
		return nil, errors.New("out of device memory")
	}
	m, err := f.Factory.New(ctx, worker)
	if err != nil {
		return nil, err
	}
	return countedModel{m, f}, nil
}

// live returns the instances made and not yet closed.
func (f *counted) live() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.made - f.closed
	if f.failAt > 0 && f.made >= f.failAt {
		n--
	}
	return n
}

type countedModel struct {
	models.Model
	f *counted
}

func (m countedModel) Close() error {
	m.f.mu.Lock()
	m.f.closed++
	m.f.mu.Unlock()
	return m.Model.Close()
}
