package broker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/server/batch"
)

// FrontendConfig configures a Frontend. The zero value is valid.
type FrontendConfig struct {
	Config
	// QueueCap is the most items in the request stream, waiting or being
	// computed, counted over all frontends; a request that would take the
	// stream past it is refused with batch.ErrQueueFull. Default 1024.
	QueueCap int
	// Fingerprint is the model's Fingerprint, announced to the workers.
	// Empty: computed from the model's name, task and backend only, as
	// Fingerprint does for a factory that cannot hash its weights.
	Fingerprint string
}

// Frontend admits requests into a model's request stream and waits for the
// results that workers send back. It implements encoder.Scheduler; Run
// must be running for results to arrive.
type Frontend struct {
	cfg      FrontendConfig
	rdb      *redis.Client
	log      *slog.Logger
	model    string // as in "sim:classify"
	stream   string
	cancelCh string
	replyKey string
	presence *presence
	metrics  frontendMetrics
	seq      atomic.Uint64
	up       atomic.Bool  // false while Redis is known to be unreachable
	items    atomic.Int64 // items of the calls in flight
	started  atomic.Bool

	// Owned by watch; read by Ready, Do and Backlog.
	view    atomic.Pointer[workerView]
	looked  chan struct{} // closed after the first heartbeat
	kick    chan struct{} // a heartbeat is due now: Redis is back
	backlog atomic.Int64  // the stream's length at the last heartbeat
	rate    atomic.Uint64 // math.Float64bits of the measured drain rate, items/s

	mu     sync.Mutex
	calls  map[uint64]*call
	closed bool
	idle   chan struct{} // signalled when the last call of a closed frontend ends
}

// call is one request in flight. Its fields are guarded by Frontend.mu until
// done is closed, and read-only after.
type call struct {
	start time.Time
	outs  []models.Output
	errs  []error // nil unless an item failed
	got   []bool
	left  int
	st    batch.Stats
	err   error // the whole request failed
	done  chan struct{}
}

func (c *call) fail(item int, err error) {
	if c.errs == nil {
		c.errs = make([]error, len(c.outs))
	}
	c.errs[item] = err
}

// admit adds a request's items to the stream unless it would take the
// stream past the cap. KEYS: stream. ARGV: cap, n, request id, reply key,
// deadline, then one input per item. Returns the entries' ids, or none if the
// stream is full.
var admit = redis.NewScript(`
local n = tonumber(ARGV[2])
if redis.call('XLEN', KEYS[1]) + n > tonumber(ARGV[1]) then
	return {}
end
local ids = {}
for i = 1, n do
	ids[i] = redis.call('XADD', KEYS[1], '*', '` + fieldReq + `', ARGV[3], '` + fieldItem + `', i - 1,
		'` + fieldReply + `', ARGV[4], '` + fieldDeadline + `', ARGV[5], '` + fieldInput + `', ARGV[5 + i])
end
return ids
`)

// workerView is what a heartbeat saw of the workers of a frontend's model.
type workerView struct {
	// workers counts the live workers of the model. When a heartbeat sees
	// none but that cannot be believed yet, it keeps the count seen before.
	workers int
	at      time.Time // when
	// sure is set when workers was seen, and a count of zero can be
	// believed: the heartbeats have succeeded for an expiry in a row (after
	// an outage, for as long as a worker may take to notice that Redis is
	// back, too), so every live worker has renewed its announcement since,
	// even after Redis restarted without its data.
	sure bool
}

// NewFrontend returns a frontend for the model described by model; its
// workers must serve a model of the same name and task. It does not connect
// yet.
func NewFrontend(cfg FrontendConfig, model models.Info) (*Frontend, error) {
	cfg.Config = cfg.Config.withDefaults()
	if cfg.QueueCap <= 0 {
		cfg.QueueCap = 1024
	}
	rdb, err := cfg.client()
	if err != nil {
		return nil, err
	}
	var b [8]byte
	rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	if cfg.Fingerprint == "" {
		cfg.Fingerprint = fingerprint(model, "")
	}
	f := &Frontend{
		cfg:      cfg,
		rdb:      rdb,
		log:      cfg.Logger,
		model:    modelKey(model),
		stream:   cfg.stream(model),
		cancelCh: cfg.cancelChannel(model),
		replyKey: cfg.Prefix + ":reply:" + id,
		presence: newPresence(rdb, cfg.role("frontends"), cfg.role("workers"),
			newAnnouncement(id, model, cfg.Fingerprint), cfg.expiry()),
		looked: make(chan struct{}),
		kick:   make(chan struct{}, 1),
		calls:  make(map[uint64]*call),
		idle:   make(chan struct{}, 1),
	}
	f.up.Store(true)
	f.metrics = newFrontendMetrics(f)
	return f, nil
}

