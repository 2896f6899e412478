package cmd

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/inferhq/infer/server/batch"
)

// batchOptions are the batching flags of a command that forms batches.
type batchOptions struct {
	Batch       int
	MaxLatency  time.Duration
	Policy      string
	Buckets     string
	NoIsolation bool
}

func (o *batchOptions) bind(cmd *cobra.Command) {
	f := cmd.Flags()
	f.IntVar(&o.Batch, "batch", batch.DefaultMaxBatch, fmt.Sprintf("most items per batch (at most %d)", batch.MaxBatchLimit))
	f.DurationVar(&o.MaxLatency, "max-latency", batch.DefaultMaxLatency, fmt.Sprintf("longest a batch waits for company, from its first item's arrival (at most %v)", batch.MaxLatencyLimit))
	f.StringVar(&o.Policy, "policy", string(batch.Adaptive), "batching policy: "+batch.PolicyNames())
	f.StringVar(&o.Buckets, "buckets", "16,32,64", "token-length bucket bounds: items batch only with items of similar length, so batches pad less (none: one bucket; no effect on models without tokens)")
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
	buckets, err := parseBuckets(o.Buckets)
	if err != nil {
		return batch.Config{}, err
	}
	cfg := batch.Config{
		MaxBatch:         o.Batch,
		MaxLatency:       o.MaxLatency,
		Policy:           policy,
		Buckets:          buckets,
		DisableIsolation: o.NoIsolation,
	}
	if err := cfg.Validate(); err != nil {
		return batch.Config{}, usageErrorf("%v", err)
	}
	return cfg, nil
}

// parseBuckets reads --buckets: "none" (or empty) or a list like 16,32,64.
func parseBuckets(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "none" {
		return nil, nil
	}
	var bs []int
	for _, part := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil {
			return nil, usageErrorf("--buckets %q: want none or increasing token counts like 16,32,64", s)
		}
		bs = append(bs, n)
	}
	return bs, nil
}
