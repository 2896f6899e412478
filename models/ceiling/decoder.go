package ceiling

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/inferhq/infer/models"
)

// DecodeConfig configures MeasureDecode. The zero value measures decoding at
// batches 1, 8 and 32 at a context of 256 tokens, and prefilling prompts of
// 32 and 128 tokens, for 3 s each.
type DecodeConfig struct {
	// Batches are the numbers of sequences decoding together. Default 1,
	// 8, 32.
	Batches []int
	// Context is the mean number of tokens in each sequence's cache while
	// its decode steps are timed. Default 256.
	Context int
	// Prompts are the prompt lengths of the prefill points, one sequence a
	// step. Default 32, 128.
	Prompts []int
	// Duration is how long each point is measured. Default 3s.
	Duration time.Duration
	// MinRuns is the fewest measured steps of each point. Default 3.
	MinRuns int
	// Window is the number of decode steps after which the sequences are
	// started anew (untimed), Window/2 tokens before Context, so that the
	// context stays within Window/2 of Context. Default 32.
	Window int
}

// WithDefaults returns c with its zero fields set to their defaults.
func (c DecodeConfig) WithDefaults() DecodeConfig {
	if len(c.Batches) == 0 {
		c.Batches = []int{1, 8, 32}
	}
	if c.Context <= 0 {
		c.Context = 256
	}
	if len(c.Prompts) == 0 {
		c.Prompts = []int{32, 128}
	}
	if c.Duration <= 0 {
		c.Duration = 3 * time.Second
	}
	if c.MinRuns <= 0 {
		c.MinRuns = 3
	}
	if c.Window <= 0 {
		c.Window = 32
	}
	return c
}

// KVTokens is the KV capacity the decode points of c need.
func (c DecodeConfig) KVTokens() int {
	c = c.WithDefaults()
	n := 0
	for _, b := range c.Batches {
		n = max(n, b*(c.Context+c.Window/2))
	}
	for _, p := range c.Prompts {
		n = max(n, p)
	}
	return n
}

// DecodeResult is a measurement of one decoder.
type DecodeResult struct {
	Model   string `json:"model"`
	Context int    `json:"context"`
	// Decode has a point per batch: Batch sequences decode one token each
	// step, so ItemsPerSec is output tokens per second, the latencies are
	// a step's, and PerItemNs is the cost of one token.
	Decode []Point `json:"decode"`
	// Prefill has a point per prompt length.
	Prefill []PrefillPoint `json:"prefill"`
}

// PrefillPoint is the measurement of steps that each prefill one prompt.
type PrefillPoint struct {
	PromptLen    int     `json:"prompt_len"`
	Runs         int     `json:"runs"`
	TokensPerSec float64 `json:"tokens_per_sec"`
	MeanMs       float64 `json:"mean_ms"`
	P50Ms        float64 `json:"p50_ms"`
	P99Ms        float64 `json:"p99_ms"`
}