// Len returns the number of items this frontend admitted and has not yet
// answered.
func (f *Frontend) Len() int { return int(f.items.Load()) }

// Collectors returns the frontend's Prometheus collectors: the stream's
// backlog, pending entries and drain rate, whether Redis is reachable, the
// live workers of the model, reply latency and late replies.
func (f *Frontend) Collectors() []prometheus.Collector { return f.metrics.collectors() }

// Do admits the items of one request and waits for their results. It has the
// contract of batch.Batcher.Do: batch.ErrQueueFull when the stream holds too
// many items, batch.ErrTooLarge for a request that could never fit,
// batch.ErrClosed once Run is draining, ctx.Err() when ctx is done first, and
// an *batch.ItemsError naming the items that failed. It fails at once with
// what Ready says while that is not nil: ErrUnavailable when Redis cannot be
// reached, ErrNoWorkers when no live worker serves the model; and with them
// when the connection is lost or the last worker goes while it waits. The
// request's deadline travels with it: a worker that finds it passed answers
// without computing, and Do returns context.DeadlineExceeded. When ctx is
// done first, or the workers are gone, its entries are withdrawn: those no
// worker has read are deleted, and the workers that hold the others skip
// them if they have not computed them yet. Stats.Queue is the time not spent
// computing: in the stream, forming a batch, and in transit. Before Run's
// first heartbeat, Do waits for it.
func (f *Frontend) Do(ctx context.Context, ins []models.Input) ([]models.Output, batch.Stats, error) {
	n := len(ins)
	switch {
	case n == 0:
		return nil, batch.Stats{}, nil
	case n > f.cfg.QueueCap:
		return nil, batch.Stats{}, batch.ErrTooLarge
	}
	select {
	case <-f.looked:
	case <-ctx.Done():
		return nil, batch.Stats{}, ctx.Err()
	}
	if err := f.admissible(); err != nil {
		return nil, batch.Stats{}, err
	}
	var deadline int64
	if d, ok := ctx.Deadline(); ok {
		deadline = d.UnixMilli()
	}
	args := make([]any, 5, 5+n) // the script's ARGV: five fields, then the inputs
	for _, in := range ins {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, batch.Stats{}, fmt.Errorf("encode input: %w", err)
		}
		args = append(args, b)
	}
	id, c, err := f.register(n)
	if err != nil {
		return nil, batch.Stats{}, err
	}
	args[0], args[1], args[2], args[3], args[4] = f.cfg.QueueCap, n, id, f.replyKey, deadline
	entries, err := admit.Run(ctx, f.rdb, []string{f.stream}, args...).StringSlice()
	if err != nil || len(entries) == 0 {
		f.forget(id)
		switch {
		case ctx.Err() != nil:
			return nil, batch.Stats{}, ctx.Err()
		case err != nil:
			return nil, batch.Stats{}, fmt.Errorf("%w: admit: %w", ErrUnavailable, err)
		default:
			return nil, batch.Stats{}, batch.ErrQueueFull
		}
	}
	select {
	case <-c.done:
	case <-ctx.Done():
		f.forget(id)
		f.withdraw(ctx, entries)
		return nil, batch.Stats{}, ctx.Err()
	}
	if c.err != nil {
		if errors.Is(c.err, ErrNoWorkers) {
			f.withdraw(ctx, entries)
		}
		return nil, batch.Stats{}, c.err
	}
	if c.errs != nil {
		return c.outs, c.st, &batch.ItemsError{Errs: c.errs}
	}
	return c.outs, c.st, nil
}

func (f *Frontend) register(n int) (uint64, *call, error) {
	c := &call{
		start: time.Now(),
		outs:  make([]models.Output, n),
		got:   make([]bool, n),
		left:  n,
		done:  make(chan struct{}),
	}
	id := f.seq.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return 0, nil, batch.ErrClosed
	}
	f.calls[id] = c
	f.items.Add(int64(n))
	return id, c, nil
}

// withdraw deletes the entries of a request nobody waits for any more, so
// that no worker reads those it has not read yet, and names them on the
// model's cancel channel, so that the workers holding the others skip those
// they have not computed yet. It tries for at most a second, and only once.
func (f *Frontend) withdraw(ctx context.Context, entries []string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_, err := f.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.XDel(ctx, f.stream, entries...)
		p.Publish(ctx, f.cancelCh, strings.Join(entries, " "))
		return nil
	})
	if err != nil {
		f.log.Debug("withdraw entries", "err", err)
	}
}

