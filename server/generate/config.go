package generate

import (
	"fmt"
	"time"
)

// Policy decides which sequences share a step.
type Policy string

const (
	// Continuous batching (iteration-level scheduling, as in Orca and
	// vLLM): every step decodes one token for every running sequence and
	// prefills newly admitted ones within the token budget; a sequence
	// joins at the next step after it is admitted and leaves at once when
	// it finishes.
	Continuous Policy = "continuous"
	// Static batching, as a request-level batcher with Hugging Face
	// generate does: a batch forms from waiting requests within MaxLatency
	// of its first one, up to MaxSeqs; nothing joins until every sequence
	// of the batch has finished, and the batch keeps its formed size:
	// finished rows are still computed (fed a padding token, their output
	// thrown away), so a static step costs as if all its rows ran.
	Static Policy = "static"
	// Naive generation: one sequence at a time.
	Naive Policy = "naive"
)

// Policies lists the accepted policy names.
func Policies() []Policy { return []Policy{Continuous, Static, Naive} }

// PolicyNames lists the policies for a help text: "continuous, static or
// naive".
func PolicyNames() string { return fmt.Sprintf("%s, %s or %s", Continuous, Static, Naive) }

// ParsePolicy returns the policy with that name.
func ParsePolicy(s string) (Policy, error) {
	for _, p := range Policies() {
		if string(p) == s {
			return p, nil
		}
	}
	return "", fmt.Errorf("unknown generation policy %q (want %s)", s, PolicyNames())
}

// Limits on the knobs: beyond them a setting is refused, since each one
// sizes allocations made per step.
const (
	MaxMaxSeqs          = 4096
	MaxMaxBatchedTokens = 1 << 20
	MaxQueueCap         = 1 << 16
	MaxStreamBuffer     = 1 << 16
	MaxBlockSize        = 1024
)

// Defaults of the prefix cache (see Config.BlockSize and
// Config.NoPrefixCache).
const (
	// DefaultBlockSize is the tokens of one KV block, as in vLLM.
	DefaultBlockSize = 16
	// DefaultPrefixCache: automatic prefix caching is on unless turned off.
	DefaultPrefixCache = true
)

// Config configures an Engine. The zero value is valid.
type Config struct {
	// Policy is the scheduling policy. Default Continuous.
	Policy Policy
	// MaxSeqs is the most sequences running at once (the batch's rows).
	// Default 32; Naive always runs 1.
	MaxSeqs int
	// MaxBatchedTokens is the per-step token budget: decodes (one token
	// per running sequence) are scheduled first, and prompt chunks fill
	// what is left (chunked prefill). Default 2048; at least MaxSeqs.
	// Static prefills a formed batch in one step whatever its size, as
	// Hugging Face generate does.
	MaxBatchedTokens int
	// KVTokens is the KV capacity the engine keeps within, in tokens: it
	// makes KVTokens / BlockSize blocks, shared by the running sequences
	// and the prefix cache. Default (and at most): the decoder's
	// Info.KVTokens. See the package doc for the admission and preemption
	// rule.
	KVTokens int
	// MaxLatency is how long a static batch waits for company, counted
	// from the arrival of its first request. Zero: it starts with what is
	// waiting.
	MaxLatency time.Duration
	// QueueCap is the most requests waiting to start; beyond it Generate
	// fails at once with ErrQueueFull. Default 16 × MaxSeqs (at least
	// 64). Open streams are bounded by MaxSeqs + QueueCap.
	QueueCap int
	// AdmitLate admits requests even when the backlog predicts they will
	// not start before their deadline (by default they are refused at once
	// with ErrWouldMissDeadline).
	AdmitLate bool
	// StreamBuffer is the most tokens a stream may hold that its reader
	// has not taken; a reader that falls further behind is cut: its
	// sequence ends with ErrSlowReader and frees its KV, so that one
	// stalled client never stalls the engine. Default 256.
	StreamBuffer int
	// BlockSize is the tokens of one KV block: the engine counts and
	// names the decoder's KV in blocks (see the package doc), and only full
	// blocks are cached. Default DefaultBlockSize; 1 to MaxBlockSize.
	BlockSize int
	// NoPrefixCache turns automatic prefix caching off: every prompt is
	// computed from its first token. It is off anyway for a decoder that
	// cannot reuse KV (models.DecoderInfo.BlockKV false).
	NoPrefixCache bool
	// SeparatePrefill runs prefill in steps of its own (a step either
	// prefills newly admitted sequences or decodes the running ones)
	// instead of inside the decode steps. Measured slower on the sim's
	// cost model (see the package doc); kept for comparison.
	SeparatePrefill bool
	// OnStep, if set, is called by the engine after each step, on the
	// engine's goroutine: it must be quick.
	OnStep func(StepInfo)
}

