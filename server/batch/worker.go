package batch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// worker is one model instance's goroutine.
type worker[In, Out any] struct {
	id       int
	fn       Func[In, Out]
	close    func() error // releases the instance; nil when the caller owns it
	quit     chan struct{}
	done     chan struct{} // closed once stopped and the instance closed
	closeErr error         // set before done is closed
	stopOnce sync.Once
}

func (w *worker[In, Out]) stop() { w.stopOnce.Do(func() { close(w.quit) }) }

// Instance is a model instance the batcher owns: its Predict computes
// batches as a Func does, and Close releases it once its worker has stopped
// for good.
type Instance[In, Out any] interface {
	Predict(ctx context.Context, in []In, out []Out) error
	Close() error
}

// ErrLastWorker is returned by RemoveWorker when one worker is left.
var ErrLastWorker = errors.New("batch: cannot remove the last worker")

// AddWorker adds a worker computing with fn, whose model instance its caller
// owns. While Run is running it starts taking batches at once.
func (b *Batcher[In, Out]) AddWorker(fn Func[In, Out]) { b.add(fn, nil) }

// AddInstance adds a worker computing with inst, which the batcher then
// owns: it closes inst once the worker has stopped for good, after
// RemoveWorker took it out or when Run returns. So the batcher's workers and
// the live instances never disagree. (Instances of a batcher whose Run is
// never called stay open.)
func (b *Batcher[In, Out]) AddInstance(inst Instance[In, Out]) { b.add(inst.Predict, inst.Close) }

func (b *Batcher[In, Out]) add(fn Func[In, Out], closeFn func() error) {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	w := &worker[In, Out]{id: b.nextID, fn: fn, close: closeFn, quit: make(chan struct{}), done: make(chan struct{})}
	b.nextID++
	b.workers = append(b.workers, w)
	b.nworkers.Store(int32(len(b.workers)))
	if b.runCtx != nil {
		b.startWorker(w)
	}
	b.notify()
}

// RemoveWorker takes the most recently added worker out at once: it gets no
// new batch, finishes its current one, if any, and then stops, and the
// batcher closes its instance if it owns it (AddInstance). RemoveWorker waits
// for that unless ctx ends first, and returns the worker's Func and the error
// of closing its instance. The removal stands even when ctx ends first (the
// error is then ctx's): Workers counts the workers still taking batches. The
// last worker cannot be removed (ErrLastWorker).
func (b *Batcher[In, Out]) RemoveWorker(ctx context.Context) (Func[In, Out], error) {
	b.wmu.Lock()
	if len(b.workers) <= 1 {
		b.wmu.Unlock()
		return nil, ErrLastWorker
	}
	w := b.workers[len(b.workers)-1]
	b.workers = b.workers[:len(b.workers)-1]
	b.nworkers.Store(int32(len(b.workers)))
	started := b.runCtx != nil
	b.wmu.Unlock()
	w.stop()
	if !started { // never ran: nothing to wait for
		return w.fn, b.closeWorker(w)
	}
	select {
	case <-w.done:
		return w.fn, w.closeErr
	case <-ctx.Done():
		return w.fn, ctx.Err()
	}
}

// closeWorker closes w's instance, if the batcher owns it, and keeps the
// error for Run to return.
func (b *Batcher[In, Out]) closeWorker(w *worker[In, Out]) error {
	if w.close == nil {
		return nil
	}
	err := w.close()
	if err != nil {
		err = fmt.Errorf("batch: close worker %d: %w", w.id, err)
		b.wmu.Lock()
		b.closeErrs = append(b.closeErrs, err)
		b.wmu.Unlock()
	}
	return err
}

// startWorker runs w; b.wmu must be held.
func (b *Batcher[In, Out]) startWorker(w *worker[In, Out]) {
	ctx := b.runCtx
	b.wg.Go(func() {
		defer close(w.done)
		defer func() { w.closeErr = b.closeWorker(w) }()
		var buf workerBuf[In, Out]
		for {
			select {
			case <-w.quit:
				return
			case s, ok := <-b.ready:
				if !ok {
					return
				}
				b.runBatch(ctx, w, s, &buf)
			}
		}
	})
}

