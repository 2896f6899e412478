package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"

	"github.com/inferhq/infer/server/generate"
)

// apiError is an error in OpenAI's shape with its HTTP status. This file is
// the one place where errors become statuses:
//
//	400 malformed JSON or header · 404 unknown model or path · 405 method
//	413 body too large, prompt over the context · 422 well-formed but invalid
//	429 + Retry-After queue full or deadline unreachable · 503 not ready or
//	draining · 504 deadline passed · 500 model failure
type apiError struct {
	Status     int     `json:"-"`
	Message    string  `json:"message"`
	Type       string  `json:"type"`
	Param      *string `json:"param"`
	Code       string  `json:"code"`
	RetryAfter int     `json:"-"`
}

func (e *apiError) Error() string { return e.Message }

// OpenAI's error types.
const (
	typeInvalid     = "invalid_request_error"
	typeRateLimit   = "rate_limit_error"
	typeUnavailable = "service_unavailable"
	typeTimeout     = "timeout"
	typeServer      = "server_error"
)

// statusClientClosed is counted, never sent: the client is gone.
const statusClientClosed = 499

func invalid(status int, param, code, format string, args ...any) *apiError {
	e := &apiError{Status: status, Type: typeInvalid, Code: code, Message: fmt.Sprintf(format, args...)}
	if param != "" {
		e.Param = &param
	}
	return e
}

// toAPIError maps an error from decoding, admission or generation.
func (h *handler) toAPIError(err error) *apiError {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, generate.ErrPromptTooLong):
		return invalid(http.StatusRequestEntityTooLarge, "prompt", "context_length_exceeded", "%v", err)
	case errors.Is(err, generate.ErrMaxTokensTooLarge):
		return invalid(http.StatusUnprocessableEntity, "max_tokens", "context_length_exceeded", "%v", err)
	case errors.Is(err, generate.ErrInvalidRequest):
		return invalid(http.StatusUnprocessableEntity, "", "invalid_request", "%v", err)
	case errors.Is(err, generate.ErrWouldMissDeadline):
		return &apiError{Status: http.StatusTooManyRequests, Type: typeRateLimit, Code: "deadline_unreachable",
			Message: "the backlog would outlast this request's deadline; retry later", RetryAfter: h.retryAfter()}
	case errors.Is(err, generate.ErrQueueFull):
		return &apiError{Status: http.StatusTooManyRequests, Type: typeRateLimit, Code: "queue_full",
			Message: "server is at capacity; retry later", RetryAfter: h.retryAfter()}
	case errors.Is(err, generate.ErrClosed):
		return errDraining()
	case errors.Is(err, context.DeadlineExceeded):
		return &apiError{Status: http.StatusGatewayTimeout, Type: typeTimeout, Code: "deadline_exceeded",
			Message: "request deadline passed before the answer was complete"}
	case errors.Is(err, context.Canceled):
		return &apiError{Status: statusClientClosed, Type: typeInvalid, Code: "client_closed", Message: "client went away"}
	case errors.Is(err, generate.ErrSlowReader):
		return &apiError{Status: statusClientClosed, Type: typeInvalid, Code: "slow_reader", Message: "the stream was not read fast enough"}
	case errors.Is(err, generate.ErrDecoder):
		return &apiError{Status: http.StatusInternalServerError, Type: typeServer, Code: "model_error", Message: err.Error()}
	default:
		return &apiError{Status: http.StatusInternalServerError, Type: typeServer, Code: "internal", Message: err.Error()}
	}
}

func errDraining() *apiError {
	return &apiError{Status: http.StatusServiceUnavailable, Type: typeUnavailable, Code: "draining", Message: "server is shutting down", RetryAfter: 1}
}

func errNotReady() *apiError {
	return &apiError{Status: http.StatusServiceUnavailable, Type: typeUnavailable, Code: "not_ready", Message: "model is loading", RetryAfter: 1}
}

// retryAfter is how many seconds the endpoint's backlog needs to start (1 to
// 60): the Retry-After of a 429.
func (h *handler) retryAfter() int {
	d := h.ep.engine.Backlog()
	return max(1, min(60, int(math.Ceil(d.Seconds()))))
}

// writeError answers with e as {"error": {"message", "type", "param", "code"}}.
func writeError(w http.ResponseWriter, e *apiError) {
	if e.Status == statusClientClosed {
		return
	}
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	writeJSON(w, e.Status, errorBody{e})
}

type errorBody struct {
	Error *apiError `json:"error"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		body = []byte(`{"error":{"message":"cannot encode response","type":"server_error","param":null,"code":"internal"}}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
}
