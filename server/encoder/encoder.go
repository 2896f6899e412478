// Package encoder serves an encoder model (one output per input text) as a
// service of the host (package server): a naive endpoint and a dynamically
// batched endpoint over the same model side by side, the KServe v2 protocol
// on the batched path, a result cache, and an admin API that changes the
// batching at run time.
//
//	POST /naive                   each request alone on its own instance
//	POST /batched                 requests queued and run in dynamic batches
//	POST /v2/models/{name}/infer  KServe v2 / Triton, on the batched path
//	GET  /v2, /v2/health/…, /v2/models/{name}[/ready]
//	GET, PATCH /admin/batching    behind the host's admin token
//
// An API over these paths is an endpoint (endpoint.go): how its body gives
// items, how its answer and errors are written, and which path (naive or
// batched) computes them; /naive, /batched and v2 are three of them.
package encoder

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/server"
	"github.com/inferhq/infer/server/batch"
)

// Config configures a Service. The zero value is valid: one worker, the
// batching defaults of server/batch, no cache.
type Config struct {
	// Batch configures the batched endpoint: batch size, max latency,
	// policy and queue capacity (see batch.Config for their defaults).
	Batch batch.Config
	// Workers is the number of model instances behind the batched
	// endpoint. Default DefaultWorkers, at most batch.WorkersLimit. The
	// naive endpoint has one instance of its own.
	Workers int
	// MaxItems is the most items one request may carry. Default
	// DefaultMaxItems, or the batched queue's capacity if smaller; it may
	// not exceed it.
	MaxItems int
	// Scheduler, if set, runs the batched endpoint's requests instead of an
	// in-process batcher over Workers local instances: distributed mode
	// plugs in here. The service then loads only the naive endpoint's
	// instance, and runs the scheduler from Run.
	Scheduler Scheduler
	// CacheSize is how many results the result cache holds (identical
	// inputs are answered from it); 0 disables the cache. At most
	// CacheSizeLimit.
	CacheSize int
	// CacheTTL is how long a cached result stays valid; 0 means until
	// evicted.
	CacheTTL time.Duration
	// Version is reported by GET /v2.
	Version string
	// Logger receives lifecycle events; nil discards them.
	Logger *slog.Logger
}

// Defaults and bounds of Config's fields (the batching ones are in
// server/batch: batch.MaxBatchLimit, batch.WorkersLimit, …).
const (
	// DefaultWorkers is Config.Workers's default.
	DefaultWorkers = 1
	// DefaultMaxItems is Config.MaxItems's default, unless the queue
	// holds fewer items.
	DefaultMaxItems = 256
	// CacheSizeLimit bounds Config.CacheSize, in results.
	CacheSizeLimit = 1 << 24
)

