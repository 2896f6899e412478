package cmd

import (
	"cmp"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/inferhq/infer/server/generate"
	"github.com/inferhq/infer/server/openai"
)

// genOptions are infer serve's flags for a generative (decoder) model.
type genOptions struct {
	MaxSeqs            int
	MaxBatchedTokens   int
	KVTokens           int
	Policy             string
	StreamInterval     int
	PrefixCache        bool
	BlockSize          int
	SimStep            time.Duration
	SimPerSeq          time.Duration
	SimPerPrefillToken time.Duration
}

func (o *genOptions) bind(cmd *cobra.Command) {
	f := cmd.Flags()
	f.IntVar(&o.MaxSeqs, "max-seqs", 0, fmt.Sprintf("decoder models: most sequences running at once, the batch's rows (0: %d for sim-lm, %d for ONNX Runtime decoders, sized for a CPU)", accelDefaults.maxSeqs, cpuDefaults.maxSeqs))
	f.IntVar(&o.MaxBatchedTokens, "max-batched-tokens", 0, fmt.Sprintf("decoder models: per-step token budget; decodes go first, prompt chunks fill the rest (chunked prefill) (0: %d for sim-lm, %d for ONNX Runtime decoders)", accelDefaults.maxBatchedTokens, cpuDefaults.maxBatchedTokens))
	f.IntVar(&o.KVTokens, "kv-tokens", 0, "decoder models: KV capacity in tokens per model instance, at least the context (0: the model's: sim-lm simulates 65536, an ONNX Runtime decoder holds 16 contexts, 16384 for GPT-2)")
	f.StringVar(&o.Policy, "gen-policy", string(generate.Continuous), "decoder models: scheduling of /v1: "+generate.PolicyNames()+" (/static/v1 and /naive/v1 always serve their own)")
	f.IntVar(&o.StreamInterval, "stream-interval", 1, fmt.Sprintf("decoder models: tokens a stream gathers into one write after its first, which goes out at once (1 to %d; n > 1 spaces a client's tokens n steps apart and saves the server n-1 writes in n)", openai.MaxStreamInterval))
	f.BoolVar(&o.PrefixCache, "prefix-cache", generate.DefaultPrefixCache, "decoder models: automatic prefix caching: a prompt's cached KV blocks are reused instead of computed (--prefix-cache=false computes every prompt; off anyway for a model that cannot reuse KV)")
	f.IntVar(&o.BlockSize, "block-size", generate.DefaultBlockSize, fmt.Sprintf("decoder models: tokens of one KV block, the unit of KV accounting and of the prefix cache (1 to %d)", generate.MaxBlockSize))
	f.DurationVar(&o.SimStep, "sim-step", 8*time.Millisecond, "sim-lm: fixed cost of an engine step")
	f.DurationVar(&o.SimPerSeq, "sim-per-seq", 250*time.Microsecond, "sim-lm: added cost per decoding sequence in a step")
	f.DurationVar(&o.SimPerPrefillToken, "sim-per-prefill-token", 20*time.Microsecond, "sim-lm: added cost per prompt token prefilled in a step")
}

// engine returns the engine configuration, with the model's defaults d for
// the settings left at 0, or a usage error.
func (o *genOptions) engine(d engineDefaults, maxLatency time.Duration, queueCap int, admitLate bool) (generate.Config, error) {
	policy, err := generate.ParsePolicy(o.Policy)
	if err != nil {
		return generate.Config{}, usageErrorf("--gen-policy: %v", err)
	}
	if err := openai.CheckStreamInterval(o.StreamInterval); err != nil {
		return generate.Config{}, usageErrorf("--stream-interval %v", err)
	}
	maxSeqs, maxBatched := cmp.Or(o.MaxSeqs, d.maxSeqs), o.MaxBatchedTokens
	if maxBatched == 0 {
		maxBatched = max(d.maxBatchedTokens, maxSeqs)
	}
	switch {
	case maxSeqs < 1 || maxSeqs > generate.MaxMaxSeqs:
		return generate.Config{}, usageErrorf("--max-seqs %d: want 1 to %d", o.MaxSeqs, generate.MaxMaxSeqs)
	case maxBatched < maxSeqs || maxBatched > generate.MaxMaxBatchedTokens:
		return generate.Config{}, usageErrorf("--max-batched-tokens %d: want --max-seqs (%d) to %d: every running sequence needs a token each step", maxBatched, maxSeqs, generate.MaxMaxBatchedTokens)
	case o.KVTokens < 0:
		return generate.Config{}, usageErrorf("--kv-tokens %d: must not be negative", o.KVTokens)
	case queueCap > generate.MaxQueueCap:
		return generate.Config{}, usageErrorf("--queue-cap %d: a decoder model's queue holds at most %d requests", queueCap, generate.MaxQueueCap)
	}
	cfg := generate.Config{
		Policy:           policy,
		MaxSeqs:          maxSeqs,
		MaxBatchedTokens: maxBatched,
		KVTokens:         o.KVTokens,
		MaxLatency:       maxLatency,
		QueueCap:         queueCap,
		AdmitLate:        admitLate,
		BlockSize:        o.BlockSize,
		NoPrefixCache:    !o.PrefixCache,
	}
	if err := cfg.Validate(); err != nil {
		return generate.Config{}, usageErrorf("%v", err)
	}
	return cfg, nil
}
