package encoder

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/server"
	"github.com/inferhq/infer/server/batch"
)

// The inference endpoints and their common path: readiness, deadline, body
// (open), items (compute: the item limit and the result cache), the
// endpoint's path (naive or batched), the Server-Timing header and the
// metrics (answer). An API over the paths (/naive and /batched here, v2 in
// kserve.go) decodes its body into items and writes its answer and errors
// in its own shape around them.

// inferResponse is the answer of /naive and /batched.
type inferResponse struct {
	Model   string          `json:"model"`
	Outputs []models.Output `json:"outputs"`
}

// endpoint is one inference endpoint, built once by Mount: the path that
// computes its items (do: the naive instance or the batched scheduler) and
// its metrics (label name), so that nothing is looked up per request.
type endpoint struct {
	name    string
	metrics *epMetrics
	do      func(ctx context.Context, ins []models.Input) ([]models.Output, batch.Stats, error)
}

func (s *Service) inferHandler(ep *endpoint) http.Handler {
	return s.answer(ep, server.WriteError, func(r *http.Request, arrived time.Time) (any, timing, error) {
		outs, st, err := s.infer(r, ep, arrived)
		return inferResponse{Model: s.info.Name, Outputs: outs}, st, err
	})
}

// answer serves the inference requests of ep, of any API: run computes one
// and returns the body of its answer, writeErr writes a failure in the API's
// shape. It counts the request in ep's metrics, in flight and answered, and
// sets Server-Timing on a success.
func (s *Service) answer(ep *endpoint, writeErr func(http.ResponseWriter, *server.Error),
	run func(r *http.Request, arrived time.Time) (any, timing, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		arrived := time.Now()
		ep.metrics.inFlight.Inc()
		defer ep.metrics.inFlight.Dec()
		body, st, err := run(r, arrived)
		if err != nil {
			e := s.toAPIError(err)
			if server.DrainTimedOut(r.Context()) {
				e = server.Errorf(http.StatusServiceUnavailable, "draining", "the server's drain timeout passed before this request finished")
				e.RetryAfter = 1
			}
			writeErr(w, e)
			ep.metrics.answered(e, time.Since(arrived))
			return
		}
		w.Header().Set("Server-Timing", serverTiming(st))
		server.WriteJSON(w, http.StatusOK, body)
		ep.metrics.request(http.StatusOK, time.Since(arrived))
	}
}

// infer runs a request of /naive or /batched: its body holds the items.
func (s *Service) infer(r *http.Request, ep *endpoint, arrived time.Time) ([]models.Output, timing, error) {
	ctx, cancel, body, err := s.open(r, arrived)
	if err != nil {
		return nil, timing{}, err
	}
	defer cancel()
	items, err := decodeItems(r.Header.Get("Content-Type"), body.Bytes())
	body.Release()
	if err != nil {
		return nil, timing{}, err
	}
	return s.compute(ctx, ep, items)
}

// open does what every inference request does first: check that the
// service takes work, set the request's deadline, and read its body (the
// host's Limits) into a pooled buffer the caller releases.
func (s *Service) open(r *http.Request, arrived time.Time) (context.Context, context.CancelFunc, *server.Body, error) {
	if s.draining.Load() {
		return nil, nil, nil, errDraining()
	}
	if !s.ready.Load() {
		return nil, nil, nil, errNotReady()
	}
	timeout, err := s.limits.RequestTimeout(r)
	if err != nil {
		return nil, nil, nil, err
	}
	body, err := s.limits.ReadBody(r)
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithDeadline(r.Context(), arrived.Add(timeout))
	return ctx, cancel, body, nil
}

// compute answers items from the cache where it can and runs the rest on
// the endpoint. Errors name items by their index in the request.
func (s *Service) compute(ctx context.Context, ep *endpoint, items []string) ([]models.Output, timing, error) {
	if len(items) > s.cfg.MaxItems {
		return nil, timing{}, server.Errorf(http.StatusUnprocessableEntity, "too_many_items",
			"request has %d items; the limit is %d (--max-items)", len(items), s.cfg.MaxItems)
	}
	if s.cache == nil {
		return s.run(ctx, ep, items, nil, nil)
	}
	outs := make([]models.Output, len(items))
	var miss []int // indexes of the items to compute
	var missed []string
	cachedTokens := 0
	now := time.Now()
	for i, text := range items {
		if out, n, ok := s.cache.get(text, now); ok {
			outs[i] = out
			cachedTokens += n
			continue
		}
		miss, missed = append(miss, i), append(missed, text)
	}
	hits := len(items) - len(miss)
	s.metrics.cacheHits.Add(float64(hits))
	s.metrics.cacheMisses.Add(float64(len(miss)))
	if len(miss) == 0 {
		return outs, timing{cached: hits, tokens: cachedTokens}, nil
	}

	tokens := make([]int, len(missed))
	computed, t, err := s.run(ctx, ep, missed, miss, tokens)
	var ie *batch.ItemsError
	if err != nil && !errors.As(err, &ie) {
		return nil, timing{}, err
	}
	t.cached = hits
	t.tokens += cachedTokens
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
		s.cache.put(items[i], computed[k], tokens[k], now)
	}
	if errs != nil {
		return outs, t, &batch.ItemsError{Errs: errs}
	}
	return outs, t, nil
}

// run prepares items and computes them on the endpoint's scheduler. idx,
// when not nil, gives each item's index in the request, for error messages;
// tokens, when not nil, receives each item's number of tokens.
func (s *Service) run(ctx context.Context, ep *endpoint, items []string, idx, tokens []int) ([]models.Output, timing, error) {
	ins := make([]models.Input, len(items))
	total := 0
	for k, text := range items {
		var err error
		if ins[k], err = s.factory.Prepare(text); err != nil {
			i := k
			if idx != nil {
				i = idx[k]
			}
			return nil, timing{}, fmt.Errorf("item %d: %w", i, err)
		}
		total += len(ins[k].Tokens)
		if tokens != nil {
			tokens[k] = len(ins[k].Tokens)
		}
	}
	outs, st, err := ep.do(ctx, ins)
	var ie *batch.ItemsError
	if err == nil || errors.As(err, &ie) {
		ep.metrics.queueDur.Observe(st.Queue.Seconds())
	}
	return outs, timing{Stats: st, tokens: total}, err
}

// timing is how a request was served, for its Server-Timing header.
type timing struct {
	batch.Stats
	cached int // items answered from the cache
	tokens int // the items' tokens (0 for a model without tokens)
}

// serverTiming renders st as a Server-Timing header value: queue and compute
// in milliseconds, the size of the batch the request ran in, its padding
// (batch × longest item ÷ real tokens, for token models) and the number of
// items answered from the cache.
func serverTiming(st timing) string {
	b := server.AppendTiming(make([]byte, 0, 64), "queue", st.Queue, "compute", st.Compute, st.BatchSize)
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
