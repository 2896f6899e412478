package llama

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/server/generate"
)

// Prefix caching on the Llama graphs: a sequence that starts after blocks
// another computed decodes what it decodes computing its whole prompt.

// TestDecoderPrefixHit: on every test graph (stories260k, grouped-query,
// multi-head and multi-query attention), a sequence that starts after 32
// cached tokens gives the logits of one that computed all of its prompt,
// within 1e-5, at every step of a greedy decode; and a sequence with the
// same prefix that decodes beside it meanwhile changes nothing.
func TestDecoderPrefixHit(t *testing.T) {
	const size = 16
	for _, m := range testModels() {
		t.Run(m.name, func(t *testing.T) {
			f, d := openDecoder(t, m, 0)
			if !f.Decoder().BlockKV {
				t.Fatal("BlockKV is false")
			}
			info := f.Decoder()
			p := make([]int32, 36)
			for i := range p {
				p[i] = int32(1+(i*37+11)) % int32(info.Vocab)
			}
			p[0] = 1 // BOS
			steps := min(16, info.Context-len(p)-1)
			miss := traceOf(t, d, []models.StepSeq{{ID: 1, Tokens: p, PromptLen: len(p), Sample: true}}, steps, nil)

			// The writer fills blocks 0 and 1 and part of 2, and leaves.
			next := int32(2)
			traceOf(t, d, []models.StepSeq{{ID: 2, Tokens: p, PromptLen: len(p), Sample: true, BlockSize: size, Blocks: []int32{0, 1}}}, 0, &next)
			// Two hits in one step: the target, and another prompt with
			// the same 32 tokens first.
			other := append(slices.Clone(p[:32]), 5, 6, 7)
			hit := traceOf(t, d, []models.StepSeq{
				{ID: 3, Past: 32, Tokens: p[32:], PromptLen: len(p), Sample: true, BlockSize: size, Blocks: []int32{0, 1}},
				{ID: 4, Past: 32, Tokens: other[32:], PromptLen: len(other), Sample: true, BlockSize: size, Blocks: []int32{0, 1}},
			}, steps, &next)
			worst := 0.0
			for k := range miss.tokens {
				diff := 0.0
				for v := range miss.logits[k] {
					diff = max(diff, math.Abs(float64(miss.logits[k][v]-hit.logits[k][v])))
				}
				worst = max(worst, diff)
				if diff > 1e-5 || miss.tokens[k] != hit.tokens[k] {
					t.Fatalf("token %d: %d after a hit, %d computed whole; logits differ by %g", k, hit.tokens[k], miss.tokens[k], diff)
				}
			}
			t.Logf("%d greedy tokens after a hit of 32 equal those computed whole, logits within %.2g", len(miss.tokens), worst)
		})
	}
}

// decodeTrace is the greedy tokens of a decode and the logits each was
// drawn from.
type decodeTrace struct {
	tokens []int32
	logits [][]float32
}

// traceOf runs seqs' first step, then steps decode steps of all of them
// together, and returns the first sequence's trace; it frees them all.
// Sequences with a block size have their tables grown before each step
// with new blocks numbered from *block on.
func traceOf(t *testing.T, d interface {
	models.Decoder
	Logits(int) []float32
}, seqs []models.StepSeq, steps int, block *int32) decodeTrace {
	t.Helper()
	var tr decodeTrace
	next := make([]int32, len(seqs))
	for k := 0; ; k++ {
		for i := range seqs {
			for s := &seqs[i]; s.BlockSize > 0 && len(s.Blocks)*s.BlockSize < s.Past+len(s.Tokens); *block++ {
				s.Blocks = append(s.Blocks, *block)
			}
		}
		if err := d.Step(context.Background(), seqs, next); err != nil {
			t.Fatal(err)
		}
		tr.tokens, tr.logits = append(tr.tokens, next[0]), append(tr.logits, slices.Clone(d.Logits(0)))
		if k == steps {
			break
		}
		for i := range seqs {
			seqs[i].Past += len(seqs[i].Tokens)
			seqs[i].Tokens = next[i : i+1]
		}
	}
	for _, s := range seqs {
		d.Free(s.ID)
	}
	return tr
}

// TestGreedyAfterACachedPrefix: through the engine with its prefix cache,
// stories that share a long beginning are the Go reference's greedy text,
// whether their beginning is computed (the first) or found cached (the
// others, alone and while 15 others with the same beginning or without it
// join and leave their batch); and with the cache off they are the same.
func TestGreedyAfterACachedPrefix(t *testing.T) {
	f := openStories(t, 0)
	ref, tok := storiesReference(t)
	shared := strings.Repeat("Lily and Ben went to the park with their mom. They saw a big dog and a red ball. ", 3)
	var prompts []string
	for _, end := range []string{"Lily said", "The dog ran to", "Ben was sad because", "Mom smiled and"} {
		prompts = append(prompts, shared+end)
	}
	want := make([]string, len(prompts))
	for i, p := range prompts {
		want[i] = ref.story(tok, p, 60).text
	}
	if n := len(tok.Encode(shared)); n < 64 {
		t.Fatalf("the shared beginning has %d tokens: too few for a test of blocks of 16", n)
	}
	for _, cache := range []bool{true, false} {
		t.Run(fmt.Sprintf("cache=%v", cache), func(t *testing.T) {
			e := startEngine(t, f, generate.Config{MaxSeqs: 16, MaxBatchedTokens: 256, MaxLatency: 20 * time.Millisecond,
				NoPrefixCache: !cache})
			req := generate.Request{MaxTokens: 60}
			for i, p := range prompts {
				g := generateText(t.Context(), e, f.Tokenizer(), p, req, nil)
				if g.err != nil || g.text != want[i] {
					t.Fatalf("prompt %d alone: %q (%v)\nthe reference: %q", i, g.text, g.err, want[i])
				}
				if hit := g.res.CachedTokens > 0; hit != (cache && i > 0) {
					t.Errorf("prompt %d alone: %d cached tokens", i, g.res.CachedTokens)
				}
			}
			var wg sync.WaitGroup
			got := make([]generated, len(prompts))
			others := make([]error, 12)
			for i := range others {
				p := fmt.Sprintf("Tom had %d apples. ", i)
				if i%2 == 0 {
					p = shared + p
				}
				wg.Go(func() {
					others[i] = generateText(t.Context(), e, f.Tokenizer(), p, generate.Request{MaxTokens: 10 + 7*i, IgnoreEOS: true,
						Sampling: models.Sampling{Temperature: float32(i%3) * 0.5, Seed: uint64(i)}}, nil).err
				})
				if i == 4 {
					for j, p := range prompts {
						wg.Go(func() { got[j] = generateText(t.Context(), e, f.Tokenizer(), p, req, nil) })
					}
				}
			}
			wg.Wait()
			for i, err := range others {
				if err != nil {
					t.Errorf("other %d: %v", i, err)
				}
			}
			for i, g := range got {
				if g.err != nil || g.text != want[i] {
					t.Errorf("prompt %d in company: %q (%v)\nthe reference: %q", i, g.text, g.err, want[i])
				}
				if hit := g.res.CachedTokens > 0; hit != cache {
					t.Errorf("prompt %d in company: %d cached tokens", i, g.res.CachedTokens)
				}
			}
		})
	}
}
