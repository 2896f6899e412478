package onnx

import (
	"errors"
	"slices"
	"testing"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/gpt2"
)

// hitTolerance is how far the logits of a sequence that starts after cached
// blocks may be from those of one that computed its whole prompt.
const hitTolerance = 1e-5

// sameTrace fails t unless got has want's greedy tokens and its logits
// within tol, and returns the largest difference.
func sameTrace(t *testing.T, what string, want, got trace, tol float64) float64 {
	t.Helper()
	worst := 0.0
	for k := range want.tokens {
		if k >= len(got.tokens) {
			t.Fatalf("%s: %d tokens, want %d", what, len(got.tokens), len(want.tokens))
		}
		diff := maxDiff(want.logits[k], got.logits[k])
		worst = max(worst, diff)
		if diff > tol || want.tokens[k] != got.tokens[k] {
			t.Fatalf("%s, token %d: %d, want %d; logits differ by %g (at most %g)", what, k, got.tokens[k],
				want.tokens[k], diff, tol)
		}
	}
	return worst
}

// decodeBlocks is decodeAlone with a block table: p is fed from past on
// (the blocks before past hold its first past tokens), then steps tokens
// are decoded.
func decodeBlocks(t *testing.T, d *Decoder, id models.SeqID, p []int32, past, steps int, b *blockPlan, table []int32) trace {
	t.Helper()
	var tr trace
	table = b.extend(slices.Clone(table), len(p))
	next, logits := step(t, d, models.StepSeq{ID: id, Past: past, Tokens: p[past:], PromptLen: len(p), Sample: true,
		BlockSize: b.size, Blocks: table})
	for {
		tr.tokens, tr.logits = append(tr.tokens, next[0]), append(tr.logits, logits[0])
		if len(tr.tokens) == steps+1 {
			break
		}
		at := len(p) + len(tr.tokens) - 1
		table = b.extend(table, at+1)
		next, logits = step(t, d, models.StepSeq{ID: id, Past: at, Tokens: next[:1], PromptLen: len(p), Sample: true,
			BlockSize: b.size, Blocks: table})
	}
	d.Free(id)
	return tr
}

// TestDecoderPrefixHit: a sequence that starts after cached blocks (the
// engine's prefix cache) decodes what it decodes when it computes its whole
// prompt: the same greedy tokens, logits within 1e-5; alone, with one token
// or several after the prefix, while the sequence that filled the blocks
// still runs, and in a batch where 15 others join, leave, sit steps out and
// are preempted (every third of them a hit too) against the same schedule
// without a hit. Every graph variant the decoder serves.
func TestDecoderPrefixHit(t *testing.T) {
	for _, variant := range []struct {
		name string
		spec gpt2.Spec
	}{{"in place", tinySpec()}, {"GQA", tinySpec(gqa)}, {"GQA int8 KV", tinySpec(gqaInt8)}, {"position_ids", tinySpec(standard)}, {"all logits", tinySpec(allLogits)}, {"no position_ids", tinySpec(noPositionIDs, allLogits)},
		{"merged", tinySpec(merged, allLogits)}} {
		t.Run(variant.name, func(t *testing.T) {
			_, d := openTestDecoder(t, variant.spec, DecoderConfig{})
			if !d.info.BlockKV {
				t.Fatal("DecoderInfo.BlockKV is false")
			}
			const size, steps = 16, 12
			target := prompt(5, 45) // two whole blocks and 13 tokens
			alone := decodeAlone(t, d, 1, target, steps, models.Sampling{})
			b := &blockPlan{size: size}

			// The writer computes the whole prompt in blocks: no change.
			writer := decodeBlocks(t, d, 2, target, 0, steps, b, nil)
			sameTrace(t, "computed in blocks", alone, writer, 0)
			table := []int32{0, 1} // its first two blocks, now cached
			copied := d.store.copied

			// A hit alone, after 32 cached tokens.
			hit := decodeBlocks(t, d, 3, target, 32, steps, b, table)
			worst := sameTrace(t, "after 32 cached tokens", alone, hit, hitTolerance)
			if got := d.store.copied - copied; got < 2 {
				t.Errorf("%d blocks copied for a hit of 2 and what it filled", got)
			}

			// One token after the prefix: the last prompt token alone.
			short := target[:33]
			want1 := decodeAlone(t, d, 4, short, steps, models.Sampling{})
			got1 := decodeBlocks(t, d, 5, short, 32, steps, b, table)
			worst = max(worst, sameTrace(t, "one token after 32 cached", want1, got1, hitTolerance))

			// While another sequence holding the blocks runs: both start
			// after them in one step, then decode together.
			next, logits := step(t, d,
				models.StepSeq{ID: 6, Past: 32, Tokens: target[32:], PromptLen: 45, Sample: true, BlockSize: size,
					Blocks: b.extend(slices.Clone(table), 45)},
				models.StepSeq{ID: 7, Past: 32, Tokens: short[32:], PromptLen: 33, Sample: true, BlockSize: size,
					Blocks: b.extend(slices.Clone(table), 33)})
			if next[0] != alone.tokens[0] || next[1] != want1.tokens[0] ||
				maxDiff(logits[0], alone.logits[0]) > hitTolerance || maxDiff(logits[1], want1.logits[0]) > hitTolerance {
				t.Errorf("two hits in one step: tokens %v, want %d %d", next, alone.tokens[0], want1.tokens[0])
			}
			d.Free(6)
			d.Free(7)

			// In a batch with joins and leaves, against the same schedule
			// without a hit.
			b.fillPrefix(t, d, 8, target[:32])
			cold := mixedSchedule(t, d, target, steps, models.Sampling{}, 1, nil)
			warm := mixedSchedule(t, d, target, steps, models.Sampling{}, 1, b)
			worst = max(worst, sameTrace(t, "in company, a hit", cold, warm, hitTolerance))
			sameTrace(t, "in company, a hit against alone", alone, warm, 1e-4)
			t.Logf("hits decode the greedy tokens of misses, logits within %.2g", worst)

			if d.Used() != 0 || d.own != 0 || d.store.inUse != 0 {
				t.Errorf("after every sequence left: Used() = %d, own %d, blocks in use %d; want 0", d.Used(), d.own,
					d.store.inUse)
			}
		})
	}
}

