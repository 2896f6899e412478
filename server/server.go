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
	"slices"
	"strings"
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
	// MaxConns caps the open client connections. At the cap, the longest
	// idle keep-alive connection is closed to let a new one in; when none
	// is idle, the new one is refused (closed). Default: half the
	// process's open-file limit, at most 4096 (nginx's worker_connections
	// is of that order); at most MaxConnsLimit.
	MaxConns int
	// IdleTimeout closes keep-alive connections idle for that long.
	// Default 75s (nginx's keepalive_timeout).
	IdleTimeout time.Duration
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
	// Services are more routes served under the same lifecycle: listener,
	// connection cap, timeouts, /healthz, /readyz, /metrics and the drain.
	// See Service.
	Services []Service
	// Version is reported by GET /v2.
	Version string
	// Logger receives lifecycle events; nil discards them.
	Logger *slog.Logger
}

// Bounds of the server's own settings (the batching ones are in
// server/batch: batch.MaxBatchLimit, batch.WorkersLimit, …).
const (
	// MaxBodyLimit bounds Config.MaxBody (Triton's HTTP default is 64 MB).
	MaxBodyLimit = 64 << 20
	// CacheSizeLimit bounds Config.CacheSize, in results.
	CacheSizeLimit = 1 << 24
	// MaxConnsLimit bounds Config.MaxConns.
	MaxConnsLimit = 1 << 20
)

// defaultMaxConns is half the open-file limit, at most 4096: the other half
// is for the model's files, Redis and the process's own.
func defaultMaxConns() int {
	if n := openFileLimit(); n > 0 {
		return max(1, min(4096, n/2))
	}
	return 4096
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
	if c.MaxConns <= 0 {
		c.MaxConns = defaultMaxConns()
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 75 * time.Second
	}
	c.Batch = c.Batch.WithDefaults(c.Workers)
	if c.MaxItems <= 0 {
		c.MaxItems = min(256, c.Batch.QueueCap)
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
	case c.MaxBody < 0 || c.MaxBody > MaxBodyLimit:
		return fmt.Errorf("max body %d bytes: want 1 to %d", c.MaxBody, MaxBodyLimit)
	case c.MaxItems < 0:
		return fmt.Errorf("max items %d: must not be negative", c.MaxItems)
	case c.CacheSize < 0 || c.CacheSize > CacheSizeLimit:
		return fmt.Errorf("cache size %d: want 0 to %d", c.CacheSize, CacheSizeLimit)
	case c.MaxConns < 0 || c.MaxConns > MaxConnsLimit:
		return fmt.Errorf("max conns %d: want 1 to %d", c.MaxConns, MaxConnsLimit)
	case c.Timeout < 0 || c.DrainTimeout < 0 || c.IdleTimeout < 0 || c.CacheTTL < 0:
		return errors.New("timeouts and the cache's TTL must not be negative")
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

// Service is a set of routes served next to the encoder endpoints, under the
// same lifecycle: the listener and its connection cap, the timeouts,
// /healthz, /readyz and /metrics (add its collectors to Config.Collectors),
// panic recovery, and the drain, with Connection: close on every response
// from its start. The generation (OpenAI-compatible) routes plug in here.
type Service interface {
	// Mount registers the service's handlers on mux; New calls it once.
	// Its patterns must not collide with the server's own.
	Mount(mux *http.ServeMux)
	// Info describes the model the service serves: the server's
	// infer_model_info, /readyz and logs name it.
	Info() models.Info
	// Run loads what the service needs, calls ready once it can serve, and
	// serves until ctx is done. ctx ending is the drain: the service then
	// refuses new work, finishes what it admitted, and returns. An error
	// before ctx ends fails the server as a failed model load does.
	Run(ctx context.Context, ready func()) error
}

// An AdminService has an admin API of its own. On a server with no encoder
// model, the first one is served at /admin/batching behind Config.AdminToken
// (and does not exist without a token).
type AdminService interface {
	Service
	Admin() http.Handler
}

// Server serves one model. Create it with New, run it with Run or Serve.
type Server struct {
	cfg     Config
	factory models.Factory // nil: no encoder endpoints, services only
	info    models.Info
	log     *slog.Logger
	metrics *metrics
	handler http.Handler
	conns   *conns

	// Set once loading is done; read by handlers.
	batched  atomic.Pointer[schedulerBox]
	naive    atomic.Pointer[naive]
	ready    atomic.Bool  // the model is loaded and warm
	unready  atomic.Int32 // services not yet ready
	draining atomic.Bool
	cache    *cache // nil when off

	admin chan struct{} // holds a token while an admin change runs
}

// New returns a server for the model made by factory. It loads nothing yet.
// With a nil factory it serves Config.Services only.
func New(cfg Config, factory models.Factory) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Server{
		cfg:     cfg,
		factory: factory,
		log:     cfg.Logger,
		admin:   make(chan struct{}, 1),
		conns:   newConns(cfg.MaxConns, cfg.Logger),
	}
	if factory != nil {
		s.info = factory.Info()
	} else {
		s.ready.Store(true)
	}
	s.unready.Store(int32(len(cfg.Services)))
	if cfg.CacheSize > 0 {
		s.cache = newCache(cfg.CacheSize, cfg.CacheTTL)
	}
	s.metrics = newMetrics(s)
	s.handler = s.routes()
	return s, nil
}

// served describes the models served: the encoder endpoints' (if any), then
// each service's.
func (s *Server) served() []models.Info {
	var ms []models.Info
	if s.factory != nil {
		ms = append(ms, s.info)
	}
	for _, svc := range s.cfg.Services {
		ms = append(ms, svc.Info())
	}
	return ms
}

// modelNames names the models served, for logs and /readyz.
func (s *Server) modelNames() string {
	var names []string
	for _, m := range s.served() {
		if !slices.Contains(names, m.Name) {
			names = append(names, m.Name)
		}
	}
	return strings.Join(names, ",")
}

// Handler returns the server's HTTP handler. Inference endpoints answer 503
// until Serve has loaded and warmed the model.
func (s *Server) Handler() http.Handler { return s.handler }

// Ready reports whether the model is loaded and warm, every service is
// ready, and the server is not draining. /readyz also asks the batched
// scheduler (see Scheduler).
func (s *Server) Ready() bool {
	return s.ready.Load() && s.unready.Load() == 0 && !s.draining.Load()
}

// Run listens on Config.Addr and serves until ctx is done, then drains.
func (s *Server) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	return s.Serve(ctx, ln)
}

