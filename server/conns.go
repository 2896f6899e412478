package server

import (
	"bytes"
	"container/list"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The connections of a server: their number is capped; at the cap the
// connection quiet for longest is closed to let a new one in, quiet meaning
// idle between keep-alive requests or new without a complete request header
// yet (nginx reuses its "reusable" connections the same way; a client that
// opens sockets and sends nothing thus cannot hold the cap against a client
// that sends a request); connections from one client address may be capped
// too; accept errors are logged at warn and
// retried, and on drain connections are closed without racing a client's
// request. net/http's own plain-text error answers (431, 400 and 501 for
// requests it cannot parse) are rewritten into the JSON error shape.

// Reasons a connection was closed by the server, as counted by
// infer_connections_closed_total.
const (
	closedIdleEvicted = "idle_evicted"  // idle, closed to make room at the cap
	closedNewEvicted  = "new_evicted"   // no complete request header yet, closed to make room at the cap
	closedOverCap     = "over_cap"      // new, refused at the cap: none was quiet
	closedOverAddrCap = "over_addr_cap" // new, refused: its address holds MaxConnsPerAddr
	closedDrainIdle   = "drain_idle"    // idle through the drain's quiet period
)

// drainQuiet is how long a connection must have been idle, or new without a
// byte read, before the drain closes it. Closing an idle connection races a
// client that picks it from its pool at that moment (it then sees EOF or a
// reset), so the drain leaves that to the client: while a client keeps
// sending, it uses each pooled connection in turn and gets an answer
// carrying Connection: close (a pool of 300 at 300 req/s is used up within
// a second). One quiet for this long is parked, and closing it races
// nothing.
const drainQuiet = time.Second

// conns tracks a server's connections. Safe for concurrent use.
type conns struct {
	max     int
	perAddr int // 0: no cap per client address
	log     *slog.Logger

	mu     sync.Mutex
	all    map[*trackedConn]struct{}
	quiet  list.List // of *trackedConn idle or new, longest quiet first
	byAddr map[netip.Addr]int

	open     atomic.Int64
	closed   *prometheus.CounterVec
	acceptEr prometheus.Counter
}

func newConns(max, perAddr int, log *slog.Logger) *conns {
	return &conns{
		max:     max,
		perAddr: perAddr,
		log:     log,
		all:     make(map[*trackedConn]struct{}),
		byAddr:  make(map[netip.Addr]int),
		closed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infer_connections_closed_total",
			Help: "Connections closed by the server: idle_evicted (idle, to make room at --max-conns), new_evicted (no complete request header yet, to make room), over_cap (refused at the cap, none quiet), over_addr_cap (refused: --max-conns-per-addr from its address), drain_idle (parked through a drain).",
		}, []string{"reason"}),
		acceptEr: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "infer_accept_errors_total", Help: "Errors accepting connections (e.g. too many open files), each retried.",
		}),
	}
}

// collectors are the connection metrics.
func (cs *conns) collectors() []prometheus.Collector {
	return []prometheus.Collector{cs.closed, cs.acceptEr, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "infer_connections_open", Help: "Open client connections (at most --max-conns).",
	}, func() float64 { return float64(cs.open.Load()) })}
}

// trackedConn is a connection the server accepted.
type trackedConn struct {
	net.Conn
	cs        *conns
	addr      netip.Addr // the client's; zero when not an IP address
	state     http.ConnState
	since     time.Time     // of the last state change
	el        *list.Element // in cs.quiet while idle or new
	closeOnce sync.Once
}

// admit registers c, making room at the cap by closing the connection quiet
// for longest (idle, or new without a complete request header). It reports
// false, having closed c, when every connection is busy with a request, or
// when c's address already holds its cap.
func (cs *conns) admit(c net.Conn) (*trackedConn, bool) {
	addr := clientAddr(c)
	cs.mu.Lock()
	refuse := ""
	switch {
	case cs.perAddr > 0 && addr.IsValid() && cs.byAddr[addr] >= cs.perAddr:
		refuse = closedOverAddrCap
	case cs.max > 0 && len(cs.all) >= cs.max && !cs.evictLocked():
		refuse = closedOverCap
	}
	if refuse != "" {
		cs.mu.Unlock()
		cs.closed.WithLabelValues(refuse).Inc()
		c.Close()
		return nil, false
	}
	tc := &trackedConn{Conn: c, cs: cs, addr: addr, state: http.StateNew, since: time.Now()}
	cs.all[tc] = struct{}{}
	tc.el = cs.quiet.PushBack(tc)
	if addr.IsValid() {
		cs.byAddr[addr]++
	}
	cs.open.Store(int64(len(cs.all)))
	cs.mu.Unlock()
	return tc, true
}

