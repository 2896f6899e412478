package encoder

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/server/batch"
)

// naive runs each request alone on its own model instance, one request at a
// time: the baseline a hand-written server gives. A request of more items
// than the batch size runs in model calls of at most that many, one after
// the other, so that it never takes more memory than a batch (the batch size
// the server started with: the admin API's changes are the batched
// endpoint's, and the naive baseline stays the same through them). Waiting
// requests are bounded like the batched queue, and honour their deadlines.
// Close stops it as a batcher's Run stops on its context's end: it refuses
// new requests and waits for those it admitted.
type naive struct {
	model    models.Model
	sem      chan struct{} // holds one token while a request computes
	waiting  atomic.Int64  // items waiting for the model
	cap      int64
	maxBatch int // items per model call, at most
	onBatch  func(batch.Info)

	mu      sync.Mutex
	closed  bool
	running sync.WaitGroup // admitted requests
}

func newNaive(m models.Model, queueCap, maxBatch int, onBatch func(batch.Info)) *naive {
	return &naive{model: m, sem: make(chan struct{}, 1), cap: int64(queueCap), maxBatch: maxBatch, onBatch: onBatch}
}

// Close refuses new requests with batch.ErrClosed and returns once those
// admitted have finished: then the instance is no longer used.
func (n *naive) Close() {
	n.mu.Lock()
	n.closed = true
	n.mu.Unlock()
	n.running.Wait()
}

// Len returns the number of items waiting.
func (n *naive) Len() int { return int(n.waiting.Load()) }

// Do computes ins once the instance is free, in calls of at most the batch
// size. It has the contract of batch.Batcher.Do. Items not computed because
// ctx ended first are reported as dropped.
func (n *naive) Do(ctx context.Context, ins []models.Input) ([]models.Output, batch.Stats, error) {
	arrived := time.Now()
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, batch.Stats{}, batch.ErrClosed
	}
	n.running.Add(1)
	n.mu.Unlock()
	defer n.running.Done()
	k := int64(len(ins))
	if k > n.cap {
		return nil, batch.Stats{}, batch.ErrTooLarge
	}
	if n.waiting.Add(k) > n.cap {
		n.waiting.Add(-k)
		return nil, batch.Stats{}, batch.ErrQueueFull
	}
	select {
	case n.sem <- struct{}{}:
		n.waiting.Add(-k)
	case <-ctx.Done():
		n.waiting.Add(-k)
		n.onBatch(batch.Info{Dropped: len(ins), Wait: time.Since(arrived)})
		return nil, batch.Stats{}, ctx.Err()
	}
	defer func() { <-n.sem }()
	st := batch.Stats{Queue: time.Since(arrived)}
	outs := make([]models.Output, len(ins))
	var errs []error
	size := max(1, n.maxBatch)
	for lo := 0; lo < len(ins); lo += size {
		hi := min(lo+size, len(ins))
		start := time.Now()
		info := batch.Info{Wait: start.Sub(arrived)}
		if err := ctx.Err(); err != nil { // expired or abandoned: the rest is not computed
			info.Dropped = len(ins) - lo
			n.onBatch(info)
			return nil, st, err
		}
		err := batch.Call(context.WithoutCancel(ctx), n.model.Predict, ins[lo:hi], outs[lo:hi])
		info.Compute, info.Size, info.Calls = time.Since(start), hi-lo, 1
		for i, e := range batch.ItemErrors(err, hi-lo) {
			if e != nil {
				if errs == nil {
					errs = make([]error, len(ins))
				}
				errs[lo+i] = e
				info.Failed++
			}
		}
		n.onBatch(info)
		st.Compute += info.Compute
		st.BatchSize = max(st.BatchSize, info.Size)
	}
	if errs != nil {
		return outs, st, &batch.ItemsError{Errs: errs}
	}
	return outs, st, nil
}
