package batch

import (
	"fmt"
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
)

// Policies lists the accepted policy names.
func Policies() []Policy { return []Policy{Fixed, Immediate} }

// ParsePolicy returns the policy with that name.
func ParsePolicy(s string) (Policy, error) {
	for _, p := range Policies() {
		if string(p) == s {
			return p, nil
		}
	}
	return "", fmt.Errorf("unknown batching policy %q (want one of %v)", s, Policies())
}

// Config configures a Batcher. The zero value is valid.
type Config struct {
	// MaxBatch is the most items in one batch. Default 64.
	MaxBatch int
	// MaxLatency is the longest a forming batch waits for more items,
	// counted from the arrival of its first item. Zero means no waiting.
	MaxLatency time.Duration
	// Policy is the batching policy. Default Fixed.
	Policy Policy
	// QueueCap is the most items admitted but not yet taken by a worker;
	// beyond it admission fails with ErrQueueFull. Default 16 × MaxBatch ×
	// workers: at most about sixteen batch times of waiting.
	QueueCap int
	// OnBatch, if set, is called by the worker after each batch. It runs on
	// the worker's goroutine, between batches, so it must be quick.
	OnBatch func(Info)
}

func (c Config) withDefaults(workers int) Config {
	if c.MaxBatch <= 0 {
		c.MaxBatch = 64
	}
	if c.MaxLatency < 0 {
		c.MaxLatency = 0
	}
	if c.Policy == "" {
		c.Policy = Fixed
	}
	if c.QueueCap <= 0 {
		c.QueueCap = 16 * c.MaxBatch * workers
	}
	return c
}

// Validate reports a configuration that New would not accept as given.
func (c Config) Validate() error {
	if c.MaxBatch < 0 {
		return fmt.Errorf("batch size %d: must be positive", c.MaxBatch)
	}
	if c.MaxLatency < 0 {
		return fmt.Errorf("max latency %v: must not be negative", c.MaxLatency)
	}
	if c.QueueCap < 0 {
		return fmt.Errorf("queue capacity %d: must not be negative", c.QueueCap)
	}
	if c.Policy != "" {
		if _, err := ParsePolicy(string(c.Policy)); err != nil {
			return err
		}
	}
	return nil
}

// policy computes how long a batch whose first item arrived at first may
// still wait for company.
type policy interface {
	wait(first time.Time) time.Duration
}

func newPolicy(c Config) policy {
	switch c.Policy {
	case Immediate:
		return immediate{}
	default:
		return fixed{maxLatency: c.MaxLatency}
	}
}

type fixed struct{ maxLatency time.Duration }

func (p fixed) wait(first time.Time) time.Duration {
	if p.maxLatency <= 0 {
		return 0
	}
	return time.Until(first.Add(p.maxLatency))
}

type immediate struct{}

func (immediate) wait(time.Time) time.Duration { return 0 }