// clientAddr is the IP address c comes from, or the zero Addr.
func clientAddr(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		ip, _ := netip.AddrFromSlice(a.IP)
		return ip.Unmap()
	}
	return netip.Addr{}
}

// evictLocked closes the connection quiet for longest, if any.
func (cs *conns) evictLocked() bool {
	front := cs.quiet.Front()
	if front == nil {
		return false
	}
	tc := front.Value.(*trackedConn)
	reason := closedIdleEvicted
	if tc.state == http.StateNew {
		reason = closedNewEvicted
	}
	cs.forgetLocked(tc)
	cs.closed.WithLabelValues(reason).Inc()
	tc.closeConn()
	return true
}

func (cs *conns) forgetLocked(tc *trackedConn) {
	if tc.el != nil {
		cs.quiet.Remove(tc.el)
		tc.el = nil
	}
	if _, ok := cs.all[tc]; !ok {
		return
	}
	delete(cs.all, tc)
	if tc.addr.IsValid() {
		if n := cs.byAddr[tc.addr] - 1; n > 0 {
			cs.byAddr[tc.addr] = n
		} else {
			delete(cs.byAddr, tc.addr)
		}
	}
	cs.open.Store(int64(len(cs.all)))
}

func (tc *trackedConn) closeConn() { tc.closeOnce.Do(func() { tc.Conn.Close() }) }

// Close closes the connection and forgets it.
func (tc *trackedConn) Close() error {
	tc.cs.mu.Lock()
	tc.cs.forgetLocked(tc)
	tc.cs.mu.Unlock()
	var err error
	tc.closeOnce.Do(func() { err = tc.Conn.Close() })
	return err
}

// stateChanged is the http.Server's ConnState hook.
func (cs *conns) stateChanged(c net.Conn, state http.ConnState) {
	tc, ok := c.(*trackedConn)
	if !ok {
		return
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if _, ok := cs.all[tc]; !ok {
		return
	}
	switch state {
	case http.StateHijacked, http.StateClosed:
		cs.forgetLocked(tc)
		return
	case http.StateIdle, http.StateNew:
		if tc.el == nil {
			tc.el = cs.quiet.PushBack(tc)
		}
	default:
		if tc.el != nil {
			cs.quiet.Remove(tc.el)
			tc.el = nil
		}
	}
	tc.state, tc.since = state, time.Now()
}

// closeQuiet closes the connections idle, or new and silent, for at least
// quiet, and returns how many stay open.
func (cs *conns) closeQuiet(now time.Time, quiet time.Duration) int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for tc := range cs.all {
		if (tc.state == http.StateIdle || tc.state == http.StateNew) && now.Sub(tc.since) >= quiet {
			cs.forgetLocked(tc)
			cs.closed.WithLabelValues(closedDrainIdle).Inc()
			tc.closeConn()
		}
	}
	return len(cs.all)
}

// listener caps and tracks the connections accepted from ln.
type listener struct {
	net.Listener
	cs      *conns
	closing atomic.Bool
}

// Close stops accepting. A listener that supports deadlines first hands
// over the connections already queued in the kernel: closing a listening
// socket resets those, and their clients have sent their request.
func (l *listener) Close() error {
	if l.closing.Swap(true) {
		return nil
	}
	if d, ok := l.Listener.(interface{ SetDeadline(time.Time) error }); ok && d.SetDeadline(time.Now()) == nil {
		return nil // Accept takes what is queued, then closes
	}
	return l.Listener.Close()
}

func (cs *conns) listen(ln net.Listener) *listener { return &listener{Listener: ln, cs: cs} }

