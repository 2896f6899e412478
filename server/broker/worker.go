package broker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/server"
	"github.com/inferhq/infer/server/batch"
)

// WorkerConfig configures a Worker. The zero value is valid.
type WorkerConfig struct {
	Config
	// Batch is each model instance's batching: MaxBatch, MaxLatency and
	// Policy with their defaults, as in-process (see batch.Config). A
	// forming batch's deadline starts when its first item reaches the
	// worker. QueueCap, AdmitLate and OnBatch are the worker's own and
	// ignored here.
	Batch batch.Config
	// Instances is the number of model instances, each a consumer of its
	// own in the group, placed on devices by the factory. Default
	// DefaultInstances.
	Instances int
	// Name names the worker's consumers Name-0, Name-1, …; names must be
	// unique among live workers. Default host-pid-random.
	Name string
	// Visibility is how long an entry may stay unacknowledged with a worker
	// before another worker claims it. It must exceed the time from reading
	// an entry to acknowledging it (max latency plus about two batches of
	// compute), or entries of slow workers are computed twice. Default
	// DefaultVisibility.
	Visibility time.Duration
	// MaxDeliveries bounds the deliveries of one entry: an entry claimed
	// more often (workers died computing it) is answered with an error
	// instead of taking down the next worker. Default DefaultMaxDeliveries.
	MaxDeliveries int
}

// Defaults of WorkerConfig's fields; infer worker's flags take theirs from
// here.
const (
	DefaultInstances     = 1
	DefaultVisibility    = 10 * time.Second
	DefaultMaxDeliveries = 3
)

func (c WorkerConfig) withDefaults() WorkerConfig {
	c.Config = c.Config.withDefaults()
	c.Batch.QueueCap = 0
	if c.Instances <= 0 {
		c.Instances = DefaultInstances
	}
	if c.Name == "" {
		host, _ := os.Hostname()
		var b [2]byte
		rand.Read(b[:])
		c.Name = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	}
	if c.Visibility <= 0 {
		c.Visibility = DefaultVisibility
	}
	if c.MaxDeliveries <= 0 {
		c.MaxDeliveries = DefaultMaxDeliveries
	}
	return c
}

// replyTTL is how long a reply list outlives its last result: the lists of
// frontends that are gone expire.
const replyTTL = time.Minute

// Worker runs a model for the requests in its stream. Create it with
// NewWorker and run it with Run, alone or as a service of a host (package
// server), which then serves its /metrics, /healthz and /readyz.
type Worker struct {
	cfg      WorkerConfig
	factory  models.Factory
	rdb      *redis.Client
	log      *slog.Logger
	stream   string
	cancelCh string
	metrics  *workerMetrics
	up       atomic.Bool // false while Redis is known to be unreachable
	started  atomic.Bool
	kick     chan struct{} // a heartbeat is due now: Redis is back

	mu   sync.Mutex
	held map[string]*heldEntry // by stream entry id: the entries being computed
}

// heldEntry is an entry a consumer is computing, cancelled if its client goes.
type heldEntry struct{ cancel context.CancelCauseFunc }

// errClientGone cancels an entry whose frontend withdrew it.
var errClientGone = errors.New("client went away")

// NewWorker returns a worker for the model made by factory, reading the
// stream of the model's name and task. It loads and connects nothing yet.
func NewWorker(cfg WorkerConfig, factory models.Factory) (*Worker, error) {
	if err := cfg.Batch.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	rdb, err := cfg.client()
	if err != nil {
		return nil, err
	}
	w := &Worker{
		cfg:      cfg,
		factory:  factory,
		rdb:      rdb,
		log:      cfg.Logger,
		stream:   cfg.stream(factory.Info()),
		cancelCh: cfg.cancelChannel(factory.Info()),
		held:     make(map[string]*heldEntry),
		kick:     make(chan struct{}, 1),
	}
	w.up.Store(true)
	w.metrics = newWorkerMetrics(w)
	return w, nil
}

// Mount puts the worker on a host: its model, its metrics, and a readiness
// check that fails while Redis is unreachable. It serves no route of its
// own: the host's /metrics, /healthz and /readyz are its interface.
func (w *Worker) Mount(m *server.Mount) {
	m.Model(w.factory.Info())
	m.Collect(w.metrics.collectors()...)
	m.Readiness(func() error {
		if !w.up.Load() {
			return errUnreachable
		}
		return nil
	})
}

