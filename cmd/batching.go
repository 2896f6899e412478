package cmd

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/inferhq/infer/server/batch"
)

// batchOptions are the batching flags of a command that forms batches.
type batchOptions struct {
	Batch       int
	MaxLatency  time.Duration
	Policy      string
	Buckets     []int
	NoIsolation bool
}

func (o *batchOptions) bind(cmd *cobra.Command) {
	f := cmd.Flags()
	f.IntVar(&o.Batch, "batch", 64, "most items per batch")
	f.DurationVar(&o.MaxLatency, "max-latency", 100*time.Millisecond, "longest a batch waits for company, from its first item's arrival")
	f.StringVar(&o.Policy, "policy", string(batch.Fixed), fmt.Sprintf("batching policy: %v", batch.Policies()))
	f.IntSliceVar(&o.Buckets, "buckets", nil, "token-length bucket bounds (e.g. 16,32,64): items batch only with items of similar length, so batches pad less")
	f.BoolVar(&o.NoIsolation, "no-isolation", false, "do not bisect batches that fail as a whole to find the failing items")
}

// config returns the batching configuration, or a usage error.
func (o *batchOptions) config() (batch.Config, error) {
	policy, err := batch.ParsePolicy(o.Policy)
	if err != nil {
		return batch.Config{}, usageErrorf("--policy: %v", err)
	}
	switch {
	case o.Batch < 1:
		return batch.Config{}, usageErrorf("--batch %d: must be at least 1", o.Batch)
	case o.MaxLatency < 0:
		return batch.Config{}, usageErrorf("--max-latency %v: must not be negative", o.MaxLatency)
	}
	cfg := batch.Config{
		MaxBatch:         o.Batch,
		MaxLatency:       o.MaxLatency,
		Policy:           policy,
		Buckets:          o.Buckets,
		DisableIsolation: o.NoIsolation,
	}
	if err := cfg.Validate(); err != nil {
		return batch.Config{}, usageErrorf("%v", err)
	}
	return cfg, nil
}
