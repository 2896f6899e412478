package models

import "context"

// This file defines what the generation engine (server/generate) needs from a
// generative model. The engine schedules; a Decoder instance computes and owns
// the KV cache of the sequences it holds. Backends: models/simlm (simulated)
// and models/onnx (GPT-2-architecture graphs and real exports).
//
// # KV blocks and prefix reuse
//
// The engine counts an instance's KV in blocks of StepSeq.BlockSize tokens
// (its Config.BlockSize, 16 by default) and names them: block b is slots
// [b·BlockSize, (b+1)·BlockSize) of the instance's KV pool of
// DecoderInfo.KVTokens token slots, 0 ≤ b < KVTokens/BlockSize (the engine
// may use fewer). It gives each sequence a block table, StepSeq.Blocks:
// Blocks[i] holds the sequence's positions [i·BlockSize, (i+1)·BlockSize).
// Like vLLM's KV cache manager, the engine alone decides which block holds
// what; the decoder stores and reads keys and values where the table says.
//
// A decoder that sets DecoderInfo.BlockKV promises to honour the tables as
// follows, and in exchange the engine may start a sequence after a prefix
// whose KV other sequences already computed (automatic prefix caching):
//
//   - Writes. A step writes the keys and values of StepSeq.Tokens at
//     positions Past, Past+1, … of the sequence, position p into block
//     Blocks[p/BlockSize] at offset p%BlockSize. It writes no other
//     position and no other block.
//   - Reads. A step reads positions 0..Past-1 of the sequence from
//     Blocks[:ceil(Past/BlockSize)]. On a sequence's first step (an ID the
//     instance does not hold) Past may be above 0: then Past is a multiple
//     of BlockSize and Blocks[:Past/BlockSize] are full blocks that earlier
//     steps of this instance wrote, for the same tokens at the same
//     positions after the same prefix, in other sequences (finished, freed
//     or still running) or in an earlier life of this one (preempted; then
//     Past may exceed PromptLen, since generated tokens fill blocks too).
//     Such a step feeds only the uncached rest (at least one token), and its
//     logits must equal those of a step that computed the whole prefix (up
//     to floating-point rounding: greedy tokens identical, logits within
//     1e-5).
//   - Sharing. One block may be in the tables of several sequences of a
//     step or of the instance, only as a full block below their Past: it is
//     read, never written, while any sequence holds it. A block is written
//     again only after every sequence holding it was freed; the engine then
//     gives it to one sequence, which writes it from offset 0 on.
//   - Lifetime. Free(id) drops the sequence, not its blocks' contents: what
//     a successful step wrote stays readable until the block is written
//     again. A failed step may leave its sequences' new positions
//     undefined; the engine never reuses what a failed step wrote.
//   - Capacity. The engine keeps the blocks in use (those in the tables of
//     sequences the instance holds) within the pool; a decoder need not
//     count tokens itself.
//   - Layout changes. BlockSize is the same for every sequence of a step.
//     It changes only when the instance holds no sequence with a table
//     (the engine frees them all first); contents written under the old
//     size are never read under the new one.
//
// A decoder may keep its KV physically in the blocks (paged attention), or
// elsewhere and copy full blocks out and back in, as long as it behaves so.
//
// A decoder without BlockKV may ignore Blocks and BlockSize: the engine then
// starts every sequence at Past 0 and never shares KV between sequences; its
// block count still bounds the tokens held to KVTokens.
//
// A caller other than the engine (a warm-up step, an offline measurement)
// may pass BlockSize 0 and no Blocks: the decoder then keeps that
// sequence's KV where it likes, with Past 0 on its first step, as before
// blocks existed. A BlockKV decoder must accept both kinds of sequences,
// though never both in one step.

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
	// KV cache. On the sequence's first step it is 0 (its first prefill
	// chunk, or a recompute after a preemption), or, for a DecoderInfo.BlockKV
	// decoder, the length of a cached prefix it starts after (a multiple of
	// BlockSize); later it equals that plus the tokens fed to the sequence
	// in earlier steps.
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
	// BlockSize is the tokens of one KV block; 0 when the caller passes no
	// block table (see "KV blocks and prefix reuse" above).
	BlockSize int
	// Blocks is the sequence's block table: Blocks[i] holds positions
	// [i·BlockSize, (i+1)·BlockSize). It covers every position up to and
	// including this step's last (len(Blocks) = ceil((Past+len(Tokens)) /
	// BlockSize)), grows only at its end while the sequence lives, and is
	// only valid during Step: the decoder must not keep or modify it.
	Blocks []int32
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
	// Free drops a sequence's KV cache (finished, cancelled or preempted).
	// Free of an unknown ID is a no-op. For a sequence with a block table it
	// drops the sequence only: its blocks' contents stay (see above).
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
	// BlockKV says the instance stores and reads KV by the engine's block
	// tables as "KV blocks and prefix reuse" above describes, so that the
	// engine may start a sequence after a cached prefix. False: the engine
	// computes every prompt from its first token (prefix caching is off).
	BlockKV bool
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

// ContextTokenizer is a Tokenizer whose tokens' bytes depend on the token
// before them. SentencePiece's decoders (llama2.c's) drop the leading space
// of a piece right after BOS: the dummy prefix that encoding added. The
// generation engine takes the bytes of each generated token from it when a
// model's tokenizer has it.
type ContextTokenizer interface {
	Tokenizer
	// TokenBytesAfter returns the bytes of id when it follows prev; the
	// same rules as TokenBytes apply to the slice.
	TokenBytesAfter(prev, id int32) []byte
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
