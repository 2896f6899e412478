package onnx

import (
	"context"
	"fmt"
	"testing"

	"github.com/inferhq/infer/loadgen/corpus"
	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/bert"
)

// BenchmarkPrepare is the cost of tokenizing one item of the built-in
// corpus, to set against BenchmarkPredict's cost per item.
func BenchmarkPrepare(b *testing.B) {
	f := newFactory(b, Config{Path: toyGraph{outputs: []string{"mask_positions"}}.build(b, b.TempDir(), "fm")})
	texts := corpus.Masked()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := f.Prepare(texts[i%len(texts)]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPredict runs bert-mini fill-mask on batches of corpus items, with
// ONNX Runtime's thread spinning off (the default) and on; ns/item is the
// model's cost per item.
func BenchmarkPredict(b *testing.B) {
	arch, _ := bert.Lookup("bert-mini")
	path, err := bert.Ensure(b.TempDir(), bert.Spec{Arch: arch, Task: bert.FillMask})
	if err != nil {
		b.Fatal(err)
	}
	texts := corpus.Masked()
	for _, spin := range []bool{false, true} {
		f := newFactory(b, Config{Path: path, Runtime: Runtime{Spin: spin}})
		ins := make([]models.Input, len(texts))
		for i, s := range texts {
			if ins[i], err = f.Prepare(s); err != nil {
				b.Fatal(err)
			}
		}
		m, err := f.New(context.Background(), 0)
		if err != nil {
			b.Fatal(err)
		}
		for _, n := range []int{1, 8, 32, 64} {
			b.Run(fmt.Sprintf("spin=%v/batch=%d", spin, n), func(b *testing.B) {
				out := make([]models.Output, n)
				next := 0
				for b.Loop() {
					batch := make([]models.Input, n)
					for j := range batch {
						batch[j] = ins[next%len(ins)]
						next++
					}
					if err := m.Predict(context.Background(), batch, out); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/item")
			})
		}
		m.Close()
	}
}
