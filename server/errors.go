package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// Error is an error with its HTTP answer: what the host's own answers and
// its body reader return, and what services answer with in the host's shape,
// {"error": {"code": "...", "message": "..."}}. A service whose API has
// another shape (OpenAI's, KServe's) writes its own body with
// WriteErrorJSON.
type Error struct {
	Status     int    `json:"-"`
	Code       string `json:"code"`
	Message    string `json:"message"`
	RetryAfter int    `json:"-"` // seconds; sent as Retry-After when positive
}

func (e *Error) Error() string { return e.Message }

// Errorf returns an Error of status and code with a formatted message.
// Messages are for clients: they never quote a network error (which names
// addresses) or a stack.
func Errorf(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// StatusClientClosed is counted and logged, never sent: the client went
// away before its answer (nginx's 499).
const StatusClientClosed = 499

// WriteError answers with e in the host's shape.
func WriteError(w http.ResponseWriter, e *Error) {
	WriteErrorJSON(w, e.Status, e.RetryAfter, struct {
		Error *Error `json:"error"`
	}{e})
}

// WriteErrorJSON answers an error with body, an API's own error shape: for
// StatusClientClosed nothing (nobody is there to read it), else a
// Retry-After header when retryAfter > 0 and body as JSON.
func WriteErrorJSON(w http.ResponseWriter, status, retryAfter int, body any) {
	if status == StatusClientClosed {
		return
	}
	if retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	}
	WriteJSON(w, status, body)
}

// WriteJSON answers with status and v as JSON, with its Content-Length. A
// value that cannot be encoded is answered 500 in the host's error shape.
func WriteJSON(w http.ResponseWriter, status int, v any) {
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
