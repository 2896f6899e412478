package models

import "context"

// This file defines what the generation engine (server/generate) needs from a
// generative model. The engine schedules; a Decoder instance computes and owns
// the KV cache of the sequences it holds. Backends: models/simlm (simulated)
// and models/onnx (GPT-2-architecture graphs and real exports).

// SeqID names a sequence inside one Decoder instance. The engine never reuses
// an ID while the instance may still hold KV for it.
type SeqID uint64

// Sampling chooses how the next token is drawn from the logits.
type Sampling struct {
	// Temperature 0 is greedy (argmax); above 0 the logits are divided by it
	// before the softmax.
	Temperature float32
	// TopP in (0, 1) keeps the smallest set of most likely tokens whose
	// probability reaches TopP (nucleus sampling); 0 or 1 keeps all.
	TopP float32
	// Seed makes sampling deterministic: the token drawn at position p of a
	// sequence depends only on the model, the tokens before p, Temperature,
	// TopP, Seed and p — never on which other sequences share the step, on
	// the step's size or on preemptions. Implementations derive the random
	// draw for position p from (Seed, p), not from a stream of draws.
	Seed uint64
}

// StepSeq is one sequence's part of an engine step.
type StepSeq struct {
	ID SeqID
	// Past is the number of this sequence's tokens already in the instance's
	// KV cache. 0 starts the sequence (its first prefill chunk, or a
	// recompute after a preemption); otherwise it equals the tokens fed to
	// the sequence in earlier steps since it was started.
	Past int
	// Tokens are fed this step and appended to the KV cache: a chunk of the
	// prompt (several tokens), or the last generated token (one). Never
	// empty. The slice is only valid during Step.
	Tokens []int32
	// PromptLen is the length of the original prompt. After a preemption the
	// engine recomputes prompt and generated tokens together (Past 0,
	// Tokens longer than PromptLen); positions ≥ PromptLen were generated.
	PromptLen int
	// Sample asks for the next token after Tokens: true for every decode
	// step and for the last chunk of a prefill; false for earlier chunks.
	Sample bool
	// Sampling is the same for the whole life of the sequence.
	Sampling Sampling
}

// Decoder is one instance of a generative model. A server gives each engine
// its own instance and never calls it concurrently.
type Decoder interface {
	// Step runs one engine step over a batch of sequences of different
	// lengths: prefill chunks and single-token decodes may be mixed. For each
	// seqs[i] with Sample set it writes the next token to next[i] (other
	// entries of next are left alone). len(next) == len(seqs). An error fails
	// the whole step; the engine then frees the sequences of that step.
	Step(ctx context.Context, seqs []StepSeq, next []int32) error
	// Free drops a sequence's KV cache (finished, cancelled or preempted). Free
	// of an unknown ID is a no-op.
	Free(id SeqID)
	// Close releases the instance.
	Close() error
}

// DecoderInfo describes a generative model to the engine and the server.
type DecoderInfo struct {
	// Context is the most tokens one sequence may hold, prompt included.
	Context int
	// EOS is the end-of-sequence token id.
	EOS int32
	// Vocab is the vocabulary size.
	Vocab int
	// KVTokens is the KV capacity of one instance in tokens, summed over its
	// sequences: the engine's admission and preemption keep within it.
	KVTokens int
	// Engine holds the engine settings this backend serves best with,
	// taken where the user sets none.
	Engine EngineDefaults
}

// EngineDefaults are the engine settings a backend serves best with, taken
// where the user sets none (server/generate's Config.WithModelDefaults). A
// zero field leaves the engine's own default, sized for an accelerator.
type EngineDefaults struct {
	// MaxSeqs is the most sequences running at once: a step's rows.
	MaxSeqs int
	// MaxBatchedTokens is a step's token budget: a decode takes one, a
	// prompt chunk the rest.
	MaxBatchedTokens int
}

// Tokenizer converts between text and token ids. Safe for concurrent use.
type Tokenizer interface {
	// Encode returns the token ids of text.
	Encode(text string) []int32
	// TokenBytes returns the bytes token id stands for. With byte-level BPE
	// a token may hold part of a UTF-8 sequence, so a streamed text must hold
	// back an incomplete trailing sequence until the next token completes
	// it. The returned slice must not be modified.
	TokenBytes(id int32) []byte
}

// DecoderFactory creates instances of one generative model.
type DecoderFactory interface {
	Info() Info
	Decoder() DecoderInfo
	Tokenizer() Tokenizer
	// New creates the instance for engine number worker (0-based).
	New(ctx context.Context, worker int) (Decoder, error)
	// Close releases what the factory holds; instances are closed first.
	Close() error
}
