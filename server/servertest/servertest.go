// Package servertest starts an infer server for a test and waits until it is
// ready, as net/http/httptest does for a handler: on a loopback port, or on
// an in-memory listener whose connections are net.Pipe pairs, so that a
// whole exchange (client, connection, server, batcher, a models/sim model
// with GoSleep) runs inside a testing/synctest bubble with exact virtual
// times.
package servertest

import (
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferhq/infer/internal/pipenet"
	"github.com/inferhq/infer/models"
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
	// NoWait returns at once, while the model may still be loading; call
	// WaitReady when the test needs it ready.
	NoWait bool
}

// readyWithin bounds WaitReady.
const readyWithin = 30 * time.Second

// Start serves f's model with cfg until the test ends, and returns once the
// server is ready. The test fails if New fails, if the server does not turn
// ready, or if Serve returns an error the test did not collect with Stop.
func Start(t testing.TB, cfg server.Config, f models.Factory) *Server {
	t.Helper()
	return StartWith(t, cfg, f, Options{})
}

// StartWith is Start with options.
func StartWith(t testing.TB, cfg server.Config, f models.Factory, o Options) *Server {
	t.Helper()
	srv, err := server.New(cfg, f)
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