// workerBuf holds a worker's reusable slices.
type workerBuf[In, Out any] struct {
	live []item[In, Out]
	ins  []In
	outs []Out
}

// runBatch computes one batch handed over by the dispatcher.
func (b *Batcher[In, Out]) runBatch(ctx context.Context, w *worker[In, Out], s *slab[In, Out], buf *workerBuf[In, Out]) {
	start := time.Now()
	if took, ok := b.batchTime(len(s.items)); ok { // busy from now: admission counts it
		b.running.begin(w.id, start.Add(took))
	}
	info := Info{Worker: w.id, Wait: start.Sub(s.first)}
	live, ins := buf.live[:0], buf.ins[:0]
	for _, it := range s.items {
		if err := it.c.ctx.Err(); err != nil {
			it.c.finish(it.idx, *new(Out), err, Stats{})
			info.Dropped++
			continue
		}
		live = append(live, it)
	}
	live = b.dropLate(live, start, &info)
	maxSize, sumSize := 0, 0
	for _, it := range live {
		ins = append(ins, it.in)
		maxSize, sumSize = max(maxSize, it.size), sumSize+it.size
	}
	clear(s.items)
	s.items = s.items[:0]
	select { // give the slab back for reuse, or leave it to the GC
	case b.back <- s:
	default:
	}

	if n := len(live); n > 0 {
		if cap(buf.outs) < n {
			buf.outs = make([]Out, n)
		}
		out := buf.outs[:n]
		if took, ok := b.batchTime(n); ok { // the items left
			b.running.begin(w.id, start.Add(took))
		}
		errs, calls := b.compute(ctx, w.fn, ins, out)
		info.Compute = time.Since(start)
		info.Size = n
		info.Calls = calls
		if sumSize > 0 { // items have sizes (WithSize)
			info.Padding = float64(n*maxSize) / float64(sumSize)
		}
		if calls == 1 {
			b.est.observe(n, info.Compute)
		}
		for _, err := range errs {
			if err != nil {
				info.Failed++
			}
		}
		// Report the batch before answering its callers, so that whoever
		// sees an answer also sees the batch in OnBatch's effects (metrics),
		// and the adaptive policy expects the callers' next requests.
		b.est.finish(n, n+info.Dropped, time.Now())
		b.report(info)
		st := Stats{Compute: info.Compute, BatchSize: n, Padding: info.Padding}
		for i, it := range live {
			var err error
			if errs != nil {
				err = errs[i]
			}
			st.Queue = start.Sub(it.c.enq)
			it.c.finish(it.idx, out[i], err, st)
		}
		clear(out)
		clear(live)
		clear(ins)
	} else {
		b.est.finish(0, info.Dropped, time.Now())
		b.report(info)
	}
	buf.live, buf.ins = live, ins
	b.running.end(w.id)
	b.busy.Add(-1)
	b.notify()
}

func (b *Batcher[In, Out]) report(info Info) {
	if b.onBatch != nil {
		b.onBatch(info)
	}
}

// compute runs fn on a batch. When the batch fails as a whole and isolation
// is on, it bisects: each half is run again, recursively, so that one bad
// item fails only itself and the others succeed. It returns the per-item
// errors (nil when all succeeded) and the number of calls made, the cost of
// the isolation.
func (b *Batcher[In, Out]) compute(ctx context.Context, fn Func[In, Out], in []In, out []Out) ([]error, int) {
	err := Call(ctx, fn, in, out)
	if err == nil {
		return nil, 1
	}
	errs := ItemErrors(err, len(in))
	if len(in) == 1 || b.cfg.Load().DisableIsolation || !wholeBatch(errs, err) {
		return errs, 1
	}
	mid := len(in) / 2
	left, c1 := b.compute(ctx, fn, in[:mid], out[:mid])
	right, c2 := b.compute(ctx, fn, in[mid:], out[mid:])
	if left == nil && right == nil {
		return nil, 1 + c1 + c2
	}
	errs = make([]error, len(in))
	copy(errs, left)
	copy(errs[mid:], right)
	return errs, 1 + c1 + c2
}

// wholeBatch reports whether errs is err spread over every item, rather than
// the items' own errors.
func wholeBatch(errs []error, err error) bool {
	for _, e := range errs {
		if e != err {
			return false
		}
	}
	return true
}
