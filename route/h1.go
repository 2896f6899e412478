package route

import (
	"bufio"
	"context"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"
)

// h1 carries proxied requests to replicas over plain HTTP/1.1 on the
// handler's own goroutine: it writes the request and reads the answer
// itself. http.Transport hands each request to a connection's writing
// goroutine and its answer back from a reading one; on a router whose
// requests take a millisecond those handoffs, each a goroutine woken on
// another thread, cost more CPU than the proxying itself. Requests to
// other schemes (https) go to next.
//
// Idle connections are kept per replica address, most recently used
// first, at most maxIdle each; one idle longer than idleTimeout, or that
// the replica closed or wrote to while idle, is not reused; reap closes
// those left behind.
type h1 struct {
	next        http.RoundTripper
	dial        func(ctx context.Context, network, addr string) (net.Conn, error)
	maxIdle     int
	idleTimeout time.Duration
	maxHeader   int64 // bytes of an answer's status line and header
	now         func() time.Time

	mu   sync.Mutex
	idle map[string][]*h1Conn // by host:port, most recently used last
}

func newH1(next http.RoundTripper, connect time.Duration) *h1 {
	return &h1{next: next, dial: dialer(connect).DialContext,
		maxIdle: maxIdlePerReplica, idleTimeout: idleConnTimeout, maxHeader: maxAnswerHeader,
		now: time.Now, idle: map[string][]*h1Conn{}}
}

// Bounds of the connections to replicas (h1's and newTransport's).
const (
	maxIdlePerReplica = 1024 // as many streams may end at once
	idleConnTimeout   = 90 * time.Second
	maxAnswerHeader   = 64 << 10
	connBuffer        = 16 << 10
	earlyAnswerWait   = 50 * time.Millisecond // after a failed write, for an answer already sent
)

// dialer connects to replicas, for h1 and newTransport alike.
func dialer(connect time.Duration) *net.Dialer {
	return &net.Dialer{Timeout: connect, KeepAlive: 30 * time.Second}
}

// h1Conn is a connection to a replica. Reads through it are bounded by
// limit, so that an answer's header cannot grow without end.
type h1Conn struct {
	net.Conn
	br    *bufio.Reader
	bw    *bufio.Writer
	limit int64
	since time.Time // idle since
}

func (c *h1Conn) Read(p []byte) (int, error) {
	if c.limit <= 0 {
		return 0, errHeaderTooLarge
	}
	if int64(len(p)) > c.limit {
		p = p[:c.limit]
	}
	n, err := c.Conn.Read(p)
	c.limit -= int64(n)
	return n, err
}

var errHeaderTooLarge = errors.New("the answer's header is too large")

// RoundTrip sends req on a connection to its host and returns the answer
// once its header has arrived. The answer's body must be closed; the
// connection is reused only if the body was read to its end. req's
// context ending closes the connection, which ends a read or write in
// progress.
func (t *h1) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "http" {
		return t.next.RoundTrip(req)
	}
	ctx := req.Context()
	addr := hostPort(req.URL)
	pc, err := t.get(ctx, addr)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { pc.Conn.Close() })
	fail := func(err error) (*http.Response, error) {
		stop()
		pc.Conn.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	pc.limit = t.maxHeader
	werr := req.Write(pc.bw)
	if werr == nil {
		werr = pc.bw.Flush()
	}
	if werr != nil {
		if ctx.Err() != nil {
			return fail(werr)
		}
		// A replica may answer before it has read the whole body (a 413
		// for a body above its limit) and close: its answer, if it came
		// within earlyAnswerWait, is passed on rather than the broken
		// write, as http.Transport does.
		pc.Conn.SetReadDeadline(time.Now().Add(earlyAnswerWait))
	}
	var resp *http.Response
	for range 5 { // interim answers (100 Continue, 103 Early Hints) are skipped, as http.Transport does
		if resp, err = http.ReadResponse(pc.br, req); err != nil {
			if werr != nil {
				return fail(werr)
			}
			return fail(err)
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
	}
	if resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
		return fail(errors.New("too many interim answers"))
	}
	pc.limit = math.MaxInt64
	keep := werr == nil && !resp.Close && resp.StatusCode != http.StatusSwitchingProtocols &&
		(resp.ContentLength >= 0 || slices.Contains(resp.TransferEncoding, "chunked"))
	resp.Body = &h1Body{t: t, pc: pc, addr: addr, body: resp.Body, stop: stop, keep: keep}
	return resp, nil
}

// get returns an idle connection to addr that may be reused, or a new one.
func (t *h1) get(ctx context.Context, addr string) (*h1Conn, error) {
	now := t.now()
	for {
		t.mu.Lock()
		l := t.idle[addr]
		if len(l) == 0 {
			t.mu.Unlock()
			break
		}
		pc := l[len(l)-1]
		l[len(l)-1] = nil
		t.idle[addr] = l[:len(l)-1]
		t.mu.Unlock()
		if now.Sub(pc.since) < t.idleTimeout && alive(pc.Conn) {
			return pc, nil
		}
		pc.Conn.Close()
	}
	c, err := t.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	pc := &h1Conn{Conn: c}
	pc.br = bufio.NewReaderSize(pc, connBuffer)
	pc.bw = bufio.NewWriterSize(c, connBuffer)
	return pc, nil
}

// put keeps pc for reuse, unless addr has maxIdle idle already.
func (t *h1) put(addr string, pc *h1Conn) {
	pc.since = t.now()
	t.mu.Lock()
	l := t.idle[addr]
	if len(l) < t.maxIdle {
		t.idle[addr] = append(l, pc)
		pc = nil
	}
	t.mu.Unlock()
	if pc != nil {
		pc.Conn.Close()
	}
}

// reap closes the connections idle for longer than the idle timeout,
// every quarter of it, until ctx ends.
func (t *h1) reap(ctx context.Context) {
	tick := time.NewTicker(t.idleTimeout / 4)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			t.closeIdle(t.now().Add(-t.idleTimeout))
		}
	}
}

// closeIdle closes the idle connections idle since before cutoff, or
// all of them when cutoff is zero.
func (t *h1) closeIdle(cutoff time.Time) {
	var stale []*h1Conn
	t.mu.Lock()
	for addr, l := range t.idle {
		keep := l[:0]
		for _, pc := range l {
			if cutoff.IsZero() || pc.since.Before(cutoff) {
				stale = append(stale, pc)
			} else {
				keep = append(keep, pc)
			}
		}
		clear(l[len(keep):])
		if len(keep) == 0 {
			delete(t.idle, addr)
		} else {
			t.idle[addr] = keep
		}
	}
	t.mu.Unlock()
	for _, pc := range stale {
		pc.Conn.Close()
	}
}

// h1Body is an answer's body; closing it after its end returns the
// connection for reuse, closing it before closes the connection.
type h1Body struct {
	t      *h1
	pc     *h1Conn
	addr   string
	body   io.ReadCloser
	stop   func() bool // stops the context's closing of the connection
	keep   bool        // the connection may carry another request after this answer
	eof    bool
	closed bool
}

func (b *h1Body) Read(p []byte) (int, error) {
	if b.closed {
		return 0, errors.New("read of a closed answer")
	}
	n, err := b.body.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (b *h1Body) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	if !b.eof {
		// Closing the connection first, so that closing the body does
		// not read the rest of it.
		b.pc.Conn.Close()
		b.body.Close()
		b.stop()
		return nil
	}
	b.body.Close()
	if b.stop() && b.keep {
		b.t.put(b.addr, b.pc)
	} else {
		b.pc.Conn.Close()
	}
	return nil
}
