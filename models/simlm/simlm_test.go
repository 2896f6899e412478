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
