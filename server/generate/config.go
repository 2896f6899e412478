package generate

import (
	"cmp"
	"fmt"
	"time"

	"github.com/inferhq/infer/internal/setting"
	"github.com/inferhq/infer/models"
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

// The engine's own defaults of MaxSeqs and MaxBatchedTokens, sized for an
// accelerator; a model's take precedence (models.DecoderInfo.Engine).
const (
	DefaultMaxSeqs          = 32
	DefaultMaxBatchedTokens = 2048
)

// QueueCap's default is DefaultQueueSeqs × MaxSeqs requests, at least
// MinDefaultQueueCap.
const (
	DefaultQueueSeqs   = 16
	MinDefaultQueueCap = 64
)

// The names of Config's settings in errors (*setting.Error): Validate is
// the one check of each, and a front end renders its errors under its own
// names (a flag, a scenario key).
const (
	SettingMaxSeqs          setting.Name = "max seqs"
	SettingMaxBatchedTokens setting.Name = "max batched tokens"
	SettingKVTokens         setting.Name = "KV tokens"
	SettingMaxLatency       setting.Name = "max latency"
	SettingQueueCap         setting.Name = "queue capacity"
	SettingStreamBuffer     setting.Name = "stream buffer"
	SettingBlockSize        setting.Name = "block size"
)

// Config configures an Engine. The zero value is valid.
type Config struct {
	// Policy is the scheduling policy. Default Continuous.
	Policy Policy
	// MaxSeqs is the most sequences running at once (the batch's rows).
	// Default: the model's, else DefaultMaxSeqs; Naive always runs 1.
	MaxSeqs int
	// MaxBatchedTokens is the per-step token budget: decodes (one token
	// per running sequence) are scheduled first, and prompt chunks fill
	// what is left (chunked prefill). Default: the model's, else
	// DefaultMaxBatchedTokens, and at least MaxSeqs.
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
	// fails at once with ErrQueueFull. Default DefaultQueueSeqs × MaxSeqs
	// (at least MinDefaultQueueCap). Open streams are bounded by MaxSeqs +
	// QueueCap.
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
	// ColdStep is what a step of one sequence costs, the model's own
	// figure (a simulated model's step cost, or a timed warm-up step):
	// until a sequence has finished and its running time is known, the
	// deadline admission (see AdmitLate) takes a sequence to live ColdStep
	// × its max tokens. Zero: no estimate, so a cold engine refuses only
	// past QueueCap.
	ColdStep time.Duration
	// OnStep, if set, is called by the engine after each step, on the
	// engine's goroutine: it must be quick.
	OnStep func(StepInfo)
}

// WithModelDefaults returns c with MaxSeqs and MaxBatchedTokens, where they
// are 0, set to the model's defaults d, else to the engine's
// (DefaultMaxSeqs, DefaultMaxBatchedTokens); a default budget is at least
// MaxSeqs. Other fields, negative ones included, are left for Validate. New
// applies it with its model's DecoderInfo.Engine; a front end applies it to
// check the settings in force before it loads the model.
func (c Config) WithModelDefaults(d models.EngineDefaults) Config {
	if c.MaxSeqs == 0 {
		c.MaxSeqs = cmp.Or(d.MaxSeqs, DefaultMaxSeqs)
	}
	if c.MaxBatchedTokens == 0 {
		c.MaxBatchedTokens = max(cmp.Or(d.MaxBatchedTokens, DefaultMaxBatchedTokens), c.MaxSeqs)
	}
	return c
}

// withDefaults fills the fields WithModelDefaults does not, for an engine
// of a model instance holding kv tokens; c must have passed Validate.
func (c Config) withDefaults(kv int) Config {
	if c.Policy == "" {
		c.Policy = Continuous
	}
	c = c.WithModelDefaults(models.EngineDefaults{})
	if c.KVTokens <= 0 {
		c.KVTokens = kv
	}
	if c.MaxLatency < 0 {
		c.MaxLatency = 0
	}
	if c.QueueCap <= 0 {
		c.QueueCap = max(MinDefaultQueueCap, DefaultQueueSeqs*c.MaxSeqs)
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

// Validate reports a configuration New would not accept as given; a field's
// error is a *setting.Error naming it (Setting…). A zero MaxSeqs is checked
// against MaxBatchedTokens as the engine's default: apply the model's
// defaults first (WithModelDefaults) to check the settings in force.
func (c Config) Validate() error {
	if c.Policy != "" {
		if _, err := ParsePolicy(string(c.Policy)); err != nil {
			return err
		}
	}
	seqs := cmp.Or(c.MaxSeqs, DefaultMaxSeqs)
	switch {
	case c.MaxSeqs < 0 || c.MaxSeqs > MaxMaxSeqs:
		return setting.Errorf(SettingMaxSeqs, c.MaxSeqs, "want 1 to %d", MaxMaxSeqs)
	case c.MaxBatchedTokens < 0 || c.MaxBatchedTokens > MaxMaxBatchedTokens:
		return setting.Errorf(SettingMaxBatchedTokens, c.MaxBatchedTokens, "want 1 to %d", MaxMaxBatchedTokens)
	case c.MaxBatchedTokens > 0 && c.MaxBatchedTokens < seqs:
		return setting.Errorf(SettingMaxBatchedTokens, c.MaxBatchedTokens, "want at least %s (%d): every running sequence needs a token each step",
			SettingMaxSeqs, seqs)
	case c.KVTokens < 0:
		return setting.Errorf(SettingKVTokens, c.KVTokens, "must not be negative")
	case c.MaxLatency < 0:
		return setting.Errorf(SettingMaxLatency, c.MaxLatency, "must not be negative")
	case c.ColdStep < 0:
		return fmt.Errorf("cold step %v: must not be negative", c.ColdStep)
	case c.QueueCap < 0 || c.QueueCap > MaxQueueCap:
		return setting.Errorf(SettingQueueCap, c.QueueCap, "want 0 (default) to %d", MaxQueueCap)
	case c.StreamBuffer < 0 || c.StreamBuffer > MaxStreamBuffer:
		return setting.Errorf(SettingStreamBuffer, c.StreamBuffer, "want 0 (default) to %d", MaxStreamBuffer)
	case c.BlockSize < 0 || c.BlockSize > MaxBlockSize:
		return setting.Errorf(SettingBlockSize, c.BlockSize, "want 1 to %d tokens", MaxBlockSize)
	}
	return nil
}

// CheckModel reports what a model described by info cannot serve under c:
// a KV bound beyond the capacity of its instances, or below its context, so
// that a long sequence could never run. A field of info left 0 (not known
// before the model is loaded) is not checked. New runs it with the model's
// whole DecoderInfo; a front end can run it with what it knows before
// loading.
func (c Config) CheckModel(info models.DecoderInfo) error {
	switch kv := cmp.Or(c.KVTokens, info.KVTokens); {
	case info.KVTokens > 0 && c.KVTokens > info.KVTokens:
		return setting.Errorf(SettingKVTokens, c.KVTokens, "want at most the capacity of the model instance (%d)", info.KVTokens)
	case kv > 0 && kv < info.Context:
		return setting.Errorf(SettingKVTokens, kv, "want at least the model's context (%d tokens): a long sequence could never run", info.Context)
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
