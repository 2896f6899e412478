// Package batch is a generic dynamic batcher: callers submit single items or
// multi-item requests, the batcher groups items into batches and hands each
// batch to the next free worker.
//
// A batch is ready when it holds Config.MaxBatch items or when
// Config.MaxLatency has passed since its first item arrived, whichever comes
// first. The deadline is set once, by the first item, and never moved by later
// arrivals. A ready batch that is waiting for a free worker keeps taking items
// up to MaxBatch: it would wait for the worker anyway, so the extra items cost
// nobody any latency.
//
// Items, not requests, count toward the batch size: a request of many items may
// span several batches and completes when all of its items are done. Each item
// carries its request's context; an item whose context is done when a worker
// takes its batch is dropped and never reaches the worker's function.
//
// Admission is bounded: when Config.QueueCap items are already waiting,
// Submit and Do fail at once with ErrQueueFull.
//
// The package has no HTTP and no models inside; the zero Config is usable.
package batch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

var (
	// ErrQueueFull is returned when admitting a request would take the queue
	// past Config.QueueCap items. Nothing of the request was admitted.
	ErrQueueFull = errors.New("batch: queue full")
	// ErrTooLarge is returned for a request with more items than the queue can
	// ever hold; retrying it cannot succeed.
	ErrTooLarge = errors.New("batch: request has more items than the queue holds")
	// ErrClosed is returned once the batcher has stopped admitting (draining
	// or stopped).
	ErrClosed = errors.New("batch: closed")
)

// Func computes one batch. It must set out[i] for every in[i] and return nil,
// or return an error: an error with a method ItemErrors() []error returning
// one entry per item (such as *ItemsError) fails only the items whose entry is
// non-nil; any other error fails every item of the batch. A panic is recovered
// and fails the batch. Each worker's Func is called by one goroutine at a
// time; len(out) == len(in) >= 1.
type Func[In, Out any] func(ctx context.Context, in []In, out []Out) error

// ItemsError reports per-item failures. Errs has one entry per item; nil
// entries succeeded.
type ItemsError struct {
	Errs []error
}

func (e *ItemsError) Error() string {
	n, first := 0, -1
	for i, err := range e.Errs {
		if err != nil {
			n++
			if first < 0 {
				first = i
			}
		}
	}
	if n == 0 {
		return "batch: no item failed"
	}
	if n == 1 {
		return fmt.Sprintf("item %d: %v", first, e.Errs[first])
	}
	return fmt.Sprintf("%d of %d items failed; item %d: %v", n, len(e.Errs), first, e.Errs[first])
}

// ItemErrors returns the per-item errors.
func (e *ItemsError) ItemErrors() []error { return e.Errs }

