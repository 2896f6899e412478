// Package servertest starts a host (package server) with its services for a
// test and waits until it is ready, as net/http/httptest does for a
// handler: on a loopback port, or on an in-memory listener whose
// connections are net.Pipe pairs, so that a whole exchange (client,
// connection, host, service, a batcher, a models/sim model with GoSleep)
// runs inside a testing/synctest bubble with exact virtual times.
package servertest

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferhq/infer/internal/pipenet"
	"github.com/inferhq/infer/server"
)

// Server is a server.Server serving until its test ends.
type Server struct {
	*server.Server
	// URL is the base URL, e.g. http://127.0.0.1:41234.
	URL string
	// Client reaches URL. Use it rather than http.DefaultClient: only it
	// can dial an in-memory server.
	Client *http.Client

	done      chan struct{} // closed when Serve has returned
	err       error         // Serve's error, once done is closed
	cancel    context.CancelFunc
	collected atomic.Bool // the test called Stop
}

// Options are the less common choices; the zero value serves on a loopback
// port and waits until the server is ready.
type Options struct {
	// InMemory serves on an in-memory listener instead of a loopback port,
	// for tests inside a testing/synctest bubble (which must not use the
	// network). Start must then be called inside the bubble.
	InMemory bool
	// NoWait returns at once, while the services may still be loading;
	// call WaitReady when the test needs them ready.
	NoWait bool
}

// readyWithin bounds WaitReady.
const readyWithin = 30 * time.Second

// Start serves services on a host configured by cfg until the test ends,
// and returns once they are ready. The test fails if New fails, if the
// services do not turn ready, or if Serve returns an error the test did not
// collect with Stop.
func Start(t testing.TB, cfg server.Config, services ...server.Service) *Server {
	t.Helper()
	return StartWith(t, cfg, Options{}, services...)
}

// StartWith is Start with options.
func StartWith(t testing.TB, cfg server.Config, o Options, services ...server.Service) *Server {
	t.Helper()
	srv, err := server.New(cfg, services...)
	if err != nil {
		t.Fatalf("server.New() = %v", err)
	}
	s := &Server{Server: srv, done: make(chan struct{})}
	var ln net.Listener
	if o.InMemory {
		pl := pipenet.Listen()
		ln, s.URL = pl, "http://servertest.invalid"
		s.Client = &http.Client{Transport: &http.Transport{DialContext: pl.Dial}}
	} else {
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		s.URL = "http://" + ln.Addr().String()
		s.Client = &http.Client{Transport: &http.Transport{}}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() {
		s.err = srv.Serve(ctx, ln)
		close(s.done)
	}()
	t.Cleanup(func() {
		if err := s.stop(); err != nil && !s.collected.Load() {
			t.Errorf("Serve() = %v", err)
		}
	})
	if !o.NoWait {
		s.WaitReady(t)
	}
	return s
}

// WaitReady returns once the server is ready; the test fails if Serve
// returns first or the server is not ready within 30 s.
func (s *Server) WaitReady(t testing.TB) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(readyWithin)
	for !s.Ready() {
		select {
		case <-s.done:
			t.Fatalf("Serve() returned before the server was ready: %v", s.err)
		case now := <-tick.C:
			if now.After(deadline) {
				t.Fatalf("server not ready after %v", readyWithin)
			}
		}
	}
}

// Reply is an answer read whole.
type Reply struct {
	Status int
	Header http.Header
	Body   string
}

// Do sends one request to the server through Client and reads the whole
// answer. hdr holds more header fields as name, value pairs; the request
// is abandoned when ctx ends.
func (s *Server) Do(ctx context.Context, method, path, contentType, body string, hdr ...string) (Reply, error) {
	req, err := http.NewRequestWithContext(ctx, method, s.URL+path, strings.NewReader(body))
	if err != nil {
		return Reply{}, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := s.Client.Do(req)
	if err != nil {
		return Reply{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return Reply{Status: resp.StatusCode, Header: resp.Header, Body: string(raw)}, err
}

// DoStalled sends a request whose body stops after prefix, although its
// Content-Length says length, as a client that stalls mid-body, and reads
// the answer: the host gives it once its read timeout has passed. It
// returns how long the answer took.
func (s *Server) DoStalled(method, path, contentType, prefix string, length int64) (Reply, time.Duration, error) {
	body := &stalled{Reader: strings.NewReader(prefix), release: make(chan struct{})}
	defer close(body.release)
	req, err := http.NewRequest(method, s.URL+path, body)
	if err != nil {
		return Reply{}, 0, err
	}
	req.ContentLength = length
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	start := time.Now()
	resp, err := s.Client.Do(req)
	if err != nil {
		return Reply{}, 0, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return Reply{Status: resp.StatusCode, Header: resp.Header, Body: string(raw)}, time.Since(start), err
}

// stalled gives its Reader, then blocks until release is closed.
type stalled struct {
	io.Reader
	release chan struct{}
}

func (s *stalled) Read(p []byte) (int, error) {
	n, err := s.Reader.Read(p)
	if err == io.EOF {
		<-s.release
		return 0, io.ErrUnexpectedEOF
	}
	return n, err
}

// Sample returns the value of one sample of a Prometheus text exposition,
// named with its labels as the exposition writes them
// (`infer_requests_total{code="200",endpoint="batched"}`), or -1 when it is
// absent.
func Sample(exposition, sample string) float64 {
	for _, l := range strings.Split(exposition, "\n") {
		if rest, ok := strings.CutPrefix(l, sample+" "); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				if v, err := strconv.ParseFloat(f[0], 64); err == nil {
					return v
				}
			}
		}
	}
	return -1
}

// Stop drains the server as a first SIGTERM would and returns Serve's error.
// Later calls return the same error. The test's cleanup calls it too.
func (s *Server) Stop() error {
	s.collected.Store(true)
	return s.stop()
}

func (s *Server) stop() error {
	s.cancel()
	<-s.done
	s.Client.CloseIdleConnections()
	return s.err
}

// HalfClosed sends raw (a whole HTTP/1.1 request) to the server at url
// (http://host:port) on a new TCP connection, half-closes it
// (shutdown(SHUT_WR)) and reads until the server closes it. It fails the
// test if the answer is a 200 with an empty body, which a client cannot
// tell from a real one; it returns the answer, nil if the connection was
// closed without one.
func HalfClosed(t testing.TB, url, raw string) *Reply {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).CloseWrite()
	all, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("after a half-close: %v", err)
	}
	if len(all) == 0 {
		return nil
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(all)), nil)
	if err != nil {
		t.Fatalf("after a half-close: %q: %v", all, err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("after a half-close: %q: %v", all, err)
	}
	if resp.StatusCode == http.StatusOK && len(body) == 0 {
		t.Errorf("after a half-close: an empty 200 (%q)", all)
	}
	return &Reply{Status: resp.StatusCode, Header: resp.Header, Body: string(body)}
}
