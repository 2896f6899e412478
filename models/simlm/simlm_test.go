package simlm

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/bpe"
)

func TestStepCost(t *testing.T) {
	var waited []time.Duration
	f, err := New(Config{Step: 8 * time.Millisecond, PerSeq: 250 * time.Microsecond, PerPrefillToken: 20 * time.Microsecond,
		Wait: func(d time.Duration) { waited = append(waited, d) }})
	if err != nil {
		t.Fatal(err)
	}
	d, _ := f.New(context.Background(), 0)
	next := make([]int32, 3)
	// Two prompts prefilled (10 and 5 tokens): 8ms + 15 × 20µs.
	steps := []models.StepSeq{
		{ID: 1, Tokens: make([]int32, 10), PromptLen: 10, Sample: true},
		{ID: 2, Tokens: make([]int32, 5), PromptLen: 5, Sample: true},
	}
	if err := d.Step(context.Background(), steps, next[:2]); err != nil {
		t.Fatal(err)
	}
	// Then both decode while a third prefills 4 tokens: 8ms + 2 × 250µs + 4 × 20µs.
	steps = []models.StepSeq{
		{ID: 1, Past: 10, Tokens: next[:1], PromptLen: 10, Sample: true},
		{ID: 2, Past: 5, Tokens: next[1:2], PromptLen: 5, Sample: true},
		{ID: 3, Tokens: make([]int32, 4), PromptLen: 4, Sample: true},
	}
	if err := d.Step(context.Background(), steps, make([]int32, 3)); err != nil {
		t.Fatal(err)
	}
	if want := []time.Duration{8300 * time.Microsecond, 8580 * time.Microsecond}; !slices.Equal(waited, want) {
		t.Errorf("waited %v, want %v", waited, want)
	}
}

// generate runs one sequence alone to its natural EOS (or max) and returns
// its tokens.
func generate(t *testing.T, d models.Decoder, id models.SeqID, prompt []int32, sp models.Sampling, max int) []int32 {
	t.Helper()
	next := make([]int32, 1)
	if err := d.Step(context.Background(), []models.StepSeq{{ID: id, Tokens: prompt, PromptLen: len(prompt), Sample: true, Sampling: sp}}, next); err != nil {
		t.Fatal(err)
	}
	out := []int32{next[0]}
	for len(out) < max && out[len(out)-1] != bpe.EOS {
		past := len(prompt) + len(out) - 1
		if err := d.Step(context.Background(), []models.StepSeq{{ID: id, Past: past, Tokens: out[len(out)-1:], PromptLen: len(prompt), Sample: true, Sampling: sp}}, next); err != nil {
			t.Fatal(err)
		}
		out = append(out, next[0])
	}
	d.Free(id)
	return out
}

func TestTokensAreDeterministicPerPromptAndSeed(t *testing.T) {
	f, _ := New(Config{})
	d, _ := f.New(context.Background(), 0)
	p1, p2 := []int32{1, 2, 3}, []int32{1, 2, 4}
	greedy := models.Sampling{}
	a, b := generate(t, d, 1, p1, greedy, 2000), generate(t, d, 2, p1, greedy, 2000)
	if !slices.Equal(a, b) {
		t.Error("the same prompt gave different answers")
	}
	if a[len(a)-1] != bpe.EOS || len(a) != f.NaturalLength(p1) {
		t.Errorf("answer of %d tokens ending in %d; want EOS at the natural length %d", len(a), a[len(a)-1], f.NaturalLength(p1))
	}
	if slices.Equal(a, generate(t, d, 3, p2, greedy, 2000)) {
		t.Error("different prompts gave the same answer")
	}
	s1 := generate(t, d, 4, p1, models.Sampling{Temperature: 1, Seed: 1}, 50)
	if !slices.Equal(s1, generate(t, d, 5, p1, models.Sampling{Temperature: 1, Seed: 1}, 50)) || slices.Equal(s1, generate(t, d, 6, p1, models.Sampling{Temperature: 1, Seed: 2}, 50)) {
		t.Error("sampling is not deterministic per seed")
	}
	// Chunked prefill and a recompute after preemption give the same tokens.
	next := make([]int32, 1)
	d.Step(context.Background(), []models.StepSeq{{ID: 7, Tokens: p1[:2], PromptLen: 3}}, next)
	d.Step(context.Background(), []models.StepSeq{{ID: 7, Past: 2, Tokens: p1[2:], PromptLen: 3, Sample: true}}, next)
	if next[0] != a[0] {
		t.Errorf("chunked prefill gave %d, want %d", next[0], a[0])
	}
	d.Free(7)
	re := append(append([]int32(nil), p1...), a[:5]...)
	d.Step(context.Background(), []models.StepSeq{{ID: 7, Tokens: re, PromptLen: 3, Sample: true}}, next)
	if next[0] != a[5] {
		t.Errorf("recompute gave %d, want %d", next[0], a[5])
	}
}

