package server_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/server"
	"github.com/inferhq/infer/server/servertest"
)

// The host's tests serve a test service (probe) on servertest's in-memory
// listener inside a testing/synctest bubble: the host is real, timing is
// exact, and no test sleeps on the wall clock.

// probe is a Service with routes that exercise the host:
//
//	GET  /hello  "hi"
//	POST /echo   the body, read through the host's Limits (its length in
//	             X-Length), after the host's deadline is applied
//	POST /wait   held until gate is closed (started receives first)
//	POST /sleep  answered after 200 ms
//	POST /hold   held until its context ends: answered 503 draining if
//	             the drain timed out, else (the client left) not at all
//	GET  /admin/probe  for the admin token's bearers
type probe struct {
	model   *models.Info  // nil: a service without a model
	load    chan struct{} // closed when loading may end; nil: at once
	fail    error         // Run's error after loading, if any
	drained chan struct{} // closed once Run saw the drain
	gate    chan struct{}
	started chan struct{}
	down    atomic.Pointer[error] // set: the readiness check's error
	limits  server.Limits
}

func newProbe() *probe {
	return &probe{drained: make(chan struct{}), gate: make(chan struct{}), started: make(chan struct{}, 100),
		model: &models.Info{Name: "hello", Task: "greet", Backend: "test"}}
}

func (p *probe) Mount(m *server.Mount) {
	p.limits = m.Limits()
	m.Handle("GET /hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("hi")) }))
	m.Handle("/echo", server.Only(http.MethodPost, http.HandlerFunc(p.echo)))
	m.Handle("/wait", server.Only(http.MethodPost, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.started <- struct{}{}
		<-p.gate
		w.Write([]byte("waited"))
	})))
	m.Handle("/sleep", server.Only(http.MethodPost, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(200 * time.Millisecond)
		w.Write([]byte("slept"))
	})))
	m.Handle("/hold", server.Only(http.MethodPost, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.started <- struct{}{}
		<-r.Context().Done()
		if server.DrainTimedOut(r.Context()) {
			server.WriteError(w, server.Errorf(http.StatusServiceUnavailable, "draining", "drain timed out"))
		}
	})))
	m.Admin("/admin/probe", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("admin")) }))
	if p.model != nil {
		m.Model(*p.model)
	}
	m.Readiness(func() error {
		if err := p.down.Load(); err != nil {
			return *err
		}
		return nil
	})
}

func (p *probe) echo(w http.ResponseWriter, r *http.Request) {
	if _, err := p.limits.RequestTimeout(r); err != nil {
		server.WriteError(w, asError(err))
		return
	}
	body, err := p.limits.ReadBody(r)
	if err != nil {
		server.WriteError(w, asError(err))
		return
	}
	defer body.Release()
	w.Header().Set("X-Length", fmt.Sprint(len(body.Bytes())))
	w.Write(body.Bytes())
}

func asError(err error) *server.Error {
	var e *server.Error
	if !errors.As(err, &e) {
		return server.Errorf(http.StatusInternalServerError, "internal", "%v", err)
	}
	return e
}

func (p *probe) Run(ctx context.Context, ready func()) error {
	if p.load != nil {
		<-p.load
	}
	if p.fail != nil {
		return p.fail
	}
	ready()
	<-ctx.Done()
	close(p.drained)
	return nil
}

// start serves svcs on a host of cfg in memory, ready: call it inside a
// synctest bubble.
func start(t *testing.T, cfg server.Config, svcs ...server.Service) *servertest.Server {
	t.Helper()
	return servertest.StartWith(t, cfg, servertest.Options{InMemory: true}, svcs...)
}

// do sends one request to ts and reads the whole answer.
func do(t testing.TB, ts *servertest.Server, method, path, contentType, body string, hdr ...string) servertest.Reply {
	t.Helper()
	r, err := ts.Do(context.Background(), method, path, contentType, body, hdr...)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
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

// metric reads a sample through c (opening no connection of its own).
func (c *rawConn) metric(t *testing.T, sample string) float64 {
	t.Helper()
	resp, body, err := c.send(get("/metrics"))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %v %v", resp, err)
	}
	return servertest.Sample(body, sample)
}

func get(path string) string { return "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n" }

func post(path, body string) string {
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", path, len(body), body)
}
