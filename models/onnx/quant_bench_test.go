package onnx

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/bert"
	"github.com/inferhq/infer/models/gpt2"
	"github.com/inferhq/infer/models/quant"
)

// Speed of the quantised models against float32, measured side by side:
// the two take turns batch by batch (A B B A), so that a machine whose
// speed drifts weighs on both alike; the metrics are median times and their
// ratio (int8/fp32 < 1: int8 is faster).

// BenchmarkQuantizedEncoder runs batches of 32 items of 128 tokens through
// a BERT model in float32 and quantised (activations per tensor): bert-mini
// and the ones INFER_BENCH_ENCODERS names (e.g. "bert-small,bert-base").
func BenchmarkQuantizedEncoder(b *testing.B) {
	names := os.Getenv("INFER_BENCH_ENCODERS")
	if names == "" {
		names = "bert-mini"
	}
	const batch, tokens = 32, 128
	for _, name := range splitComma(names) {
		arch, err := bert.Lookup(name)
		if err != nil {
			b.Fatal(err)
		}
		src, err := bert.Ensure(testModels, bert.Spec{Arch: arch, Task: bert.FillMask})
		if err != nil {
			b.Fatal(err)
		}
		fp32, int8 := encoderInstance(b, src), encoderInstance(b, quantized(b, src, quant.Options{}))
		// "word" is one token; [CLS], [MASK] and [SEP] make 128.
		in, err := fp32.f.Prepare(strings.Repeat("word ", tokens-3) + MaskToken)
		if err != nil || len(in.Tokens) != tokens {
			b.Fatalf("item of %d tokens, %v; want %d", len(in.Tokens), err, tokens)
		}
		ins := make([]models.Input, batch)
		for i := range ins {
			ins[i] = in
		}
		out := make([]models.Output, batch)
		b.Run(fmt.Sprintf("%s/batch=%d/tokens=%d", name, batch, tokens), func(b *testing.B) {
			var times abTimes
			for i := 0; b.Loop(); i++ {
				m := abba(i, fp32, int8)
				t0 := time.Now()
				if err := m.Predict(context.Background(), ins, out); err != nil {
					b.Fatal(err)
				}
				times.add(m == int8, time.Since(t0))
			}
			times.report(b, "fp32", "int8")
		})
	}
}

// encoderInstance returns an instance of the encoder at path.
func encoderInstance(b *testing.B, path string) *Model {
	f := newFactory(b, Config{Path: path})
	m, err := f.New(context.Background(), 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	return m.(*Model)
}

// BenchmarkQuantizedDecode runs decode steps of 16 sequences at a context
// of 256 tokens on a GPT-2 model in float32, int8 and int4 (activations per
// row, as decoders are quantised by default): gpt2-tiny and the ones
// INFER_BENCH_ARCHS names (e.g. "gpt2-small").
func BenchmarkQuantizedDecode(b *testing.B) {
	const batch, ctxLen = 16, 256
	for _, a := range benchArchs(b) {
		src := testModel(b, gpt2.Spec{Arch: a})
		fp32 := openDecoderFile(b, src)
		for _, q := range []struct {
			name string
			opts quant.Options
		}{{"int8", quant.Options{}}, {"int4", quant.Options{Bits: 4, Block: 32}}} {
			d := openDecoderFile(b, quantized(b, src, q.opts))
			b.Run(fmt.Sprintf("%s/%s/batch=%d/context=%d", a, q.name, batch, ctxLen), func(b *testing.B) {
				seqs := map[*Decoder][]models.StepSeq{fp32: fill(b, fp32, batch, ctxLen), d: fill(b, d, batch, ctxLen)}
				next := make([]int32, batch)
				var times abTimes
				for i := 0; b.Loop(); i++ {
					m := abba(i, fp32, d)
					if i > 0 && i%128 < 2 {
						// The sequences start anew every 64 steps of each, so
						// that the context stays within 256..320.
						b.StopTimer()
						for _, s := range seqs[m] {
							m.Free(s.ID)
						}
						seqs[m] = fill(b, m, batch, ctxLen)
						b.StartTimer()
					}
					t0 := time.Now()
					if err := m.Step(context.Background(), seqs[m], next); err != nil {
						b.Fatal(err)
					}
					times.add(m == d, time.Since(t0))
					for k := range seqs[m] {
						seqs[m][k].Past++
					}
				}
				times.report(b, "fp32", q.name)
				for m, ss := range seqs {
					for _, s := range ss {
						m.Free(s.ID)
					}
				}
			})
		}
	}
}