func TestNaturalLengthsAreLognormal(t *testing.T) {
	f, _ := New(Config{})
	var ls []int
	for i := range 4000 {
		ls = append(ls, f.NaturalLength([]int32{int32(i), 7}))
	}
	slices.Sort(ls)
	if med := ls[len(ls)/2]; med < 90 || med > 110 {
		t.Errorf("median length %d, want about 100", med)
	}
	if ls[0] < 1 || ls[len(ls)-1] > 1024 {
		t.Errorf("lengths from %d to %d, want 1 to 1024", ls[0], ls[len(ls)-1])
	}
	// sigma 0.8: the 84th percentile is about 100·e^0.8 ≈ 223.
	if p84 := ls[len(ls)*84/100]; p84 < 195 || p84 > 250 {
		t.Errorf("84th percentile %d, want about 223", p84)
	}
}

func TestKVCapacityAndConsistencyAreChecked(t *testing.T) {
	f, err := New(Config{Context: 16, KVTokens: 20})
	if err != nil {
		t.Fatal(err)
	}
	d, _ := f.New(context.Background(), 0)
	next := make([]int32, 2)
	if err := d.Step(context.Background(), []models.StepSeq{{ID: 1, Tokens: make([]int32, 12), PromptLen: 12, Sample: true}}, next); err != nil {
		t.Fatal(err)
	}
	err = d.Step(context.Background(), []models.StepSeq{{ID: 2, Tokens: make([]int32, 10), PromptLen: 10, Sample: true}}, next)
	if !errors.Is(err, ErrKVFull) {
		t.Errorf("step past the KV capacity: %v, want ErrKVFull", err)
	}
	if err := d.Step(context.Background(), []models.StepSeq{{ID: 1, Past: 3, Tokens: next[:1], PromptLen: 12, Sample: true}}, next); !errors.Is(err, ErrBadStep) {
		t.Errorf("wrong past: %v, want ErrBadStep", err)
	}
	if err := d.Step(context.Background(), []models.StepSeq{{ID: 1, Past: 12, Tokens: make([]int32, 5), PromptLen: 12}}, next); !errors.Is(err, ErrBadStep) {
		t.Errorf("past the context: %v, want ErrBadStep", err)
	}
	d.Free(1)
	if got := d.(*Decoder).Held(); got != 0 {
		t.Errorf("held %d after Free", got)
	}
	if _, err := New(Config{Context: 100, KVTokens: 50}); err == nil {
		t.Error("New accepted a KV capacity below the context")
	}
	if _, err := New(Config{Step: -time.Millisecond}); err == nil {
		t.Error("New accepted a negative cost")
	}
}

// step runs one step of seqs and returns the sampled tokens.
func step(t *testing.T, d models.Decoder, seqs ...models.StepSeq) ([]int32, error) {
	t.Helper()
	next := make([]int32, len(seqs))
	err := d.Step(context.Background(), seqs, next)
	return next, err
}

