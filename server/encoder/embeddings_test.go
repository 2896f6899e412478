package encoder_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/server"
	"github.com/inferhq/infer/server/batch"
	"github.com/inferhq/infer/server/encoder"
	"github.com/inferhq/infer/server/servertest"
)

// vectors is an embedding model: an item's tokens are its words (at most
// maxLen, longer items refused), its vector is a function of its text of
// dims values. It records the size of every batch.
type vectors struct {
	dims, maxLen int

	mu    sync.Mutex
	sizes []int
}

func (v *vectors) Info() models.Info {
	return models.Info{Name: "vec", Task: models.TaskEmbed, Backend: "test"}
}

func (v *vectors) Prepare(s string) (models.Input, error) {
	words := strings.Fields(s)
	if len(words) > v.maxLen {
		return models.Input{}, fmt.Errorf("%w: %d tokens, more than %d", models.ErrInputTooLong, len(words), v.maxLen)
	}
	return models.Input{Text: s, Tokens: make([]int32, len(words))}, nil
}

func (v *vectors) New(context.Context, int) (models.Model, error) { return vectorsInstance{v}, nil }
func (v *vectors) Close() error                                   { return nil }

func (v *vectors) batchSizes() []int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]int(nil), v.sizes...)
}

// vectorOf is the vector of text.
func (v *vectors) vectorOf(text string) []float32 {
	h := fnv.New64a()
	h.Write([]byte(text))
	x := h.Sum64()
	out := make([]float32, v.dims)
	for i := range out {
		out[i] = float32(int64(x>>(i%8*8))&0xff-128) / 128
	}
	return out
}

type vectorsInstance struct{ v *vectors }

func (m vectorsInstance) Close() error { return nil }

func (m vectorsInstance) Predict(_ context.Context, in []models.Input, out []models.Output) error {
	if in[0].Text != warmText {
		m.v.mu.Lock()
		m.v.sizes = append(m.v.sizes, len(in))
		m.v.mu.Unlock()
	}
	time.Sleep(time.Millisecond) // a batch takes time: in a bubble, concurrent requests meet
	for i, x := range in {
		out[i] = m.v.vectorOf(x.Text)
	}
	return nil
}

// TestEmbeddings: /v1/embeddings and /naive/v1/embeddings answer OpenAI's
// shape: one vector per input in order, as floats or base64, the model's
// name and the tokens; the inputs of one request run in one batch.
func TestEmbeddings(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &vectors{dims: 6, maxLen: 8}
		ts := start(t, encoder.Config{Batch: batch.Config{MaxBatch: 8, MaxLatency: 10 * time.Millisecond}}, m)
		for _, path := range []string{"/v1/embeddings", "/naive/v1/embeddings"} {
			r := do(t, ts, "POST", path, "application/json",
				`{"input": ["one two", "three", "four five six"], "model": "vec", "encoding_format": "float", "user": "u1", "dimensions": 6}`)
			if r.status != http.StatusOK {
				t.Fatalf("POST %s = %d %s", path, r.status, r.raw)
			}
			if r.body["object"] != "list" || r.body["model"] != "vec" {
				t.Errorf("POST %s = %s", path, r.raw)
			}
			usage := r.body["usage"].(map[string]any)
			if usage["prompt_tokens"] != 6.0 || usage["total_tokens"] != 6.0 {
				t.Errorf("POST %s: usage %v, want 6 prompt and total tokens", path, usage)
			}
			data := r.body["data"].([]any)
			for i, text := range []string{"one two", "three", "four five six"} {
				d := data[i].(map[string]any)
				want := m.vectorOf(text)
				got := d["embedding"].([]any)
				if d["object"] != "embedding" || d["index"] != float64(i) || len(got) != len(want) {
					t.Fatalf("data[%d] = %v", i, d)
				}
				for k := range want {
					if float32(got[k].(float64)) != want[k] {
						t.Errorf("data[%d][%d] = %v, want %v", i, k, got[k], want[k])
					}
				}
			}
			if st := r.header.Get("Server-Timing"); !strings.Contains(st, "batch;desc=3") {
				t.Errorf("POST %s: Server-Timing %q, want the three inputs in one batch", path, st)
			}
		}

		// base64: the float32 values little-endian; a single string input.
		r := do(t, ts, "POST", "/v1/embeddings", "", `{"input": "seven eight", "encoding_format": "base64"}`)
		data, _ := r.body["data"].([]any)
		if r.status != http.StatusOK || len(data) != 1 {
			t.Fatalf("base64: %d %s", r.status, r.raw)
		}
		b, err := base64.StdEncoding.DecodeString(data[0].(map[string]any)["embedding"].(string))
		if err != nil || len(b) != 4*6 {
			t.Fatalf("base64 embedding: %d bytes, %v", len(b), err)
		}
		for k, want := range m.vectorOf("seven eight") {
			if got := math.Float32frombits(binary.LittleEndian.Uint32(b[4*k:])); got != want {
				t.Errorf("base64 value %d = %v, want %v", k, got, want)
			}
		}
		if got := metric(t, ts, `infer_requests_total{code="200",endpoint="embeddings"}`); got != 2 {
			t.Errorf("embeddings requests counted %v, want 2", got)
		}
		if got := metric(t, ts, `infer_requests_total{code="200",endpoint="naive_embeddings"}`); got != 1 {
			t.Errorf("naive embeddings requests counted %v, want 1", got)
		}
	})
}

