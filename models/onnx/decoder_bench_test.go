package onnx

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/gpt2"
)

// benchArchs are the models of the decoder benchmarks: gpt2-tiny, and the
// ones INFER_BENCH_ARCHS names (e.g. "gpt2-tiny,gpt2-mini").
func benchArchs(b *testing.B) []gpt2.Arch {
	names := os.Getenv("INFER_BENCH_ARCHS")
	if names == "" {
		names = "gpt2-tiny"
	}
	var archs []gpt2.Arch
	for _, n := range splitComma(names) {
		a, err := gpt2.Lookup(n)
		if err != nil {
			b.Fatal(err)
		}
		archs = append(archs, a)
	}
	return archs
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}

// fill starts n sequences of ctxLen tokens each and returns their decode
// step (one token each, greedy).
func fill(b *testing.B, d *Decoder, n, ctxLen int) []models.StepSeq {
	seqs := make([]models.StepSeq, n)
	for i := range seqs {
		seqs[i] = models.StepSeq{ID: models.SeqID(i), Tokens: prompt(uint64(i), ctxLen), Sample: true}
		if err := d.Step(context.Background(), seqs[i:i+1], make([]int32, 1)); err != nil {
			b.Fatal(err)
		}
		seqs[i].Past, seqs[i].Tokens = ctxLen, []int32{7}
	}
	return seqs
}

// BenchmarkKVLayout measures what decided the layout of the KV cache: a
// decode step over a batch that does not change, with the cache in one
// shared buffer that is the next step's past as it is (shared), against the
// same step when each sequence's cache is kept on its own and gathered into
// the batch's past at every step (per-seq, emulated by splitting the cache
// into one buffer per sequence, untimed, before each step). The difference is
// also the cost of one join or leave in the shared layout. tokens/s counts
// decoded tokens.
func BenchmarkKVLayout(b *testing.B) {
	for _, a := range benchArchs(b) {
		_, d := openTestDecoder(b, gpt2.Spec{Arch: a}, DecoderConfig{KVTokens: 1 << 20})
		for _, batch := range []int{8, 32} {
			for _, ctxLen := range []int{128, 512} {
				seqs := fill(b, d, batch, ctxLen)
				next := make([]int32, batch)
				for _, layout := range []string{"shared", "per-seq"} {
					b.Run(fmt.Sprintf("%s/batch=%d/context=%d/%s", a, batch, ctxLen, layout), func(b *testing.B) {
						for b.Loop() {
							if layout == "per-seq" {
								b.StopTimer()
								for _, st := range d.seqs {
									if _, err := d.pool.assemble(d.dims, []*seqState{st}); err != nil {
										b.Fatal(err)
									}
								}
								b.StartTimer()
							}
							if err := d.Step(context.Background(), seqs, next); err != nil {
								b.Fatal(err)
							}
							for i := range seqs {
								seqs[i].Past++
							}
						}
						b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "tokens/s")
					})
				}
				for i := range seqs {
					d.Free(seqs[i].ID)
				}
			}
		}
	}
}

// BenchmarkMixedStep measures a step of 16 decoding sequences and one
// joining with a 128-token prompt: as one run, every row padded to the
// prompt's length (one), or as the decoder runs it, the prompt in a run of
// its own (split).
func BenchmarkMixedStep(b *testing.B) {
	for _, a := range benchArchs(b) {
		_, d := openTestDecoder(b, gpt2.Spec{Arch: a}, DecoderConfig{KVTokens: 1 << 20})
		for _, mode := range []string{"one", "split"} {
			b.Run(fmt.Sprintf("%s/%s", a, mode), func(b *testing.B) {
				for b.Loop() {
					b.StopTimer()
					seqs := fill(b, d, 16, 64)
					p := prompt(99, 128)
					seqs = append(seqs, models.StepSeq{ID: 99, Tokens: p, Sample: true})
					next := make([]int32, len(seqs))
					jobs := make([]job, len(seqs))
					for i, s := range seqs {
						st := d.seqs[s.ID]
						if st == nil {
							st = &seqState{}
							d.seqs[s.ID] = st
						}
						jobs[i] = job{st: st, tokens: s.Tokens, out: i}
					}
					d.rowLogits = grow(d.rowLogits, len(seqs))
					b.StartTimer()
					var err error
					if mode == "one" {
						err = d.run(jobs, next, true)
					} else {
						err = d.Step(context.Background(), seqs, next)
					}
					if err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					for _, s := range seqs {
						d.Free(s.ID)
					}
					b.StartTimer()
				}
			})
		}
	}
}
