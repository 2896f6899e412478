package route

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/inferhq/infer/server"
)

// ReplicaHeader names the replica that answered, on every answer that came
// from one.
const ReplicaHeader = "X-Infer-Replica"

// api is the kind of endpoint a route serves.
type api uint8

const (
	apiEncoder api = iota // /naive, /batched: {"inputs": …}, text or a form
	apiOpenAI             // /v1/…: completions, chat, embeddings
	apiV2                 // /v2/…: KServe v2
)

// endpoint is one proxied route, built once at Mount.
type endpoint struct {
	route string // Request.Route
	api   api
}

// Mount registers the router on its host (it is a server.Service): the
// proxied endpoints
//
//	POST /naive, /batched                      infer's encoder API
//	     /v2/…                                 KServe v2 (any method)
//	POST /v1/completions, /v1/chat/completions, /v1/embeddings
//	GET  /v1/models, /v1/models/{model}        every ready replica's, merged
//
// and the same OpenAI paths under /static/v1/ and /naive/v1/; its metrics
// (infer_route_*), a readiness check (at least one replica may be picked),
// and the admin API under /admin/ (see admin). Each request's deadline and
// largest body are the host's Limits.
func (rt *Router) Mount(m *server.Mount) {
	rt.limits = m.Limits()
	post := func(path string, ep *endpoint) {
		m.Handle(path, server.Methods(map[string]http.Handler{http.MethodPost: rt.proxy(ep)}, refuseMethod))
	}
	post("/naive", &endpoint{route: "/naive", api: apiEncoder})
	post("/batched", &endpoint{route: "/batched", api: apiEncoder})
	v2 := rt.proxy(&endpoint{route: "/v2", api: apiV2})
	m.Handle("/v2", v2)
	m.Handle("/v2/", v2)
	for _, p := range []string{"", "/static", "/naive"} {
		ep := &endpoint{route: p + "/v1", api: apiOpenAI}
		for _, path := range []string{"/completions", "/chat/completions", "/embeddings"} {
			post(ep.route+path, ep)
		}
		get := func(h http.Handler) http.Handler {
			return server.Methods(map[string]http.Handler{http.MethodGet: h}, refuseMethod)
		}
		m.Handle(ep.route+"/models", get(rt.models(ep.route, false)))
		m.Handle(ep.route+"/models/{model...}", get(rt.models(ep.route, true)))
	}
	m.Collect(rt.collectors()...)
	m.Readiness(func() error {
		if err := rt.Ready(); err != nil {
			return server.Errorf(http.StatusServiceUnavailable, "no_replica", "%v", err)
		}
		return nil
	})
	m.Admin("/admin/", rt.admin())
	m.Paths("/v1/…", "/batched", "/naive", "/v2/…")
}

func refuseMethod(w http.ResponseWriter, msg string) {
	writeError(w, newError(http.StatusMethodNotAllowed, "method_not_allowed", "%s", msg))
}

// hopHeaders are the hop-by-hop headers, not passed on (RFC 9110 7.6.1),
// and the router's own.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "X-Request-Timeout"}

// deadlineMargin is taken off the time left that a replica is told, so
// that its own 504 (or a stream's error event) reaches the client before
// the router's deadline passes.
const deadlineMargin = 5 * time.Millisecond

// proxy serves ep: it reads the body, picks a replica, forwards, and
// retries elsewhere while that is safe.
func (rt *Router) proxy(ep *endpoint) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !rt.track.enter() {
			rt.refuse(w, newError(http.StatusServiceUnavailable, "draining", "the router is shutting down"))
			return
		}
		defer rt.track.leave()
		timeout, err := rt.limits.RequestTimeout(r)
		if err != nil {
			rt.refuse(w, fromHost(err))
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		var body []byte
		if r.Body != nil && r.Body != http.NoBody && r.Method != http.MethodGet && r.Method != http.MethodHead {
			b, err := rt.limits.ReadBody(r)
			if err != nil {
				rt.refuse(w, fromHost(err))
				return
			}
			defer b.Release()
			body = b.Bytes()
		}
		req := &Request{Route: ep.route}
		rt.describe(req, r, body)
		rt.forward(ctx, w, r, req, body)
	})
}

// describe fills in what the picker reads: the key and the prompt.
func (rt *Router) describe(req *Request, r *http.Request, body []byte) {
	if rt.cfg.Policy == Hash {
		if k := rt.cfg.Key; k.Header != "" {
			req.Key = r.Header.Get(k.Header)
		} else if len(body) > 0 {
			req.Key = fieldOf(body, k.Field)
		}
	}
	if rt.index != nil && len(body) > 0 {
		req.Prompt = promptOf(body)
	}
}