// MeasureDecode measures f's decoder alone: the decode steps of each batch
// and the prefill of each prompt length, on one instance, with greedy
// sampling and random tokens. onDecode and onPrefill, if not nil, get each
// point as it is done.
func MeasureDecode(ctx context.Context, f models.DecoderFactory, cfg DecodeConfig,
	onDecode func(Point), onPrefill func(PrefillPoint)) (DecodeResult, error) {
	cfg = cfg.WithDefaults()
	info := f.Decoder()
	res := DecodeResult{Model: f.Info().Name, Context: cfg.Context}
	for _, p := range cfg.Prompts {
		if p < 1 || p > info.Context {
			return res, fmt.Errorf("prompt length %d: want 1..%d", p, info.Context)
		}
	}
	start := cfg.Context - cfg.Window/2
	switch {
	case start < 1 || cfg.Context+cfg.Window/2 > info.Context:
		return res, fmt.Errorf("context %d ± %d: want within 1..%d, the model's", cfg.Context, cfg.Window/2, info.Context)
	case cfg.KVTokens() > info.KVTokens:
		return res, fmt.Errorf("the points need %d tokens of KV cache, the model's bound is %d", cfg.KVTokens(), info.KVTokens)
	}
	d, err := f.New(ctx, 0)
	if err != nil {
		return res, fmt.Errorf("load model: %w", err)
	}
	defer d.Close()
	r := rand.New(rand.NewPCG(1, 2))
	tokens := func(n int) []int32 {
		t := make([]int32, n)
		for i := range t {
			t[i] = int32(r.IntN(info.Vocab))
			if t[i] == info.EOS {
				t[i] = 0
			}
		}
		return t
	}
	var id models.SeqID
	for _, n := range cfg.Batches {
		if n < 1 {
			return res, fmt.Errorf("batch %d: want at least 1", n)
		}
		seqs := make([]models.StepSeq, n)
		next := make([]int32, n)
		// refill starts the batch's sequences anew at start tokens.
		refill := func() error {
			for i := range seqs {
				d.Free(seqs[i].ID)
				id++
				seqs[i] = models.StepSeq{ID: id, Tokens: tokens(start), PromptLen: start, Sample: true}
				if err := d.Step(ctx, seqs[i:i+1], next[i:i+1]); err != nil {
					return err
				}
				seqs[i].Past, seqs[i].Tokens = start, next[i:i+1]
			}
			return nil
		}
		p, err := measure(ctx, n, cfg.Duration, cfg.MinRuns, func(steps int) (time.Duration, bool, error) {
			if steps%cfg.Window == 0 {
				if err := refill(); err != nil {
					return 0, false, fmt.Errorf("batch %d: %w", n, err)
				}
			}
			t0 := time.Now()
			err := d.Step(ctx, seqs, next)
			dt := time.Since(t0)
			if err != nil {
				return 0, false, fmt.Errorf("batch %d: %w", n, err)
			}
			for i := range seqs {
				seqs[i].Past++
				seqs[i].Tokens = next[i : i+1]
			}
			// The first step after a refill joins the new sequences: it
			// assembles the batch's cache, which a steady batch does not.
			return dt, steps%cfg.Window != 0, nil
		})
		if err != nil {
			return res, err
		}
		for i := range seqs {
			d.Free(seqs[i].ID)
		}
		res.Decode = append(res.Decode, p)
		if onDecode != nil {
			onDecode(p)
		}
	}
	for _, n := range cfg.Prompts {
		next := make([]int32, 1)
		p, err := measure(ctx, n, cfg.Duration, cfg.MinRuns, func(i int) (time.Duration, bool, error) {
			id++
			seq := []models.StepSeq{{ID: id, Tokens: tokens(n), PromptLen: n, Sample: true}}
			t0 := time.Now()
			err := d.Step(ctx, seq, next)
			dt := time.Since(t0)
			d.Free(id)
			if err != nil {
				return 0, false, fmt.Errorf("prefill %d: %w", n, err)
			}
			return dt, i > 0, nil // the first is a warm-up
		})
		if err != nil {
			return res, err
		}
		pp := PrefillPoint{PromptLen: n, Runs: p.Runs, TokensPerSec: p.ItemsPerSec, MeanMs: p.MeanMs, P50Ms: p.P50Ms, P99Ms: p.P99Ms}
		res.Prefill = append(res.Prefill, pp)
		if onPrefill != nil {
			onPrefill(pp)
		}
	}
	return res, nil
}

// DecodeFit is the cost model of a simulated decoder fitted to a
// DecodeResult: a step with n decoding sequences and p prefill tokens takes
// Step + n·PerSeq + p·PerPrefillToken.
type DecodeFit struct {
	Step            time.Duration `json:"step"`
	PerSeq          time.Duration `json:"per_seq"`
	PerPrefillToken time.Duration `json:"per_prefill_token"`
	// Decode and Prefill are the linear fits of the decode points (per
	// batch) and of the prefill points (per prompt token), with their
	// errors; Step and PerSeq come from Decode, PerPrefillToken is
	// Prefill's slope.
	Decode  Fit `json:"decode"`
	Prefill Fit `json:"prefill"`
}

// FitDecode fits the simulated decoder's costs to r. It needs two batch
// sizes and two prompt lengths.
func FitDecode(r DecodeResult) (DecodeFit, error) {
	dec, err := FitLinear(r.Decode)
	if err != nil {
		return DecodeFit{}, fmt.Errorf("decode points: %w", err)
	}
	points := make([]Point, len(r.Prefill))
	for i, p := range r.Prefill {
		points[i] = Point{Batch: p.PromptLen, MeanMs: p.MeanMs}
	}
	pre, err := FitLinear(points)
	if err != nil {
		return DecodeFit{}, errors.New("prefill points: fit needs at least two prompt lengths")
	}
	return DecodeFit{Step: dec.Fixed, PerSeq: dec.PerItem, PerPrefillToken: pre.PerItem, Decode: dec, Prefill: pre}, nil
}
