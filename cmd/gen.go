package cmd

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/inferhq/infer/server/generate"
)

// genOptions are infer serve's flags for a generative (decoder) model.
type genOptions struct {
	MaxSeqs            int
	MaxBatchedTokens   int
	KVTokens           int
	Policy             string
	SimStep            time.Duration
	SimPerSeq          time.Duration
	SimPerPrefillToken time.Duration
}

func (o *genOptions) bind(cmd *cobra.Command) {
	f := cmd.Flags()
	f.IntVar(&o.MaxSeqs, "max-seqs", 32, "decoder models: most sequences running at once (the batch's rows)")
	f.IntVar(&o.MaxBatchedTokens, "max-batched-tokens", 2048, "decoder models: per-step token budget; decodes go first, prompt chunks fill the rest (chunked prefill)")
	f.IntVar(&o.KVTokens, "kv-tokens", 0, "decoder models: KV capacity in tokens per model instance (0: the model's; sets sim-lm's simulated capacity, default 65536)")
	f.StringVar(&o.Policy, "gen-policy", string(generate.Continuous), fmt.Sprintf("decoder models: scheduling of /v1: %v (/static/v1 and /naive/v1 always serve their own)", generate.Policies()))
	f.DurationVar(&o.SimStep, "sim-step", 8*time.Millisecond, "sim-lm: fixed cost of an engine step")
	f.DurationVar(&o.SimPerSeq, "sim-per-seq", 250*time.Microsecond, "sim-lm: added cost per decoding sequence in a step")
	f.DurationVar(&o.SimPerPrefillToken, "sim-per-prefill-token", 20*time.Microsecond, "sim-lm: added cost per prompt token prefilled in a step")
}

// engine returns the engine configuration, or a usage error.
func (o *genOptions) engine(maxLatency time.Duration, queueCap int, admitLate bool) (generate.Config, error) {
	policy, err := generate.ParsePolicy(o.Policy)
	if err != nil {
		return generate.Config{}, usageErrorf("--gen-policy: %v", err)
	}
	switch {
	case o.MaxSeqs < 1 || o.MaxSeqs > generate.MaxMaxSeqs:
		return generate.Config{}, usageErrorf("--max-seqs %d: want 1 to %d", o.MaxSeqs, generate.MaxMaxSeqs)
	case o.MaxBatchedTokens < o.MaxSeqs || o.MaxBatchedTokens > generate.MaxMaxBatchedTokens:
		return generate.Config{}, usageErrorf("--max-batched-tokens %d: want --max-seqs (%d) to %d: every running sequence needs a token each step", o.MaxBatchedTokens, o.MaxSeqs, generate.MaxMaxBatchedTokens)
	case o.KVTokens < 0:
		return generate.Config{}, usageErrorf("--kv-tokens %d: must not be negative", o.KVTokens)
	case queueCap > generate.MaxQueueCap:
		return generate.Config{}, usageErrorf("--queue-cap %d: a decoder model's queue holds at most %d requests", queueCap, generate.MaxQueueCap)
	}
	cfg := generate.Config{
		Policy:           policy,
		MaxSeqs:          o.MaxSeqs,
		MaxBatchedTokens: o.MaxBatchedTokens,
		KVTokens:         o.KVTokens,
		MaxLatency:       maxLatency,
		QueueCap:         queueCap,
		AdmitLate:        admitLate,
	}
	if err := cfg.Validate(); err != nil {
		return generate.Config{}, usageErrorf("%v", err)
	}
	return cfg, nil
}
