//go:build unix

package llama

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/onnx"
	"github.com/inferhq/infer/server/generate"
)

// The benchmarks run stories260k on ONNX Runtime through the generation
// engine (server/generate over models/onnx's decoder), without HTTP:
//
//	go test -run '^$' -bench . -benchtime 20x ./models/llama
//
// The machine's other work weighs on both sides of a comparison alike:
// alternatives take turns (A B A B).

// cpuTime returns the process's user and system CPU time so far.
func cpuTime(b testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// closedLoop sends reqs through e from streams clients, each taking the
// next request when its last one ended, and returns the tokens generated.
func closedLoop(b testing.TB, e *generate.Engine, streams int, reqs []generate.Request) int {
	var mu sync.Mutex
	next, tokens := 0, 0
	var wg sync.WaitGroup
	for range streams {
		wg.Go(func() {
			for {
				mu.Lock()
				if next == len(reqs) {
					mu.Unlock()
					return
				}
				req := reqs[next]
				next++
				mu.Unlock()
				s, err := e.Generate(context.Background(), req)
				if err != nil {
					b.Error(err)
					return
				}
				_, res, err := generate.Collect(context.Background(), s)
				if err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				tokens += res.CompletionTokens
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return tokens
}

// storyPrompt returns a prompt of about n tokens of stories260k.
func storyPrompt(r *rand.Rand, n int) []int32 {
	p := []int32{1}
	for len(p) < n {
		p = append(p, int32(259+r.IntN(253))) // pieces, not bytes
	}
	return p
}

// BenchmarkStreams measures greedy generation of 128 tokens after a
// 16-token prompt (mean context 80) by 1, 8 and 32 closed-loop streams on
// one continuous-batching engine (32 slots): an op is one request per
// stream. It reports tokens/s and the process's CPU time per generated
// token (the decoder's threads, the engine and the clients; one intra-op
// thread).
func BenchmarkStreams(b *testing.B) {
	f := openStories(b, 0)
	for _, streams := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("streams=%d", streams), func(b *testing.B) {
			e := startEngine(b, f, generate.Config{MaxSeqs: 32})
			r := rand.New(rand.NewPCG(1, 2))
			reqs := make([]generate.Request, streams)
			for i := range reqs {
				reqs[i] = generate.Request{Prompt: storyPrompt(r, 16), MaxTokens: 128, IgnoreEOS: true}
			}
			tokens := 0
			cpu0, t0 := cpuTime(b), time.Now()
			for b.Loop() {
				tokens += closedLoop(b, e, streams, reqs)
			}
			elapsed, cpu := time.Since(t0), cpuTime(b)-cpu0
			b.ReportMetric(float64(tokens)/elapsed.Seconds(), "tokens/s")
			b.ReportMetric(float64(cpu.Microseconds())/float64(tokens), "cpu-µs/token")
		})
	}
}

// BenchmarkContinuousVsStatic measures continuous against static batching
// on mixed lengths: 32 closed-loop streams, 32 slots, 96 requests an op
// with prompts of 10 to 100 tokens and max_tokens lognormal (median 50,
// σ 0.8, at most 256) with ignore_eos, the same requests for both, and
// the ONNX Runtime decoder's step budget (onnx.DecoderMaxBatchedTokens). The
// two engines (each its own decoder instance of one session) take turns, A
// B A B; the metrics are their median tokens/s and the ratio.
func BenchmarkContinuousVsStatic(b *testing.B) {
	f := openStories(b, 0)
	engines := []*generate.Engine{
		startEngine(b, f, generate.Config{Policy: generate.Continuous, MaxSeqs: 32, MaxBatchedTokens: onnx.DecoderMaxBatchedTokens}),
		startEngine(b, f, generate.Config{Policy: generate.Static, MaxSeqs: 32, MaxBatchedTokens: onnx.DecoderMaxBatchedTokens,
			MaxLatency: 100 * time.Millisecond}),
	}
	rates := make([][]float64, 2)
	for i := 0; b.Loop(); i++ {
		r := rand.New(rand.NewPCG(uint64(i/2), 3))
		reqs := make([]generate.Request, 96)
		for k := range reqs {
			out := int(math.Round(50 * math.Exp(0.8*r.NormFloat64())))
			reqs[k] = generate.Request{Prompt: storyPrompt(r, 10+r.IntN(91)), MaxTokens: min(max(out, 1), 256), IgnoreEOS: true,
				Sampling: models.Sampling{Temperature: 1, Seed: uint64(k)}}
		}
		t0 := time.Now()
		tokens := closedLoop(b, engines[i%2], 32, reqs)
		rates[i%2] = append(rates[i%2], float64(tokens)/time.Since(t0).Seconds())
	}
	median := func(v []float64) float64 {
		if len(v) == 0 {
			return 0
		}
		v = slices.Clone(v)
		slices.Sort(v)
		return v[len(v)/2]
	}
	cont, stat := median(rates[0]), median(rates[1])
	b.ReportMetric(cont, "continuous-tokens/s")
	b.ReportMetric(stat, "static-tokens/s")
	if stat > 0 {
		b.ReportMetric(cont/stat, "continuous/static")
	}
}
