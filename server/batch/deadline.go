package batch

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Deadline-aware scheduling (off with Config.AdmitLate). A request is refused
// at admission, with ErrWouldMissDeadline, when the cost model says it would
// finish after its context's deadline: it must wait for the batches running
// now to end, then for the full batches of the items queued ahead of it, and
// then run in a batch of its own. An item admitted all the same (the model
// ran slower than estimated) is dropped when its batch starts if that batch
// would end after the item's deadline: it is never computed, and its caller
// gets errWouldExpire at once rather than a result after its deadline.

// errWouldExpire fails an item whose batch would end after its deadline. It
// wraps context.DeadlineExceeded: the request's deadline is as good as past.
var errWouldExpire = fmt.Errorf("batch: its batch would end after its deadline: %w", context.DeadlineExceeded)

// running records when each busy worker's batch should end, as the cost
// model predicted when it started. Safe for concurrent use.
type running struct {
	mu   sync.Mutex
	ends map[int]time.Time // by worker id
}

func (r *running) begin(worker int, end time.Time) {
	r.mu.Lock()
	if r.ends == nil {
		r.ends = make(map[int]time.Time)
	}
	r.ends[worker] = end
	r.mu.Unlock()
}

func (r *running) end(worker int) {
	r.mu.Lock()
	delete(r.ends, worker)
	r.mu.Unlock()
}

// remaining returns how long the running batches still take at now, the
// shortest and the total over the busy workers, and how many are busy.
func (r *running) remaining(now time.Time) (shortest, total time.Duration, busy int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, end := range r.ends {
		left := max(0, end.Sub(now))
		if busy == 0 || left < shortest {
			shortest = left
		}
		total += left
		busy++
	}
	return shortest, total, busy
}

// wouldMiss reports whether the last item of a request admitted behind q
// queued items (its own included) would finish too late for deadline (see
// late). Its batch starts when a worker is free for it: the first free
// worker, if the items ahead fill no batch, else once the workers have done
// the running batches' remaining time and the full batches ahead, shared
// among them. It then takes the time of a batch of the queued items, at most
// MaxBatch. Nothing is refused until the cost model has measured some
// batches.
func (b *Batcher[In, Out]) wouldMiss(now, deadline time.Time, q int, cfg *Config) bool {
	full, ok := b.batchTime(cfg.MaxBatch)
	if !ok {
		return false
	}
	own, _ := b.batchTime(min(q, cfg.MaxBatch))
	workers := max(1, int(b.nworkers.Load()))
	shortest, total, busy := b.running.remaining(now)
	if busy < workers {
		shortest = 0 // a worker is idle
	}
	ahead := time.Duration((q - 1) / cfg.MaxBatch) // full batches before the item's own
	start := max(shortest, (total+ahead*full)/time.Duration(workers))
	return late(now.Add(start+own), own, deadline)
}

// late reports whether a batch of cost took ending at end leaves its item's
// answer too close to deadline: within a margin of 1 ms plus 2 % of the batch
// time, for the model's jitter and the answer's way back to its client.
func late(end time.Time, took time.Duration, deadline time.Time) bool {
	return !end.Add(time.Millisecond + took/50).Before(deadline)
}

// dropLate fails the items of a batch starting at start that it would end
// too late for (see late), and returns the others (reusing live).
func (b *Batcher[In, Out]) dropLate(live []item[In, Out], start time.Time, info *Info) []item[In, Out] {
	if b.cfg.Load().AdmitLate {
		return live
	}
	took, ok := b.batchTime(len(live))
	if !ok {
		return live
	}
	end := start.Add(took)
	kept := live[:0]
	for _, it := range live {
		if deadline, ok := it.c.ctx.Deadline(); ok && late(end, took, deadline) {
			it.c.finish(it.idx, *new(Out), errWouldExpire, Stats{})
			info.Dropped++
			continue
		}
		kept = append(kept, it)
	}
	clear(live[len(kept):])
	return kept
}

// batchTime is the cost model's time of a batch of n items, rounded up to the
// microsecond: a fit's rounding error must not make an answer due exactly at
// a deadline look early.
func (b *Batcher[In, Out]) batchTime(n int) (time.Duration, bool) {
	d, ok := b.est.batchTime(n)
	if r := d % time.Microsecond; r != 0 {
		d += time.Microsecond - r
	}
	return d, ok
}
