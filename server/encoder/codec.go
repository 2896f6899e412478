package encoder

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/inferhq/infer/server"
)

// The bodies accepted by /naive and /batched, decided by what they are:
//
//	JSON   {"inputs": ["text", ...]} (or one string): with a JSON
//	       Content-Type, and for any body whose first character is '{'
//	       (curl -d sends JSON as a form; a UTF-8 byte order mark is ignored)
//	form   repeated s= fields: with the form Content-Type, when the body
//	       parses as a form and holds s=
//	text   anything else with the form Content-Type or none (what curl -d
//	       'text' sends, semicolons and % signs included), and text/plain:
//	       the body is one item
//
// JSON is strict: one object, the key "inputs" exactly once, spelled so,
// nothing else, nothing after it. Every item must be valid UTF-8 without NUL
// characters: invalid bytes, NUL and unpaired surrogate escapes (\ud800) are
// refused with 400 rather than silently replaced with U+FFFD.

// utf8BOM is the byte order mark some tools put before JSON.
var utf8BOM = []byte("\xef\xbb\xbf")

// decodeItems returns the items of an inference request body.
func decodeItems(contentType string, body []byte) ([]string, error) {
	mt := ""
	if contentType != "" {
		var err error
		if mt, _, err = mime.ParseMediaType(contentType); err != nil {
			return nil, server.Errorf(http.StatusBadRequest, "bad_content_type", "malformed Content-Type %q", contentType)
		}
	}
	switch {
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		return decodeJSON(body)
	case mt == "text/plain":
		return decodeText(body)
	case mt == "application/x-www-form-urlencoded" || mt == "":
		if looksJSON(body) {
			return decodeJSON(body)
		}
		if mt != "" {
			if items, ok := formItems(body); ok {
				return items, checkItems(items)
			}
		}
		return decodeText(body)
	default:
		return nil, server.Errorf(http.StatusUnsupportedMediaType, "unsupported_media_type",
			"unsupported Content-Type %q: send application/json, text/plain or application/x-www-form-urlencoded", mt)
	}
}

// looksJSON reports whether body starts as a JSON object.
func looksJSON(body []byte) bool {
	t := bytes.TrimLeft(bytes.TrimPrefix(body, utf8BOM), " \t\r\n")
	return len(t) > 0 && t[0] == '{'
}

// formItems returns the s= fields of a body that parses as a form.
func formItems(body []byte) ([]string, bool) {
	vals, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, false
	}
	items, ok := vals["s"]
	return items, ok
}

func decodeJSON(body []byte) ([]string, error) {
	body = bytes.TrimPrefix(body, utf8BOM)
	if err := checkJSONText(body); err != nil {
		return nil, err
	}
	fields, err := strictObject(body, "inputs")
	if err != nil {
		return nil, err
	}
	raw := bytes.TrimSpace(fields["inputs"])
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, server.Errorf(http.StatusUnprocessableEntity, "missing_inputs", `body has no "inputs": send {"inputs": ["text", ...]}`)
	}
	var items []string
	switch raw[0] {
	case '"':
		var one string
		if err := json.Unmarshal(raw, &one); err != nil {
			return nil, server.Errorf(http.StatusBadRequest, "malformed_json", "malformed JSON: %v", err)
		}
		items = []string{one}
	case '[':
		if err := json.Unmarshal(raw, &items); err != nil {
			return nil, server.Errorf(http.StatusUnprocessableEntity, "invalid_inputs", "%s", describeNonString(raw))
		}
	default:
		return nil, server.Errorf(http.StatusUnprocessableEntity, "invalid_inputs", `"inputs" must be an array of strings`)
	}
	return items, checkItems(items)
}