func (c Config) withDefaults(kv int) Config {
	if c.Policy == "" {
		c.Policy = Continuous
	}
	if c.MaxSeqs <= 0 {
		c.MaxSeqs = 32
	}
	if c.MaxBatchedTokens <= 0 {
		c.MaxBatchedTokens = max(2048, c.MaxSeqs)
	}
	if c.KVTokens <= 0 {
		c.KVTokens = kv
	}
	if c.MaxLatency < 0 {
		c.MaxLatency = 0
	}
	if c.QueueCap <= 0 {
		c.QueueCap = max(64, 16*c.MaxSeqs)
	}
	if c.StreamBuffer <= 0 {
		c.StreamBuffer = 256
	}
	if c.BlockSize <= 0 {
		c.BlockSize = DefaultBlockSize
	}
	return c
}

// maxSeqs is the running-sequence cap in effect under the policy.
func (c *Config) maxSeqs() int {
	if c.Policy == Naive {
		return 1
	}
	return c.MaxSeqs
}

// Validate reports a configuration New would not accept as given.
func (c Config) Validate() error {
	if c.Policy != "" {
		if _, err := ParsePolicy(string(c.Policy)); err != nil {
			return err
		}
	}
	switch {
	case c.MaxSeqs < 0 || c.MaxSeqs > MaxMaxSeqs:
		return fmt.Errorf("max seqs %d: want 1 to %d", c.MaxSeqs, MaxMaxSeqs)
	case c.MaxBatchedTokens < 0 || c.MaxBatchedTokens > MaxMaxBatchedTokens:
		return fmt.Errorf("max batched tokens %d: want 1 to %d", c.MaxBatchedTokens, MaxMaxBatchedTokens)
	case c.MaxBatchedTokens > 0 && c.MaxBatchedTokens < c.withDefaults(0).MaxSeqs:
		return fmt.Errorf("max batched tokens %d is less than max seqs %d: every running sequence needs a token each step", c.MaxBatchedTokens, c.withDefaults(0).MaxSeqs)
	case c.KVTokens < 0:
		return fmt.Errorf("KV tokens %d: must not be negative", c.KVTokens)
	case c.MaxLatency < 0:
		return fmt.Errorf("max latency %v: must not be negative", c.MaxLatency)
	case c.QueueCap < 0 || c.QueueCap > MaxQueueCap:
		return fmt.Errorf("queue capacity %d: want 0 (default) to %d", c.QueueCap, MaxQueueCap)
	case c.StreamBuffer < 0 || c.StreamBuffer > MaxStreamBuffer:
		return fmt.Errorf("stream buffer %d: want 0 (default) to %d", c.StreamBuffer, MaxStreamBuffer)
	case c.BlockSize < 0 || c.BlockSize > MaxBlockSize:
		return fmt.Errorf("block size %d: want 1 to %d tokens", c.BlockSize, MaxBlockSize)
	}
	return nil
}

// StepInfo describes one engine step after it ran. It is passed to
// Config.OnStep.
type StepInfo struct {
	Seqs          int           // sequences in the step (rows of the batch)
	Decodes       int           // of them, decoding one token
	PrefillTokens int           // prompt tokens prefilled or recomputed
	Idle          int           // static: finished rows still computed
	Generated     int           // tokens generated (sampled) for live sequences
	Duration      time.Duration // the decoder's Step
	Running       int           // running sequences after the step
	Waiting       int           // waiting requests after the step
	KVUsed        int           // tokens of the KV blocks in use (referenced) after the step
	KVTokens      int           // the KV capacity kept within: all blocks, in tokens
	KVCached      int           // tokens of the cached blocks nobody references (evictable)
	Preempted     int           // sequences preempted to make room for this step
	Finished      int           // sequences that finished in this step
	// PrefixQueries and PrefixHits are vLLM's prefix_cache_queries and
	// prefix_cache_hits of the requests started in this step for the
	// first time (not their recomputes), while the prefix cache is on:
	// their tokens, and of those the tokens found cached.
	PrefixQueries int
	PrefixHits    int
	Err           error // the decoder's error; its sequences failed
}
