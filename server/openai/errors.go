package openai

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"

	"github.com/inferhq/infer/server"
	"github.com/inferhq/infer/server/generate"
)

// apiError is an error in OpenAI's shape with its HTTP status. This file is
// the one place where errors become statuses (the host's, of a body or an
// X-Request-Timeout it refused, keep theirs):
//
//	400 malformed JSON or header · 404 unknown model or path · 405 method
//	408 body not sent in time · 413 body too large, prompt over the context
//	422 well-formed but invalid · 429 + Retry-After queue full or deadline
//	unreachable · 503 not ready or draining · 504 deadline passed · 500 model
//	failure
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
	var se *server.Error
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &se): // the host's: a body or X-Request-Timeout refused
		return fromHost(se)
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
		return &apiError{Status: server.StatusClientClosed, Type: typeInvalid, Code: "client_closed", Message: "client went away"}
	case errors.Is(err, generate.ErrSlowReader):
		return &apiError{Status: server.StatusClientClosed, Type: typeInvalid, Code: "slow_reader", Message: "the stream was not read fast enough"}
	case errors.Is(err, generate.ErrDecoder):
		return &apiError{Status: http.StatusInternalServerError, Type: typeServer, Code: "model_error", Message: err.Error()}
	default:
		return &apiError{Status: http.StatusInternalServerError, Type: typeServer, Code: "internal", Message: err.Error()}
	}
}

// errorOf is toAPIError for a request whose context is ctx: one ended by
// the host's drain timeout is answered 503 draining, not taken for a
// client that went away.
func (h *handler) errorOf(ctx context.Context, err error) *apiError {
	if server.DrainTimedOut(ctx) {
		return &apiError{Status: http.StatusServiceUnavailable, Type: typeUnavailable, Code: "draining",
			Message: "the server's drain timeout passed before this request finished", RetryAfter: 1}
	}
	return h.toAPIError(err)
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

// fromHost is an error of the host's in OpenAI's shape.
func fromHost(e *server.Error) *apiError {
	typ := typeInvalid
	switch {
	case e.Status == http.StatusTooManyRequests:
		typ = typeRateLimit
	case e.Status == http.StatusServiceUnavailable:
		typ = typeUnavailable
	case e.Status == http.StatusGatewayTimeout:
		typ = typeTimeout
	case e.Status >= 500:
		typ = typeServer
	}
	return &apiError{Status: e.Status, Type: typ, Code: e.Code, Message: e.Message, RetryAfter: e.RetryAfter}
}

// writeError answers with e as {"error": {"message", "type", "param", "code"}}.
func writeError(w http.ResponseWriter, e *apiError) {
	server.WriteErrorJSON(w, e.Status, e.RetryAfter, errorBody{e})
}

type errorBody struct {
	Error *apiError `json:"error"`
}