// Accept returns the next connection within the cap. Errors other than the
// listener being closed (too many open files, a connection aborted before it
// was accepted) are logged at warn, at most once a second, and retried with
// a back-off; running out of descriptors first closes an idle connection.
func (l *listener) Accept() (net.Conn, error) {
	var backoff time.Duration
	var failed int
	var lastLog time.Time
	for {
		c, err := l.Listener.Accept()
		if err == nil {
			if tc, ok := l.cs.admit(c); ok {
				return tc, nil
			}
			continue
		}
		if errors.Is(err, net.ErrClosed) {
			return nil, err
		}
		if l.closing.Load() { // the queue is empty (the deadline has passed)
			l.Listener.Close()
			return nil, net.ErrClosed
		}
		l.cs.acceptEr.Inc()
		failed++
		if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
			l.cs.mu.Lock()
			l.cs.evictLocked()
			l.cs.mu.Unlock()
		}
		if now := time.Now(); now.Sub(lastLog) >= time.Second {
			l.cs.log.Warn("accepting connections failed; retrying", "err", err, "failures", failed, "open", l.cs.open.Load(), "max_conns", l.cs.max)
			lastLog, failed = now, 0
		}
		backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
		time.Sleep(backoff)
	}
}

// Write rewrites the plain-text answers net/http writes itself, before any
// handler runs, to requests it cannot parse (431 headers too large, 400
// malformed, 501 unknown transfer coding), into the JSON error shape. It
// recognises them by their exact form: a status line, this Content-Type and
// Connection: close, no Date, written in one call.
func (tc *trackedConn) Write(p []byte) (int, error) {
	if e, ok := netHTTPError(p); ok {
		if _, err := tc.Conn.Write(e); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return tc.Conn.Write(p)
}

var netHTTPErrorHeaders = []byte("\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n")

// netHTTPError returns the JSON form of one of net/http's own error answers.
func netHTTPError(p []byte) ([]byte, bool) {
	rest, ok := bytes.CutPrefix(p, []byte("HTTP/1.1 "))
	if !ok || len(rest) < 4 || rest[3] != ' ' {
		return nil, false
	}
	status, err := strconv.Atoi(string(rest[:3]))
	if err != nil || status < 400 {
		return nil, false
	}
	head, body, ok := bytes.Cut(rest, netHTTPErrorHeaders)
	if !ok || bytes.IndexByte(head, '\n') >= 0 {
		return nil, false
	}
	code := "bad_request"
	switch status {
	case http.StatusRequestHeaderFieldsTooLarge:
		code = "headers_too_large"
	case http.StatusNotImplemented:
		code = "unsupported_transfer_encoding"
	}
	msg, _ := bytes.CutPrefix(body, []byte(strconv.Itoa(status)+" "))
	js := fmt.Appendf(nil, `{"error":{"code":%q,"message":%q}}`+"\n", code, msg)
	out := fmt.Appendf(nil, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n",
		status, http.StatusText(status), len(js))
	return append(out, js...), true
}

// closingWriter adds Connection: close to a response whose header is written
// once the server is draining, so that its client does not reuse the
// connection.
type closingWriter struct {
	http.ResponseWriter
	draining *atomic.Bool
	wrote    bool
}

func (w *closingWriter) WriteHeader(code int) {
	if !w.wrote {
		w.wrote = true
		if w.draining.Load() {
			w.Header().Set("Connection", "close")
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *closingWriter) Write(p []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(p)
}

// Flush lets streaming handlers flush through the wrapper.
func (w *closingWriter) Flush() {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap gives http.ResponseController the connection's writer.
func (w *closingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// lifecycle wraps every route: responses carry Connection: close once the
// server drains, and after a request with a transfer coding (RFC 9112 §6.1:
// one that also had a Content-Length, which net/http removes before a
// handler sees it, may be a smuggling attempt, and the connection must then
// be closed). A handler that wrote nothing because its request's context
// ended (the client went away) has its connection closed without an
// answer, never with net/http's empty 200. inFlight counts the requests
// being handled.
func lifecycle(draining *atomic.Bool, inFlight *atomic.Int64, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inFlight.Add(1)
		defer inFlight.Add(-1)
		if len(r.TransferEncoding) > 0 {
			w.Header().Set("Connection", "close")
		}
		cw := &closingWriter{ResponseWriter: w, draining: draining}
		h.ServeHTTP(cw, r)
		if !cw.wrote && r.Context().Err() != nil {
			panic(http.ErrAbortHandler) // net/http closes the connection, logging nothing
		}
	})
}
