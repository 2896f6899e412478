package encoder

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/inferhq/infer/server"
)

// The fuzz targets of the encoder's decoders. Seeds are in
// testdata/fuzz/<target>; `make fuzz` runs each for a while.

// asAPIError fails unless err is a client error of the documented shape.
func asAPIError(t *testing.T, err error) *server.Error {
	t.Helper()
	var ae *server.Error
	if !errors.As(err, &ae) {
		t.Fatalf("error %v (%T) is not a *server.Error", err, err)
	}
	if ae.Status < 400 || ae.Status >= 500 || ae.Code == "" || ae.Message == "" {
		t.Fatalf("error %+v: want a 4xx with a code and a message", ae)
	}
	return ae
}

func checkDecoded(t *testing.T, items []string) {
	t.Helper()
	if len(items) == 0 {
		t.Fatal("no items and no error")
	}
	for i, s := range items {
		if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 || strings.TrimSpace(s) == "" {
			t.Fatalf("item %d %q: invalid, empty or with NUL, yet accepted", i, s)
		}
	}
}

func FuzzDecodeItems(f *testing.F) {
	for _, ct := range []string{"application/json", "text/plain", "application/x-www-form-urlencoded", "", "application/xml"} {
		for _, body := range []string{`{"inputs": ["a", "b"]}`, `{"inputs": "a"}`, "s=a&s=b", "Paris; the [MASK].", "100% sure", "\ufeff{\"inputs\": [\"x\"]}", `{"inputs": ["\ud800"]}`} {
			f.Add(ct, []byte(body))
		}
	}
	f.Fuzz(func(t *testing.T, contentType string, body []byte) {
		items, err := decodeItems(contentType, body)
		if err != nil {
			asAPIError(t, err)
			return
		}
		checkDecoded(t, items)
		// Round trip: the items sent back as JSON decode to themselves.
		again, err := decodeItems("application/json", mustJSON(t, map[string][]string{"inputs": items}))
		if err != nil || !slices.Equal(again, items) {
			t.Fatalf("round trip of %q: %q, %v", items, again, err)
		}
	})
}

func FuzzDecodeV2(f *testing.F) {
	for _, body := range []string{
		`{"id": "1", "inputs": [{"name": "text", "shape": [2, 1], "datatype": "BYTES", "data": [["a"], ["b"]]}]}`,
		`{"inputs": [{"name": "t", "shape": [2], "datatype": "BYTES", "data": ["a", "b"]}]}`,
		`{"inputs": [{"name": "text", "shape": [-1, -1], "datatype": "BYTES", "data": ["a"]}]}`,
		`{"inputs": [{"name": "text", "shape": [9223372036854775807, 2], "datatype": "BYTES", "data": ["a", "b"]}]}`,
		`{"inputs": [{"name": "text", "shape": [2, 2], "datatype": "BYTES", "data": [["a", "b", "c"], ["d"]]}]}`,
	} {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		items, id, err := decodeV2(body)
		if err != nil {
			asAPIError(t, err)
			return
		}
		checkDecoded(t, items)
		req := map[string]any{"id": id, "inputs": []map[string]any{{"name": "text", "shape": []int{len(items)}, "datatype": "BYTES", "data": items}}}
		again, againID, err := decodeV2(mustJSON(t, req))
		if err != nil || againID != id || !slices.Equal(again, items) {
			t.Fatalf("round trip of %q (id %q): %q (id %q), %v", items, id, again, againID, err)
		}
	})
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(fmt.Errorf("encode %v: %w", v, err))
	}
	return b
}
