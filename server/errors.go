package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/server/batch"
)

// apiError is an error with its HTTP answer. This file is the one place where
// errors become status codes.
type apiError struct {
	Status     int    `json:"-"`
	Code       string `json:"code"`
	Message    string `json:"message"`
	RetryAfter int    `json:"-"` // seconds; set for 429 and 503
}

func (e *apiError) Error() string { return e.Message }

func errorf(status int, code, format string, args ...any) *apiError {
	return &apiError{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// statusClientClosed is logged and counted, never sent: the client is gone.
const statusClientClosed = 499

// toAPIError maps any error from decoding, admission or the model to its
// answer.
func (s *Server) toAPIError(err error) *apiError {
	var ae *apiError
	var tooBig *http.MaxBytesError
	var items *batch.ItemsError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &tooBig):
		return errorf(http.StatusRequestEntityTooLarge, "body_too_large", "request body exceeds %d bytes", tooBig.Limit)
	case errors.Is(err, models.ErrInputTooLong):
		return errorf(http.StatusRequestEntityTooLarge, "input_too_long", "%v", err)
	case errors.Is(err, models.ErrInvalidInput):
		return errorf(http.StatusUnprocessableEntity, "invalid_input", "%v", err)
	case errors.Is(err, batch.ErrWouldMissDeadline):
		e := errorf(http.StatusTooManyRequests, "deadline_unreachable", "the backlog would outlast this request's deadline; retry later")
		e.RetryAfter = s.retryAfter()
		return e
	case errors.Is(err, batch.ErrQueueFull):
		e := errorf(http.StatusTooManyRequests, "queue_full", "server is at capacity; retry later")
		e.RetryAfter = s.retryAfter()
		return e
	case errors.Is(err, batch.ErrTooLarge):
		return errorf(http.StatusUnprocessableEntity, "too_many_items", "request has more items than the queue holds")
	case errors.Is(err, batch.ErrClosed) && !s.draining.Load():
		// The scheduler refuses while the server is not draining: its
		// transport (a broker) is unreachable, or has no worker. It may
		// name its code and message.
		e := errorf(http.StatusServiceUnavailable, "unavailable", "batch scheduler unavailable; retry later")
		var u interface{ Unavailable() (code, message string) }
		if errors.As(err, &u) {
			e.Code, e.Message = u.Unavailable()
		}
		e.RetryAfter = 1
		return e
	case errors.Is(err, batch.ErrClosed):
		return errDraining()
	case errors.Is(err, context.DeadlineExceeded):
		return errorf(http.StatusGatewayTimeout, "deadline_exceeded", "request deadline passed before its result")
	case errors.Is(err, context.Canceled):
		return errorf(statusClientClosed, "client_closed", "client went away")
	case errors.As(err, &items):
		return errorf(http.StatusInternalServerError, "model_error", "model failed: %v", items)
	default:
		return errorf(http.StatusInternalServerError, "internal", "%v", err)
	}
}

func errDraining() *apiError {
	e := errorf(http.StatusServiceUnavailable, "draining", "server is shutting down")
	e.RetryAfter = 1
	return e
}

func errNotReady() *apiError {
	e := errorf(http.StatusServiceUnavailable, "not_ready", "model is loading")
	e.RetryAfter = 1
	return e
}

// writeError answers with e as {"error": {"code", "message"}}.
func writeError(w http.ResponseWriter, e *apiError) {
	if e.Status == statusClientClosed {
		return
	}
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	writeJSON(w, e.Status, struct {
		Error *apiError `json:"error"`
	}{e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		body = []byte(`{"error":{"code":"internal","message":"cannot encode response"}}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
}

// retryAfter is how many seconds the batched backlog needs to clear, as the
// scheduler estimates it (at least 1, at most 60): the Retry-After of a 429.
func (s *Server) retryAfter() int {
	var d time.Duration
	if b, ok := s.scheduler().(interface{ Backlog() time.Duration }); ok {
		d = b.Backlog()
	}
	return max(1, min(60, int(math.Ceil(d.Seconds()))))
}