// strictObject reads body as exactly one JSON object whose keys are among
// known, each at most once and spelled exactly so, and returns their values.
func strictObject(body []byte, known ...string) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	tok, err := dec.Token()
	if err != nil {
		return nil, malformed(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, server.Errorf(http.StatusUnprocessableEntity, "invalid_body", "body must be a JSON object with the fields %s", quoteAll(known))
	}
	fields := make(map[string]json.RawMessage, len(known))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, malformed(err)
		}
		key := tok.(string) // an object's tokens alternate key, value
		if err := checkKey(key, fields, known); err != nil {
			return nil, err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, malformed(err)
		}
		fields[key] = v
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, malformed(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, server.Errorf(http.StatusBadRequest, "malformed_json", "malformed JSON: data after the object")
	}
	return fields, nil
}

// checkKey refuses a key that is unknown, a case variant of a known one, or
// seen before.
func checkKey(key string, seen map[string]json.RawMessage, known []string) error {
	for _, k := range known {
		switch {
		case key == k:
			if _, dup := seen[key]; dup {
				return server.Errorf(http.StatusBadRequest, "duplicate_field", "field %q appears twice", key)
			}
			return nil
		case strings.EqualFold(key, k):
			return server.Errorf(http.StatusUnprocessableEntity, "unknown_field", "unknown field %q: field names are case-sensitive; did you mean %q?", key, k)
		}
	}
	return server.Errorf(http.StatusUnprocessableEntity, "unknown_field", "unknown field %q: want %s", key, quoteAll(known))
}

func quoteAll(ks []string) string {
	q := make([]string, len(ks))
	for i, k := range ks {
		q[i] = fmt.Sprintf("%q", k)
	}
	return strings.Join(q, ", ")
}

func malformed(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return server.Errorf(http.StatusBadRequest, "malformed_json", "malformed JSON: unexpected end of the body")
	}
	return server.Errorf(http.StatusBadRequest, "malformed_json", "malformed JSON: %v", err)
}

// checkJSONText refuses JSON whose strings would not decode to the text
// sent: invalid UTF-8, \u0000, and surrogate escapes that do not pair
// (encoding/json would turn those into U+FFFD).
func checkJSONText(body []byte) error {
	if !utf8.Valid(body) {
		return server.Errorf(http.StatusBadRequest, "bad_encoding", "body is not valid UTF-8")
	}
	inString := false
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch {
		case !inString:
			inString = c == '"'
		case c == '"':
			inString = false
		case c == '\\' && i+1 < len(body):
			i++
			if body[i] != 'u' {
				continue
			}
			r, ok := hex4(body[i+1:])
			if !ok {
				continue // malformed: the decoder says so
			}
			i += 4
			switch {
			case r == 0:
				return server.Errorf(http.StatusBadRequest, "bad_encoding", `a string holds \u0000 (NUL)`)
			case r >= 0xdc00 && r <= 0xdfff:
				return server.Errorf(http.StatusBadRequest, "bad_encoding", `a string holds an unpaired surrogate \u%04x`, r)
			case r >= 0xd800 && r <= 0xdbff:
				if i+2 < len(body) && body[i+1] == '\\' && body[i+2] == 'u' {
					if lo, ok := hex4(body[i+3:]); ok && lo >= 0xdc00 && lo <= 0xdfff {
						i += 6
						continue
					}
				}
				return server.Errorf(http.StatusBadRequest, "bad_encoding", `a string holds an unpaired surrogate \u%04x`, r)
			}
		}
	}
	return nil
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
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

func decodeText(body []byte) ([]string, error) {
	items := []string{strings.TrimSpace(string(body))}
	return items, checkItems(items)
}

// checkItems refuses items that are empty (422), or not valid UTF-8 or hold
// NUL (400).
func checkItems(items []string) error {
	if len(items) == 0 {
		return server.Errorf(http.StatusUnprocessableEntity, "no_inputs", "request has no items")
	}
	for i, s := range items {
		switch {
		case !utf8.ValidString(s):
			return server.Errorf(http.StatusBadRequest, "bad_encoding", "item %d is not valid UTF-8", i)
		case strings.IndexByte(s, 0) >= 0:
			return server.Errorf(http.StatusBadRequest, "bad_encoding", "item %d holds a NUL character", i)
		case strings.TrimSpace(s) == "":
			return server.Errorf(http.StatusUnprocessableEntity, "empty_input", "item %d is empty", i)
		}
	}
	return nil
}