// errUnreachable is the worker's readiness while Redis is unreachable.
var errUnreachable = server.Errorf(http.StatusServiceUnavailable, "unavailable", "broker unreachable")

// Run runs the worker: it loads and warms the model instances, announces
// the worker every Config.Heartbeat, calls ready, and consumes the stream
// until ctx is done. Then it stops reading, finishes, answers and
// acknowledges every entry it had read (but skips those whose client went
// away), leaves the group, withdraws its announcement, closes the instances,
// and returns. While Redis is unreachable it retries by itself. Run may be
// called once.
func (w *Worker) Run(ctx context.Context, ready func()) (err error) {
	if !w.started.CompareAndSwap(false, true) {
		return errors.New("broker: Run called twice")
	}
	defer func() {
		if cerr := w.rdb.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("close broker connection: %w", cerr))
		}
	}()

	fp, err := Fingerprint(w.factory)
	if err != nil {
		return err
	}
	consumers, err := w.load(ctx)
	defer func() {
		for _, c := range consumers {
			if cerr := c.model.Close(); cerr != nil {
				err = errors.Join(err, fmt.Errorf("close model: %w", cerr))
			}
		}
	}()
	if err != nil {
		return err
	}

	// Announce the worker before it says it is ready, and until its
	// consumers have finished; hear which entries' clients went away.
	me := newAnnouncement(w.cfg.Name, w.factory.Info(), fp)
	me.Instances = len(consumers)
	p := newPresence(w.rdb, w.cfg.role("workers"), w.cfg.role("frontends"), me, w.cfg.expiry())
	bgCtx, stopBg := context.WithCancel(context.WithoutCancel(ctx))
	var bg sync.WaitGroup
	sub := w.rdb.Subscribe(bgCtx, w.cancelCh)
	bg.Go(func() { w.skipCancelled(sub.Channel()) })
	mlog := mismatchLog{me: me, side: "frontend", then: "this worker gets no requests"}
	seen := func(peers []announcement, err error) {
		if err != nil {
			if !isServerError(err) {
				w.down(err)
			}
			w.log.Debug("heartbeat", "err", err)
			return
		}
		mlog.seen(w.log, viewOf(peers, me.model()), true)
	}
	seen(p.beat(bgCtx))
	bg.Go(func() { p.run(bgCtx, w.cfg.Heartbeat, w.kick, func() bool { return !w.up.Load() }, seen) })

	ready()
	w.log.Info("consuming", "stream", w.stream, "consumers", len(consumers), "batch", consumers[0].b.Config().MaxBatch,
		"max_latency", w.cfg.Batch.MaxLatency, "visibility", w.cfg.Visibility, "fingerprint", fp)
	var wg sync.WaitGroup
	for _, c := range consumers {
		wg.Go(func() { c.run(ctx) })
	}
	wg.Wait()
	stopBg()
	sub.Close()
	bg.Wait()
	p.leave()
	w.log.Info("stopped")
	return nil
}

// skipCancelled cancels the held entries named on the cancel channel until
// it is closed: the batcher then drops them unless they are computing.
func (w *Worker) skipCancelled(msgs <-chan *redis.Message) {
	for m := range msgs {
		for _, id := range strings.Fields(m.Payload) {
			w.mu.Lock()
			h := w.held[id]
			w.mu.Unlock()
			if h != nil {
				h.cancel(errClientGone)
				w.metrics.cancelled.Inc()
			}
		}
	}
}

// track returns the context to compute entry id under: ctx, cancelled if
// the entry's client goes away. untrack must be called when it is done.
func (w *Worker) track(ctx context.Context, id string) (_ context.Context, untrack func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	h := &heldEntry{cancel: cancel}
	w.mu.Lock()
	w.held[id] = h
	w.mu.Unlock()
	return ctx, func() {
		w.mu.Lock()
		if w.held[id] == h {
			delete(w.held, id)
		}
		w.mu.Unlock()
		cancel(nil)
	}
}