// refuse answers a request the router cannot pass on.
func (rt *Router) refuse(w http.ResponseWriter, e *apiError) {
	rt.m.refused.WithLabelValues(strconv.Itoa(e.Status)).Inc()
	writeError(w, e)
}

// refusal is a replica's 429 or 503, kept to pass on if no other replica
// takes the request.
type refusal struct {
	replica *Replica
	status  int
	header  http.Header
	body    []byte
}

// maxRefusalBody bounds a refusal's body kept for passing on.
const maxRefusalBody = 64 << 10

// forward sends the request to a replica picked for it and passes the
// answer on; it tries another replica, up to Config.Attempts in all, when
// one could not be reached, refused it (429, 503), or (unless
// Config.StrictRetries) broke its connection before answering — each time
// before any byte of an answer reached the client.
func (rt *Router) forward(ctx context.Context, w http.ResponseWriter, r *http.Request, req *Request, body []byte) {
	var triedBuf [MaxAttempts]*Replica
	var candBuf [16]*Replica
	tried := triedBuf[:0]
	var last *refusal
	for attempt := range rt.cfg.Attempts {
		cands := rt.candidates(candBuf[:0], tried)
		if len(cands) == 0 {
			break
		}
		rep, reason := rt.picker.Pick(req, cands)
		if attempt > 0 {
			reason = ReasonRetry
		}
		rep.m.picks[reason].Inc()
		tried = append(tried, rep)
		ref, done := rt.attempt(ctx, w, r, rep, body)
		if done {
			return
		}
		if ref != nil {
			last = ref
		}
	}
	switch {
	case last != nil:
		h := w.Header()
		for k, v := range last.header {
			h[k] = v
		}
		h.Set(ReplicaHeader, last.replica.name)
		h.Set("Content-Length", strconv.Itoa(len(last.body)))
		w.WriteHeader(last.status)
		w.Write(last.body)
		last.replica.m.answered(last.status)
	case len(tried) == 0:
		rt.refuse(w, newError(http.StatusServiceUnavailable, "no_replica", "%v", rt.noReplica(rt.Replicas())))
	default:
		names := make([]string, len(tried))
		for i, t := range tried {
			names[i] = t.name
		}
		rt.refuse(w, newError(http.StatusBadGateway, "upstream_unreachable", "no replica could be reached (tried %s)", strings.Join(names, ", ")))
	}
}

// attempt sends the request to rep. It returns done when the request is
// over (answered, or the client left); otherwise the request may go to
// another replica, and ref is the refusal to pass on if none takes it.
func (rt *Router) attempt(ctx context.Context, w http.ResponseWriter, r *http.Request, rep *Replica, body []byte) (ref *refusal, done bool) {
	rep.inFlight.Add(1)
	rep.m.inFlight.Inc()
	defer func() {
		rep.inFlight.Add(-1)
		rep.m.inFlight.Dec()
	}()

	deadline, _ := ctx.Deadline()
	left := time.Until(deadline) - deadlineMargin
	if left <= 0 {
		rep.m.failed(errTimeout)
		writeError(w, newError(http.StatusGatewayTimeout, "deadline_exceeded", "request deadline passed before the answer"))
		return nil, true
	}
	out := rt.outgoing(ctx, r, rep, body, left)
	sent := time.Now()
	resp, err := rt.carrier.RoundTrip(out)
	if err != nil {
		switch {
		case r.Context().Err() != nil:
			rep.m.failed(errClient)
			return nil, true
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			rep.m.failed(errTimeout)
			rt.failed(rep, "no answer before the request's deadline")
			w.Header()[ReplicaHeader] = rep.nameValue
			writeError(w, newError(http.StatusGatewayTimeout, "deadline_exceeded", "request deadline passed before the answer"))
			return nil, true
		case isDial(err):
			// The request never reached the replica: safe to send elsewhere.
			rep.m.failed(errConnect)
			if errors.Is(err, syscall.ECONNREFUSED) {
				rt.ejectNow(rep, "connection refused")
			} else {
				rt.failed(rep, "connect: "+probeError(err).Error())
			}
			return nil, false
		case !rt.cfg.StrictRetries && unanswered(err):
			// The replica took the request and its connection broke
			// before a byte of an answer: it crashed or was killed.
			rep.m.failed(errBroken)
			rt.failed(rep, "connection broke before the answer: "+probeError(err).Error())
			return nil, false
		default:
			rep.m.failed(errBroken)
			rt.failed(rep, "connection broke before the answer: "+probeError(err).Error())
			w.Header()[ReplicaHeader] = rep.nameValue
			writeError(w, newError(http.StatusBadGateway, "upstream_failed", "replica %s failed before answering", rep.name))
			return nil, true
		}
	}
	defer resp.Body.Close()
	now := time.Now()
	rep.seen(now)
	rep.m.start.Observe(now.Sub(sent).Seconds())

	switch code := resp.StatusCode; {
	case code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable:
		rep.m.failed(errRefused)
		if code == http.StatusServiceUnavailable {
			rt.failed(rep, "answered 503") // loading or draining: its health check follows
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxRefusalBody))
		h := resp.Header.Clone()
		for _, k := range hopHeaders {
			h.Del(k)
		}
		return &refusal{replica: rep, status: code, header: h, body: b}, false
	case code == http.StatusInternalServerError || code == http.StatusBadGateway || code == http.StatusGatewayTimeout:
		rep.m.failed(errServer)
		rt.failed(rep, "answered "+strconv.Itoa(code))
	default:
		rep.answered(rt.cfg.Health, true, "")
	}

	h := w.Header()
	copyHeader(h, resp.Header)
	h[ReplicaHeader] = rep.nameValue
	h["Server-Timing"] = routeTiming(resp.Header["Server-Timing"], rep)
	w.WriteHeader(resp.StatusCode)
	rep.m.answered(resp.StatusCode)
	if isEventStream(resp.Header.Get("Content-Type")) {
		http.NewResponseController(w).Flush() // the client learns at once that its stream started
		rt.copyEvents(ctx, w, r, rep, resp.Body)
	} else {
		rt.copyBody(w, r, rep, resp)
	}
	return nil, true
}

