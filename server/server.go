// Package server is the HTTP surface of infer serve: a naive endpoint and a
// dynamically batched endpoint over the same model, the KServe v2 protocol on
// the batched path, health, readiness and Prometheus metrics, and a graceful
// drain on shutdown.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/server/batch"
)

// Config configures a Server. The zero value serves on 127.0.0.1:8080 with
// the documented defaults.
type Config struct {
	// Addr is the listen address. Default "127.0.0.1:8080".
	Addr string
	// Batch configures the batched endpoint: batch size, max latency,
	// policy and queue capacity (see batch.Config for their defaults).
	Batch batch.Config
	// Workers is the number of model instances behind the batched
	// endpoint. Default 1. The naive endpoint has one instance of its own.
	Workers int
	// Timeout is the default deadline of a request, from its arrival to its
	// answer; a request may shorten it with the X-Request-Timeout header.
	// Default 30s.
	Timeout time.Duration
	// MaxBody is the largest request body accepted, in bytes. Default 1 MiB.
	MaxBody int64
	// MaxItems is the most items one request may carry. Default 256, or
	// the batched queue's capacity if smaller; it may not exceed it.
	MaxItems int
	// DrainTimeout bounds how long shutdown waits for admitted requests.
	// Default 30s.
	DrainTimeout time.Duration
	// Scheduler, if set, runs the batched endpoint's requests instead of an
	// in-process batcher over Workers local instances: distributed mode
	// plugs in here. The server then loads only the naive endpoint's
	// instance, and runs the scheduler from Serve.
	Scheduler Scheduler
	// Collectors are registered on the server's /metrics alongside its
	// own, e.g. a distributed Scheduler's.
	Collectors []prometheus.Collector
	// AdminToken enables the admin API (PATCH /admin/batching) for bearers
	// of this token; empty, the admin API does not exist.
	AdminToken string
	// CacheSize is how many results the result cache holds (identical
	// inputs are answered from it); 0 disables the cache.
	CacheSize int
	// CacheTTL is how long a cached result stays valid; 0 means until
	// evicted.
	CacheTTL time.Duration
	// Version is reported by GET /v2.
	Version string
	// Logger receives lifecycle events; nil discards them.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Addr == "" {
		c.Addr = "127.0.0.1:8080"
	}
	if c.Workers <= 0 {
		c.Workers = 1
	}
	if c.Timeout <= 0 {
		c.Timeout = 30 * time.Second
	}
	if c.MaxBody <= 0 {
		c.MaxBody = 1 << 20
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = 30 * time.Second
	}
	if c.Batch.MaxBatch <= 0 {
		c.Batch.MaxBatch = 64
	}
	if c.Batch.Policy == "" {
		c.Batch.Policy = batch.Fixed
	}
	if c.Batch.QueueCap <= 0 {
		c.Batch.QueueCap = 16 * c.Batch.MaxBatch * c.Workers
	}
	if c.MaxItems <= 0 {
		c.MaxItems = min(256, c.Batch.QueueCap)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports settings that cannot work together.
func (c Config) Validate() error {
	if err := c.Batch.Validate(); err != nil {
		return err
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
//
// An error from Ready or Do that matches batch.ErrClosed while the server is
// not draining is answered 503; it may name its code and client-facing
// message with a method Unavailable() (code, message string).

// Server serves one model. Create it with New, run it with Run or Serve.
type Server struct {
	cfg     Config
	factory models.Factory
	info    models.Info
	log     *slog.Logger
	metrics *metrics
	handler http.Handler

	// Set once loading is done; read by handlers.
	batched  atomic.Pointer[schedulerBox]
	naive    atomic.Pointer[naive]
	ready    atomic.Bool
	draining atomic.Bool
	cache    *cache // nil when off

	adminMu   sync.Mutex     // serialises admin changes
	instances []models.Model // the batched workers' instances, in the order added
}

// New returns a server for the model made by factory. It loads nothing yet.
func New(cfg Config, factory models.Factory) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Server{
		cfg:     cfg,
		factory: factory,
		info:    factory.Info(),
		log:     cfg.Logger,
	}
	if cfg.CacheSize > 0 {
		s.cache = newCache(cfg.CacheSize, cfg.CacheTTL)
	}
	s.metrics = newMetrics(s)
	s.handler = s.routes()
	return s, nil
}

// Handler returns the server's HTTP handler. Inference endpoints answer 503
// until Serve has loaded and warmed the model.
func (s *Server) Handler() http.Handler { return s.handler }

// Ready reports whether the model is loaded and warm and the server is not
// draining. /readyz also asks the batched scheduler (see Scheduler).
func (s *Server) Ready() bool { return s.ready.Load() && !s.draining.Load() }

// Run listens on Config.Addr and serves until ctx is done, then drains.
func (s *Server) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	return s.Serve(ctx, ln)
}

// Serve serves on ln: it answers health checks at once, loads and warms the
// model instances, then turns ready. When ctx is done it drains: /readyz
// turns 503, new requests are refused with 503, admitted requests are
// finished within Config.DrainTimeout, and Serve returns. It returns an error
// if loading fails or the drain timed out.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      s.cfg.Timeout + 10*time.Second,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	s.log.Info("listening", "addr", ln.Addr().String(), "model", s.info.Name)

	var wg sync.WaitGroup
	batchCtx, stopBatch := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBatch()
	instances, loadErr := s.load(ctx, batchCtx, &wg)
	if loadErr == nil {
		s.ready.Store(true)
		s.log.Info("ready", "model", s.info.Name, "workers", s.cfg.Workers,
			"batch", s.cfg.Batch.MaxBatch, "max_latency", s.cfg.Batch.MaxLatency, "policy", s.cfg.Batch.Policy)
	}

	if loadErr == nil {
		select {
		case <-ctx.Done():
		case err := <-serveErr:
			loadErr = fmt.Errorf("serve: %w", err)
		}
	}

	// Drain: refuse new work, finish admitted work, then stop.
	s.draining.Store(true)
	s.log.Info("draining", "queued", s.queued(), "timeout", s.cfg.DrainTimeout)
	drainCtx, cancel := context.WithTimeout(context.Background(), s.cfg.DrainTimeout)
	defer cancel()
	stopBatch()
	batchDone := make(chan struct{})
	go func() { wg.Wait(); close(batchDone) }()
	var drainErr error
	select {
	case <-batchDone:
	case <-drainCtx.Done():
		drainErr = fmt.Errorf("drain timed out after %v with %d items queued", s.cfg.DrainTimeout, s.queued())
	}
	if err := srv.Shutdown(drainCtx); err != nil && drainErr == nil {
		drainErr = fmt.Errorf("drain timed out after %v: %w", s.cfg.DrainTimeout, err)
	}
	if drainErr == nil {
		for _, m := range instances {
			if err := m.Close(); err != nil {
				drainErr = errors.Join(drainErr, fmt.Errorf("close model: %w", err))
			}
		}
	}
	s.log.Info("stopped")
	return errors.Join(loadErr, drainErr)
}

