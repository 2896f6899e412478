package route

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// apiError is an answer the router gives itself. It is written in OpenAI's
// error shape, {"error": {"message", "type", "param", "code"}}, which also
// carries the "code" and "message" that infer's encoder API answers with,
// so clients of either API read it. This file is the one place where the
// router's errors become statuses:
//
//	400 a malformed X-Request-Timeout or body · 404 no such path
//	405 method · 408 the body did not arrive in time · 413 body too large
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

// statusClientClosed is counted, never sent: the client is gone.
const statusClientClosed = 499

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
		body = []byte(`{"error":{"message":"cannot encode response","type":"server_error","param":null,"code":"internal"}}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
}

// errorEvent is the end of a stream that broke off: an OpenAI error event,
// then [DONE], so that a client sees why it ended.
func errorEvent(e *apiError) []byte {
	body, _ := json.Marshal(struct {
		Error *apiError `json:"error"`
	}{e})
	b := make([]byte, 0, len(body)+32)
	b = append(b, "data: "...)
	b = append(b, body...)
	return append(b, "\n\ndata: [DONE]\n\n"...)
}
