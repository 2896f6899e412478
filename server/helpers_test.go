package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/sim"
	"github.com/inferhq/infer/server"
	"github.com/inferhq/infer/server/batch"
	"github.com/inferhq/infer/server/servertest"
)

// The tests of this package drive the server through HTTP only, most of them
// inside a testing/synctest bubble on servertest's in-memory listener, so that
// timing is exact and no test sleeps.

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

// start serves f with cfg in memory: call it inside a synctest bubble.
func start(t *testing.T, cfg server.Config, f models.Factory) *servertest.Server {
	t.Helper()
	return servertest.StartWith(t, cfg, f, servertest.Options{InMemory: true})
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
	return sampleValue(do(t, ts, "GET", "/metrics", "", "").raw, sample)
}

// metric reads a sample through c (opening no connection of its own).
func (c *rawConn) metric(t *testing.T, sample string) float64 {
	t.Helper()
	resp, body, err := c.send(get("/metrics"))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %v %v", resp, err)
	}
	return sampleValue(body, sample)
}

func sampleValue(metrics, sample string) float64 {
	for _, l := range strings.Split(metrics, "\n") {
		if rest, ok := strings.CutPrefix(l, sample+" "); ok {
			var v float64
			if _, err := fmt.Sscan(rest, &v); err == nil {
				return v
			}
		}
	}
	return -1
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
	req, err := http.NewRequestWithContext(ctx, method, ts.URL+path, strings.NewReader(body))
	if err != nil {
		return reply{}, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := ts.Client.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	r := reply{status: resp.StatusCode, header: resp.Header, raw: string(raw)}
	_ = json.Unmarshal(raw, &r.body)
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

// rawConn is one client connection to ts, for tests that need to control it:
// keep-alive reuse, malformed requests, what the server closes.
type rawConn struct {
	net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, ts *servertest.Server) *rawConn {
	t.Helper()
	c, err := ts.Client.Transport.(*http.Transport).DialContext(context.Background(), "tcp", "servertest")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{Conn: c, r: bufio.NewReader(c)}
}

// send writes a raw request (in the background: in-memory connections are
// synchronous) and reads the answer.
func (c *rawConn) send(raw string) (*http.Response, string, error) {
	go io.WriteString(c.Conn, raw)
	return c.read()
}

func (c *rawConn) read() (*http.Response, string, error) {
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, string(body), err
}

// closedByServer reports whether the server closed the connection: a read
// gets EOF rather than data.
func (c *rawConn) closedByServer() bool {
	c.SetReadDeadline(time.Now().Add(time.Millisecond))
	defer c.SetReadDeadline(time.Time{})
	_, err := c.r.Peek(1)
	return errors.Is(err, io.EOF)
}

func get(path string) string { return "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n" }