// load creates and warms one instance per consumer. It returns the
// consumers whose instance was created, for closing.
func (w *Worker) load(ctx context.Context) ([]*consumer, error) {
	var cs []*consumer
	for i := range w.cfg.Instances {
		m, err := w.factory.New(ctx, i)
		if err != nil {
			return cs, fmt.Errorf("load instance %d: %w", i, err)
		}
		c := newConsumer(w, i, m)
		cs = append(cs, c)
		if err := c.warm(ctx); err != nil {
			return cs, fmt.Errorf("warm instance %d: %w", i, err)
		}
	}
	return cs, nil
}

// down notes a failure to reach Redis, logging the first of an outage.
func (w *Worker) down(err error) {
	if w.up.Swap(false) {
		w.log.Warn("broker unreachable; retrying", "err", err)
	}
}

func (w *Worker) recovered() {
	if !w.up.Swap(true) {
		w.log.Info("broker reachable again")
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
}

func (w *Worker) createGroup(ctx context.Context) error {
	err := w.rdb.XGroupCreateMkStream(ctx, w.stream, group, "0").Err()
	if err != nil && !redis.HasErrorPrefix(err, "BUSYGROUP") {
		return fmt.Errorf("create consumer group: %w", err)
	}
	return nil
}

// send pushes results to their frontends and acknowledges and deletes their
// entries, in one transaction. It retries while Redis is unreachable, up to
// the visibility timeout (the entries then belong to whoever claims them),
// and gives up at once on an error reply, as when the group is gone with a
// restarted Redis. Entries not acknowledged stay pending and are claimed
// again.
func (w *Worker) send(ctx context.Context, rs []result) {
	ids := make([]string, len(rs))
	lists := make(map[string][]any)
	for i, r := range rs {
		ids[i] = r.id
		if r.to == "" { // a malformed entry with nowhere to answer, or nobody waiting
			continue
		}
		b, err := json.Marshal(r)
		if err != nil {
			w.log.Error("encode result", "err", err)
			continue
		}
		lists[r.to] = append(lists[r.to], b)
	}
	until := time.Now().Add(w.cfg.Visibility)
	var wait backoff
	for {
		_, err := w.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			for key, vals := range lists {
				p.RPush(ctx, key, vals...)
				p.PExpire(ctx, key, replyTTL)
			}
			p.XAck(ctx, w.stream, group, ids...)
			p.XDel(ctx, w.stream, ids...)
			return nil
		})
		if err == nil {
			return
		}
		d := wait.next()
		if isServerError(err) || ctx.Err() != nil || time.Now().Add(d).After(until) {
			w.log.Warn("results not delivered; their entries stay pending", "entries", len(ids), "err", err)
			return
		}
		w.down(err)
		sleep(ctx, d)
	}
}

// consumer is one model instance reading the stream as one consumer of the
// group and batching what it reads with a batch.Batcher of its own, the
// in-process batcher: same batching rule, isolation of failing items, size
// buckets.
type consumer struct {
	w     *Worker
	name  string
	model models.Model
	b     *batch.Batcher[models.Input, models.Output]
	room  int          // most entries held at once: two batches
	held  atomic.Int64 // entries read and not yet answered
	freed chan struct{}
	done  chan result // results to send; capacity room
}

func newConsumer(w *Worker, i int, m models.Model) *consumer {
	c := &consumer{w: w, name: fmt.Sprintf("%s-%d", w.cfg.Name, i), model: m, freed: make(chan struct{}, 1)}
	cfg := w.cfg.Batch
	cfg.AdmitLate = true // entries were admitted by a frontend; the deadline drops them if need be
	cfg.OnBatch = w.metrics.observeBatch
	c.b = batch.New(cfg, m.Predict).WithSize(func(in models.Input) int { return len(in.Tokens) })
	c.room = 2 * c.b.Config().MaxBatch // one batch computing, one forming; less than the queue's capacity
	c.done = make(chan result, c.room)
	return c
}

// warm runs a full batch through the fresh instance, so that first requests
// do not pay for lazy initialisation.
func (c *consumer) warm(ctx context.Context) error {
	in, err := c.w.factory.Prepare("Warm up the [MASK] before serving.")
	if err != nil {
		return err
	}
	ins := make([]models.Input, c.b.Config().MaxBatch)
	for i := range ins {
		ins[i] = in
	}
	return c.model.Predict(ctx, ins, make([]models.Output, len(ins)))
}