// TestEmbeddingsBatchesRequests: concurrent requests of several inputs
// share batches, as /batched's items do.
func TestEmbeddingsBatchesRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &vectors{dims: 4, maxLen: 8}
		ts := start(t, encoder.Config{Batch: batch.Config{MaxBatch: 16, MaxLatency: 10 * time.Millisecond, Policy: batch.Fixed}}, m)
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Go(func() {
				r := do(t, ts, "POST", "/v1/embeddings", "", fmt.Sprintf(`{"input": ["a %d", "b %d", "c %d", "d %d"]}`, i, i, i, i))
				if r.status != http.StatusOK {
					t.Errorf("request %d: %d %s", i, r.status, r.raw)
				}
			})
		}
		wg.Wait()
		if got := m.batchSizes(); len(got) != 1 || got[0] != 16 {
			t.Errorf("batch sizes %v, want the 16 inputs of 4 requests in one batch", got)
		}
	})
}

// TestEmbeddingsBadRequests: every refusal names what is wrong, in
// OpenAI's error shape with the field it is about, and the server goes on.
func TestEmbeddingsBadRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &vectors{dims: 4, maxLen: 6} // the warm-up text has 6 words
		ts := start(t, encoder.Config{MaxItems: 4}, m)
		for _, tc := range []struct {
			body        string
			status      int
			code, param string
			msg         string
		}{
			{`{"input": []}`, 422, "empty_input", "input", "empty array"},
			{`{"input": ""}`, 422, "empty_input", "input", "item 0 is empty"},
			{`{"input": ["ok", "  "]}`, 422, "empty_input", "input", "item 1 is empty"},
			{`{}`, 422, "missing_input", "input", `no "input"`},
			{`{"input": null}`, 422, "missing_input", "input", `no "input"`},
			{`{"input": ["a", "b", "c", "d", "e"]}`, 422, "too_many_items", "input", "the limit is 4"},
			{`{"input": "one two three four five six seven"}`, 413, "input_too_long", "input", "more than 6"},
			{`{"input": [[1, 2, 3]]}`, 422, "invalid_input", "input", "token arrays are not accepted"},
			{`{"input": [1, 2]}`, 422, "invalid_input", "input", "array of strings"},
			{`{"input": 7}`, 422, "invalid_input", "input", "string or an array"},
			{`{"input": "a", "model": "gpt-4"}`, 404, "model_not_found", "model", `serves "vec"`},
			{`{"input": "a", "model": 1}`, 422, "invalid_model", "model", "must be a string"},
			{`{"input": "a", "encoding_format": "int8"}`, 422, "invalid_encoding_format", "encoding_format", `"float" or "base64"`},
			{`{"input": "a", "dimensions": 2}`, 422, "invalid_dimensions", "dimensions", "vectors of 4 dimensions"},
			{`{"input": "a", "dimensions": "4"}`, 422, "invalid_dimensions", "dimensions", "whole number"},
			{`{"input": "a", "user": 5}`, 422, "invalid_user", "user", "must be a string"},
			{`{"input": "a", "Input": "b"}`, 422, "unknown_field", "", "case-sensitive"},
			{`{"input": "a", "temperature": 1}`, 422, "unknown_field", "", `want "input", "model"`},
			{`{"input": "a", "input": "b"}`, 400, "duplicate_field", "", "appears twice"},
			{`{"input": "a"} {}`, 400, "malformed_json", "", "data after the object"},
			{`{"input": "a`, 400, "malformed_json", "", "unexpected end"},
			{`["a"]`, 422, "invalid_body", "", "JSON object"},
			{`{"input": "\u0000"}`, 400, "bad_encoding", "input", "NUL"},
			{"{\"input\": \"\xff\"}", 400, "bad_encoding", "input", "not valid UTF-8"},
		} {
			r := do(t, ts, "POST", "/v1/embeddings", "application/json", tc.body)
			e, _ := r.body["error"].(map[string]any)
			param, _ := e["param"].(string)
			msg, _ := e["message"].(string)
			if r.status != tc.status || e["code"] != tc.code || param != tc.param || e["type"] != "invalid_request_error" ||
				!strings.Contains(msg, tc.msg) {
				t.Errorf("POST %.50s = %d %s; want %d %s (param %q) saying %q", tc.body, r.status, r.raw, tc.status, tc.code, tc.param, tc.msg)
			}
		}
		if r := do(t, ts, "GET", "/v1/embeddings", "", ""); r.status != http.StatusMethodNotAllowed {
			t.Errorf("GET /v1/embeddings = %d, want 405", r.status)
		}
		if r := do(t, ts, "POST", "/v1/embeddings", "", `{"input": "still fine"}`); r.status != http.StatusOK {
			t.Errorf("after the refusals: %d %s", r.status, r.raw)
		}
	})
}