func (c Config) withDefaults() Config {
	if c.Workers <= 0 {
		c.Workers = DefaultWorkers
	}
	c.Batch = c.Batch.WithDefaults(c.Workers)
	if c.MaxItems <= 0 {
		c.MaxItems = min(DefaultMaxItems, c.Batch.QueueCap)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports settings out of their bounds or that cannot work
// together. Zero values stand for their defaults.
func (c Config) Validate() error {
	if err := c.Batch.Validate(); err != nil {
		return err
	}
	if c.Workers != 0 {
		if err := batch.ValidateWorkers(c.Workers); err != nil {
			return err
		}
	}
	switch {
	case c.MaxItems < 0:
		return fmt.Errorf("max items %d: must not be negative", c.MaxItems)
	case c.CacheSize < 0 || c.CacheSize > CacheSizeLimit:
		return fmt.Errorf("cache size %d: want 0 to %d", c.CacheSize, CacheSizeLimit)
	case c.CacheTTL < 0:
		return errors.New("the cache's TTL must not be negative")
	}
	d := c.withDefaults()
	if d.MaxItems > d.Batch.QueueCap {
		return fmt.Errorf("max items per request (%d) exceeds the queue capacity (%d): such requests could never be admitted", d.MaxItems, d.Batch.QueueCap)
	}
	return nil
}

// Scheduler runs batched requests. *batch.Batcher[models.Input,
// models.Output] is the in-process one.
type Scheduler interface {
	// Run schedules until ctx is done, then stops admitting, finishes what
	// was admitted, and returns.
	Run(ctx context.Context) error
	// Do computes the items of one request; it has the contract of
	// batch.Batcher.Do (ErrQueueFull, ErrClosed, ctx errors, *ItemsError).
	Do(ctx context.Context, ins []models.Input) ([]models.Output, batch.Stats, error)
	// Len returns the number of items admitted and waiting.
	Len() int
}

// A Scheduler may also implement:
//
//	Backlog() time.Duration // how long its backlog needs to clear: a 429's Retry-After
//	Ready() error           // why it cannot serve now (nil: it can), as a broker frontend
//	                        // without live workers or without Redis: /readyz, /v2/health/ready
//	                        // and infer_ready follow it
//	Collectors() []prometheus.Collector // its metrics, served on the host's /metrics
//
// An error from Ready or Do that matches batch.ErrClosed while the service
// is not draining is answered 503; it may name its code and client-facing
// message with a method Unavailable() (code, message string).

// Service is the encoder API over one model. Create it with New and mount
// it on a host (server.New).
type Service struct {
	cfg     Config
	factory models.Factory
	info    models.Info
	log     *slog.Logger
	limits  server.Limits // the host's, set by Mount
	metrics *metrics
	cache   *cache // nil when off

	// Set once loading is done; read by handlers.
	batched  atomic.Pointer[schedulerBox]
	naive    atomic.Pointer[naive]
	ready    atomic.Bool  // the model is loaded and warm
	dims     atomic.Int64 // the length of the model's vectors, from its warm-up; 0 if not vectors
	draining atomic.Bool  // Run's context ended: new work is refused

	admin chan struct{} // holds a token while an admin change runs
}

// New returns the API over the model made by factory. It loads nothing yet.
func New(cfg Config, factory models.Factory) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Service{
		cfg:     cfg,
		factory: factory,
		info:    factory.Info(),
		log:     cfg.Logger,
		admin:   make(chan struct{}, 1),
	}
	if cfg.CacheSize > 0 {
		s.cache = newCache(cfg.CacheSize, cfg.CacheTTL)
	}
	s.metrics = newMetrics(s)
	return s, nil
}

// Mount registers the endpoints, the model, the metrics, the batched
// scheduler's readiness and the admin API on the host.
func (s *Service) Mount(m *server.Mount) {
	s.limits = m.Limits()
	naive := &endpoint{name: endpointNaive, metrics: s.metrics.naive, do: func(ctx context.Context, ins []models.Input) ([]models.Output, batch.Stats, error) {
		return s.naive.Load().Do(ctx, ins)
	}}
	batched := &endpoint{name: endpointBatched, metrics: s.metrics.batched, do: func(ctx context.Context, ins []models.Input) ([]models.Output, batch.Stats, error) {
		return s.scheduler().Do(ctx, ins)
	}}
	m.Handle("/naive", server.Only(http.MethodPost, s.inferHandler(naive)))
	m.Handle("/batched", server.Only(http.MethodPost, s.inferHandler(batched)))
	// v2 requests run in the batched endpoint's batches, counted apart.
	s.v2Routes(m, &endpoint{name: endpointV2, metrics: s.metrics.v2, do: batched.do})
	if s.embeds() {
		// OpenAI's embeddings run on the naive and batched paths, counted apart.
		s.embeddingsRoutes(m, &endpoint{name: endpointNaiveEmbeddings, metrics: s.metrics.naiveEmbeddings, do: naive.do},
			&endpoint{name: endpointEmbeddings, metrics: s.metrics.embeddings, do: batched.do})
	}
	m.Admin("/admin/batching", s.adminHandler())
	m.Paths("/naive", "/batched", "/v2/models/"+s.info.Name+"/infer")
	m.Model(s.info)
	m.Collect(s.metrics.collectors()...)
	if c, ok := s.cfg.Scheduler.(interface{ Collectors() []prometheus.Collector }); ok {
		m.Collect(c.Collectors()...)
	}
	m.Readiness(s.schedulerReady)
}

// Run loads and warms the model instances, starts the batched scheduler,
// calls ready, and serves until ctx is done. Then it refuses new requests,
// lets both endpoints finish what they admitted, closes the instances and
// returns. A failure to load is its error.
func (s *Service) Run(ctx context.Context, ready func()) error {
	sched, naiveModel, err := s.load(ctx)
	if err != nil {
		return err
	}
	// The scheduler stops admitting only once the service says it drains,
	// so that its refusals are answered as the drain's.
	schedCtx, stopSched := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSched()
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := sched.Run(schedCtx); err != nil {
			s.log.Error("batched scheduler stopped", "err", err)
		}
	})
	s.ready.Store(true)
	ready()
	s.log.Info("ready", "model", s.info.Name, "workers", s.cfg.Workers,
		"batch", s.cfg.Batch.MaxBatch, "max_latency", s.cfg.Batch.MaxLatency, "policy", s.cfg.Batch.Policy)

	<-ctx.Done()
	s.draining.Store(true)
	s.log.Info("finishing admitted requests", "model", s.info.Name, "queued", s.queued())
	stopSched()
	wg.Wait() // the batcher closed its workers' instances as they stopped
	s.naive.Load().Close()
	if err := naiveModel.Close(); err != nil {
		return fmt.Errorf("close model: %w", err)
	}
	return nil
}

