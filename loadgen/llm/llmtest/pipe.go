package llmtest

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
)

// PipeListener is an in-memory net.Listener: Dial connects to it through
// net.Pipe. Client and server then block only on channels, so they run
// inside a testing/synctest bubble, where time advances when every
// goroutine waits and the fake server's sleeps take exactly their time.
type PipeListener struct {
	conns     chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
}

// NewPipeListener returns an open listener.
func NewPipeListener() *PipeListener {
	return &PipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

var errClosed = errors.New("pipe listener closed")

// Accept waits for a Dial.
func (l *PipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops Accept and Dial.
func (l *PipeListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return nil
}

// Addr is a placeholder address.
func (l *PipeListener) Addr() net.Addr { return pipeAddr{} }

// Dial connects to the listener; network and address are ignored.
func (l *PipeListener) Dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		return nil, errClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// ServePipe serves h on a PipeListener. It returns an HTTP client whose
// connections go to h, the base URL to use with it (any host works), and
// a function that stops the server and closes the client's connections:
// call it before a synctest bubble ends.
func ServePipe(h http.Handler) (client *http.Client, baseURL string, stop func()) {
	l := NewPipeListener()
	srv := &http.Server{Handler: h}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(l)
	}()
	tr := &http.Transport{DialContext: l.Dial, DisableCompression: true, MaxIdleConnsPerHost: 1 << 16}
	return &http.Client{Transport: tr}, "http://fake.test", func() {
		tr.CloseIdleConnections()
		_ = srv.Close()
		<-served
	}
}