// outgoing is the request to rep: r's method, path, query and end-to-end
// headers, the body read, the time left, and the client's address in
// X-Forwarded-For. Its context is the request's: the client leaving, or
// its deadline passing, cancels it.
func (rt *Router) outgoing(ctx context.Context, r *http.Request, rep *Replica, body []byte, left time.Duration) *http.Request {
	u := *rep.url
	u.Path, u.RawPath, u.RawQuery = r.URL.Path, r.URL.RawPath, r.URL.RawQuery
	base := http.Request{Method: r.Method, URL: &u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: make(http.Header, len(r.Header)+2), Host: u.Host}
	out := base.WithContext(ctx) // the one copy on the heap
	if len(body) > 0 {
		out.Body = io.NopCloser(bytes.NewReader(body))
		out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		out.ContentLength = int64(len(body))
	}
	copyHeader(out.Header, r.Header)
	out.Header["X-Request-Timeout"] = []string{strconv.FormatFloat(left.Seconds(), 'f', 3, 64)}
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		if prior := r.Header["X-Forwarded-For"]; len(prior) > 0 {
			ip = strings.Join(prior, ", ") + ", " + ip
		}
		out.Header["X-Forwarded-For"] = []string{ip}
	}
	return out
}

// isDial reports whether a round trip failed to connect: the request never
// reached the replica.
func isDial(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}

// unanswered reports whether a round trip failed because the replica's
// connection closed or reset before any answer, rather than for a
// malformed answer or a local error.
func unanswered(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// copyHeader copies src's end-to-end headers into dst.
func copyHeader(dst, src http.Header) {
	var drop []string
	for _, c := range src.Values("Connection") { // headers the sender named hop-by-hop
		for f := range strings.SplitSeq(c, ",") {
			if f = strings.TrimSpace(f); f != "" {
				drop = append(drop, http.CanonicalHeaderKey(f))
			}
		}
	}
	for k, v := range src {
		if !isHop(k) && (drop == nil || !containsString(drop, k)) {
			dst[k] = v // shared: neither side changes a value slice
		}
	}
}

func isHop(k string) bool { return containsString(hopHeaders, k) }

func containsString(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}

// routeTiming appends route;desc="<replica>" to a replica's Server-Timing:
// one value, shared by every answer when the replica sent none.
func routeTiming(prior []string, rep *Replica) []string {
	if len(prior) == 0 {
		return rep.timing
	}
	return []string{strings.Join(prior, ", ") + ", " + rep.timing[0]}
}

func isEventStream(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	return strings.EqualFold(strings.TrimSpace(mt), "text/event-stream")
}

var copyPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// copyBody passes a plain answer on. If the replica's answer breaks off,
// the client's connection is aborted, so that a truncated answer is never
// taken for a whole one.
func (rt *Router) copyBody(w http.ResponseWriter, r *http.Request, rep *Replica, resp *http.Response) {
	// A small answer of known length goes out in one write that the
	// socket's buffer takes whole: it needs no deadline of its own.
	small := resp.ContentLength >= 0 && resp.ContentLength <= smallBody
	var rc *http.ResponseController
	if !small {
		rc = http.NewResponseController(w)
		defer rc.SetWriteDeadline(time.Time{})
	}
	bp := copyPool.Get().(*[]byte)
	defer copyPool.Put(bp)
	buf := *bp
	flush := resp.ContentLength < 0 // an answer of unknown length may be a stream of its own
	var dl writeDeadline
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			rep.seen(time.Now())
			if !small {
				dl.extend(rc, rt.cfg.WriteTimeout)
			}
			if _, werr := w.Write(buf[:n]); werr != nil {
				rt.clientGone(r, rep, werr)
				return
			}
			if flush {
				rc.Flush()
			}
		}
		switch {
		case err == io.EOF:
			return
		case err != nil:
			if r.Context().Err() != nil {
				rep.m.failed(errClient)
				return
			}
			rep.m.failed(errCut)
			rt.failed(rep, "answer broke off: "+probeError(err).Error())
			panic(http.ErrAbortHandler)
		}
	}
}