// run consumes until ctx is done, then finishes and answers what it read,
// and leaves the group if it holds nothing.
func (c *consumer) run(ctx context.Context) {
	batchCtx, stopBatch := context.WithCancel(context.WithoutCancel(ctx))
	var bwg, swg, ewg sync.WaitGroup
	bwg.Go(func() { c.b.Run(batchCtx) })
	swg.Go(func() { c.sendLoop(context.WithoutCancel(ctx)) })
	c.read(ctx, &ewg)
	ewg.Wait() // every entry read has its result
	close(c.done)
	swg.Wait() // and it was sent
	stopBatch()
	bwg.Wait()
	c.leave()
}

// read takes entries while the consumer has room: first those that silent
// workers left pending past the visibility timeout, every half of it, then
// new ones. Each entry is computed by a goroutine of ewg.
func (c *consumer) read(ctx context.Context, ewg *sync.WaitGroup) {
	var (
		wait      backoff
		cursor    = "0-0"
		lastClaim time.Time
	)
	for ctx.Err() == nil {
		room := c.room - int(c.held.Load())
		if room <= 0 {
			select {
			case <-c.freed:
			case <-ctx.Done():
			}
			continue
		}
		var msgs []redis.XMessage
		var err error
		if time.Since(lastClaim) >= c.w.cfg.Visibility/2 {
			lastClaim = time.Now()
			msgs, cursor, err = c.claim(ctx, cursor, room)
		}
		if err == nil && len(msgs) == 0 {
			msgs, err = c.readNew(ctx, room)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if isNoGroup(err) {
				if err = c.w.createGroup(ctx); err == nil {
					continue
				}
			}
			c.w.down(err)
			sleep(ctx, wait.next())
			continue
		}
		wait.reset()
		c.w.recovered()
		c.take(ctx, msgs, ewg)
	}
}

func (c *consumer) readNew(ctx context.Context, room int) ([]redis.XMessage, error) {
	streams, err := c.w.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group:    group,
		Consumer: c.name,
		Streams:  []string{c.w.stream, ">"},
		Count:    int64(room),
		Block:    c.w.cfg.Poll,
	}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var msgs []redis.XMessage
	for _, s := range streams {
		msgs = append(msgs, s.Messages...)
	}
	return msgs, nil
}

// claim takes over up to room entries that have been pending longer than the
// visibility timeout, continuing the scan from cursor, and answers those
// delivered too often with an error. At the end of each scan it also removes
// consumers long gone.
func (c *consumer) claim(ctx context.Context, cursor string, room int) ([]redis.XMessage, string, error) {
	w := c.w
	msgs, next, err := w.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
		Stream:   w.stream,
		Group:    group,
		Consumer: c.name,
		MinIdle:  w.cfg.Visibility,
		Start:    cursor,
		Count:    int64(room),
	}).Result()
	if err != nil {
		return nil, cursor, err
	}
	if next == "0-0" {
		c.prune(ctx)
	}
	if len(msgs) == 0 {
		return nil, next, nil
	}
	w.metrics.claims.Add(float64(len(msgs)))
	w.log.Warn("claimed entries a silent worker left pending", "consumer", c.name, "entries", len(msgs))
	return c.dropAbandoned(ctx, msgs), next, nil
}

// dropAbandoned answers and acknowledges the claimed entries delivered more
// than MaxDeliveries times, and returns the others.
func (c *consumer) dropAbandoned(ctx context.Context, msgs []redis.XMessage) []redis.XMessage {
	w := c.w
	pend, err := w.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream:   w.stream,
		Group:    group,
		Start:    msgs[0].ID,
		End:      msgs[len(msgs)-1].ID,
		Count:    int64(len(msgs) + c.room),
		Consumer: c.name,
	}).Result()
	if err != nil {
		return msgs // counts unknown: deliver them once more
	}
	deliveries := make(map[string]int64, len(pend))
	for _, p := range pend {
		deliveries[p.ID] = p.RetryCount
	}
	keep := msgs[:0]
	var rs []result
	for _, m := range msgs {
		n := deliveries[m.ID]
		if n <= int64(w.cfg.MaxDeliveries) {
			keep = append(keep, m)
			continue
		}
		e, _ := parseEntry(m)
		rs = append(rs, result{id: m.ID, to: e.reply, Req: e.req, Item: e.item, Code: codeAbandoned,
			Err: fmt.Sprintf("abandoned after %d deliveries: the workers computing it stopped", n)})
	}
	if len(rs) > 0 {
		w.metrics.abandoned.Add(float64(len(rs)))
		w.log.Error("abandoned entries delivered too often", "entries", len(rs), "max_deliveries", w.cfg.MaxDeliveries)
		w.send(context.WithoutCancel(ctx), rs)
	}
	return keep
}

