package server

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/server/batch"
)

// naive runs each request alone on its own model instance, one request at a
// time: the baseline a hand-written server gives. Waiting requests are bounded
// like the batched queue, and honour their deadlines.
type naive struct {
	model   models.Model
	sem     chan struct{} // holds one token while a request computes
	waiting atomic.Int64  // items waiting for the model
	cap     int64
	onBatch func(batch.Info)
}

func newNaive(m models.Model, queueCap int, onBatch func(batch.Info)) *naive {
	return &naive{model: m, sem: make(chan struct{}, 1), cap: int64(queueCap), onBatch: onBatch}
}

// Len returns the number of items waiting.
func (n *naive) Len() int { return int(n.waiting.Load()) }

// Do computes ins as one model call once the instance is free. It has the
// contract of batch.Batcher.Do.
func (n *naive) Do(ctx context.Context, ins []models.Input) ([]models.Output, batch.Stats, error) {
	arrived := time.Now()
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
		return nil, batch.Stats{}, ctx.Err()
	}
	defer func() { <-n.sem }()
	start := time.Now()
	info := batch.Info{Wait: start.Sub(arrived)}
	if err := ctx.Err(); err != nil { // expired while waiting for the lock
		info.Dropped = len(ins)
		n.onBatch(info)
		return nil, batch.Stats{}, err
	}
	outs := make([]models.Output, len(ins))
	err := batch.Call(context.WithoutCancel(ctx), n.model.Predict, ins, outs)
	info.Compute = time.Since(start)
	info.Size = len(ins)
	st := batch.Stats{Queue: info.Wait, Compute: info.Compute, BatchSize: len(ins)}
	errs := batch.ItemErrors(err, len(ins))
	for _, e := range errs {
		if e != nil {
			info.Failed++
		}
	}
	n.onBatch(info)
	if info.Failed > 0 {
		return outs, st, &batch.ItemsError{Errs: errs}
	}
	return outs, st, nil
}
