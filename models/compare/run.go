package compare

import (
	"context"
	"errors"
	"fmt"

	"github.com/inferhq/infer/models"
)

// Predict runs texts through an encoder instance in batches of batch items
// and returns one output per text.
func Predict(ctx context.Context, f models.Factory, m models.Model, texts []string, batch int) ([]models.Output, error) {
	if batch < 1 {
		return nil, fmt.Errorf("batch %d: want at least 1", batch)
	}
	out := make([]models.Output, len(texts))
	in := make([]models.Input, 0, batch)
	for start := 0; start < len(texts); start += batch {
		in = in[:0]
		end := min(start+batch, len(texts))
		for i := start; i < end; i++ {
			x, err := f.Prepare(texts[i])
			if err != nil {
				return nil, fmt.Errorf("item %d: %w", i+1, err)
			}
			in = append(in, x)
		}
		if err := m.Predict(ctx, in, out[start:end]); err != nil {
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Stepper is a decoder instance whose last step's logits can be read, as
// *onnx.Decoder's can.
type Stepper interface {
	models.Decoder
	// Logits returns the logits next[i] was drawn from in the last Step.
	Logits(i int) []float32
}

// DecodeConfig says how Decode runs.
type DecodeConfig struct {
	// Tokens is how many tokens to generate greedily after each prompt; 0
	// compares along the prompts alone.
	Tokens int
	// Context bounds a sequence, prompt and generated tokens together.
	Context int
	// EOS ends a generation when A chooses it; -1 for none.
	EOS int32
}

// Decode compares decoder b with decoder a along texts they are both fed
// (teacher forcing): at each position of each prompt, then of A's greedy
// continuation of it, the two models' logits for the next token. All the
// prompts run side by side, one token each a step, so that the models
// compute in batches; a and b must hold no sequences. Positions in A's
// continuation also make the greedy runs: B, fed the same text, would have
// generated it up to the first position where its choice differs from A's.
func Decode(ctx context.Context, a, b Stepper, prompts [][]int32, cfg DecodeConfig) (DecodingReport, error) {
	type seq struct {
		id       models.SeqID
		tokens   []int32 // the prompt, then A's continuation
		prompt   int
		fed      int
		diverged int // generated tokens before B first chose otherwise; -1 while it has not
	}
	if cfg.Tokens < 0 {
		return DecodingReport{}, fmt.Errorf("tokens %d: must not be negative", cfg.Tokens)
	}
	var live []*seq
	for i, p := range prompts {
		if len(p) == 0 {
			return DecodingReport{}, fmt.Errorf("prompt %d is empty", i+1)
		}
		if cfg.Context > 0 && len(p)+cfg.Tokens > cfg.Context {
			return DecodingReport{}, fmt.Errorf("prompt %d: %d tokens and %d to generate exceed the context of %d", i+1, len(p), cfg.Tokens, cfg.Context)
		}
		if cfg.Tokens == 0 && len(p) < 2 {
			continue // no next token to compare
		}
		live = append(live, &seq{id: models.SeqID(i + 1), tokens: append([]int32(nil), p...), prompt: len(p), diverged: -1})
	}
	var d Decoding
	finish := func(id models.SeqID) {
		a.Free(id)
		b.Free(id)
	}
	defer func() {
		for _, s := range live {
			finish(s.id)
		}
	}()
	steps := make([]models.StepSeq, 0, len(live))
	nextA, nextB := make([]int32, len(live)), make([]int32, len(live))
	for len(live) > 0 {
		steps = steps[:0]
		for _, s := range live {
			steps = append(steps, models.StepSeq{ID: s.id, Past: s.fed, Tokens: s.tokens[s.fed : s.fed+1], PromptLen: s.prompt, Sample: true})
		}
		if err := a.Step(ctx, steps, nextA[:len(steps)]); err != nil {
			return DecodingReport{}, fmt.Errorf("model A: %w", err)
		}
		if err := b.Step(ctx, steps, nextB[:len(steps)]); err != nil {
			return DecodingReport{}, fmt.Errorf("model B: %w", err)
		}
		kept := live[:0]
		for i, s := range live {
			la, lb := a.Logits(i), b.Logits(i)
			if la == nil || lb == nil {
				return DecodingReport{}, errors.New("a decoder gave no logits for a sampled position")
			}
			s.fed++
			if s.fed < s.prompt {
				// Along the prompt: its next token is the reference.
				if err := d.Add(la, lb, s.tokens[s.fed]); err != nil {
					return DecodingReport{}, err
				}
				if cfg.Tokens == 0 && s.fed+1 >= s.prompt {
					finish(s.id) // nothing to generate after it
					continue
				}
				kept = append(kept, s)
				continue
			}
			// After the prompt: A's greedy choice is the reference.
			ref := Argmax(la)
			if err := d.Add(la, lb, ref); err != nil {
				return DecodingReport{}, err
			}
			gen := s.fed - s.prompt // tokens generated before this one
			if s.diverged < 0 && Argmax(lb) != ref {
				s.diverged = gen
			}
			if n := gen + 1; n == cfg.Tokens || ref == cfg.EOS {
				if s.diverged < 0 {
					s.diverged = n
				}
				d.Run(s.diverged, n)
				finish(s.id)
				continue
			}
			s.tokens = append(s.tokens, ref)
			kept = append(kept, s)
		}
		live = kept
		if err := ctx.Err(); err != nil {
			return DecodingReport{}, err
		}
	}
	return d.Report(), nil
}
