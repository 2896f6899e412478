package openai

import (
	"strings"
	"testing"

	"github.com/inferhq/infer/models/bpe"
	"github.com/inferhq/infer/server/generate"
)

// The tokenizer's cost on the server's path: encoding a prompt, per token.
func BenchmarkPromptEncode(b *testing.B) {
	tok := bpe.GPT2()
	prompt := strings.Repeat("the quick brown fox jumps over the lazy dog and then some more words follow ", 28)
	n := len(tok.Encode(prompt))
	b.ReportAllocs()
	for b.Loop() {
		tok.Encode(prompt)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/token")
}

// The server's CPU per streamed token outside the engine and the socket:
// the token's bytes and one SSE chunk.
func BenchmarkStreamedTokenChunk(b *testing.B) {
	tok := bpe.GPT2()
	a := &answer{p: &parsed{includeUsage: true}, id: "cmpl-0123456789abcdef01234567", created: 1, h: &handler{s: &Service{}}}
	a.h.s.info.Name = "sim-lm"
	enc := chunkEncoder{a: a}
	buf := make([]byte, 0, 512)
	ids := tok.Encode(strings.Repeat("Streaming one token at a time, with punctuation! ", 20))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		id := ids[i%len(ids)]
		i++
		t := generate.Token{ID: id, Text: string(tok.TokenBytes(id))}
		buf = enc.token(buf[:0], t)
	}
}
