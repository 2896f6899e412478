package route

import (
	"bytes"
	"encoding/json"
)

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
