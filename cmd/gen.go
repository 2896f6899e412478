package cmd

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/onnx"
	"github.com/inferhq/infer/models/simlm"
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
	f.IntVar(&o.MaxSeqs, "max-seqs", 0, fmt.Sprintf("decoder models: most sequences running at once, the batch's rows (0: %d for sim-lm, %d for ONNX Runtime decoders, sized for a CPU)", generate.DefaultMaxSeqs, onnx.DecoderMaxSeqs))
	f.IntVar(&o.MaxBatchedTokens, "max-batched-tokens", 0, fmt.Sprintf("decoder models: per-step token budget; decodes go first, prompt chunks fill the rest (chunked prefill) (0: %d for sim-lm, %d for ONNX Runtime decoders)", generate.DefaultMaxBatchedTokens, onnx.DecoderMaxBatchedTokens))
	f.IntVar(&o.KVTokens, "kv-tokens", 0, fmt.Sprintf("decoder models: KV capacity in tokens per model instance, at least the context (0: the model's: sim-lm simulates %d, an ONNX Runtime decoder holds %d contexts, %d for GPT-2)", simlm.DefaultKVTokens, onnx.DefaultKVContexts, onnx.DefaultKVContexts*onnx.DefaultContext))
	f.StringVar(&o.Policy, "gen-policy", string(generate.Continuous), "decoder models: scheduling of /v1: "+generate.PolicyNames()+" (/static/v1 and /naive/v1 always serve their own)")
	f.IntVar(&o.StreamInterval, "stream-interval", openai.DefaultStreamInterval, fmt.Sprintf("decoder models: tokens a stream gathers into one write after its first, which goes out at once (1 to %d; n > 1 spaces a client's tokens n steps apart and saves the server n-1 writes in n)", openai.MaxStreamInterval))
	f.BoolVar(&o.PrefixCache, "prefix-cache", generate.DefaultPrefixCache, "decoder models: automatic prefix caching: a prompt's cached KV blocks are reused instead of computed (--prefix-cache=false computes every prompt; off anyway for a model that cannot reuse KV)")
	f.IntVar(&o.BlockSize, "block-size", generate.DefaultBlockSize, fmt.Sprintf("decoder models: tokens of one KV block, the unit of KV accounting and of the prefix cache (1 to %d)", generate.MaxBlockSize))
	f.DurationVar(&o.SimStep, "sim-step", simlm.DefaultStep, "sim-lm: fixed cost of an engine step")
	f.DurationVar(&o.SimPerSeq, "sim-per-seq", simlm.DefaultPerSeq, "sim-lm: added cost per decoding sequence in a step")
	f.DurationVar(&o.SimPerPrefillToken, "sim-per-prefill-token", simlm.DefaultPerPrefillToken, "sim-lm: added cost per prompt token prefilled in a step")
}

// engine returns the engine configuration, with the model's defaults d for
// the settings left at 0, checked by the engine's Validate, or a usage
// error.
func (o *genOptions) engine(d models.EngineDefaults, maxLatency time.Duration, queueCap int, admitLate bool) (generate.Config, error) {
	policy, err := generate.ParsePolicy(o.Policy)
	if err != nil {
		return generate.Config{}, usageErrorf("--gen-policy: %v", err)
	}
	if err := openai.CheckStreamInterval(o.StreamInterval); err != nil {
		return generate.Config{}, usageErrorf("--stream-interval %v", err)
	}
	if o.BlockSize < 1 { // the engine would take 0 for its default
		return generate.Config{}, usageErrorf("--block-size %d: want 1 to %d tokens", o.BlockSize, generate.MaxBlockSize)
	}
	cfg := generate.Config{
		Policy:           policy,
		MaxSeqs:          o.MaxSeqs,
		MaxBatchedTokens: o.MaxBatchedTokens,
		KVTokens:         o.KVTokens,
		MaxLatency:       maxLatency,
		QueueCap:         queueCap,
		AdmitLate:        admitLate,
		BlockSize:        o.BlockSize,
		NoPrefixCache:    !o.PrefixCache,
	}.WithModelDefaults(d)
	if err := cfg.Validate(); err != nil {
		return generate.Config{}, settingError(err)
	}
	return cfg, nil
}

// simLM is the cost of sim-lm that the flags set.
func (o *genOptions) simLM() simlm.Config {
	return simlm.Config{Step: o.SimStep, PerSeq: o.SimPerSeq, PerPrefillToken: o.SimPerPrefillToken}
}
