package batch

import (
	"fmt"
	"strings"
	"time"
)

// Policy decides how long a forming batch waits for more items.
type Policy string

const (
	// Fixed waits until the batch holds MaxBatch items or MaxLatency has
	// passed since its first item arrived, whichever comes first.
	Fixed Policy = "fixed"
	// Immediate never waits: a free worker takes whatever is queued, up to
	// MaxBatch. The zero-delay baseline.
	Immediate Policy = "immediate"
	// Adaptive waits only when waiting pays, never longer than MaxLatency
	// while a worker is free. For a closed pool of callers (each sends
	// again when answered), an idle worker waits for the callers out of
	// the batcher, at most a quarter of the fixed cost a of the measured
	// batch cost t(n) = a + b·n (MaxLatency when they would fill the
	// batch). Otherwise one worker sends at once, and several wait for the
	// batch size at which they keep up with the measured arrival rate.
	Adaptive Policy = "adaptive"
)

// Policies lists the accepted policies, the default first.
func Policies() []Policy { return []Policy{Adaptive, Fixed, Immediate} }

// PolicyNames lists the accepted policy names for people: "adaptive, fixed
// or immediate".
func PolicyNames() string {
	ps := Policies()
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = string(p)
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// ParsePolicy returns the policy with that name.
func ParsePolicy(s string) (Policy, error) {
	for _, p := range Policies() {
		if string(p) == s {
			return p, nil
		}
	}
	return "", fmt.Errorf("unknown batching policy %q (want %s)", s, PolicyNames())
}

// Config configures a Batcher. The zero value is valid.
type Config struct {
	// MaxBatch is the most items in one batch. Default DefaultMaxBatch.
	MaxBatch int
	// MaxLatency is the longest a forming batch waits for more items,
	// counted from the arrival of its first item. Zero means no waiting.
	MaxLatency time.Duration
	// Policy is the batching policy. Default Adaptive.
	Policy Policy
	// QueueCap is the most items admitted but not yet taken by a worker;
	// beyond it admission fails with ErrQueueFull. Default
	// DefaultQueueBatches × MaxBatch × workers (at most about sixteen batch
	// times of waiting), at most QueueCapLimit.
	QueueCap int
	// Buckets, with Batcher.WithSize, are upper bounds of item size (e.g.
	// 16, 32, 64 tokens): items are batched only with items of the same
	// bucket, so that a batch pads to similar sizes. Empty: one bucket.
	Buckets []int
	// DisableIsolation turns off the bisection of batches that fail as a
	// whole; then every item of such a batch gets the error.
	DisableIsolation bool
	// AdmitLate turns deadline-aware scheduling off: requests are admitted
	// even when the backlog predicts they will miss their deadline (by
	// default they are refused at once with ErrWouldMissDeadline), and
	// items are computed even when their batch would end after their
	// deadline (by default they are dropped when the batch starts).
	AdmitLate bool
	// OnBatch, if set, is called by the worker after each batch. It runs on
	// the worker's goroutine, between batches, so it must be quick.
	OnBatch func(Info)
}

// Defaults of Config.
const (
	// DefaultMaxBatch is MaxBatch's default, in items.
	DefaultMaxBatch = 64
	// DefaultQueueBatches is QueueCap's default in full batches per
	// worker.
	DefaultQueueBatches = 16
	// DefaultMaxLatency is the max latency front ends start with (the
	// zero MaxLatency is a legitimate value: no wait for company).
	DefaultMaxLatency = 100 * time.Millisecond
)

// WithDefaults returns c with its zero fields set to their documented
// defaults, for a batcher of that many workers (the queue capacity's default
// grows with them). New applies it; the server and the command line read the
// settings in force from it.
func (c Config) WithDefaults(workers int) Config {
	if c.MaxBatch <= 0 {
		c.MaxBatch = DefaultMaxBatch
	}
	if c.MaxLatency < 0 {
		c.MaxLatency = 0
	}
	if c.Policy == "" {
		c.Policy = Adaptive
	}
	if c.QueueCap <= 0 {
		c.QueueCap = min(DefaultQueueBatches*c.MaxBatch*max(workers, 1), QueueCapLimit)
	}
	return c
}

// Validate reports a configuration that New would not accept as given:
// negative values, values past the bounds in limits.go, an unknown policy,
// or buckets that do not increase.
func (c Config) Validate() error {
	switch {
	case c.MaxBatch < 0 || c.MaxBatch > MaxBatchLimit:
		return fmt.Errorf("batch size %d: want 1 to %d", c.MaxBatch, MaxBatchLimit)
	case c.MaxLatency < 0 || c.MaxLatency > MaxLatencyLimit:
		return fmt.Errorf("max latency %v: want 0 to %v", c.MaxLatency, MaxLatencyLimit)
	case c.QueueCap < 0 || c.QueueCap > QueueCapLimit:
		return fmt.Errorf("queue capacity %d: want 1 to %d items", c.QueueCap, QueueCapLimit)
	case len(c.Buckets) > BucketsLimit:
		return fmt.Errorf("%d buckets: at most %d", len(c.Buckets), BucketsLimit)
	}
	if c.Policy != "" {
		if _, err := ParsePolicy(string(c.Policy)); err != nil {
			return err
		}
	}
	for i, ub := range c.Buckets {
		if ub <= 0 || (i > 0 && ub <= c.Buckets[i-1]) {
			return fmt.Errorf("buckets %v: want positive, increasing bounds", c.Buckets)
		}
	}
	return nil
}