// TestEmbeddingsCacheCountsTokens: an input answered from the result
// cache counts its tokens as a computed one does.
func TestEmbeddingsCacheCountsTokens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &vectors{dims: 4, maxLen: 8}
		ts := start(t, encoder.Config{CacheSize: 16}, m)
		for range 2 {
			r := do(t, ts, "POST", "/v1/embeddings", "", `{"input": ["one two", "three four five"]}`)
			if u, _ := r.body["usage"].(map[string]any); r.status != http.StatusOK || u["prompt_tokens"] != 5.0 {
				t.Errorf("POST: %d %s, want 5 prompt tokens", r.status, r.raw)
			}
		}
		if got := m.batchSizes(); len(got) != 1 {
			t.Errorf("batches %v, want the second request answered from the cache", got)
		}
	})
}

// TestEmbeddingsOnlyForVectors: a model whose outputs are not vectors has
// no embeddings API.
func TestEmbeddingsOnlyForVectors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := start(t, encoder.Config{}, newGated())
		if r := do(t, ts, "POST", "/v1/embeddings", "", `{"input": "a"}`); r.status != http.StatusNotFound {
			t.Errorf("POST /v1/embeddings of a classifier = %d %s, want 404", r.status, r.raw)
		}
	})
}

// TestEmbeddingsOpenAIClient: OpenAI's own Go library reads the answers,
// floats and base64 alike, and its errors.
func TestEmbeddingsOpenAIClient(t *testing.T) {
	m := &vectors{dims: 8, maxLen: 16}
	ts := servertest.Start(t, server.Config{}, newService(t, encoder.Config{}, m))
	for _, base := range []string{"/v1", "/naive/v1"} {
		client := oai.NewClient(option.WithBaseURL(ts.URL+base), option.WithAPIKey("unused"), option.WithMaxRetries(0))
		texts := []string{"the first text", "a second one"}
		for _, format := range []oai.EmbeddingNewParamsEncodingFormat{oai.EmbeddingNewParamsEncodingFormatFloat, oai.EmbeddingNewParamsEncodingFormatBase64} {
			resp, err := client.Embeddings.New(context.Background(), oai.EmbeddingNewParams{
				Input:          oai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: texts},
				Model:          "vec",
				EncodingFormat: format,
			})
			if err != nil {
				t.Fatalf("%s %s: %v", base, format, err)
			}
			if resp.Model != "vec" || len(resp.Data) != 2 || resp.Usage.PromptTokens != 6 || resp.Usage.TotalTokens != 6 {
				t.Errorf("%s %s: %+v", base, format, resp)
			}
			for i, d := range resp.Data {
				want := m.vectorOf(texts[i])
				if d.Index != int64(i) || len(d.Embedding) != len(want) {
					t.Fatalf("%s %s: data[%d] index %d, %d values", base, format, i, d.Index, len(d.Embedding))
				}
				for k := range want {
					if float32(d.Embedding[k]) != want[k] {
						t.Errorf("%s %s: data[%d][%d] = %v, want %v", base, format, i, k, d.Embedding[k], want[k])
					}
				}
			}
		}
		_, err := client.Embeddings.New(context.Background(), oai.EmbeddingNewParams{
			Input: oai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{}}, Model: "vec"})
		var apiErr *oai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusUnprocessableEntity || apiErr.Code != "empty_input" || apiErr.Param != "input" {
			t.Errorf("%s: empty input: %v", base, err)
		}
	}
}

