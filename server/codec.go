package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"
)

// The bodies accepted by /naive and /batched:
//
//	application/json                   {"inputs": ["text", ...]} (or one string)
//	text/plain                         the body is one item
//	application/x-www-form-urlencoded  repeated s= fields; a body without any
//	                                   s= field is one item, as `curl -d 'text'`
//	                                   sends it
//
// Without a Content-Type, a body that starts with '{' is JSON, else text.

// decodeItems returns the items of an inference request body.
func decodeItems(contentType string, body []byte) ([]string, error) {
	mt := ""
	if contentType != "" {
		var err error
		if mt, _, err = mime.ParseMediaType(contentType); err != nil {
			return nil, errorf(http.StatusBadRequest, "bad_content_type", "malformed Content-Type %q", contentType)
		}
	}
	switch {
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		return decodeJSON(body)
	case mt == "application/x-www-form-urlencoded":
		return decodeForm(body)
	case mt == "text/plain":
		return decodeText(body)
	case mt == "":
		if t := bytes.TrimLeft(body, " \t\r\n"); len(t) > 0 && t[0] == '{' {
			return decodeJSON(body)
		}
		return decodeText(body)
	default:
		return nil, errorf(http.StatusUnsupportedMediaType, "unsupported_media_type",
			"unsupported Content-Type %q: send application/json, text/plain or application/x-www-form-urlencoded", mt)
	}
}

func decodeJSON(body []byte) ([]string, error) {
	var req struct {
		Inputs json.RawMessage `json:"inputs"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, errorf(http.StatusUnprocessableEntity, "invalid_body", `body must be a JSON object like {"inputs": ["text", ...]}`)
		}
		return nil, errorf(http.StatusBadRequest, "malformed_json", "malformed JSON: %v", err)
	}
	raw := bytes.TrimSpace(req.Inputs)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, errorf(http.StatusUnprocessableEntity, "missing_inputs", `body has no "inputs": send {"inputs": ["text", ...]}`)
	}
	var items []string
	switch raw[0] {
	case '"':
		var one string
		if err := json.Unmarshal(raw, &one); err != nil {
			return nil, errorf(http.StatusBadRequest, "malformed_json", "malformed JSON: %v", err)
		}
		items = []string{one}
	case '[':
		if err := json.Unmarshal(raw, &items); err != nil {
			return nil, errorf(http.StatusUnprocessableEntity, "invalid_inputs", "%s", describeNonString(raw))
		}
	default:
		return nil, errorf(http.StatusUnprocessableEntity, "invalid_inputs", `"inputs" must be an array of strings`)
	}
	return items, checkItems(items)
}

// describeNonString names the first item of a JSON array that is not a string.
func describeNonString(raw []byte) string {
	var elems []json.RawMessage
	if json.Unmarshal(raw, &elems) == nil {
		for i, e := range elems {
			if len(e) > 0 && e[0] != '"' {
				return fmt.Sprintf(`"inputs" must be an array of strings: item %d is %s`, i, jsonKind(e[0]))
			}
		}
	}
	return `"inputs" must be an array of strings`
}

func jsonKind(c byte) string {
	switch c {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}

func decodeForm(body []byte) ([]string, error) {
	if !utf8.Valid(body) {
		return nil, errorf(http.StatusBadRequest, "bad_encoding", "body is not valid UTF-8")
	}
	vals, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, errorf(http.StatusBadRequest, "malformed_form", "malformed form body: %v", err)
	}
	items, ok := vals["s"]
	if !ok {
		return decodeText(body)
	}
	return items, checkItems(items)
}

func decodeText(body []byte) ([]string, error) {
	if !utf8.Valid(body) {
		return nil, errorf(http.StatusBadRequest, "bad_encoding", "body is not valid UTF-8")
	}
	items := []string{strings.TrimSpace(string(body))}
	return items, checkItems(items)
}

func checkItems(items []string) error {
	if len(items) == 0 {
		return errorf(http.StatusUnprocessableEntity, "no_inputs", "request has no items")
	}
	for i, s := range items {
		if strings.TrimSpace(s) == "" {
			return errorf(http.StatusUnprocessableEntity, "empty_input", "item %d is empty", i)
		}
	}
	return nil
}
