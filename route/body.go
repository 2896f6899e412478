package route

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
)

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// readBody reads the whole body, at most limit bytes, into a pooled buffer
// the caller returns to bufPool. Its errors are the encoder API's: 413 past
// the limit, 408 for a body that does not arrive in time, 400 otherwise,
// never quoting a network error (which names addresses).
func readBody(r *http.Request, limit int64) (*bytes.Buffer, *apiError) {
	if r.ContentLength > limit {
		return nil, tooLarge(limit)
	}
	buf := bufPool.Get().(*bytes.Buffer)
	buf.Reset()
	_, err := buf.ReadFrom(io.LimitReader(r.Body, limit+1))
	switch {
	case err != nil:
		bufPool.Put(buf)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, newError(http.StatusRequestTimeout, "body_timeout", "the body did not arrive in time")
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, newError(http.StatusBadRequest, "bad_body", "the body ended early")
		}
		return nil, newError(http.StatusBadRequest, "bad_body", "the body could not be read (malformed chunked encoding, or the connection broke)")
	case int64(buf.Len()) > limit:
		bufPool.Put(buf)
		return nil, tooLarge(limit)
	}
	return buf, nil
}

func tooLarge(limit int64) *apiError {
	return newError(http.StatusRequestEntityTooLarge, "body_too_large", "request body exceeds %d bytes", limit)
}

// bodyFields are the parts of a JSON body the pickers read.
type bodyFields struct {
	Prompt   json.RawMessage `json:"prompt"`   // OpenAI completions
	Messages json.RawMessage `json:"messages"` // OpenAI chat
	Input    json.RawMessage `json:"input"`    // OpenAI embeddings
	Inputs   json.RawMessage `json:"inputs"`   // infer's encoder API
}

// promptOf returns the prompt of a request body as sent: the JSON text of
// its messages, prompt, input or inputs (the first present), or for a body
// that is not a JSON object, the body itself. Two requests that share a
// conversation's beginning share the beginning of this text.
func promptOf(body []byte) []byte {
	t := bytes.TrimLeft(body, " \t\r\n\xef\xbb\xbf")
	if len(t) == 0 || t[0] != '{' {
		return body
	}
	var f bodyFields
	if json.Unmarshal(t, &f) != nil {
		return nil // the replica will refuse it
	}
	for _, p := range []json.RawMessage{f.Messages, f.Prompt, f.Input, f.Inputs} {
		if len(p) > 0 {
			return p
		}
	}
	return nil
}

// fieldOf returns the value at path in a JSON body: a string's text, or
// the JSON text of any other value; "" when absent.
func fieldOf(body []byte, path []string) string {
	raw := json.RawMessage(body)
	for _, k := range path {
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) != nil {
			return ""
		}
		if raw = obj[k]; raw == nil {
			return ""
		}
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	if v := bytes.TrimSpace(raw); !bytes.Equal(v, []byte("null")) {
		return string(v)
	}
	return ""
}
