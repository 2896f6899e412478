package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strconv"
	"strings"
)

// Go's JSON decoder matches field names without regard to case and lets a
// repeated key win over the first. The API is as strict as the encoder's:
// a key that differs from a known field only by case (PROMPT) is refused,
// and so is a known field given twice; other unknown fields are ignored,
// as OpenAI-compatible servers do. Objects inside "messages" and
// "stream_options" are checked too.

var (
	requestKeys = jsonKeys(reflect.TypeFor[request]())
	messageKeys = jsonKeys(reflect.TypeFor[message]())
	optionKeys  = []string{"include_usage"}
)

// jsonKeys are the JSON names of struct type t's fields.
func jsonKeys(t reflect.Type) []string {
	var keys []string
	for f := range t.Fields() {
		if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" {
			keys = append(keys, name)
		}
	}
	return keys
}

// checkKeys refuses a body whose keys break the rules above. A body that
// is not as expected (not JSON, not an object, "messages" not an array)
// passes: the decoder says what is wrong with it.
func checkKeys(body []byte) error {
	err := checkObject(json.NewDecoder(bytes.NewReader(body)), "", requestKeys)
	if err == errUnchecked {
		return nil
	}
	return err
}

// errUnchecked stops the check where the body is not as expected.
var errUnchecked = errors.New("not checked")

// checkObject checks the object dec is at against known, and the objects
// nested in "messages" and "stream_options".
func checkObject(dec *json.Decoder, path string, known []string) error {
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return errUnchecked
	}
	seen := make(map[string]bool, len(known))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return errUnchecked
		}
		key, _ := tok.(string)
		for _, k := range known {
			switch {
			case key == k && seen[k]:
				return invalid(http.StatusBadRequest, path+key, "duplicate_field", "field %q appears twice", path+key)
			case key == k:
				seen[k] = true
			case strings.EqualFold(key, k):
				return invalid(http.StatusUnprocessableEntity, path+key, "unknown_field", "unknown field %q: field names are case-sensitive; did you mean %q?", path+key, path+k)
			}
		}
		var err2 error
		switch {
		case path == "" && key == "messages":
			err2 = checkArray(dec, "messages")
		case path == "" && key == "stream_options":
			err2 = checkObject(dec, "stream_options.", optionKeys)
		default:
			var skip json.RawMessage
			if dec.Decode(&skip) != nil {
				return errUnchecked
			}
		}
		if err2 != nil {
			return err2
		}
	}
	return nil
}

// checkArray checks each message object of the array dec is at.
func checkArray(dec *json.Decoder, name string) error {
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return errUnchecked
	}
	for i := 0; dec.More(); i++ {
		var raw json.RawMessage
		if dec.Decode(&raw) != nil {
			return errUnchecked
		}
		err := checkObject(json.NewDecoder(bytes.NewReader(raw)), name+"["+strconv.Itoa(i)+"].", messageKeys)
		if err != nil && err != errUnchecked {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing bracket
		return errUnchecked
	}
	return nil
}