// TestDecoderBlockTablesChecked: steps whose block tables break the
// contract of models/decoder.go are refused before anything runs, and the
// sequences the instance holds carry on.
func TestDecoderBlockTablesChecked(t *testing.T) {
	_, d := openTestDecoder(t, tinySpec(), DecoderConfig{KVTokens: 256})
	const size = 16
	p := prompt(9, 40)
	want := decodeAlone(t, d, 1, p, 2, models.Sampling{})
	next, _ := step(t, d, models.StepSeq{ID: 2, Tokens: p, PromptLen: 40, Sample: true, BlockSize: size, Blocks: []int32{0, 1, 2}})
	if next[0] != want.tokens[0] {
		t.Fatalf("first token %d, want %d", next[0], want.tokens[0])
	}
	for _, tc := range []struct {
		name string
		seq  models.StepSeq
		want error
	}{
		{"writes a block another holds", models.StepSeq{ID: 3, Tokens: p[:3], PromptLen: 3, BlockSize: size, Blocks: []int32{0}}, models.ErrInvalidInput},
		{"starts after a block never filled", models.StepSeq{ID: 3, Past: 16, Tokens: p[:3], PromptLen: 19, BlockSize: size, Blocks: []int32{7, 3}}, models.ErrInvalidInput},
		{"starts after a block half full", models.StepSeq{ID: 3, Past: 48, Tokens: p[:3], PromptLen: 51, BlockSize: size, Blocks: []int32{0, 1, 2, 3}}, models.ErrInvalidInput},
		{"starts mid-block", models.StepSeq{ID: 3, Past: 8, Tokens: p[:3], PromptLen: 11, BlockSize: size, Blocks: []int32{0}}, models.ErrInvalidInput},
		{"a table too short", models.StepSeq{ID: 3, Tokens: p[:20], PromptLen: 20, BlockSize: size, Blocks: []int32{3}}, models.ErrInvalidInput},
		{"a block outside the pool", models.StepSeq{ID: 3, Tokens: p[:3], PromptLen: 3, BlockSize: size, Blocks: []int32{16}}, ErrKVFull},
		{"another block size while blocks are held", models.StepSeq{ID: 3, Tokens: p[:3], PromptLen: 3, BlockSize: 8, Blocks: []int32{5}}, models.ErrInvalidInput},
		{"a table that changes", models.StepSeq{ID: 2, Past: 40, Tokens: next[:1], PromptLen: 40, Sample: true, BlockSize: size, Blocks: []int32{0, 1, 5}}, models.ErrInvalidInput},
		{"blocks, then none", models.StepSeq{ID: 2, Past: 40, Tokens: next[:1], PromptLen: 40, Sample: true}, models.ErrInvalidInput},
		{"past without blocks or a cache", models.StepSeq{ID: 3, Past: 16, Tokens: p[:3], PromptLen: 19}, nil},
	} {
		err := d.Step(t.Context(), []models.StepSeq{tc.seq}, make([]int32, 1))
		if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	next, logits := step(t, d, models.StepSeq{ID: 2, Past: 40, Tokens: next[:1], PromptLen: 40, Sample: true, BlockSize: size, Blocks: []int32{0, 1, 2}})
	if next[0] != want.tokens[1] || maxDiff(logits[0], want.logits[1]) > hitTolerance {
		t.Errorf("after refused steps: token %d, want %d", next[0], want.tokens[1])
	}
	// A sequence without a table beside those with tables in one step is
	// refused too: one step has one block size.
	err := d.Step(t.Context(), []models.StepSeq{
		{ID: 2, Past: 41, Tokens: next[:1], PromptLen: 40, Sample: true, BlockSize: size, Blocks: []int32{0, 1, 2}},
		{ID: 9, Tokens: p[:3], PromptLen: 3, Sample: true}}, make([]int32, 2))
	if !errors.Is(err, models.ErrInvalidInput) {
		t.Errorf("a step with and without tables: %v, want ErrInvalidInput", err)
	}
	d.Free(2)
	if d.store.inUse != 0 {
		t.Errorf("%d blocks in use after the sequence left", d.store.inUse)
	}
}
