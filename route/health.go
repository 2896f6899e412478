package route

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"syscall"
	"time"
)

// healthPaths are tried in order when Config.Health.Path is not set: infer's
// readiness, then vLLM's and SGLang's /health, then any OpenAI server's
// model list. The first that answers other than 404 is kept.
var healthPaths = []string{"/readyz", "/health", "/v1/models"}

// probeLoop checks r's health every interval until ctx is done.
func (rt *Router) probeLoop(ctx context.Context, r *Replica) {
	t := time.NewTicker(rt.cfg.Health.Interval)
	defer t.Stop()
	for {
		rt.probe(ctx, r)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// probe checks r once and records the outcome.
func (rt *Router) probe(ctx context.Context, r *Replica) {
	h := rt.cfg.Health
	cctx, cancel := context.WithTimeout(ctx, h.Timeout)
	defer cancel()
	err := rt.check(cctx, r)
	if ctx.Err() != nil {
		return // stopping: not the replica's fault
	}
	refused := errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET)
	before, after := r.checked(h, rt.cfg.now(), err, refused)
	if err != nil {
		r.m.failed(errProbe)
	}
	rt.transition(r, before, after, err)
}

// check asks r's health path; nil when it answers 2xx.
func (rt *Router) check(ctx context.Context, r *Replica) error {
	paths := healthPaths
	r.mu.Lock()
	known := r.healthPath
	r.mu.Unlock()
	switch {
	case rt.cfg.Health.Path != "":
		paths = []string{rt.cfg.Health.Path}
	case known != "":
		paths = []string{known}
	}
	for i, p := range paths {
		code, err := rt.get(ctx, r, p)
		if err != nil {
			return err
		}
		if code == http.StatusNotFound && i+1 < len(paths) {
			continue
		}
		if rt.cfg.Health.Path == "" && code != http.StatusNotFound {
			r.mu.Lock()
			r.healthPath = p
			r.mu.Unlock()
		}
		if code < 200 || code > 299 {
			return &statusError{path: p, code: code}
		}
		return nil
	}
	return nil
}

type statusError struct {
	path string
	code int
}

func (e *statusError) Error() string { return e.path + " answered " + strconv.Itoa(e.code) }

// get asks r for path and returns the status, reading at most 64 KiB of
// the answer so that the connection is reused.
func (rt *Router) get(ctx context.Context, r *Replica, path string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.url.String()+path, nil)
	if err != nil {
		return 0, err
	}
	resp, err := rt.transport.RoundTrip(req)
	if err != nil {
		return 0, probeError(err)
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return resp.StatusCode, nil
}

// probeError shortens a transport error to its cause, without the
// addresses that net errors quote.
func probeError(err error) error {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		return errTimedOut
	case errors.Is(err, syscall.ECONNREFUSED):
		return errConnRefused
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return errConnReset
	}
	return err
}

var (
	errTimedOut    = errors.New("timed out")
	errConnRefused = wrapped{"connection refused", syscall.ECONNREFUSED}
	errConnReset   = wrapped{"connection reset", syscall.ECONNRESET}
)

// wrapped is an error with a short text that still matches its cause.
type wrapped struct {
	msg   string
	cause error
}

func (w wrapped) Error() string { return w.msg }
func (w wrapped) Unwrap() error { return w.cause }

// transition logs and counts a change of r's state.
func (rt *Router) transition(r *Replica, before, after State, err error) {
	if before == after {
		return
	}
	r.m.ready.Set(b2f(r.eligible()))
	switch {
	case after == StateReady:
		rt.log.Info("replica ready", "replica", r.name)
	case before == StateReady:
		r.m.eject.Inc()
		rt.log.Warn("replica ejected", "replica", r.name, "reason", errString(err))
	case before == StateUnknown:
		rt.log.Warn("replica not ready", "replica", r.name, "reason", errString(err))
	}
}

// ejectNow takes r out: it refused a connection.
func (rt *Router) ejectNow(r *Replica, reason string) {
	if r.eject(rt.cfg.Health, rt.cfg.now(), reason) {
		r.m.ready.Set(0)
		r.m.eject.Inc()
		rt.log.Warn("replica ejected", "replica", r.name, "reason", reason)
	}
}

// failed records a failed request to r; HealthConfig.Failures in a row
// eject it, unless no other replica may be picked.
func (rt *Router) failed(r *Replica, reason string) {
	if !r.answered(rt.cfg.Health, false, reason) {
		return
	}
	for _, o := range rt.Replicas() {
		if o != r && o.eligible() {
			rt.ejectNow(r, reason)
			return
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// scrapeLoop reads r's load from its /metrics every Score.Interval.
func (rt *Router) scrapeLoop(ctx context.Context, r *Replica) {
	t := time.NewTicker(rt.cfg.Score.Interval)
	defer t.Stop()
	client := &http.Client{Transport: rt.transport}
	for {
		sctx, cancel := context.WithTimeout(ctx, max(rt.cfg.Score.Interval, 500*time.Millisecond))
		s, err := scrape(sctx, client, r, rt.cfg.now)
		cancel()
		switch {
		case err == nil:
			r.sample.Store(s)
		case ctx.Err() == nil:
			r.m.failed(errScrape)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// resolveLoop resolves upstream i again every ResolveInterval.
func (rt *Router) resolveLoop(ctx context.Context, i int, u Upstream) {
	t := time.NewTicker(rt.cfg.ResolveInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			rt.resolve(ctx, i, u)
		}
	}
}

// resolve looks up a DNS upstream and makes its addresses the replicas of
// source i. A failed lookup keeps the replicas it had.
func (rt *Router) resolve(ctx context.Context, i int, u Upstream) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	addrs, err := rt.cfg.Resolver.LookupHost(rctx, u.URL.Hostname())
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			rt.log.Warn("resolve upstream", "upstream", u.String(), "err", err)
		}
		return
	}
	port := u.URL.Port()
	var names []string
	for _, a := range addrs {
		if net.ParseIP(a) == nil {
			continue
		}
		names = append(names, net.JoinHostPort(a, port))
	}
	slices.Sort(names)
	names = slices.Compact(names)
	if len(names) > MaxReplicas {
		rt.log.Warn("resolve upstream: too many addresses", "upstream", u.String(), "addresses", len(names), "kept", MaxReplicas)
		names = names[:MaxReplicas]
	}

	rt.mu.Lock()
	defer rt.mu.Unlock()
	old := rt.sources[i]
	var next []*Replica
	var added, removed []string
	for _, n := range names {
		if j := slices.IndexFunc(old, func(r *Replica) bool { return r.name == n }); j >= 0 {
			next = append(next, old[j])
			continue
		}
		ru := *u.URL
		ru.Host = n
		next = append(next, rt.newReplica(n, &ru, max(1, u.Weight)))
		added = append(added, n)
	}
	for _, r := range old {
		if !slices.Contains(next, r) {
			removed = append(removed, r.name)
		}
	}
	if len(added) == 0 && len(removed) == 0 {
		return
	}
	all := rt.Replicas()
	rt.sources[i] = next
	rt.membersChanged(all)
	rt.log.Info("upstream resolved", "upstream", u.String(), "replicas", len(next), "added", added, "removed", removed)
}
