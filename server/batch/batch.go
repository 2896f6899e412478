// Package batch is a generic dynamic batcher: callers submit single items or
// multi-item requests, the batcher groups items into batches and hands each
// batch to the next free worker.
//
// Under the Fixed policy a batch is ready when it holds Config.MaxBatch items
// or when Config.MaxLatency has passed since its first item arrived,
// whichever comes first. The deadline is set once, by the first item, and
// never moved by later arrivals. Immediate sends a batch as soon as a worker
// is free; Adaptive waits only when waiting pays, never longer than
// MaxLatency while a worker is free: for callers that form a closed pool
// (they send again as soon as they are answered, which the batcher tells
// from how arrivals follow finished batches), an idle worker waits for the
// pool's callers out of the batcher, at most a quarter of a batch's fixed
// cost, or MaxLatency when they would fill the batch; otherwise one worker
// sends at once and several wait for their share of the measured arrival
// rate (see adaptive.go for the whole rule). A ready batch that is
// waiting for a free worker keeps taking items up to MaxBatch: it would wait
// for the worker anyway, so the extra items cost nobody any latency.
//
// Items, not requests, count toward the batch size: a request of many items may
// span several batches and completes when all of its items are done. Each item
// carries its request's context; an item whose context is done when a worker
// takes its batch is dropped and never reaches the worker's function.
//
// Admission is bounded: when Config.QueueCap items are already waiting,
// Submit and Do fail at once with ErrQueueFull; and a request whose deadline
// the backlog cannot meet is refused at once with ErrWouldMissDeadline
// instead of timing out later.
//
// When a batch fails as a whole, the batcher bisects it to find the failing
// items, so that one bad input fails only itself.
//
// With WithSize, items have sizes (token counts); a batch pads to its largest
// item, the padding is reported, and Config.Buckets groups items of similar
// size into separate batches.
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
	// ErrWouldMissDeadline is returned when the backlog ahead of a request
	// means it would finish after its context's deadline. It wraps
	// ErrQueueFull: the remedy is the same, retry later.
	ErrWouldMissDeadline = fmt.Errorf("%w: the backlog would outlast the request's deadline", ErrQueueFull)
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
	Padding   float64       // batch size × largest item ÷ total item size; 0 when items have no size (see WithSize)
}

// Info describes one batch after it ran. It is passed to Config.OnBatch.
type Info struct {
	Worker  int           // index of the worker that ran it
	Size    int           // items computed
	Dropped int           // items dropped before compute: context done
	Failed  int           // items that got an error from the worker's Func
	Wait    time.Duration // from the arrival of the first item to the start of compute
	Compute time.Duration // time spent in the worker's Func
	Calls   int           // calls of the Func: 1, more when a failed batch was bisected
	Padding float64       // Size × largest item ÷ total item size; 0 when items have no size (see WithSize)
}

// Batcher groups submitted items into batches for its workers. Its methods
// are safe for concurrent use. Run must be running for work to be done.
type Batcher[In, Out any] struct {
	cfg     atomic.Pointer[Config]       // replaced whole by Reconfigure
	size    atomic.Pointer[func(In) int] // item size for padding and buckets; nil: all 1
	est     estimator
	running running // predicted ends of the batches being computed
	onBatch func(Info)

	in    chan arrival[In, Out] // admitted calls; capacity QueueCap
	ready chan *slab[In, Out]   // unbuffered: a receive means a worker is free
	idle  chan struct{}         // capacity 1: a worker finished a batch
	calls sync.Pool             // *call[Out]

	back chan *slab[In, Out] // slabs returned by workers for reuse

	queued   atomic.Int64 // admitted items not yet taken by a worker
	busy     atomic.Int32 // workers computing a batch
	nworkers atomic.Int32 // len(workers), readable without the lock
	mu       sync.RWMutex // guards closed against concurrent admission
	closed   bool

	wmu       sync.Mutex // guards workers, runCtx and closeErrs
	workers   []*worker[In, Out]
	runCtx    context.Context // the workers' context once Run started; nil before
	closeErrs []error         // from closing the instances of stopped workers
	wg        sync.WaitGroup  // the running workers and the dispatcher
	nextID    int
	started   atomic.Bool
}

type item[In, Out any] struct {
	c    *call[Out]
	in   In
	idx  int
	size int
}

// arrival is one admitted call's items, sent to the dispatcher as one
// value so that a call's items are judged together: a call of one item
// in one, of several in many (allocated: one item is the common case).
type arrival[In, Out any] struct {
	one  item[In, Out]
	many []item[In, Out]
}

// slab is one batch: forming, ready, or handed to a worker.
type slab[In, Out any] struct {
	items []item[In, Out]
	first time.Time // arrival of the first item
	key   int       // size bucket
	max   int       // largest item size
	sum   int       // total item size
	hold  time.Time // when the adaptive policy began to hold it with a worker free
}

// New returns a batcher with one worker per Func. Each Func owns its model
// instance: it is never called concurrently with itself. Workers can be
// added and removed later with AddWorker, AddInstance and RemoveWorker.
// Fields of cfg left zero take the defaults of Config.WithDefaults.
func New[In, Out any](cfg Config, workers ...Func[In, Out]) *Batcher[In, Out] {
	cfg = cfg.WithDefaults(len(workers))
	b := &Batcher[In, Out]{
		est:     newEstimator(),
		onBatch: cfg.OnBatch,
		in:      make(chan arrival[In, Out], cfg.QueueCap),
		ready:   make(chan *slab[In, Out]),
		idle:    make(chan struct{}, 1),
		back:    make(chan *slab[In, Out], 64),
	}
	b.cfg.Store(&cfg)
	for _, fn := range workers {
		b.AddWorker(fn)
	}
	return b
}

