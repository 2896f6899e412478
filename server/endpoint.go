package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/server/batch"
)

// The inference endpoints, /naive and /batched, and their common path:
// readiness, deadline, body, items, the result cache, the endpoint's
// scheduler, and the Server-Timing header of the answer.

// inferResponse is the answer of /naive and /batched.
type inferResponse struct {
	Model   string          `json:"model"`
	Outputs []models.Output `json:"outputs"`
}

// endpoint is one inference endpoint, built once by routes: how its items
// are computed and its metrics, so that nothing is looked up per request.
type endpoint struct {
	name    string
	metrics *epMetrics
	do      func(ctx context.Context, ins []models.Input) ([]models.Output, batch.Stats, error)
}

func (s *Server) inferHandler(ep *endpoint) http.Handler {
	return s.answer(ep, writeError, func(r *http.Request, arrived time.Time) (any, timing, error) {
		outs, st, err := s.infer(r, ep, arrived)
		return inferResponse{Model: s.info.Name, Outputs: outs}, st, err
	})
}

// answer serves the inference requests of ep, of either API: run computes
// one and returns the body of its answer, writeErr writes a failure in the
// API's shape. It counts the request in ep's metrics, in flight and
// answered, and sets Server-Timing on a success.
func (s *Server) answer(ep *endpoint, writeErr func(http.ResponseWriter, *apiError),
	run func(r *http.Request, arrived time.Time) (any, timing, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		arrived := time.Now()
		ep.metrics.inFlight.Inc()
		defer ep.metrics.inFlight.Dec()
		body, st, err := run(r, arrived)
		if err != nil {
			e := s.toAPIError(err)
			writeErr(w, e)
			ep.metrics.answered(e, time.Since(arrived))
			return
		}
		w.Header().Set("Server-Timing", serverTiming(st))
		writeJSON(w, http.StatusOK, body)
		ep.metrics.request(http.StatusOK, time.Since(arrived))
	}
}

// infer runs a request of /naive or /batched: its body holds the items.
func (s *Server) infer(r *http.Request, ep *endpoint, arrived time.Time) ([]models.Output, timing, error) {
	ctx, cancel, body, err := s.open(r, arrived)
	if err != nil {
		return nil, timing{}, err
	}
	defer cancel()
	items, err := decodeItems(r.Header.Get("Content-Type"), body.Bytes())
	bufPool.Put(body)
	if err != nil {
		return nil, timing{}, err
	}
	return s.compute(ctx, ep, items)
}

// open does what every inference request does first: check that the server
// takes work, set the request's deadline, and read its body into a pooled
// buffer the caller returns to bufPool.
func (s *Server) open(r *http.Request, arrived time.Time) (context.Context, context.CancelFunc, *bytes.Buffer, error) {
	if s.draining.Load() {
		return nil, nil, nil, errDraining()
	}
	if !s.ready.Load() {
		return nil, nil, nil, errNotReady()
	}
	timeout, err := s.requestTimeout(r)
	if err != nil {
		return nil, nil, nil, err
	}
	body, err := s.readBody(r)
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithDeadline(r.Context(), arrived.Add(timeout))
	return ctx, cancel, body, nil
}

// compute answers items from the cache where it can and runs the rest on
// the endpoint. Errors name items by their index in the request.
func (s *Server) compute(ctx context.Context, ep *endpoint, items []string) ([]models.Output, timing, error) {
	if len(items) > s.cfg.MaxItems {
		return nil, timing{}, errorf(http.StatusUnprocessableEntity, "too_many_items",
			"request has %d items; the limit is %d (--max-items)", len(items), s.cfg.MaxItems)
	}
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
func (s *Server) run(ctx context.Context, ep *endpoint, items []string, idx []int) ([]models.Output, timing, error) {
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
	outs, st, err := ep.do(ctx, ins)
	var ie *batch.ItemsError
	if err == nil || errors.As(err, &ie) {
		ep.metrics.queueDur.Observe(st.Queue.Seconds())
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
		return nil, bodyError(err)
	}
	if int64(buf.Len()) > s.cfg.MaxBody {
		bufPool.Put(buf)
		return nil, &http.MaxBytesError{Limit: s.cfg.MaxBody}
	}
	return buf, nil
}

// bodyError is the answer to a body that could not be read. It never quotes
// a network error, which names the server's and the client's addresses.
func bodyError(err error) *apiError {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return errorf(http.StatusRequestTimeout, "body_timeout", "the body did not arrive in time")
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return errorf(http.StatusBadRequest, "bad_body", "the body ended early")
	}
	return errorf(http.StatusBadRequest, "bad_body", "the body could not be read (malformed chunked encoding, or the connection broke)")
}

// requestTimeout is Config.Timeout, shortened by the request's
// X-Request-Timeout header (see RequestTimeout).
func (s *Server) requestTimeout(r *http.Request) (time.Duration, error) {
	return RequestTimeout(r, s.cfg.Timeout)
}

// RequestTimeout is a request's deadline: def, shortened by an
// X-Request-Timeout header holding a Go duration ("250ms") or seconds
// ("0.25"). A malformed or non-positive header is an error that says why.
// Services use it so that every endpoint reads the header alike.
func RequestTimeout(r *http.Request, def time.Duration) (time.Duration, error) {
	v := r.Header.Get("X-Request-Timeout")
	if v == "" {
		return def, nil
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
	return min(d, def), nil
}

// AppendTiming appends the start of a Server-Timing header value to b: two
// durations, in milliseconds to the microsecond, and the size of the batch,
// "queue;dur=1.250, compute;dur=3.000, batch;desc=8". The server's answers
// and server/openai's begin so.
func AppendTiming(b []byte, name1 string, d1 time.Duration, name2 string, d2 time.Duration, batch int) []byte {
	b = append(b, name1...)
	b = append(b, ";dur="...)
	b = strconv.AppendFloat(b, float64(d1.Microseconds())/1000, 'f', 3, 64)
	b = append(b, ", "...)
	b = append(b, name2...)
	b = append(b, ";dur="...)
	b = strconv.AppendFloat(b, float64(d2.Microseconds())/1000, 'f', 3, 64)
	b = append(b, ", batch;desc="...)
	return strconv.AppendInt(b, int64(batch), 10)
}

// serverTiming renders st as a Server-Timing header value: queue and compute
// in milliseconds, the size of the batch the request ran in, its padding
// (batch × longest item ÷ real tokens, for token models) and the number of
// items answered from the cache.
func serverTiming(st timing) string {
	b := AppendTiming(make([]byte, 0, 64), "queue", st.Queue, "compute", st.Compute, st.BatchSize)
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