// smallBody bounds the answers copyBody writes without a deadline of their
// own (the host's write timeout still holds).
const smallBody = 64 << 10

// writeDeadline extends a connection's write deadline to the write
// timeout from now, at most every eighth of it: a client then has 7/8 to
// all of the timeout to take each write, and a stream of many small writes
// does not reset a timer for each.
type writeDeadline struct{ set time.Time }

func (d *writeDeadline) extend(rc *http.ResponseController, timeout time.Duration) {
	if now := time.Now(); now.Sub(d.set) > timeout/8 {
		rc.SetWriteDeadline(now.Add(timeout))
		d.set = now
	}
}

// clientGone counts a write to the client that failed: it left, or did not
// read within the write timeout.
func (rt *Router) clientGone(r *http.Request, rep *Replica, err error) {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() && r.Context().Err() == nil {
		rep.m.failed(errSlowRead)
		return
	}
	rep.m.failed(errClient)
}

// maxEvent bounds an SSE event held back until its end arrives; a longer
// one is passed on in parts.
const maxEvent = 1 << 20

// copyEvents passes a Server-Sent Events stream on event by event: each
// complete event is written and flushed as soon as it has arrived, and
// nothing else is held back. If the replica's stream breaks off, the
// client gets an OpenAI error event and data: [DONE] after the last whole
// event, and the stream ends.
func (rt *Router) copyEvents(ctx context.Context, w http.ResponseWriter, r *http.Request, rep *Replica, body io.Reader) {
	rc := http.NewResponseController(w)
	defer rc.SetWriteDeadline(time.Time{})
	bp := copyPool.Get().(*[]byte)
	defer copyPool.Put(bp)
	buf := *bp
	var pending []byte // the start of an event whose end has not arrived
	midEvent := false  // part of an event went out without its end
	var dl writeDeadline
	write := func(b []byte) bool {
		dl.extend(rc, rt.cfg.WriteTimeout)
		if _, err := w.Write(b); err != nil {
			rt.clientGone(r, rep, err)
			return false
		}
		if err := rc.Flush(); err != nil {
			rt.clientGone(r, rep, err)
			return false
		}
		return true
	}
	for {
		n, err := body.Read(buf)
		if n > 0 {
			rep.seen(time.Now())
			chunk := buf[:n]
			if len(pending) > 0 {
				pending = append(pending, chunk...)
				chunk = pending
			}
			end := eventsEnd(chunk)
			switch {
			case end > 0:
				if !write(chunk[:end]) {
					return
				}
				midEvent = false
				pending = append(pending[:0], chunk[end:]...)
			case len(chunk) > maxEvent:
				if !write(chunk) {
					return
				}
				midEvent = true
				pending = pending[:0]
			default:
				pending = append(pending[:0], chunk...)
			}
		}
		switch {
		case err == io.EOF:
			if len(pending) > 0 {
				write(pending)
			}
			return
		case err != nil:
			if r.Context().Err() != nil {
				rep.m.failed(errClient)
				return
			}
			e := newError(http.StatusBadGateway, "upstream_failed", "replica %s broke off the stream", rep.name)
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				e = newError(http.StatusGatewayTimeout, "deadline_exceeded", "request deadline passed before the answer was complete")
				rep.m.failed(errTimeout)
			} else {
				rep.m.failed(errCut)
				rt.failed(rep, "stream broke off: "+probeError(err).Error())
			}
			ev := errorEvent(e)
			if midEvent {
				ev = append([]byte("\n\n"), ev...)
			}
			write(ev)
			return
		}
	}
}

// eventsEnd returns the end of the last complete event in b (after its
// blank line: \n\n, \r\r or \r\n\r\n), 0 if b holds none.
func eventsEnd(b []byte) int {
	end := 0
	if i := bytes.LastIndex(b, []byte("\n\n")); i >= 0 {
		end = i + 2
	}
	if i := bytes.LastIndex(b, []byte("\r\n\r\n")); i >= 0 && i+4 > end {
		end = i + 4
	}
	if i := bytes.LastIndex(b, []byte("\r\r")); i >= 0 && i+2 > end {
		end = i + 2
	}
	return end
}