// With block tables the KV follows the blocks: a sequence that starts after
// another's cached blocks pays only for the rest of its prompt, answers as
// if it had computed all of it, and the instance holds exactly the blocks in
// its sequences' tables.
func TestKVFollowsTheBlocks(t *testing.T) {
	var waited []time.Duration
	f, _ := New(Config{Step: time.Millisecond, PerSeq: 100 * time.Microsecond, PerPrefillToken: 10 * time.Microsecond,
		Context: 128, KVTokens: 8 * 16, Wait: func(d time.Duration) { waited = append(waited, d) }})
	d, _ := f.New(context.Background(), 0)
	sd := d.(*Decoder)
	prompt := make([]int32, 40)
	for i := range prompt {
		prompt[i] = int32(100 + i)
	}
	const B = 16
	// The reference: the whole prompt without blocks.
	want := generate(t, d, 9, prompt, models.Sampling{}, 6)

	// Sequence 1 computes the prompt into blocks 0, 1, 2 and decodes.
	got, err := step(t, d, models.StepSeq{ID: 1, Tokens: prompt, PromptLen: 40, Sample: true, BlockSize: B, Blocks: []int32{0, 1, 2}})
	if err != nil || got[0] != want[0] {
		t.Fatalf("first token %d, %v; want %d", got[0], err, want[0])
	}
	// Sequence 2 starts after the two full blocks: it feeds 8 tokens.
	waited = waited[:0]
	got, err = step(t, d,
		models.StepSeq{ID: 1, Past: 40, Tokens: got[:1], PromptLen: 40, Sample: true, BlockSize: B, Blocks: []int32{0, 1, 2}},
		models.StepSeq{ID: 2, Past: 32, Tokens: prompt[32:], PromptLen: 40, Sample: true, BlockSize: B, Blocks: []int32{0, 1, 5}})
	if err != nil || got[0] != want[1] || got[1] != want[0] {
		t.Fatalf("tokens %v, %v; want %d (sequence 1's second) and %d (sequence 2's first, as a miss's)", got, err, want[1], want[0])
	}
	if want := time.Millisecond + 100*time.Microsecond + 8*10*time.Microsecond; waited[0] != want {
		t.Errorf("step cost %v, want %v: the cached tokens cost nothing", waited[0], want)
	}
	if sd.HeldBlocks() != 4 || sd.Held() != 41+40 {
		t.Errorf("holds %d blocks, %d tokens; want 4 (0, 1, 2, 5), 81", sd.HeldBlocks(), sd.Held())
	}
	// A sequence that starts past the prompt (a recompute after a
	// preemption) reads the prompt's hash from its block.
	d.Free(1)
	if _, err := step(t, d, models.StepSeq{ID: 3, Past: 32, Tokens: []int32{7, 7, 7, 7, 7, 7, 7, 7}, PromptLen: 20, Sample: true, BlockSize: B, Blocks: []int32{0, 1, 6}}); err != nil {
		t.Fatal(err)
	}
	if sd.HeldBlocks() != 4 {
		t.Errorf("holds %d blocks after 1 left and 3 came, want 4 (0, 1, 5, 6)", sd.HeldBlocks())
	}
	// The device's own checks.
	for _, tc := range []struct {
		name string
		seq  models.StepSeq
		want error
	}{
		{"writes a block another holds", models.StepSeq{ID: 4, Tokens: prompt[:3], PromptLen: 3, BlockSize: B, Blocks: []int32{0}}, ErrBadStep},
		{"starts after a block never filled", models.StepSeq{ID: 4, Past: 16, Tokens: prompt[:3], PromptLen: 19, BlockSize: B, Blocks: []int32{7, 3}}, ErrBadStep},
		{"starts mid-block", models.StepSeq{ID: 4, Past: 8, Tokens: prompt[:3], PromptLen: 11, BlockSize: B, Blocks: []int32{0}}, ErrBadStep},
		{"a table too short", models.StepSeq{ID: 4, Tokens: prompt[:20], PromptLen: 20, BlockSize: B, Blocks: []int32{3}}, ErrBadStep},
		{"a block outside the pool", models.StepSeq{ID: 4, Tokens: prompt[:3], PromptLen: 3, BlockSize: B, Blocks: []int32{8}}, ErrKVFull},
		{"another block size while blocks are held", models.StepSeq{ID: 4, Tokens: prompt[:3], PromptLen: 3, BlockSize: 8, Blocks: []int32{3}}, ErrBadStep},
	} {
		if _, err := step(t, d, tc.seq); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		d.Free(4) // as the engine frees the sequences of a failed step
	}
	d.Free(2)
	d.Free(3)
	if sd.HeldBlocks() != 0 || sd.Held() != 0 {
		t.Errorf("holds %d blocks, %d tokens after all left", sd.HeldBlocks(), sd.Held())
	}
	// Freed sequences leave their blocks' contents: a new one starts after
	// blocks 0 and 1 and answers as the miss did.
	if got, err := step(t, d, models.StepSeq{ID: 5, Past: 32, Tokens: prompt[32:], PromptLen: 40, Sample: true, BlockSize: B, Blocks: []int32{0, 1, 2}}); err != nil || got[0] != want[0] {
		t.Errorf("after the others left: %d, %v; want %d", got[0], err, want[0])
	}
}
