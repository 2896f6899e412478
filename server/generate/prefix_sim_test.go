package generate_test

import (
	"context"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/bpe"
	"github.com/inferhq/infer/server/generate"
)

// The prefix cache's acceptance loads, on the simulated decoder in virtual
// time (testing/synctest), the cache on against off: exact figures, free of
// this machine's CPU noise. The workload is inference-perf's shared prefix:
// 16 groups, each a 2,048-token prefix, 64-token questions, 128 tokens out
// (ignore_eos), 32 slots.

const (
	spGroups   = 16
	spPrefix   = 2048
	spQuestion = 64
	spAnswer   = 128
	spSlots    = 32
)

// randomTokens are n tokens drawn uniformly (EOS excluded).
func randomTokens(rng *rand.Rand, n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = rng.Int32N(bpe.EOS)
	}
	return out
}

// sharedPrefixRequests makes the shared-prefix workload's requests: a
// random group's prefix, then a question of its own.
func sharedPrefixRequests() func(*rand.Rand, models.Tokenizer) generate.Request {
	prefixes := make([][]int32, spGroups)
	for g := range prefixes {
		prefixes[g] = randomTokens(rand.New(rand.NewPCG(uint64(g), 99)), spPrefix)
	}
	return func(rng *rand.Rand, _ models.Tokenizer) generate.Request {
		p := slices.Concat(prefixes[rng.IntN(spGroups)], randomTokens(rng, spQuestion))
		return generate.Request{Prompt: p, MaxTokens: spAnswer, IgnoreEOS: true}
	}
}

func p50(ds []time.Duration) time.Duration {
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return ds[len(ds)/2]
}

func TestSimSharedPrefixClosedLoop(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates minutes of serving")
	}
	const run = 60 * time.Second
	on := simulateLoad(t, generate.Config{MaxSeqs: spSlots}, spSlots, 0, run, sharedPrefixRequests())
	off := simulateLoad(t, generate.Config{MaxSeqs: spSlots, NoPrefixCache: true}, spSlots, 0, run, sharedPrefixRequests())
	for _, r := range []struct {
		name string
		l    simLoad
	}{{"prefix cache on", on}, {"prefix cache off", off}} {
		t.Logf("%-17s %6.0f tokens/s  %4d requests  p50 TTFT %8v  %.3f of prompt tokens cached", r.name, r.l.rate(), r.l.requests,
			p50(r.l.ttft).Round(time.Millisecond), float64(r.l.cached)/float64(r.l.prompt))
	}
	ratio := on.rate() / off.rate()
	t.Logf("32 closed-loop streams: the cache gives %.2f× the tokens/s", ratio)
	if ratio < 1.5 {
		t.Errorf("tokens/s with the cache %.2f× without, want at least 1.5×", ratio)
	}
}

// Poisson arrivals at 90 % of the ideal request rate without the cache
// (DESIGN.md's ideal at 32 slots: Lo·(a/B + b) + c·Lp seconds a request).
func TestSimSharedPrefixPoissonTTFT(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates minutes of serving")
	}
	a, b, c := simCosts.Step.Seconds(), simCosts.PerSeq.Seconds(), simCosts.PerPrefillToken.Seconds()
	idealRate := 1 / (spAnswer*(a/spSlots+b) + c*(spPrefix+spQuestion))
	rate := 0.9 * idealRate
	const run = 120 * time.Second
	on := simulateLoad(t, generate.Config{MaxSeqs: spSlots}, 0, rate, run, sharedPrefixRequests())
	off := simulateLoad(t, generate.Config{MaxSeqs: spSlots, NoPrefixCache: true}, 0, rate, run, sharedPrefixRequests())
	t.Logf("Poisson %.2f requests/s (90%% of the no-cache ideal %.2f/s), %v:", rate, idealRate, run)
	for _, r := range []struct {
		name string
		l    simLoad
	}{{"prefix cache on", on}, {"prefix cache off", off}} {
		t.Logf("%-17s TTFT p50 %8v  p99 %8v  %6.0f tokens/s  %4d requests", r.name, p50(r.l.ttft).Round(time.Millisecond),
			p99(r.l.ttft).Round(time.Millisecond), r.l.rate(), r.l.requests)
	}
	ratio := float64(p50(off.ttft)) / float64(p50(on.ttft))
	t.Logf("TTFT p50 %.1f× lower with the cache", ratio)
	if ratio < 5 {
		t.Errorf("TTFT p50 only %.1f× lower with the cache, want at least 5×", ratio)
	}
}

// Multi-turn chat sessions: each turn's prompt is the conversation so far
// (the earlier prompts and the engine's actual answers) plus a new user
// message. 8 sessions at a time, each of 5 turns with 2 s of think time;
// a first message of 512 tokens, then 128-token messages and 128-token
// answers.
func TestSimMultiTurnTTFT(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates minutes of serving")
	}
	const turns = 5
	on := multiTurn(t, generate.Config{MaxSeqs: spSlots}, turns)
	off := multiTurn(t, generate.Config{MaxSeqs: spSlots, NoPrefixCache: true}, turns)
	t.Log("TTFT p50 by turn (prompt tokens):")
	for i := range turns {
		t.Logf("turn %d (%4d tokens): cache on %8v   off %8v", i+1, 512+256*i, p50(on[i]).Round(100*time.Microsecond), p50(off[i]).Round(100*time.Microsecond))
	}
	if r := float64(p50(on[turns-1])) / float64(p50(on[0])); r > 1.5 {
		t.Errorf("with the cache turn %d's TTFT is %.2f× turn 1's, want at most 1.5×", turns, r)
	}
	for i := 1; i < turns; i++ {
		if p50(off[i]) <= p50(off[i-1]) {
			t.Errorf("without the cache turn %d's TTFT (%v) does not exceed turn %d's (%v)", i+1, p50(off[i]), i, p50(off[i-1]))
		}
	}
}

