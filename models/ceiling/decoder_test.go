package ceiling

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/inferhq/infer/models"
)

// fakeDecoder checks the calls MeasureDecode makes against the decoder
// contract and records the contexts of decode steps.
type fakeDecoder struct {
	held     map[models.SeqID]int // tokens in the cache
	kv       int
	contexts []int // Past of each decode step's first sequence
	closed   bool
}

func (d *fakeDecoder) Step(_ context.Context, seqs []models.StepSeq, next []int32) error {
	used := 0
	for _, n := range d.held {
		used += n
	}
	for i, s := range seqs {
		if d.held[s.ID] != s.Past {
			return fmt.Errorf("sequence %d: past %d, holds %d", s.ID, s.Past, d.held[s.ID])
		}
		if len(s.Tokens) == 1 && s.Past > 0 && i == 0 {
			d.contexts = append(d.contexts, s.Past)
		}
		d.held[s.ID] += len(s.Tokens)
		used += len(s.Tokens)
		next[i] = 1
	}
	if used > d.kv {
		return fmt.Errorf("%d tokens held, bound %d", used, d.kv)
	}
	return nil
}

func (d *fakeDecoder) Free(id models.SeqID) { delete(d.held, id) }
func (d *fakeDecoder) Close() error         { d.closed = true; return nil }

type fakeFactory struct {
	info models.DecoderInfo
	dec  *fakeDecoder
}

func (f *fakeFactory) Info() models.Info                                { return models.Info{Name: "fake"} }
func (f *fakeFactory) Decoder() models.DecoderInfo                      { return f.info }
func (f *fakeFactory) Tokenizer() models.Tokenizer                      { return nil }
func (f *fakeFactory) Close() error                                     { return nil }
func (f *fakeFactory) New(context.Context, int) (models.Decoder, error) { return f.dec, nil }

func TestMeasureDecode(t *testing.T) {
	info := models.DecoderInfo{Context: 1024, EOS: 9, Vocab: 10, KVTokens: 1000}
	dec := &fakeDecoder{held: map[models.SeqID]int{}, kv: info.KVTokens}
	f := &fakeFactory{info: info, dec: dec}
	cfg := DecodeConfig{Batches: []int{1, 3}, Context: 100, Prompts: []int{5, 50}, Duration: time.Nanosecond, MinRuns: 40, Window: 8}
	var decodes, prefills int
	res, err := MeasureDecode(context.Background(), f, cfg, func(Point) { decodes++ }, func(PrefillPoint) { prefills++ })
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Decode) != 2 || res.Decode[1].Batch != 3 || res.Decode[1].Runs < 40 || len(res.Prefill) != 2 ||
		res.Prefill[1].PromptLen != 50 || res.Prefill[1].Runs < 40 || decodes != 2 || prefills != 2 || res.Context != 100 {
		t.Errorf("result = %+v", res)
	}
	for _, c := range dec.contexts {
		if c < 96 || c >= 104 {
			t.Fatalf("a decode step at context %d, want 100 ± 4", c)
		}
	}
	if len(dec.held) != 0 || !dec.closed {
		t.Errorf("after the bench: %d sequences held, closed %v", len(dec.held), dec.closed)
	}
	for _, tc := range []struct {
		cfg  DecodeConfig
		want string
	}{
		{DecodeConfig{Context: 1020, Window: 16}, "want within 1..1024"},
		{DecodeConfig{Context: 4, Window: 16}, "want within 1..1024"},
		{DecodeConfig{Batches: []int{32}, Context: 100}, "need 3712 tokens of KV cache, the model's bound is 1000"},
		{DecodeConfig{Batches: []int{0}}, "batch 0"},
		{DecodeConfig{Batches: []int{1}, Prompts: []int{2000}}, "prompt length 2000"},
	} {
		if _, err := MeasureDecode(context.Background(), f, tc.cfg, nil, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("MeasureDecode(%+v) = %v, want an error containing %q", tc.cfg, err, tc.want)
		}
	}
}

func TestFitDecode(t *testing.T) {
	// Steps of exactly 2ms + 0.5ms·n, prefills of 2ms + 0.1ms·p.
	var r DecodeResult
	for _, n := range []int{1, 8, 32} {
		r.Decode = append(r.Decode, Point{Batch: n, MeanMs: 2 + 0.5*float64(n)})
	}
	for _, p := range []int{32, 128} {
		r.Prefill = append(r.Prefill, PrefillPoint{PromptLen: p, MeanMs: 2 + 0.1*float64(p)})
	}
	fit, err := FitDecode(r)
	if err != nil {
		t.Fatal(err)
	}
	if fit.Step != 2*time.Millisecond || fit.PerSeq != 500*time.Microsecond || fit.PerPrefillToken != 100*time.Microsecond {
		t.Errorf("FitDecode = %+v, want 2ms, 500µs, 100µs", fit)
	}
	r.Prefill = r.Prefill[:1]
	if _, err := FitDecode(r); err == nil || !strings.Contains(err.Error(), "two prompt lengths") {
		t.Errorf("FitDecode with one prompt length = %v", err)
	}
}