// load creates and warms the instances, and makes the batched endpoint's
// scheduler, which owns the batched workers' instances from then on. It
// returns the scheduler and the naive endpoint's instance, which the caller
// closes. When loading fails, every instance made is closed.
func (s *Service) load(ctx context.Context) (Scheduler, models.Model, error) {
	start := time.Now()
	n := s.cfg.Workers + 1 // the last one serves /naive
	if s.cfg.Scheduler != nil {
		n = 1 // batches run elsewhere
	}
	instances := make([]models.Model, n)
	errs := make([]error, n)
	timed := make([][]warmup, n)
	var lw sync.WaitGroup
	for i := range n {
		lw.Go(func() {
			m, err := s.factory.New(ctx, i%s.cfg.Workers)
			if err != nil {
				errs[i] = fmt.Errorf("load instance %d: %w", i, err)
				return
			}
			instances[i] = m
			timed[i], errs[i] = s.warm(ctx, m, s.cfg.Batch.MaxBatch)
		})
	}
	lw.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, nil, errors.Join(err, closeAll(instances))
	}

	sched := s.cfg.Scheduler
	if sched == nil {
		bcfg := s.cfg.Batch
		bcfg.OnBatch = s.metrics.batched.observeBatch
		// A token model's batch pads to its longest item.
		b := batch.New[models.Input, models.Output](bcfg).WithSize(func(in models.Input) int { return len(in.Tokens) })
		for i, m := range instances[:s.cfg.Workers] {
			for _, w := range timed[i] {
				b.Observe(w.n, w.d)
			}
			b.AddInstance(m)
		}
		sched = b
	}
	s.batched.Store(&schedulerBox{sched})
	s.naive.Store(newNaive(instances[n-1], s.cfg.Batch.QueueCap, s.cfg.Batch.MaxBatch, s.metrics.naive.observeBatch))
	s.log.Info("model loaded", "model", s.info.Name, "instances", n, "took", time.Since(start).Round(time.Millisecond))
	return sched, instances[n-1], nil
}

// closeAll closes the instances that are not nil.
func closeAll(ms []models.Model) error {
	var errs []error
	for _, m := range ms {
		if m != nil {
			if err := m.Close(); err != nil {
				errs = append(errs, fmt.Errorf("close model: %w", err))
			}
		}
	}
	return errors.Join(errs...)
}

// warm runs a fresh instance once on a single item (lazy initialisation),
// then times a full batch of maxBatch items and a single item again: the
// batcher's cost model starts from these.
func (s *Service) warm(ctx context.Context, m models.Model, maxBatch int) ([]warmup, error) {
	in, err := s.factory.Prepare("Warm up the [MASK] before serving.")
	if err != nil {
		return nil, fmt.Errorf("warm up: %w", err)
	}
	var timed []warmup
	for i, n := range []int{1, maxBatch, 1} {
		ins := make([]models.Input, n)
		for i := range ins {
			ins[i] = in
		}
		start := time.Now()
		outs := make([]models.Output, n)
		if err := m.Predict(ctx, ins, outs); err != nil {
			return nil, fmt.Errorf("warm up with %d items: %w", n, err)
		}
		if v, ok := outs[0].([]float32); ok {
			s.dims.Store(int64(len(v)))
		}
		if i > 0 {
			timed = append(timed, warmup{n, time.Since(start)})
		}
	}
	return timed, nil
}

// warmup is one timed warm-up batch.
type warmup struct {
	n int
	d time.Duration
}

func (s *Service) queued() int {
	n := 0
	if b := s.batched.Load(); b != nil {
		n += b.Len()
	}
	if nv := s.naive.Load(); nv != nil {
		n += nv.Len()
	}
	return n
}

// schedulerBox lets an interface value sit in an atomic.Pointer.
type schedulerBox struct{ Scheduler }

// scheduler returns the batched endpoint's scheduler, nil before loading.
func (s *Service) scheduler() Scheduler {
	if b := s.batched.Load(); b != nil {
		return b.Scheduler
	}
	return nil
}

// batcher returns the in-process batcher, or nil when batches run elsewhere.
func (s *Service) batcher() *batch.Batcher[models.Input, models.Output] {
	b, _ := s.scheduler().(*batch.Batcher[models.Input, models.Output])
	return b
}

// schedulerErr returns why the batched scheduler cannot serve now, for a
// scheduler that can say so (see Scheduler), or nil.
func (s *Service) schedulerErr() error {
	if r, ok := s.scheduler().(interface{ Ready() error }); ok {
		return r.Ready()
	}
	return nil
}

// schedulerReady is the service's readiness check on the host: why the
// batched scheduler cannot serve now, as a 503 for /readyz.
func (s *Service) schedulerReady() error {
	err := s.schedulerErr()
	if err == nil {
		return nil
	}
	e := s.toAPIError(err)
	if e.Status != http.StatusServiceUnavailable {
		e = server.Errorf(http.StatusServiceUnavailable, "unavailable", "batch scheduler unavailable")
	}
	return e
}

// serving reports whether the service is ready, not draining, and its
// batched scheduler can serve: what /v2/health/ready says.
func (s *Service) serving() bool {
	return s.ready.Load() && !s.draining.Load() && s.schedulerErr() == nil
}