// multiTurn runs 8 session slots for 120 s of virtual time, each starting
// sessions one after another, and returns the TTFTs by turn index.
func multiTurn(t *testing.T, cfg generate.Config, turns int) [][]time.Duration {
	const slots, run, think = 8, 120 * time.Second, 2 * time.Second
	ttft := make([][]time.Duration, turns)
	synctest.Test(t, func(t *testing.T) {
		e, _, stop := startSim(t, cfg)
		defer stop()
		end := time.Now().Add(run)
		var mu sync.Mutex
		var wg sync.WaitGroup
		for c := range slots {
			wg.Go(func() {
				time.Sleep(time.Duration(c) * think / slots) // stagger the sessions
				rng := rand.New(rand.NewPCG(uint64(c), 5))
				for time.Now().Before(end) {
					conv := randomTokens(rng, 512)
					for turn := range turns {
						s, err := e.Generate(context.Background(), generate.Request{Prompt: conv, MaxTokens: 128, IgnoreEOS: true})
						if err != nil {
							t.Error(err)
							return
						}
						var toks []generate.Token
						for err == nil {
							toks, err = s.Next(context.Background(), toks)
						}
						if err != io.EOF {
							t.Error(err)
							return
						}
						mu.Lock()
						ttft[turn] = append(ttft[turn], s.Result().FirstToken)
						mu.Unlock()
						for _, tk := range toks {
							conv = append(conv, tk.ID)
						}
						conv = append(conv, randomTokens(rng, 128)...)
						time.Sleep(think)
					}
				}
			})
		}
		wg.Wait()
	})
	for i, d := range ttft {
		if len(d) == 0 {
			t.Fatalf("no turn %d finished", i+1)
		}
	}
	return ttft
}

// A hit answers exactly as a miss does: the same prompts, alone and in a
// batch that others join and leave, greedy and sampled, with the cache on
// and off. Later prompts extend earlier conversations, so hits include
// generated tokens' blocks.
func TestSimHitAnswersAsAMiss(t *testing.T) {
	answers := func(cfg generate.Config) ([]string, int) {
		var out []string
		cached := 0
		synctest.Test(t, func(t *testing.T) {
			e, tok, stop := startSim(t, cfg)
			defer stop()
			rng := rand.New(rand.NewPCG(3, 3))
			base := randomTokens(rng, 300)
			var reqs []generate.Request
			for i := range 12 {
				p := slices.Concat(base[:100+10*i], randomTokens(rng, 1+i%3))
				sp := models.Sampling{}
				if i%2 == 1 {
					sp = models.Sampling{Temperature: 0.8, TopP: 0.9, Seed: uint64(i)}
				}
				reqs = append(reqs, generate.Request{Prompt: p, MaxTokens: 20 + i, Sampling: sp})
			}
			run := func(req generate.Request) (string, generate.Result) {
				s, err := e.Generate(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				text, res, err := generate.Collect(context.Background(), s)
				if err != nil {
					t.Fatal(err)
				}
				return text, res
			}
			// One at a time, then all at once (joins and leaves), then a
			// second turn extending the first answer.
			for _, req := range reqs {
				text, res := run(req)
				out = append(out, text)
				cached += res.CachedTokens
			}
			texts := make([]string, len(reqs))
			var wg sync.WaitGroup
			for i, req := range reqs {
				wg.Go(func() {
					time.Sleep(time.Duration(i) * 7 * time.Millisecond)
					texts[i], _ = run(req)
				})
			}
			wg.Wait()
			out = append(out, texts...)
			turn2 := slices.Concat(reqs[0].Prompt, tok.Encode(out[0]), randomTokens(rng, 5))
			text, res := run(generate.Request{Prompt: turn2, MaxTokens: 30})
			out = append(out, text)
			cached += res.CachedTokens
		})
		return out, cached
	}
	on, cachedOn := answers(generate.Config{MaxSeqs: 8})
	off, cachedOff := answers(generate.Config{MaxSeqs: 8, NoPrefixCache: true})
	if cachedOn == 0 || cachedOff != 0 {
		t.Fatalf("cached tokens: %d with the cache, %d without; want some, none", cachedOn, cachedOff)
	}
	for i := range on {
		if on[i] != off[i] {
			t.Errorf("answer %d differs:\nwith the cache    %q\nwithout the cache %q", i, on[i], off[i])
		}
	}
	for i := range 12 {
		if on[i] != on[12+i] {
			t.Errorf("answer %d alone %q, in a batch %q", i, on[i], on[12+i])
		}
	}
	t.Logf("%d answers equal; %d prompt tokens cached", len(on), cachedOn)
}