// prune removes consumers that hold nothing and have been silent for ten
// visibility timeouts: workers that are gone.
func (c *consumer) prune(ctx context.Context) {
	w := c.w
	infos, err := w.rdb.XInfoConsumers(ctx, w.stream, group).Result()
	if err != nil {
		return
	}
	for _, ci := range infos {
		if ci.Pending == 0 && ci.Idle > 10*w.cfg.Visibility && ci.Name != c.name {
			w.rdb.XGroupDelConsumer(ctx, w.stream, group, ci.Name)
		}
	}
}

// take answers at once the entries that are malformed or whose deadline
// passed, and starts the computation of the others.
func (c *consumer) take(ctx context.Context, msgs []redis.XMessage, ewg *sync.WaitGroup) {
	now := time.Now()
	var rs []result
	for _, m := range msgs {
		e, err := parseEntry(m)
		switch {
		case err != nil:
			c.w.log.Warn("malformed entry", "err", err)
			rs = append(rs, answer(&e, nil, err))
		case e.expired(now):
			rs = append(rs, answer(&e, nil, context.DeadlineExceeded))
			c.w.metrics.expired.Inc()
		default:
			c.held.Add(1)
			ectx, untrack := c.w.track(context.WithoutCancel(ctx), e.id)
			ewg.Go(func() {
				defer untrack()
				c.done <- c.compute(ectx, &e)
			})
		}
	}
	if len(rs) > 0 {
		c.w.send(context.WithoutCancel(ctx), rs)
	}
}

// compute runs one entry through the batcher under ctx, which is cancelled
// only when the entry's client goes away, and the entry's deadline. The
// batcher drops the entry without computing it if either comes first. An
// entry whose client went away is acknowledged without an answer.
func (c *consumer) compute(ctx context.Context, e *entry) result {
	if !e.deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, e.deadline)
		defer cancel()
	}
	// The batcher has room for every entry held and admits late ones: only
	// the deadline or the model fail it.
	outs, st, err := c.b.Do(ctx, []models.Input{e.in})
	var ie *batch.ItemsError
	if errors.As(err, &ie) {
		err = ie.Errs[0]
	}
	var out models.Output
	if err == nil {
		out = outs[0]
	}
	r := answer(e, out, err)
	r.Compute, r.Batch = st.Compute.Microseconds(), st.BatchSize
	if errors.Is(context.Cause(ctx), errClientGone) {
		r.to = "" // nobody waits for it
	}
	return r
}

// sendLoop sends the computed results, as many at once as have arrived.
func (c *consumer) sendLoop(ctx context.Context) {
	rs := make([]result, 0, c.room)
	for r := range c.done {
		rs = append(rs[:0], r)
	more:
		for len(rs) < cap(rs) {
			select {
			case r, ok := <-c.done:
				if !ok {
					break more
				}
				rs = append(rs, r)
			default:
				break more
			}
		}
		c.w.send(ctx, rs)
		clear(rs)
		c.held.Add(-int64(len(rs)))
		select {
		case c.freed <- struct{}{}:
		default:
		}
	}
}

// leave removes the consumer from the group if it holds no entry.
func (c *consumer) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	w := c.w
	p, err := w.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: w.stream, Group: group, Start: "-", End: "+", Count: 1, Consumer: c.name,
	}).Result()
	if err == nil && len(p) == 0 {
		w.rdb.XGroupDelConsumer(ctx, w.stream, group, c.name)
	}
}