// FuzzEmbeddings sends arbitrary bodies to /v1/embeddings: every answer is
// a success with one vector per input or an error in OpenAI's shape, and
// nothing is a 500.
func FuzzEmbeddings(f *testing.F) {
	for _, body := range []string{
		`{"input": "a"}`, `{"input": ["a b", "c"], "encoding_format": "base64", "dimensions": 4, "model": "vec", "user": "u"}`,
		`{"input": []}`, `{"input": [[1]]}`, `{"input": "a", "dimensions": 1e400}`, `{"input": null, "model": null}`, "\xef\xbb\xbf{\"input\": \"a\"}",
	} {
		f.Add([]byte(body))
	}
	m := &vectors{dims: 4, maxLen: 8}
	h := servertest.Start(f, server.Config{MaxBody: 64 << 10}, newService(f, encoder.Config{MaxItems: 8}, m)).Handler()
	f.Fuzz(func(t *testing.T, body []byte) {
		r := httptest.NewRequest("POST", "/v1/embeddings", bytes.NewReader(body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		var resp struct {
			Data  []json.RawMessage `json:"data"`
			Error *struct {
				Message, Type, Code string
			} `json:"error"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
			t.Fatalf("%q: %d, not JSON: %q", body, rec.Code, rec.Body)
		}
		switch {
		case rec.Code >= 500:
			t.Fatalf("%q: %d %s", body, rec.Code, rec.Body)
		case rec.Code == http.StatusOK && len(resp.Data) == 0:
			t.Fatalf("%q: 200 without data: %s", body, rec.Body)
		case rec.Code != http.StatusOK && (resp.Error == nil || resp.Error.Type == "" || resp.Error.Message == ""):
			t.Fatalf("%q: %d, not an OpenAI error: %s", body, rec.Code, rec.Body)
		}
	})
}
