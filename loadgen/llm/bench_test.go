package llm_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/inferhq/infer/loadgen/llm"
)

// canned answers every request with the same event stream, without a
// network: what is left is the client's own work.
type canned []byte

func (c canned) RoundTrip(*http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(bytes.NewReader(c))}, nil
}

// BenchmarkClientStream is the client's cost per stream of 200 chat
// chunks (SSE parsing, chunk scanning, timing) with the transport taken
// away; ns/chunk is the figure that bounds streams per core.
func BenchmarkClientStream(b *testing.B) {
	const chunks = 200
	var stream []byte
	enc := llm.Encoding{}
	stream = enc.AppendEvent(stream, llm.Event{Data: []byte(`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`)})
	for i := range chunks {
		stream = enc.AppendEvent(stream, llm.Event{Data: fmt.Appendf(nil,
			`{"id":"c","object":"chat.completion.chunk","created":1,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"content":" word%d"},"logprobs":null,"finish_reason":null}]}`, i)})
	}
	stream = enc.AppendEvent(stream, llm.Event{Data: []byte(`{"id":"c","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":200,"total_tokens":210}}`)})
	stream = enc.AppendEvent(stream, llm.Event{Data: []byte("[DONE]")})
	c, err := llm.NewClient(llm.ClientConfig{BaseURL: "http://bench", HTTP: &http.Client{Transport: canned(stream)}})
	if err != nil {
		b.Fatal(err)
	}
	req := body(llm.Chat, chunks, true)
	var res llm.Result
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	for b.Loop() {
		c.Do(context.Background(), req, &res, nil)
		if !res.OK() || len(res.Chunks) != chunks {
			b.Fatalf("%s %s, %d chunks", res.Cause, res.Err, len(res.Chunks))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*chunks), "ns/chunk")
}
