package onnx

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

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
func fill(b testing.TB, d *Decoder, n, ctxLen int) []models.StepSeq {
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

// abTimes collects the durations of two alternatives measured in turn, A B A
// B …, so that a machine whose speed drifts (a shared one) weighs on both
// alike.
type abTimes struct{ a, b []time.Duration }

func (t *abTimes) add(second bool, d time.Duration) {
	if second {
		t.b = append(t.b, d)
	} else {
		t.a = append(t.a, d)
	}
}

// medianMs returns the median of d in milliseconds, 0 for none.
func medianMs(d []time.Duration) float64 {
	d = slices.Clone(d)
	slices.Sort(d)
	if len(d) == 0 {
		return 0
	}
	return float64(d[len(d)/2].Microseconds()) / 1e3
}

// report reports the median milliseconds of each alternative and their
// ratio.
func (t *abTimes) report(b *testing.B, nameA, nameB string) {
	ma, mb := medianMs(t.a), medianMs(t.b)
	b.ReportMetric(ma, nameA+"-ms")
	b.ReportMetric(mb, nameB+"-ms")
	if ma > 0 {
		b.ReportMetric(mb/ma, nameB+"/"+nameA)
	}
}

// BenchmarkKVLayout measures what decided the layout of the KV cache: a
// decode step over a batch that does not change, with the cache in one
// shared buffer that is the next step's past as it is (shared), against the
// same step when each sequence's cache is kept on its own and gathered into
// the batch's past at every step (per-seq, emulated by splitting the cache
// into one buffer per sequence, untimed, before the step). The two take
// turns, step by step; the metrics are median step times and their ratio.
// The difference is also the cost of one join or leave in the shared layout.
func BenchmarkKVLayout(b *testing.B) {
	for _, a := range benchArchs(b) {
		_, d := openTestDecoder(b, gpt2.Spec{Arch: a}, DecoderConfig{KVTokens: 1 << 20})
		for _, batch := range []int{8, 32} {
			for _, ctxLen := range []int{128, 512} {
				b.Run(fmt.Sprintf("%s/batch=%d/context=%d", a, batch, ctxLen), func(b *testing.B) {
					seqs := fill(b, d, batch, ctxLen)
					next := make([]int32, batch)
					var times abTimes
					for i := 0; b.Loop(); i++ {
						perSeq := i%2 == 1
						if perSeq {
							b.StopTimer()
							for _, st := range d.seqs {
								if _, err := d.pool.assemble(d.dims, []*seqState{st}, false); err != nil {
									b.Fatal(err)
								}
							}
							b.StartTimer()
						}
						t0 := time.Now()
						if err := d.Step(context.Background(), seqs, next); err != nil {
							b.Fatal(err)
						}
						times.add(perSeq, time.Since(t0))
						for i := range seqs {
							seqs[i].Past++
						}
					}
					times.report(b, "shared", "per-seq")
					for i := range seqs {
						d.Free(seqs[i].ID)
					}
				})
			}
		}
	}
}

// BenchmarkMixedStep measures a step of 16 decoding sequences (64 tokens of
// context) and one joining with a 128-token prompt: as the decoder runs it,
// the prompt in a run of its own (split), against one run with every row
// padded to the prompt's length (one). The two take turns; the metrics are
// median step times and their ratio.
func BenchmarkMixedStep(b *testing.B) {
	for _, a := range benchArchs(b) {
		_, d := openTestDecoder(b, gpt2.Spec{Arch: a}, DecoderConfig{KVTokens: 1 << 20})
		b.Run(a.String(), func(b *testing.B) {
			var times abTimes
			for i := 0; b.Loop(); i++ {
				one := i%2 == 1
				b.StopTimer()
				seqs := fill(b, d, 16, 64)
				seqs = append(seqs, models.StepSeq{ID: 99, Tokens: prompt(99, 128), Sample: true})
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
				t0 := time.Now()
				var err error
				if one {
					err = d.run(jobs, next, true)
				} else {
					err = d.Step(context.Background(), seqs, next)
				}
				times.add(one, time.Since(t0))
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				for _, s := range seqs {
					d.Free(s.ID)
				}
				b.StartTimer()
			}
			times.report(b, "split", "one")
		})
	}
}

// BenchmarkLogitsToKeep measures what logits_to_keep saves: a decode step of
// 32 sequences at a context of 256, and the prefill of a 128-token prompt,
// on the graph with it (last: logits at each row's last position) against
// the same graph without it (all: at every position, as exports). The two
// take turns, A B B A, so that neither always runs first; the metrics are
// median step times and their ratio.
func BenchmarkLogitsToKeep(b *testing.B) {
	for _, a := range benchArchs(b) {
		_, last := openTestDecoder(b, gpt2.Spec{Arch: a}, DecoderConfig{KVTokens: 1 << 20})
		_, all := openTestDecoder(b, gpt2.Spec{Arch: a, AllLogits: true}, DecoderConfig{KVTokens: 1 << 20})
		b.Run(a.String()+"/decode", func(b *testing.B) { benchDecodePair(b, last, all, 32, 256, "last", "all") })
		b.Run(a.String()+"/prefill", func(b *testing.B) {
			p := prompt(9, 128)
			next := make([]int32, 1)
			var times abTimes
			for i := 0; b.Loop(); i++ {
				d := abba(i, last, all)
				t0 := time.Now()
				if err := d.Step(context.Background(), []models.StepSeq{{ID: 1, Tokens: p, Sample: true}}, next); err != nil {
					b.Fatal(err)
				}
				times.add(d == all, time.Since(t0))
				d.Free(1)
			}
			times.report(b, "last", "all")
		})
	}
}

// abba returns a or b for step i of the order A B B A A B B A ….
func abba[T any](i int, a, b T) T {
	if i%4 == 1 || i%4 == 2 {
		return b
	}
	return a
}

// BenchmarkPrefixHit measures what a prefix cache hit saves the decoder: a
// 540-token prompt prefilled whole (a miss, in chunks of 256 tokens as the
// engine's default step budget feeds it) against the same prompt started
// after its first 528 tokens' cached blocks (a hit: the blocks copied into
// a row, 12 tokens computed). The two take turns; the metrics are their
// median times to the first token's logits and miss/hit.
func BenchmarkPrefixHit(b *testing.B) {
	const size, cached, n = 16, 528, 540
	for _, a := range benchArchs(b) {
		_, d := openTestDecoder(b, gpt2.Spec{Arch: a}, DecoderConfig{})
		p := prompt(1, n)
		table := make([]int32, (n+size-1)/size)
		for i := range table {
			table[i] = int32(i)
		}
		next := make([]int32, 1)
		run := func(s models.StepSeq) {
			if err := d.Step(context.Background(), []models.StepSeq{s}, next); err != nil {
				b.Fatal(err)
			}
		}
		// The writer: blocks 0..32 full, then cached.
		run(models.StepSeq{ID: 1, Tokens: p, PromptLen: n, Sample: true, BlockSize: size, Blocks: table})
		d.Free(1)
		hitTable := append(slices.Clone(table[:cached/size]), int32(len(table)))
		b.Run(a.String(), func(b *testing.B) {
			var times abTimes
			id := models.SeqID(2)
			for i := 0; b.Loop(); i++ {
				hit := i%2 == 1
				t0 := time.Now()
				if hit {
					run(models.StepSeq{ID: id, Past: cached, Tokens: p[cached:], PromptLen: n, Sample: true, BlockSize: size, Blocks: hitTable})
				} else {
					for at := 0; at < n; at += 256 {
						end := min(n, at+256)
						run(models.StepSeq{ID: id, Past: at, Tokens: p[at:end], PromptLen: n, Sample: end == n})
					}
				}
				times.add(!hit, time.Since(t0))
				d.Free(id)
				id++
			}
			times.report(b, "hit", "miss")
		})
	}
}

// BenchmarkStaggered measures what staggered lengths cost a decode batch:
// 32 slots in continuous batching, each sequence a 16-token prompt and 320
// to 640 tokens out (uniform, seeded), a finished one replaced in the same
// step by a new one (as the engine joins them), against 32 sequences decoding
// in step at a context of 256 to 288 (the offline ceiling's shape, the same
// mean context). The staggered batch starts in its steady state (each slot
// part way through its sequence, prefilled untimed); the two take turns,
// step by step. The metrics are each side's tokens per second and
// staggered/aligned, which the served ceiling's target (≥ 0.85) bounds, for
// the graph as served (its KV cache in place), its GroupQueryAttention form
// (the -int8 twins', here over a float32 cache) and the standard graph.
func BenchmarkStaggered(b *testing.B) {
	for _, a := range benchArchs(b) {
		for _, layout := range []struct {
			name string
			spec gpt2.Spec
		}{{"in-place", gpt2.Spec{Arch: a, InPlaceKV: true}}, {"gqa", gpt2.Spec{Arch: a, GQA: true}}, {"standard", gpt2.Spec{Arch: a}}} {
			b.Run(a.String()+"/"+layout.name, func(b *testing.B) { benchStaggered(b, layout.spec) })
		}
	}
}

func benchStaggered(b *testing.B, spec gpt2.Spec) {
	const slots, promptLen = 32, 16
	{
		_, stag := openTestDecoder(b, spec, DecoderConfig{KVTokens: 1 << 20})
		_, aligned := openTestDecoder(b, spec, DecoderConfig{KVTokens: 1 << 20})
		{
			rng := rand.New(rand.NewPCG(1, 2))
			type slot struct {
				s    models.StepSeq
				left int // tokens still to generate
			}
			var ss [slots]slot
			id := models.SeqID(0)
			start := func(i, done int) { // a new sequence in slot i, done tokens already out (untimed prefill)
				id++
				out := 320 + rng.IntN(321)
				done = min(done, out-1)
				ss[i] = slot{s: models.StepSeq{ID: id, Tokens: prompt(uint64(id), promptLen+done), Sample: true}, left: out - done}
			}
			for i := range ss {
				start(i, rng.IntN(640))
				next := make([]int32, 1)
				if err := stag.Step(context.Background(), []models.StepSeq{ss[i].s}, next); err != nil {
					b.Fatal(err)
				}
				ss[i].s.Past, ss[i].s.Tokens = len(ss[i].s.Tokens), next[:1]
				ss[i].left--
			}
			al := fill(b, aligned, slots, 256)
			var tStag, tAligned time.Duration
			var nStag, nAligned int
			seqs := make([]models.StepSeq, slots)
			next := make([]int32, slots)
			for b.Loop() {
				for i := range ss {
					if ss[i].left == 0 {
						stag.Free(ss[i].s.ID)
						start(i, 0)
					}
					seqs[i] = ss[i].s
				}
				t0 := time.Now()
				if err := stag.Step(context.Background(), seqs, next); err != nil {
					b.Fatal(err)
				}
				tStag += time.Since(t0)
				nStag += slots
				for i := range ss {
					ss[i].s.Past += len(ss[i].s.Tokens)
					ss[i].s.Tokens = []int32{next[i]}
					ss[i].left--
				}

				if al[0].Past >= 256+32 {
					b.StopTimer()
					for _, s := range al {
						aligned.Free(s.ID)
					}
					al = fill(b, aligned, slots, 256)
					b.StartTimer()
				}
				t0 = time.Now()
				if err := aligned.Step(context.Background(), al, next); err != nil {
					b.Fatal(err)
				}
				tAligned += time.Since(t0)
				nAligned += slots
				for i := range al {
					al[i].Past++
					al[i].Tokens = []int32{next[i]}
				}
			}
			s, al2 := float64(nStag)/tStag.Seconds(), float64(nAligned)/tAligned.Seconds()
			b.ReportMetric(s, "staggered-tok/s")
			b.ReportMetric(al2, "aligned-tok/s")
			b.ReportMetric(s/al2, "staggered/aligned")
		}
	}
}

// BenchmarkKVInPlace measures what the in-place KV cache saves a decode step:
// 32 sequences decoding in step at a context of 256 to 320 (the offline
// ceiling's shape), on the graph with its KV cache in place (as served)
// and on the standard graph, which copies the past into its present. The
// two take turns, step by step; the metrics are median step times and
// their ratio.
func BenchmarkKVInPlace(b *testing.B) {
	benchGraphs(b, 32, gpt2.Spec{}, gpt2.Spec{InPlaceKV: true}, "standard", "in-place")
}

// BenchmarkKVGQA measures the float32 graphs of the two in-place layouts
// side by side, at the shape of the int8 twins' acceptance benchmark (16
// sequences at a context of 256 to 320): models/gpt2's in-place graph (as
// the float32 built-ins are served) and its GroupQueryAttention graph (as
// the -int8 twins are, there over an int8 cache).
func BenchmarkKVGQA(b *testing.B) {
	benchGraphs(b, 16, gpt2.Spec{InPlaceKV: true}, gpt2.Spec{GQA: true}, "in-place", "gqa")
}

// benchGraphs is benchDecodePair on the graphs of specs a and b (their
// Arch set here) at a context of 256.
func benchGraphs(b *testing.B, rows int, specA, specB gpt2.Spec, nameA, nameB string) {
	for _, a := range benchArchs(b) {
		specA.Arch, specB.Arch = a, a
		_, da := openTestDecoder(b, specA, DecoderConfig{KVTokens: 1 << 20})
		_, db := openTestDecoder(b, specB, DecoderConfig{KVTokens: 1 << 20})
		b.Run(a.String(), func(b *testing.B) { benchDecodePair(b, da, db, rows, 256, nameA, nameB) })
	}
}