// forget drops a call nobody waits for any more; its results, if they come,
// are counted as late.
func (f *Frontend) forget(id uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := f.calls[id]; c != nil {
		f.end(id, c)
	}
}

// end removes a finished call. f.mu must be held.
func (f *Frontend) end(id uint64, c *call) {
	delete(f.calls, id)
	f.items.Add(-int64(len(c.outs)))
	if f.closed && len(f.calls) == 0 {
		select {
		case f.idle <- struct{}{}:
		default:
		}
	}
}

// deliver hands one result to the call waiting for it.
func (f *Frontend) deliver(raw string) {
	var r result
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		f.log.Warn("undecodable result", "err", err)
		return
	}
	id, _ := strconv.ParseUint(r.Req, 10, 64)
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls[id]
	if c == nil || r.Item < 0 || r.Item >= len(c.got) || c.got[r.Item] {
		f.metrics.late.Inc() // a duplicate, or its request is no longer waiting
		return
	}
	c.got[r.Item] = true
	c.left--
	if r.Code == codeExpired {
		c.err = context.DeadlineExceeded
		c.left = 0
	} else if r.Code != "" {
		c.fail(r.Item, r.err())
	} else if out, err := r.output(); err != nil {
		c.fail(r.Item, fmt.Errorf("decode output: %w", err))
	} else {
		c.outs[r.Item] = out
	}
	compute := time.Duration(r.Compute) * time.Microsecond
	c.st.Compute = max(c.st.Compute, compute)
	c.st.Queue = max(c.st.Queue, time.Since(c.start)-compute)
	c.st.BatchSize = max(c.st.BatchSize, r.Batch)
	if c.left == 0 {
		f.metrics.reply.Observe(time.Since(c.start).Seconds())
		f.end(id, c)
		close(c.done)
	}
}

// failAll ends every call in flight with err.
func (f *Frontend) failAll(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for id, c := range f.calls {
		c.err = err
		f.end(id, c)
		close(c.done)
	}
}

// Run receives results and announces the frontend every Config.Heartbeat
// until ctx is done, then stops admitting (Do returns batch.ErrClosed), waits
// for the calls in flight to end (each ends by its result or its own
// context), withdraws its announcement, releases its connections and
// returns. While Redis is unreachable, Do fails at once with ErrUnavailable
// and the calls in flight fail with it; Run reconnects by itself. Run may be
// called once.
func (f *Frontend) Run(ctx context.Context) error {
	if !f.started.CompareAndSwap(false, true) {
		return errors.New("broker: Run called twice")
	}
	bg, stop := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { f.receive(bg) })
	wg.Go(func() { f.watch(bg) })

	<-ctx.Done()
	f.mu.Lock()
	f.closed = true
	busy := len(f.calls) > 0
	f.mu.Unlock()
	if busy {
		<-f.idle
	}
	stop()
	wg.Wait()
	f.presence.leave()
	if err := f.rdb.Close(); err != nil {
		return fmt.Errorf("close broker connection: %w", err)
	}
	return nil
}

// receive pops results from the frontend's reply list and delivers them.
// When the connection fails, the calls in flight fail with ErrUnavailable
// (their entries may be gone with a restarted Redis), Do refuses at once,
// and receive pings until Redis answers again.
func (f *Frontend) receive(ctx context.Context) {
	var wait backoff
	for ctx.Err() == nil {
		vals, err := f.pop(ctx)
		switch {
		case err == nil:
			for _, v := range vals {
				f.deliver(v)
			}
			continue
		case errors.Is(err, redis.Nil) || ctx.Err() != nil:
			continue
		}
		if f.up.Swap(false) {
			f.log.Warn("broker unreachable; refusing requests until it is back", "err", err)
		}
		f.failAll(fmt.Errorf("%w: connection lost: %w", ErrUnavailable, err))
		for sleep(ctx, wait.next()) {
			if f.rdb.Ping(ctx).Err() == nil {
				wait.reset()
				f.up.Store(true)
				f.log.Info("broker reachable again")
				select {
				case f.kick <- struct{}{}:
				default:
				}
				break
			}
		}
	}
}