// Serve serves on ln: it answers health checks at once, loads and warms the
// model instances and runs the services, then turns ready. When ctx is done
// it drains: /readyz turns 503, the listener closes, new requests are
// refused with 503, every response carries Connection: close, admitted
// requests are finished within Config.DrainTimeout, and connections are
// closed once quiet (see drainQuiet); then Serve returns. It returns an error
// if loading fails or the drain timed out.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      s.cfg.Timeout + 10*time.Second,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ConnState:         s.conns.stateChanged,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	cl := s.conns.listen(ln)
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(cl) }()
	s.log.Info("listening", "addr", ln.Addr().String(), "model", s.modelNames(), "max_conns", s.cfg.MaxConns)

	// What runs admitted work (the batcher, the services) stops admitting
	// when workCtx ends, and returns once its work is done.
	var wg sync.WaitGroup
	workCtx, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	failed := make(chan error, len(s.cfg.Services))
	for _, svc := range s.cfg.Services {
		wg.Go(func() {
			var once sync.Once
			if err := svc.Run(workCtx, func() { once.Do(func() { s.unready.Add(-1) }) }); err != nil {
				failed <- err
			}
		})
	}
	var naiveModel models.Model
	var loadErr error
	if s.factory != nil {
		if naiveModel, loadErr = s.load(ctx, workCtx, &wg); loadErr == nil {
			s.ready.Store(true)
			s.log.Info("ready", "model", s.info.Name, "workers", s.cfg.Workers,
				"batch", s.cfg.Batch.MaxBatch, "max_latency", s.cfg.Batch.MaxLatency, "policy", s.cfg.Batch.Policy)
		}
	}
	if loadErr == nil {
		select {
		case <-ctx.Done():
		case err := <-serveErr:
			loadErr = fmt.Errorf("serve: %w", err)
		case err := <-failed:
			loadErr = err
		}
	}

	// Drain: refuse new work and new connections, finish admitted work,
	// then close the connections once quiet.
	s.draining.Store(true) // from here every response carries Connection: close
	cl.Close()
	s.log.Info("draining", "queued", s.queued(), "timeout", s.cfg.DrainTimeout)
	drainCtx, cancel := context.WithTimeout(context.Background(), s.cfg.DrainTimeout)
	defer cancel()
	stopWork()
	workDone := make(chan struct{})
	go func() { wg.Wait(); close(workDone) }()
	var drainErr error
	select {
	case <-workDone:
	case <-drainCtx.Done():
		drainErr = fmt.Errorf("drain timed out after %v with %d items queued", s.cfg.DrainTimeout, s.queued())
	}
	if err := s.closeConns(drainCtx); err != nil && drainErr == nil {
		drainErr = fmt.Errorf("drain timed out after %v: %w", s.cfg.DrainTimeout, err)
	}
	srv.Close()
	<-serveErr
	for len(failed) > 0 { // services that failed while draining
		drainErr = errors.Join(drainErr, <-failed)
	}
	// The batcher closed its workers' instances as they stopped; the naive
	// endpoint's is closed here, unless a call may still run on it.
	if drainErr == nil && naiveModel != nil {
		if err := naiveModel.Close(); err != nil {
			drainErr = fmt.Errorf("close model: %w", err)
		}
	}
	s.log.Info("stopped")
	return errors.Join(loadErr, drainErr)
}

// closeConns waits for the connections to close: each answer written during
// the drain carried Connection: close, so its connection closes after it;
// connections idle (or new and silent) for drainQuiet are closed. When ctx
// ends first, the rest are left to http.Server.Close.
func (s *Server) closeConns(ctx context.Context) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		open := s.conns.closeQuiet(time.Now(), drainQuiet)
		if open == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d connections still open: %w", open, ctx.Err())
		case <-tick.C:
		}
	}
}

// load creates and warms the instances, and starts the batcher under
// batchCtx: it owns the batched workers' instances from then on. It returns
// the naive endpoint's instance, which the caller closes. When loading fails,
// every instance made is closed.
func (s *Server) load(ctx, batchCtx context.Context, wg *sync.WaitGroup) (models.Model, error) {
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
			timed[i], errs[i] = s.warm(ctx, m, s.cfg.Batch.MaxBatch)
		})
	}
	lw.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, errors.Join(err, closeAll(instances))
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
	wg.Go(func() {
		if err := sched.Run(batchCtx); err != nil {
			s.log.Error("batched scheduler stopped", "err", err)
		}
	})
	s.naive.Store(newNaive(instances[n-1], s.cfg.Batch.QueueCap, s.cfg.Batch.MaxBatch, s.metrics.naive.observeBatch))
	s.log.Info("model loaded", "model", s.info.Name, "instances", n, "took", time.Since(start).Round(time.Millisecond))
	return instances[n-1], nil
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
func (s *Server) warm(ctx context.Context, m models.Model, maxBatch int) ([]warmup, error) {
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
