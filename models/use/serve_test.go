package use

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/server"
	"github.com/inferhq/infer/server/batch"
	"github.com/inferhq/infer/server/encoder"
	"github.com/inferhq/infer/server/servertest"
)

// serve serves f's model through the encoder API with the batching bcfg
// until the test ends.
func serve(t *testing.T, f models.Factory, bcfg batch.Config) *servertest.Server {
	t.Helper()
	svc, err := encoder.New(encoder.Config{Batch: bcfg}, f)
	if err != nil {
		t.Fatal(err)
	}
	return servertest.Start(t, server.Config{}, svc)
}

// TestServedMatchesJS serves use-lite through the real server and checks
// that /batched answers every sentence with the JavaScript reference's
// vector, whether the sentences come in one request or in concurrent ones
// that the server batches together with padding; and that the paraphrase
// pair is closer than any unrelated pair, as in the reference.
func TestServedMatchesJS(t *testing.T) {
	fx := load(t)
	f := factory(t, Config{})
	srv := serve(t, f, batch.Config{MaxBatch: 16, MaxLatency: 20 * time.Millisecond})
	texts := make([]string, len(fx.ref.Sentences))
	for i, s := range fx.ref.Sentences {
		texts[i] = s.Text
	}

	check := func(how string, got [][]float32) {
		var c cosines
		for i, v := range got {
			cos := cosine(v, fx.ref.Sentences[i].Embedding)
			if cos < minCosine {
				t.Errorf("%s: %.40q: cosine %.6f to the JS reference, want ≥ %g", how, texts[i], cos, minCosine)
			}
			c.add(cos)
		}
		t.Logf("%s: served against JS: %d sentences, cosine min %s mean %s", how, c.n, c.fmtMin(), c.fmtMean())
	}
	check("one request", embed(t, srv, texts))

	// One request per sentence, all at once: the server batches them.
	got := make([][]float32, len(texts))
	done := make(chan int)
	for i := range texts {
		go func() {
			got[i] = embed(t, srv, texts[i:i+1])[0]
			done <- i
		}()
	}
	for range texts {
		<-done
	}
	check("concurrent requests", got)

	// Sentences 0 and 1 are the paraphrase pair; 2 and 3 are unrelated to
	// them and to each other.
	pair := cosine(got[0], got[1])
	if want := cosine(fx.ref.Sentences[0].Embedding, fx.ref.Sentences[1].Embedding); pair < want-1e-4 || pair > want+1e-4 {
		t.Errorf("paraphrase cosine %.4f, the reference's %.4f", pair, want)
	}
	for _, p := range [][2]int{{0, 2}, {0, 3}, {1, 2}, {1, 3}, {2, 3}} {
		if c := cosine(got[p[0]], got[p[1]]); c > pair-0.5 {
			t.Errorf("unrelated %.30q and %.30q: cosine %.3f, not far below the paraphrases' %.3f", texts[p[0]], texts[p[1]], c, pair)
		}
	}
	t.Logf("paraphrase cosine %.3f", pair)
}

// embed posts texts to /batched and returns their vectors.
func embed(t *testing.T, srv *servertest.Server, texts []string) [][]float32 {
	body, _ := json.Marshal(map[string][]string{"inputs": texts})
	resp, err := srv.Client.Post(srv.URL+"/batched", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Error(err)
		return make([][]float32, len(texts))
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var r struct {
		Model   string      `json:"model"`
		Outputs [][]float32 `json:"outputs"`
	}
	if err := json.Unmarshal(raw, &r); err != nil || resp.StatusCode != http.StatusOK || len(r.Outputs) != len(texts) || r.Model != Name {
		t.Errorf("POST /batched: %d %.200s (%v), want %d outputs of %s", resp.StatusCode, raw, err, len(texts), Name)
		return make([][]float32, len(texts))
	}
	for i, v := range r.Outputs {
		if len(v) != 512 {
			t.Errorf("output %d has %d values, want 512", i, len(v))
		}
	}
	return r.Outputs
}

// TestServedBadInput: inputs the model cannot take are refused with the
// documented status, and the server keeps answering.
func TestServedBadInput(t *testing.T) {
	load(t)
	srv := serve(t, factory(t, Config{RejectLong: true}), batch.Config{MaxBatch: 8, MaxLatency: 5 * time.Millisecond})
	long := ""
	for range 200 {
		long += "word "
	}
	for _, tc := range []struct {
		body string
		want int
	}{
		{`{"inputs": [""]}`, http.StatusUnprocessableEntity},
		{`{"inputs": ["ok", "   "]}`, http.StatusUnprocessableEntity},
		{fmt.Sprintf(`{"inputs": [%q]}`, long), http.StatusRequestEntityTooLarge},
		{`{"inputs": ["\u200b"]}`, http.StatusOK},
		{`{"inputs": ["still fine"]}`, http.StatusOK},
	} {
		resp, err := srv.Client.Post(srv.URL+"/batched", "application/json", bytes.NewReader([]byte(tc.body)))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("POST %.60s: %d %.200s, want %d", tc.body, resp.StatusCode, raw, tc.want)
		}
	}
}

// TestEmbeddingsAPIMatchesJS: use-lite served through OpenAI's embeddings
// API, read by OpenAI's own Go library (floats and base64), gives the
// JavaScript reference's vectors, and counts the tokens it read.
func TestEmbeddingsAPIMatchesJS(t *testing.T) {
	fx := load(t)
	f := factory(t, Config{})
	srv := serve(t, f, batch.Config{MaxBatch: 32, MaxLatency: 20 * time.Millisecond})
	texts := make([]string, len(fx.ref.Sentences))
	tokens := 0
	for i, s := range fx.ref.Sentences {
		texts[i] = s.Text
		tokens += min(len(s.IDs), MaxSeqLen)
	}
	client := oai.NewClient(option.WithBaseURL(srv.URL+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	for _, format := range []oai.EmbeddingNewParamsEncodingFormat{oai.EmbeddingNewParamsEncodingFormatFloat, oai.EmbeddingNewParamsEncodingFormatBase64} {
		resp, err := client.Embeddings.New(context.Background(), oai.EmbeddingNewParams{
			Input: oai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: texts}, Model: Name, EncodingFormat: format,
			Dimensions: oai.Int(Width), User: oai.String("test"),
		})
		if err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		if resp.Model != Name || len(resp.Data) != len(texts) || resp.Usage.PromptTokens != int64(tokens) {
			t.Fatalf("%s: model %s, %d vectors, %d prompt tokens; want %s, %d, %d", format, resp.Model, len(resp.Data), resp.Usage.PromptTokens,
				Name, len(texts), tokens)
		}
		var c cosines
		for i, d := range resp.Data {
			cos := cosine(d.Embedding, fx.ref.Sentences[i].Embedding)
			if cos < minCosine || d.Index != int64(i) {
				t.Errorf("%s: data[%d] (index %d) %.40q: cosine %.6f to the JS reference, want ≥ %g", format, i, d.Index, texts[i], cos, minCosine)
			}
			c.add(cos)
		}
		t.Logf("%s: /v1/embeddings against JS: %d sentences, cosine min %s mean %s", format, c.n, c.fmtMin(), c.fmtMean())
	}
}