// load creates and warms the instances, and starts the batcher under
// batchCtx. It returns every instance created, for closing.
func (s *Server) load(ctx, batchCtx context.Context, wg *sync.WaitGroup) ([]models.Model, error) {
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
			m, err := s.factory.New(ctx, i%max(s.cfg.Workers, 1))
			if err != nil {
				errs[i] = fmt.Errorf("load instance %d: %w", i, err)
				return
			}
			instances[i] = m
			timed[i], errs[i] = s.warm(ctx, m)
		})
	}
	lw.Wait()
	var all []models.Model
	for _, m := range instances {
		if m != nil {
			all = append(all, m)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return all, err
	}

	sched := s.cfg.Scheduler
	if sched == nil {
		workers := make([]batch.Func[models.Input, models.Output], s.cfg.Workers)
		for i := range workers {
			workers[i] = instances[i].Predict
		}
		s.instances = instances[:s.cfg.Workers]
		bcfg := s.cfg.Batch
		bcfg.OnBatch = s.metrics.eps[endpointBatched].observeBatch
		// A token model's batch pads to its longest item.
		b := batch.New(bcfg, workers...).WithSize(func(in models.Input) int { return len(in.Tokens) })
		for _, ws := range timed[:s.cfg.Workers] {
			for _, w := range ws {
				b.Observe(w.n, w.d)
			}
		}
		sched = b
	}
	s.batched.Store(&schedulerBox{sched})
	wg.Go(func() {
		if err := sched.Run(batchCtx); err != nil {
			s.log.Error("batched scheduler stopped", "err", err)
		}
	})
	s.naive.Store(newNaive(instances[n-1], s.cfg.Batch.QueueCap, s.metrics.eps[endpointNaive].observeBatch))
	s.log.Info("model loaded", "model", s.info.Name, "instances", n, "took", time.Since(start).Round(time.Millisecond))
	return all, nil
}

// warm runs a fresh instance once on a single item (lazy initialisation),
// then times a full batch and a single item again: the batcher's cost model
// starts from these.
func (s *Server) warm(ctx context.Context, m models.Model) ([]warmup, error) {
	in, err := s.factory.Prepare("Warm up the [MASK] before serving.")
	if err != nil {
		return nil, fmt.Errorf("warm up: %w", err)
	}
	var timed []warmup
	for i, n := range []int{1, s.cfg.Batch.MaxBatch, 1} {
		ins := make([]models.Input, n)
		for i := range ins {
			ins[i] = in
		}
		start := time.Now()
		if err := m.Predict(ctx, ins, make([]models.Output, n)); err != nil {
			return nil, fmt.Errorf("warm up with %d items: %w", n, err)
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

func (s *Server) queued() int {
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
func (s *Server) scheduler() Scheduler {
	if b := s.batched.Load(); b != nil {
		return b.Scheduler
	}
	return nil
}

// batcher returns the in-process batcher, or nil when batches run elsewhere.
func (s *Server) batcher() *batch.Batcher[models.Input, models.Output] {
	b, _ := s.scheduler().(*batch.Batcher[models.Input, models.Output])
	return b
}
