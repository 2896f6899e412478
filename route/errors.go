package route

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/inferhq/infer/server"
)

// apiError is an answer the router gives itself. It is written in OpenAI's
// error shape, {"error": {"message", "type", "param", "code"}}, which also
// carries the "code" and "message" that infer's encoder API answers with,
// so clients of either API read it. This file is the one place where the
// router's errors become statuses:
//
//	400 a malformed X-Request-Timeout or body · 405 method · 408 the body
//	did not arrive in time · 413 body too large (these three the host's
//	Limits decide)
//	502 the replica failed before answering · 503 no replica ready, or
//	draining · 504 the deadline passed before the answer
type apiError struct {
	Status     int     `json:"-"`
	Message    string  `json:"message"`
	Type       string  `json:"type"`
	Param      *string `json:"param"`
	Code       string  `json:"code"`
	RetryAfter int     `json:"-"`
}

func (e *apiError) Error() string { return e.Message }

func newError(status int, code, format string, args ...any) *apiError {
	typ := "invalid_request_error"
	switch {
	case status == http.StatusServiceUnavailable:
		typ = "service_unavailable"
	case status == http.StatusGatewayTimeout:
		typ = "timeout"
	case status >= 500:
		typ = "server_error"
	}
	e := &apiError{Status: status, Type: typ, Code: code, Message: fmt.Sprintf(format, args...)}
	if status == http.StatusServiceUnavailable {
		e.RetryAfter = 1
	}
	return e
}

// writeError answers with e in OpenAI's error shape, through the host's
// writer (nothing for a client that left, Retry-After when set).
func writeError(w http.ResponseWriter, e *apiError) {
	server.WriteErrorJSON(w, e.Status, e.RetryAfter, errorBody{e})
}

type errorBody struct {
	Error *apiError `json:"error"`
}

// fromHost is an error of the host's body reader or deadline parser (a
// *server.Error) in the router's shape.
func fromHost(err error) *apiError {
	var se *server.Error
	if !errors.As(err, &se) {
		return newError(http.StatusBadRequest, "bad_request", "%v", err)
	}
	e := newError(se.Status, se.Code, "%s", se.Message)
	e.RetryAfter = max(e.RetryAfter, se.RetryAfter)
	return e
}

// errorEvent is the end of a stream that broke off: an OpenAI error event,
// then [DONE], so that a client sees why it ended.
func errorEvent(e *apiError) []byte {
	body, _ := json.Marshal(errorBody{e})
	b := make([]byte, 0, len(body)+32)
	b = append(b, "data: "...)
	b = append(b, body...)
	return append(b, "\n\ndata: [DONE]\n\n"...)
}
