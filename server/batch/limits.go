package batch

import (
	"fmt"
	"time"
)

// Upper bounds of the settings that allocate or spawn, or that no sane
// deployment sets beyond them. Config.Validate and ValidateWorkers refuse
// values past them; the command line's flags and the server's admin API both
// check their values there, so the bounds live in this one place.
const (
	// MaxBatchLimit bounds Config.MaxBatch: larger than any batch an
	// accelerator runs well (Triton's examples stop at a few hundred), yet
	// a batch of it allocates only what its items need.
	MaxBatchLimit = 4096
	// MaxLatencyLimit bounds Config.MaxLatency: a batch waiting longer for
	// company would outlast the requests' own deadlines.
	MaxLatencyLimit = time.Minute
	// QueueCapLimit bounds Config.QueueCap, in items: the admission channel
	// is allocated at this capacity (an arrival a slot: an item and a slice
	// header, about 90 bytes).
	QueueCapLimit = 1 << 20
	// WorkersLimit bounds the number of workers, each a model instance of
	// its own.
	WorkersLimit = 64
	// BucketsLimit bounds the number of Config.Buckets.
	BucketsLimit = 64
)

// ValidateWorkers reports a worker count outside 1..WorkersLimit.
func ValidateWorkers(n int) error {
	if n < 1 || n > WorkersLimit {
		return fmt.Errorf("workers %d: want 1 to %d", n, WorkersLimit)
	}
	return nil
}
