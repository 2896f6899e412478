package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/server/batch"
)

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/naive", only(http.MethodPost, s.inferHandler(endpointNaive)))
	mux.Handle("/batched", only(http.MethodPost, s.inferHandler(endpointBatched)))
	s.v2Routes(mux)
	s.adminRoutes(mux)
	mux.Handle("/healthz", only(http.MethodGet, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})))
	mux.Handle("/readyz", only(http.MethodGet, http.HandlerFunc(s.handleReady)))
	mux.Handle("/metrics", only(http.MethodGet, s.metrics.handler()))
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, errorf(http.StatusNotFound, "not_found", "no endpoint %s; see /naive, /batched, /v2/models/%s/infer", r.URL.Path, s.info.Name))
	}))
	return recoverPanics(mux)
}

// only answers 405 with Allow for any method but m (and HEAD for GET).
func only(m string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != m && !(m == http.MethodGet && r.Method == http.MethodHead) {
			w.Header().Set("Allow", m)
			writeError(w, errorf(http.StatusMethodNotAllowed, "method_not_allowed", "%s %s: use %s", r.Method, r.URL.Path, m))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// recoverPanics turns a handler's panic into a JSON 500: no stack trace
// reaches a client.
func recoverPanics(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				writeError(w, errorf(http.StatusInternalServerError, "internal", "internal error"))
			}
		}()
		h.ServeHTTP(w, r)
	})
}

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	switch err := s.schedulerErr(); {
	case s.draining.Load():
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "draining"})
	case !s.ready.Load():
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "loading"})
	case err != nil:
		e := s.toAPIError(err)
		if e.Status != http.StatusServiceUnavailable {
			e = errorf(http.StatusServiceUnavailable, "unavailable", "batch scheduler unavailable")
		}
		writeJSON(w, e.Status, map[string]string{"status": e.Code, "reason": e.Message})
	default:
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready", "model": s.info.Name})
	}
}

// serving reports whether the server is ready and its batched scheduler can
// serve: what /readyz, /v2/health/ready and infer_ready say.
func (s *Server) serving() bool { return s.Ready() && s.schedulerErr() == nil }

// schedulerErr returns why the batched scheduler cannot serve now, for a
// scheduler that can say so (see Scheduler), or nil.
func (s *Server) schedulerErr() error {
	if r, ok := s.scheduler().(interface{ Ready() error }); ok {
		return r.Ready()
	}
	return nil
}

// inferResponse is the answer of /naive and /batched.
type inferResponse struct {
	Model   string          `json:"model"`
	Outputs []models.Output `json:"outputs"`
}

func (s *Server) inferHandler(ep string) http.Handler {
	em := s.metrics.eps[ep]
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived := time.Now()
		em.inFlight.Inc()
		defer em.inFlight.Dec()
		outs, st, err := s.infer(r, ep, arrived, func(body []byte) ([]string, error) {
			return decodeItems(r.Header.Get("Content-Type"), body)
		})
		if err != nil {
			e := s.toAPIError(err)
			writeError(w, e)
			em.answered(e, time.Since(arrived))
			return
		}
		w.Header().Set("Server-Timing", serverTiming(st))
		writeJSON(w, http.StatusOK, inferResponse{Model: s.info.Name, Outputs: outs})
		em.request(http.StatusOK, time.Since(arrived))
	})
}

// infer runs one inference request: readiness, body, items, deadline, then
// the endpoint's scheduler. decode turns the body into items.
func (s *Server) infer(r *http.Request, ep string, arrived time.Time, decode func([]byte) ([]string, error)) ([]models.Output, timing, error) {
	if s.draining.Load() {
		return nil, timing{}, errDraining()
	}
	if !s.ready.Load() {
		return nil, timing{}, errNotReady()
	}
	timeout, err := s.requestTimeout(r)
	if err != nil {
		return nil, timing{}, err
	}
	ctx, cancel := context.WithDeadline(r.Context(), arrived.Add(timeout))
	defer cancel()

	buf, err := s.readBody(r)
	if err != nil {
		return nil, timing{}, err
	}
	items, err := decode(buf.Bytes())
	bufPool.Put(buf)
	if err != nil {
		return nil, timing{}, err
	}
	if len(items) > s.cfg.MaxItems {
		return nil, timing{}, errorf(http.StatusUnprocessableEntity, "too_many_items",
			"request has %d items; the limit is %d (--max-items)", len(items), s.cfg.MaxItems)
	}
	return s.compute(ctx, ep, items)
}

