package server

import (
	"math"
	"sync"
	"time"
)

// rateMeter estimates the batched endpoint's throughput in items per second
// from the batches it completes: an exponential average of per-batch rates,
// times the number of workers.
type rateMeter struct {
	mu   sync.Mutex
	rate float64
}

func (r *rateMeter) add(items int, compute time.Duration, workers int) {
	if items == 0 || compute <= 0 {
		return
	}
	v := float64(items) / compute.Seconds() * float64(workers)
	r.mu.Lock()
	if r.rate == 0 {
		r.rate = v
	} else {
		r.rate += (v - r.rate) / 8
	}
	r.mu.Unlock()
}

func (r *rateMeter) perSecond() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rate
}

// retryAfter is how many seconds the current backlog needs to clear, at
// least 1: the Retry-After sent with a 429.
func (s *Server) retryAfter() int {
	rate := s.rate.perSecond()
	if rate <= 0 {
		return 1
	}
	return max(1, min(60, int(math.Ceil(float64(s.queued())/rate))))
}