// pop waits up to Config.Poll, at most half CommandTimeout (so that a
// frozen Redis is told from a quiet one within CommandTimeout), for results
// and returns up to 512 of them. (go-redis's BLMPop rounds the timeout up
// to whole seconds.)
func (f *Frontend) pop(ctx context.Context) ([]string, error) {
	timeout := strconv.FormatFloat(min(f.cfg.Poll, CommandTimeout/2).Seconds(), 'f', 3, 64)
	v, err := f.rdb.Do(ctx, "blmpop", timeout, 1, f.replyKey, "left", "count", 512).Slice()
	if err != nil {
		return nil, err
	}
	// [key, [value…]]
	if len(v) != 2 {
		return nil, fmt.Errorf("blmpop: unexpected reply %v", v)
	}
	items, _ := v[1].([]any)
	vals := make([]string, 0, len(items))
	for _, it := range items {
		if s, ok := it.(string); ok {
			vals = append(vals, s)
		}
	}
	return vals, nil
}

// Ready reports why the frontend cannot serve now, or nil when it can:
// ErrUnavailable while Redis is unreachable (or has not answered a
// heartbeat for an expiry, or since it came back), ErrNoWorkers while no
// live worker of the model is known. The server's /readyz follows it.
func (f *Frontend) Ready() error {
	v := f.view.Load()
	switch {
	case !f.up.Load() || v == nil || time.Since(v.at) > f.cfg.expiry():
		return ErrUnavailable
	case v.workers == 0:
		return ErrNoWorkers
	}
	return nil
}

// admissible is Ready for admission, which is more hopeful: when no worker
// has been seen yet, as just after the frontend or Redis started, a request
// is admitted and fails with ErrNoWorkers only if none shows up within an
// expiry.
func (f *Frontend) admissible() error {
	err := f.Ready()
	if errors.Is(err, ErrNoWorkers) && !f.view.Load().sure {
		return nil
	}
	return err
}

// Backlog estimates how long the items in the request stream need to
// clear, from its length and the rate at which it was measured to drain
// while it held items (by all workers, for all frontends); zero until
// measured. A server's Retry-After comes from it.
func (f *Frontend) Backlog() time.Duration {
	rate, n := math.Float64frombits(f.rate.Load()), f.backlog.Load()
	if rate <= 0 || n <= 0 {
		return 0
	}
	return time.Duration(min(float64(n)/rate, 3600) * float64(time.Second))
}

// watch announces the frontend every heartbeat and keeps its view of the
// model's workers: it logs when there are none (and which models the live
// workers serve instead), fails the calls in flight with ErrNoWorkers while
// there are none, and measures how fast the stream drains.
func (f *Frontend) watch(ctx context.Context) {
	var (
		once   sync.Once
		looked = func() { once.Do(func() { close(f.looked) }) }
		mlog   = mismatchLog{me: f.presence.me, side: "worker", then: "requests are refused with 503 no_workers"}
		meter  drainMeter
		since  time.Time // start of the current run of successful heartbeats
		outage bool      // a heartbeat failed before that run
		warned bool      // that there is no worker
	)
	seen := func(peers []announcement, err error) {
		defer looked()
		now := time.Now()
		if err != nil {
			since, outage = time.Time{}, true
			f.log.Debug("heartbeat", "err", err)
			return
		}
		if since.IsZero() {
			since = now
		}
		believe := f.cfg.expiry()
		if outage {
			believe += maxBackoff
		}
		v := viewOf(peers, f.model)
		n := len(v.same)
		sure := n > 0 || now.Sub(since) >= believe
		mlog.seen(f.log, v, sure)
		shown := n
		if old := f.view.Load(); !sure && old != nil {
			shown = old.workers
		}
		f.view.Store(&workerView{workers: shown, at: now, sure: sure})
		switch {
		case n > 0 && warned:
			warned = false
			f.log.Info("live workers serve the model again", "model", f.model, "workers", n)
		case n == 0 && sure:
			if !warned && len(v.others) == 0 { // else mlog said so
				f.log.Warn("no live worker serves the model: requests are refused with 503 no_workers until one announces itself",
					"model", f.model)
			}
			warned = true
			f.failAll(ErrNoWorkers)
		}
		f.measure(ctx, &meter)
	}
	defer looked()
	seen(f.presence.beat(ctx))
	f.presence.run(ctx, f.cfg.Heartbeat, f.kick, func() bool { return !f.up.Load() }, seen)
}

// measure looks at the stream's length and entries ever added, for Backlog.
func (f *Frontend) measure(ctx context.Context, m *drainMeter) {
	ctx, cancel := context.WithTimeout(ctx, f.cfg.expiry())
	defer cancel()
	var added, length int64
	info, err := f.rdb.XInfoStream(ctx, f.stream).Result()
	switch {
	case err == nil:
		added, length = info.EntriesAdded, info.Length
	case !redis.HasErrorPrefix(err, "no such key"):
		return
	}
	m.observe(time.Now(), added, length)
	f.backlog.Store(length)
	f.rate.Store(math.Float64bits(m.rate()))
}