// compute answers items from the cache where it can and runs the rest on
// the endpoint's scheduler. Errors name items by their index in the request.
func (s *Server) compute(ctx context.Context, ep string, items []string) ([]models.Output, timing, error) {
	if s.cache == nil {
		return s.run(ctx, ep, items, nil)
	}
	outs := make([]models.Output, len(items))
	var miss []int // indexes of the items to compute
	var missed []string
	now := time.Now()
	for i, text := range items {
		if out, ok := s.cache.get(text, now); ok {
			outs[i] = out
			continue
		}
		miss, missed = append(miss, i), append(missed, text)
	}
	hits := len(items) - len(miss)
	s.metrics.cacheHits.Add(float64(hits))
	s.metrics.cacheMisses.Add(float64(len(miss)))
	if len(miss) == 0 {
		return outs, timing{cached: hits}, nil
	}

	computed, t, err := s.run(ctx, ep, missed, miss)
	var ie *batch.ItemsError
	if err != nil && !errors.As(err, &ie) {
		return nil, timing{}, err
	}
	t.cached = hits
	var errs []error
	for k, i := range miss {
		if ie != nil && ie.Errs[k] != nil {
			if errs == nil {
				errs = make([]error, len(items))
			}
			errs[i] = ie.Errs[k]
			continue
		}
		outs[i] = computed[k]
		s.cache.put(items[i], computed[k], now)
	}
	if errs != nil {
		return outs, t, &batch.ItemsError{Errs: errs}
	}
	return outs, t, nil
}

// run prepares items and computes them on the endpoint's scheduler. idx,
// when not nil, gives each item's index in the request, for error messages.
func (s *Server) run(ctx context.Context, ep string, items []string, idx []int) ([]models.Output, timing, error) {
	ins := make([]models.Input, len(items))
	for k, text := range items {
		var err error
		if ins[k], err = s.factory.Prepare(text); err != nil {
			i := k
			if idx != nil {
				i = idx[k]
			}
			return nil, timing{}, fmt.Errorf("item %d: %w", i, err)
		}
	}
	var outs []models.Output
	var st batch.Stats
	var err error
	if ep == endpointNaive {
		outs, st, err = s.naive.Load().Do(ctx, ins)
	} else {
		outs, st, err = s.scheduler().Do(ctx, ins)
	}
	var ie *batch.ItemsError
	if err == nil || errors.As(err, &ie) {
		s.metrics.eps[ep].queueDur.Observe(st.Queue.Seconds())
	}
	return outs, timing{Stats: st}, err
}

// timing is how a request was served, for its Server-Timing header.
type timing struct {
	batch.Stats
	cached int // items answered from the cache
}

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// readBody reads the whole body, at most Config.MaxBody bytes, into a pooled
// buffer the caller returns to bufPool.
func (s *Server) readBody(r *http.Request) (*bytes.Buffer, error) {
	if r.ContentLength > s.cfg.MaxBody {
		return nil, &http.MaxBytesError{Limit: s.cfg.MaxBody}
	}
	buf := bufPool.Get().(*bytes.Buffer)
	buf.Reset()
	_, err := buf.ReadFrom(io.LimitReader(r.Body, s.cfg.MaxBody+1))
	if err != nil {
		bufPool.Put(buf)
		return nil, errorf(http.StatusBadRequest, "bad_body", "reading body: %v", err)
	}
	if int64(buf.Len()) > s.cfg.MaxBody {
		bufPool.Put(buf)
		return nil, &http.MaxBytesError{Limit: s.cfg.MaxBody}
	}
	return buf, nil
}

// requestTimeout is Config.Timeout, shortened by an X-Request-Timeout header
// holding a Go duration ("250ms") or seconds ("0.25").
func (s *Server) requestTimeout(r *http.Request) (time.Duration, error) {
	v := r.Header.Get("X-Request-Timeout")
	if v == "" {
		return s.cfg.Timeout, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		f, ferr := strconv.ParseFloat(v, 64)
		if ferr != nil {
			return 0, errorf(http.StatusBadRequest, "bad_timeout", "X-Request-Timeout %q: want a duration like 250ms or seconds like 0.25", v)
		}
		d = time.Duration(f * float64(time.Second))
	}
	if d <= 0 {
		return 0, errorf(http.StatusBadRequest, "bad_timeout", "X-Request-Timeout %q: must be positive", v)
	}
	return min(d, s.cfg.Timeout), nil
}

// serverTiming renders st as a Server-Timing header value: queue and compute
// in milliseconds, the size of the batch the request ran in, its padding
// (batch × longest item ÷ real tokens, for token models) and the number of
// items answered from the cache.
func serverTiming(st timing) string {
	b := make([]byte, 0, 64)
	b = append(b, "queue;dur="...)
	b = strconv.AppendFloat(b, float64(st.Queue.Microseconds())/1000, 'f', 3, 64)
	b = append(b, ", compute;dur="...)
	b = strconv.AppendFloat(b, float64(st.Compute.Microseconds())/1000, 'f', 3, 64)
	b = append(b, ", batch;desc="...)
	b = strconv.AppendInt(b, int64(st.BatchSize), 10)
	if st.Padding > 0 {
		b = append(b, ", pad;desc="...)
		b = strconv.AppendFloat(b, st.Padding, 'f', 2, 64)
	}
	if st.cached > 0 {
		b = append(b, ", cache;desc="...)
		b = strconv.AppendInt(b, int64(st.cached), 10)
	}
	return string(b)
}
