package use

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/inferhq/infer/loadgen/corpus"
	"github.com/inferhq/infer/models"
)

// BenchmarkPredict runs use-lite offline (one instance, no server) on
// batches of the built-in corpus that infer models bench uses, and reports
// items/s, as infer models bench does for the other built-in encoders:
//
//	go test -run '^$' -bench Predict -benchtime 5s ./models/use
func BenchmarkPredict(b *testing.B) {
	f := factory(b, Config{})
	texts := corpus.Masked()
	ins := make([]models.Input, len(texts))
	tokens := 0
	for i, s := range texts {
		var err error
		if ins[i], err = f.Prepare(s); err != nil {
			b.Fatal(err)
		}
		tokens += len(ins[i].Tokens)
	}
	m, err := f.New(context.Background(), 0)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	for _, n := range []int{1, 8, 32, 64} {
		b.Run(fmt.Sprintf("batch=%d", n), func(b *testing.B) {
			out := make([]models.Output, n)
			batch := make([]models.Input, n)
			next := 0
			for b.Loop() {
				for j := range batch {
					batch[j] = ins[next%len(ins)]
					next++
				}
				if err := m.Predict(context.Background(), batch, out); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "items/s")
			b.ReportMetric(float64(tokens)/float64(len(ins)), "tokens/item")
		})
	}
}

// BenchmarkTokenize is the cost of tokenizing one item, truncated to
// MaxSeqLen as Prepare does: a corpus sentence, and 1 MiB texts (the
// server's default body limit) with and without spaces, where only the
// first has a prefix to stop at.
func BenchmarkTokenize(b *testing.B) {
	tok := load(b).tok
	words := strings.Repeat("the capital of France is Paris ", 1<<20/30+1)[:1<<20]
	cjk := strings.Repeat("東京は日本の首都です", 1<<20/30+1)[:1<<20/3*3] // 3 bytes a character
	for _, tc := range []struct{ name, text string }{
		{"sentence", corpus.Masked()[0]},
		{"1MiB-words", words},
		{"1MiB-no-spaces", cjk},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			var ids []int32
			for b.Loop() {
				ids, _ = tok.AppendEncode(ids[:0], tc.text, MaxSeqLen)
			}
		})
	}
}