// WithSize sets the function giving an item's size, such as its token count.
// A batch is padded to its largest item: the batcher then reports padding
// (Info.Padding, Stats.Padding) and, with Config.Buckets, groups items of
// similar size. It is safe to call at any time; items admitted before have
// size 1. It returns b.
func (b *Batcher[In, Out]) WithSize(size func(In) int) *Batcher[In, Out] {
	b.size.Store(&size)
	return b
}

// Config returns the configuration in effect, defaults filled in.
func (b *Batcher[In, Out]) Config() Config { return *b.cfg.Load() }

// Reconfigure changes MaxBatch, MaxLatency, Policy and Buckets at once; the
// batch being formed is judged by the new rules from its next arrival on.
// QueueCap and OnBatch keep their values. Zero fields take their defaults.
func (b *Batcher[In, Out]) Reconfigure(c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	old := b.cfg.Load()
	c.QueueCap, c.OnBatch = old.QueueCap, old.OnBatch
	c = c.WithDefaults(b.Workers())
	b.cfg.Store(&c)
	b.notify()
	return nil
}

// Len returns the number of admitted items not yet taken by a worker.
func (b *Batcher[In, Out]) Len() int { return int(b.queued.Load()) }

// Workers returns the number of workers.
func (b *Batcher[In, Out]) Workers() int {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	return len(b.workers)
}

// Backlog estimates how long the items now queued need to clear at the
// workers' measured capacity; zero until the batcher has measured some
// batches. It is what a Retry-After should say.
func (b *Batcher[In, Out]) Backlog() time.Duration {
	cfg := b.cfg.Load()
	return b.est.clear(int(b.queued.Load()), cfg.MaxBatch, b.Workers())
}

// Observe teaches the batcher's cost model that a batch of n items took d,
// e.g. from a warm-up run outside the batcher. The batcher also learns from
// every batch it runs.
func (b *Batcher[In, Out]) Observe(n int, d time.Duration) { b.est.observe(n, d) }

// Run starts the workers and forms batches until ctx is done. Then it stops
// admitting (Submit and Do return ErrClosed), finishes every admitted item
// without waiting for more company, closes the instances the batcher owns
// (see AddInstance), and returns once all workers have stopped, with the
// errors of closing them. The context given to the workers' Funcs is not
// cancelled by ctx: admitted work is finished, not abandoned. Run may be
// called once.
func (b *Batcher[In, Out]) Run(ctx context.Context) error {
	if !b.started.CompareAndSwap(false, true) {
		return errors.New("batch: Run called twice")
	}
	b.wmu.Lock()
	b.runCtx = context.WithoutCancel(ctx)
	for _, w := range b.workers {
		b.startWorker(w)
	}
	b.wmu.Unlock()
	dispatched := make(chan struct{})
	go func() { b.dispatch(); close(dispatched) }()

	<-ctx.Done()
	b.mu.Lock()
	b.closed = true
	close(b.in)
	b.mu.Unlock()
	<-dispatched // every admitted item is now with a worker
	b.wmu.Lock()
	for _, w := range b.workers {
		w.stop()
	}
	b.wmu.Unlock()
	b.wg.Wait() // the workers have closed their instances
	b.wmu.Lock()
	defer b.wmu.Unlock()
	return errors.Join(b.closeErrs...)
}

// Submit computes one item and returns its output. It blocks until the item is
// done, ctx is done (ctx.Err() is returned; a queued item is then dropped), or
// admission fails at once (ErrQueueFull, ErrClosed).
func (b *Batcher[In, Out]) Submit(ctx context.Context, in In) (Out, error) {
	c := b.getCall(ctx)
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
	c := b.getCall(ctx)
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
	cfg := b.cfg.Load()
	n := int64(len(ins))
	if n > int64(cfg.QueueCap) {
		return ErrTooLarge
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return ErrClosed
	}
	q := b.queued.Add(n)
	if q > int64(cfg.QueueCap) {
		b.queued.Add(-n)
		return ErrQueueFull
	}
	if deadline, ok := c.ctx.Deadline(); ok && !cfg.AdmitLate && b.wouldMiss(c.enq, deadline, int(q), cfg) {
		b.queued.Add(-n)
		return ErrWouldMissDeadline
	}
	c.pending.Store(int32(n))
	sizeOf := b.size.Load()
	it := func(i int) item[In, Out] {
		size := 1
		if sizeOf != nil {
			size = (*sizeOf)(ins[i])
		}
		return item[In, Out]{c: c, in: ins[i], idx: i, size: size}
	}
	// The counter bounds the channel's contents (each arrival holds at
	// least one item), so this send never blocks.
	if len(ins) == 1 {
		b.in <- arrival[In, Out]{one: it(0)}
		return nil
	}
	many := make([]item[In, Out], len(ins))
	for i := range ins {
		many[i] = it(i)
	}
	b.in <- arrival[In, Out]{many: many}
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

func (b *Batcher[In, Out]) getCall(ctx context.Context) *call[Out] {
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
	c.padding.Store(0)
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
	padding atomic.Int64 // ×1000
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
	storeMax(&c.padding, int64(st.Padding*1000))
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
		Padding:   float64(c.padding.Load()) / 1000,
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