// ItemErrors spreads the error of a batch of n items over its items: nil for
// a nil error, the items' own errors when err carries them (see Func), and
// err itself for every item otherwise.
func ItemErrors(err error, n int) []error {
	if err == nil {
		return nil
	}
	var ie interface{ ItemErrors() []error }
	if errors.As(err, &ie) {
		if errs := ie.ItemErrors(); len(errs) == n {
			return errs
		}
	}
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// Unwrap returns the non-nil item errors, so errors.Is and errors.As look
// through them.
func (e *ItemsError) Unwrap() []error {
	var errs []error
	for _, err := range e.Errs {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// Stats describes how one request was served. For a request whose items ran in
// several batches, each field is the largest over its items.
type Stats struct {
	Queue     time.Duration // from arrival to the start of the batch's computation
	Compute   time.Duration // the computation of the batch
	BatchSize int           // items in the batch
}

// Info describes one batch after it ran. It is passed to Config.OnBatch.
type Info struct {
	Worker  int           // index of the worker that ran it
	Size    int           // items computed
	Dropped int           // items dropped before compute: context done
	Failed  int           // items that got an error from the worker's Func
	Wait    time.Duration // from the arrival of the first item to the start of compute
	Compute time.Duration // time spent in the worker's Func
}

// Batcher groups submitted items into batches for a fixed set of workers. Its
// methods are safe for concurrent use. Run must be running for work to be done.
type Batcher[In, Out any] struct {
	cfg     Config
	workers []Func[In, Out]
	policy  policy

	in    chan item[In, Out]  // admitted items; capacity QueueCap
	ready chan *slab[In, Out] // unbuffered: a receive means a worker is free
	free  chan *slab[In, Out] // spare batch buffers
	calls sync.Pool           // *call[Out]

	queued  atomic.Int64 // admitted items not yet taken by a worker
	mu      sync.RWMutex // guards closed against concurrent admission
	closed  bool
	started atomic.Bool
}

type item[In, Out any] struct {
	c   *call[Out]
	in  In
	idx int
}

type slab[In, Out any] struct {
	items []item[In, Out]
}

// New returns a batcher with one worker per Func. Each Func owns its model
// instance: it is never called concurrently with itself. New panics if no
// worker is given, since that is a programming error.
func New[In, Out any](cfg Config, workers ...Func[In, Out]) *Batcher[In, Out] {
	if len(workers) == 0 {
		panic("batch.New: no workers")
	}
	cfg = cfg.withDefaults(len(workers))
	b := &Batcher[In, Out]{
		cfg:     cfg,
		workers: workers,
		policy:  newPolicy(cfg),
		in:      make(chan item[In, Out], cfg.QueueCap),
		ready:   make(chan *slab[In, Out]),
		free:    make(chan *slab[In, Out], len(workers)+1),
	}
	for range len(workers) + 1 {
		b.free <- &slab[In, Out]{items: make([]item[In, Out], 0, cfg.MaxBatch)}
	}
	return b
}

// Config returns the configuration in effect, defaults filled in.
func (b *Batcher[In, Out]) Config() Config { return b.cfg }

// Len returns the number of admitted items not yet taken by a worker.
func (b *Batcher[In, Out]) Len() int { return int(b.queued.Load()) }

// Run starts the workers and forms batches until ctx is done. Then it stops
// admitting (Submit and Do return ErrClosed), finishes every admitted item
// without waiting for more company, and returns once all workers are idle.
// The context given to the workers' Funcs is not cancelled by ctx: admitted
// work is finished, not abandoned. Run may be called once.
func (b *Batcher[In, Out]) Run(ctx context.Context) error {
	if !b.started.CompareAndSwap(false, true) {
		return errors.New("batch: Run called twice")
	}
	work := context.WithoutCancel(ctx)
	var wg sync.WaitGroup
	for i, fn := range b.workers {
		wg.Go(func() { b.work(work, i, fn) })
	}
	wg.Go(b.dispatch)

	<-ctx.Done()
	b.mu.Lock()
	b.closed = true
	close(b.in)
	b.mu.Unlock()
	wg.Wait()
	return nil
}

// Submit computes one item and returns its output. It blocks until the item is
// done, ctx is done (ctx.Err() is returned; a queued item is then dropped), or
// admission fails at once (ErrQueueFull, ErrClosed).
func (b *Batcher[In, Out]) Submit(ctx context.Context, in In) (Out, error) {
	c := b.getCall(ctx, 1)
	c.outs = c.one[:]
	ins := [1]In{in}
	var zero Out
	if err := b.admit(c, ins[:]); err != nil {
		b.putCall(c)
		return zero, err
	}
	if err := b.wait(ctx, c); err != nil {
		return zero, err
	}
	out, err := c.one[0], c.err(0)
	b.putCall(c)
	return out, err
}

// Do computes every item of ins, possibly across several batches, and returns
// the outputs in order. It blocks like Submit. If some items failed, the
// outputs of the others are returned along with an *ItemsError.
func (b *Batcher[In, Out]) Do(ctx context.Context, ins []In) ([]Out, Stats, error) {
	if len(ins) == 0 {
		return nil, Stats{}, nil
	}
	c := b.getCall(ctx, len(ins))
	c.outs = make([]Out, len(ins))
	if err := b.admit(c, ins); err != nil {
		b.putCall(c)
		return nil, Stats{}, err
	}
	if err := b.wait(ctx, c); err != nil {
		return nil, Stats{}, err
	}
	outs, st := c.outs, c.stats()
	var err error
	if c.errs != nil {
		err = &ItemsError{Errs: c.errs}
	}
	b.putCall(c)
	return outs, st, err
}

func (b *Batcher[In, Out]) admit(c *call[Out], ins []In) error {
	n := int64(len(ins))
	if n > int64(b.cfg.QueueCap) {
		return ErrTooLarge
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return ErrClosed
	}
	if b.queued.Add(n) > int64(b.cfg.QueueCap) {
		b.queued.Add(-n)
		return ErrQueueFull
	}
	c.pending.Store(int32(n))
	// The counter bounds the channel's contents, so these sends never block.
	for i := range ins {
		b.in <- item[In, Out]{c: c, in: ins[i], idx: i}
	}
	return nil
}

// wait blocks until c is done or ctx is. On ctx the call is abandoned: workers
// may still write into it, so it is not recycled.
func (b *Batcher[In, Out]) wait(ctx context.Context, c *call[Out]) error {
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// dispatch forms batches and hands each to the next free worker.
func (b *Batcher[In, Out]) dispatch() {
	defer close(b.ready)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	in := b.in
	for {
		s := <-b.free
		first, ok := <-in
		if !ok {
			return
		}
		s.items = append(s.items[:0], first)
		max := b.cfg.MaxBatch

		// Forming: wait for company until full or the first item's deadline.
		if wait := b.policy.wait(first.c.enq); wait > 0 && len(s.items) < max {
			timer.Reset(wait)
		forming:
			for len(s.items) < max {
				select {
				case it, ok := <-in:
					if !ok { // draining: nothing more will come
						in = nil
						break forming
					}
					s.items = append(s.items, it)
				case <-timer.C:
					break forming
				}
			}
			timer.Stop()
		}

		// Ready: offer to the workers, taking more items while none is free.
		// Once sent, s belongs to the worker: count its items before.
	offering:
		for {
			s.items, in = drain(s.items, in, max)
			n := int64(len(s.items))
			if n >= int64(max) {
				b.ready <- s
				b.queued.Add(-n)
				break
			}
			select {
			case b.ready <- s:
				b.queued.Add(-n)
				break offering
			case it, ok := <-in:
				if !ok {
					in = nil
					continue
				}
				s.items = append(s.items, it)
			}
		}
		if in == nil {
			// Closed and empty: receiving from nil would block forever.
			in = closedChan[In, Out]()
		}
	}
}

// drain appends the items already waiting in in, up to max in all, without
// blocking. It returns in, or nil once in is closed and empty.
func drain[In, Out any](items []item[In, Out], in chan item[In, Out], max int) ([]item[In, Out], chan item[In, Out]) {
	for in != nil && len(items) < max {
		select {
		case it, ok := <-in:
			if !ok {
				return items, nil
			}
			items = append(items, it)
		default:
			return items, in
		}
	}
	return items, in
}

func closedChan[In, Out any]() chan item[In, Out] {
	c := make(chan item[In, Out])
	close(c)
	return c
}

// work runs batches on one worker until the dispatcher stops.
func (b *Batcher[In, Out]) work(ctx context.Context, id int, fn Func[In, Out]) {
	max := b.cfg.MaxBatch
	live := make([]item[In, Out], 0, max)
	ins := make([]In, 0, max)
	outs := make([]Out, max)
	var zeroIn In
	for s := range b.ready {
		start := time.Now()
		info := Info{Worker: id, Wait: start.Sub(s.items[0].c.enq)}
		live, ins = live[:0], ins[:0]
		for _, it := range s.items {
			if err := it.c.ctx.Err(); err != nil {
				it.c.finish(it.idx, *new(Out), err, Stats{})
				info.Dropped++
				continue
			}
			live = append(live, it)
			ins = append(ins, it.in)
		}
		clear(s.items)
		s.items = s.items[:0]
		b.free <- s

		if n := len(live); n > 0 {
			out := outs[:n]
			clear(out)
			errs := ItemErrors(Call(ctx, fn, ins, out), n)
			info.Compute = time.Since(start)
			info.Size = n
			for i, it := range live {
				var ierr error
				if errs != nil {
					ierr = errs[i]
				}
				if ierr != nil {
					info.Failed++
				}
				it.c.finish(it.idx, out[i], ierr, Stats{
					Queue:     start.Sub(it.c.enq),
					Compute:   info.Compute,
					BatchSize: n,
				})
			}
			clear(out)
			clear(live)
			for i := range ins {
				ins[i] = zeroIn
			}
		}
		if b.cfg.OnBatch != nil {
			b.cfg.OnBatch(info)
		}
	}
}

// Call runs fn on one batch and turns a panic into an error, as the
// batcher's workers do.
func Call[In, Out any](ctx context.Context, fn Func[In, Out], in []In, out []Out) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("batch: worker panicked: %v", r)
		}
	}()
	return fn(ctx, in, out)
}

func (b *Batcher[In, Out]) getCall(ctx context.Context, n int) *call[Out] {
	c, _ := b.calls.Get().(*call[Out])
	if c == nil {
		c = &call[Out]{done: make(chan struct{}, 1)}
	}
	c.ctx = ctx
	c.enq = time.Now()
	return c
}

// putCall recycles a call whose workers are all done with it.
func (b *Batcher[In, Out]) putCall(c *call[Out]) {
	var zero Out
	c.ctx, c.outs, c.errs = nil, nil, nil
	c.one[0] = zero
	c.queue.Store(0)
	c.compute.Store(0)
	c.size.Store(0)
	b.calls.Put(c)
}

// call is one request in flight: its items point at it.
type call[Out any] struct {
	ctx     context.Context
	enq     time.Time
	pending atomic.Int32
	done    chan struct{} // capacity 1; signalled when pending reaches 0
	outs    []Out
	one     [1]Out // backing store of outs for single-item calls

	mu      sync.Mutex // guards errs
	errs    []error
	queue   atomic.Int64
	compute atomic.Int64
	size    atomic.Int64
}

func (c *call[Out]) finish(idx int, out Out, err error, st Stats) {
	if err != nil {
		c.mu.Lock()
		if c.errs == nil {
			c.errs = make([]error, len(c.outs))
		}
		c.errs[idx] = err
		c.mu.Unlock()
	} else {
		c.outs[idx] = out
	}
	storeMax(&c.queue, int64(st.Queue))
	storeMax(&c.compute, int64(st.Compute))
	storeMax(&c.size, int64(st.BatchSize))
	if c.pending.Add(-1) == 0 {
		c.done <- struct{}{}
	}
}

func (c *call[Out]) err(idx int) error {
	if c.errs == nil {
		return nil
	}
	return c.errs[idx]
}

func (c *call[Out]) stats() Stats {
	return Stats{
		Queue:     time.Duration(c.queue.Load()),
		Compute:   time.Duration(c.compute.Load()),
		BatchSize: int(c.size.Load()),
	}
}

func storeMax(a *atomic.Int64, v int64) {
	for {
		old := a.Load()
		if v <= old || a.CompareAndSwap(old, v) {
			return
		}
	}
}
