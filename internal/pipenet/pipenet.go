// Package pipenet is an in-memory network for tests: a net.Listener whose
// connections are net.Pipe pairs. Client and server then block only on
// channels, so they run inside a testing/synctest bubble, where time
// advances when every goroutine waits.
package pipenet

import (
	"context"
	"errors"
	"net"
	"sync"
)

// Listener is an in-memory net.Listener: Dial connects to it through
// net.Pipe.
type Listener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

// Listen returns an open listener.
func Listen() *Listener {
	return &Listener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

// Accept waits for a Dial.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

// Close stops Accept and Dial.
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

// Addr is a placeholder address, "pipe".
func (l *Listener) Addr() net.Addr { return addr{} }

// Dial connects to the listener, handing the server's end to Accept; network
// and address are ignored, so that it serves as an http.Transport's
// DialContext. After Close it is refused.
func (l *Listener) Dial(ctx context.Context, _, _ string) (net.Conn, error) {
	srv, cli := net.Pipe()
	select {
	case l.conns <- srv:
		return cli, nil
	case <-l.closed:
		return nil, &net.OpError{Op: "dial", Net: "pipe", Err: errors.New("connection refused")}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type addr struct{}

func (addr) Network() string { return "pipe" }
func (addr) String() string  { return "pipe" }
