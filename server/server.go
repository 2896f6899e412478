// Package server is the HTTP host of infer's services: the listener and its
// connection cap, the timeouts, panic recovery, health (/healthz),
// readiness (/readyz), the Prometheus registry (/metrics), the admin token,
// and a graceful drain on shutdown; and, for every service alike, the body
// reader (Limits), the X-Request-Timeout deadline, and the JSON and error
// writers. The APIs are services mounted on it (see Service): the encoder
// endpoints (server/encoder), the OpenAI-compatible generation API
// (server/openai), a broker worker (server/broker).
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

	"github.com/inferhq/infer/internal/setting"
	"github.com/inferhq/infer/models"
)

// Config configures a Server. The zero value serves on DefaultAddr with the
// documented defaults.
type Config struct {
	// Addr is the listen address of Run. Default DefaultAddr.
	Addr string
	// Timeout is the default deadline of a request, from its arrival to its
	// answer; a request may shorten it with the X-Request-Timeout header
	// (see Limits). Default DefaultTimeout.
	Timeout time.Duration
	// MaxBody is the largest request body accepted, in bytes. Default
	// DefaultMaxBody, at most MaxBodyLimit.
	MaxBody int64
	// DrainTimeout bounds how long shutdown waits for admitted work.
	// Default DefaultDrainTimeout.
	DrainTimeout time.Duration
	// MaxConns caps the open client connections. At the cap, the
	// connection quiet for longest (idle between keep-alive requests, or
	// new without a complete request header) is closed to let a new one
	// in; when every one is busy with a request, the new one is refused
	// (closed). Default: half the
	// process's open-file limit, at most DefaultMaxConnsCap (nginx's
	// worker_connections is of that order); at most MaxConnsLimit.
	MaxConns int
	// MaxConnsPerAddr caps the open connections from one client IP
	// address; a new one past it is refused (closed). Default 0: no cap
	// per address (a load generator, or a proxy in front, opens many from
	// one address). At most MaxConnsLimit.
	MaxConnsPerAddr int
	// HeaderTimeout closes a connection that has not sent a complete
	// request header within it, from its accept (or from the first byte
	// of a keep-alive connection's next request). Default
	// DefaultHeaderTimeout.
	HeaderTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle for that long.
	// Default DefaultIdleTimeout (nginx's keepalive_timeout).
	IdleTimeout time.Duration
	// AdminToken enables the services' admin APIs (Mount.Admin) for
	// bearers of this token; empty, they do not exist.
	AdminToken string
	// Logger receives lifecycle events; nil discards them.
	Logger *slog.Logger
}

// The defaults of Config's fields; the command line's flags take theirs
// from here.
const (
	DefaultAddr         = "127.0.0.1:8080"
	DefaultTimeout      = 30 * time.Second
	DefaultMaxBody      = 1 << 20
	DefaultDrainTimeout = 30 * time.Second
	DefaultIdleTimeout  = 75 * time.Second
	// DefaultHeaderTimeout is Config.HeaderTimeout's default: a client on
	// a slow link sends a header of a few hundred bytes well within it.
	DefaultHeaderTimeout = 3 * time.Second
	// DefaultMaxConnsCap caps MaxConns's default, half the open-file limit.
	DefaultMaxConnsCap = 4096
)

// Bounds of Config's fields.
const (
	// MaxBodyLimit bounds Config.MaxBody (Triton's HTTP default is 64 MB).
	MaxBodyLimit = 64 << 20
	// MaxConnsLimit bounds Config.MaxConns.
	MaxConnsLimit = 1 << 20
)

// The http.Server's own bounds: a request's whole body must arrive within
// readTimeout (a slower one is answered 408 by ReadBody), an answer's
// writes end at the request's timeout plus writeSlack (streams extend their
// own), and a header holds at most maxHeaderBytes (431 beyond).
const (
	readTimeout    = 30 * time.Second
	writeSlack     = 10 * time.Second
	maxHeaderBytes = 64 << 10
)

// defaultMaxConns is half the open-file limit, at most DefaultMaxConnsCap:
// the other half is for the models' files, Redis and the process's own.
func defaultMaxConns() int {
	if n := openFileLimit(); n > 0 {
		return max(1, min(DefaultMaxConnsCap, n/2))
	}
	return DefaultMaxConnsCap
}

func (c Config) withDefaults() Config {
	if c.Addr == "" {
		c.Addr = DefaultAddr
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxBody <= 0 {
		c.MaxBody = DefaultMaxBody
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = DefaultDrainTimeout
	}
	if c.MaxConns <= 0 {
		c.MaxConns = defaultMaxConns()
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.HeaderTimeout <= 0 {
		c.HeaderTimeout = DefaultHeaderTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// The names of Config's settings in errors (*setting.Error).
const (
	SettingTimeout         setting.Name = "timeout"
	SettingMaxBody         setting.Name = "max body"
	SettingDrainTimeout    setting.Name = "drain timeout"
	SettingMaxConns        setting.Name = "max conns"
	SettingMaxConnsPerAddr setting.Name = "max conns per address"
	SettingHeaderTimeout   setting.Name = "header timeout"
	SettingIdleTimeout     setting.Name = "idle timeout"
)

// Validate reports settings out of their bounds, each a *setting.Error
// naming it (Setting…). Zero values stand for their defaults.
func (c Config) Validate() error {
	switch {
	case c.MaxBody < 0 || c.MaxBody > MaxBodyLimit:
		return setting.Errorf(SettingMaxBody, c.MaxBody, "want 1 to %d bytes (%d MiB)", MaxBodyLimit, MaxBodyLimit>>20)
	case c.MaxConns < 0 || c.MaxConns > MaxConnsLimit:
		return setting.Errorf(SettingMaxConns, c.MaxConns, "want 0 (the default) to %d", MaxConnsLimit)
	case c.MaxConnsPerAddr < 0 || c.MaxConnsPerAddr > MaxConnsLimit:
		return setting.Errorf(SettingMaxConnsPerAddr, c.MaxConnsPerAddr, "want 0 (no cap) to %d", MaxConnsLimit)
	}
	for _, d := range []struct {
		name setting.Name
		v    time.Duration
	}{{SettingTimeout, c.Timeout}, {SettingDrainTimeout, c.DrainTimeout}, {SettingIdleTimeout, c.IdleTimeout}, {SettingHeaderTimeout, c.HeaderTimeout}} {
		if d.v < 0 {
			return setting.Errorf(d.name, d.v, "must not be negative")
		}
	}
	return nil
}

// Server hosts services. Create it with New, run it with Run or Serve.
type Server struct {
	cfg      Config
	services []Service
	log      *slog.Logger
	metrics  *metrics
	mux      *http.ServeMux
	handler  http.Handler
	conns    *conns

	// What the services mounted; fixed once New returns.
	models    []models.Info
	readiness []func() error
	paths     []string
	mountErrs []error

	unready  atomic.Int32 // services that have not called ready yet
	draining atomic.Bool
	inFlight atomic.Int64 // requests being handled
}

// ErrDrainTimeout is what the requests still running when the drain
// timeout passes see as their context's cause (context.Cause): a service
// answers them 503 draining (a stream: an error event, then its end).
// Serve's error wraps it when the drain timed out.
var ErrDrainTimeout = errors.New("the drain timeout passed")

// DrainTimedOut reports whether ctx, a request's context or one derived
// from it, ended because the drain timeout passed: its request is then to be
// answered 503 draining, not taken for a client that went away.
func DrainTimedOut(ctx context.Context) bool {
	return ctx.Err() != nil && errors.Is(context.Cause(ctx), ErrDrainTimeout)
}

// drainGrace is how long, past the drain timeout, the requests still
// running have to write their 503 (their contexts ended with
// ErrDrainTimeout) before their connections are closed.
const drainGrace = time.Second

// New returns a host of services, each mounted once (see Service.Mount). It
// runs nothing yet.
func New(cfg Config, services ...Service) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Server{
		cfg:      cfg,
		services: services,
		log:      cfg.Logger,
		conns:    newConns(cfg.MaxConns, cfg.MaxConnsPerAddr, cfg.Logger),
		mux:      http.NewServeMux(),
	}
	s.unready.Store(int32(len(services)))
	s.metrics = newMetrics(s)
	s.routes()
	for _, svc := range services {
		svc.Mount(&Mount{s: s, svc: svc})
	}
	if err := errors.Join(s.mountErrs...); err != nil {
		return nil, err
	}
	s.handler = lifecycle(&s.draining, &s.inFlight, recoverPanics(s.mux))
	return s, nil
}

// modelNames names the models served, for logs and /readyz.
func (s *Server) modelNames() string {
	var names []string
	for _, m := range s.models {
		if !slices.Contains(names, m.Name) {
			names = append(names, m.Name)
		}
	}
	return strings.Join(names, ",")
}

// Handler returns the host's HTTP handler: the services' routes and the
// host's own, inside the drain's Connection: close and panic recovery.
func (s *Server) Handler() http.Handler { return s.handler }

// Ready reports whether every service is ready (has called ready from Run)
// and the host is not draining. /readyz also asks the services' readiness
// checks (Mount.Readiness).
func (s *Server) Ready() bool {
	return s.unready.Load() == 0 && !s.draining.Load()
}

// unavailable returns why a service that is ready cannot serve now, or nil.
func (s *Server) unavailable() error {
	for _, check := range s.readiness {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// serving reports what /readyz and infer_ready say: ready, and no service
// says it cannot serve.
func (s *Server) serving() bool { return s.Ready() && s.unavailable() == nil }

// Run listens on Config.Addr and serves until ctx is done, then drains.
func (s *Server) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	return s.Serve(ctx, ln)
}

// Serve serves on ln: it answers health checks at once, and runs the
// services (they load, then turn ready). When ctx is done it drains:
// /readyz turns 503, the listener closes, every response carries
// Connection: close, the services' contexts end (they refuse new work and
// finish what they admitted) within Config.DrainTimeout, and connections
// are closed once quiet (see drainQuiet); then Serve returns. Past the
// drain timeout, the requests still running have their contexts ended with
// the cause ErrDrainTimeout and drainGrace to answer (503 draining) before
// their connections close. It returns an error if a service failed, or
// one wrapping ErrDrainTimeout if the drain timed out.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	reqCtx, abortRequests := context.WithCancelCause(context.Background())
	defer abortRequests(nil)
	srv := &http.Server{
		Handler:           s.handler,
		BaseContext:       func(net.Listener) context.Context { return reqCtx },
		ReadHeaderTimeout: s.cfg.HeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      s.cfg.Timeout + writeSlack,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ConnState:         s.conns.stateChanged,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	cl := s.conns.listen(ln)
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(cl) }()
	s.log.Info("listening", "addr", ln.Addr().String(), "model", s.modelNames(), "max_conns", s.cfg.MaxConns)

	// The services stop admitting when workCtx ends, and return once their
	// work is done.
	var wg sync.WaitGroup
	workCtx, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	failed := make(chan error, len(s.services))
	for _, svc := range s.services {
		wg.Go(func() {
			var once sync.Once
			if err := svc.Run(workCtx, func() { once.Do(func() { s.unready.Add(-1) }) }); err != nil {
				failed <- err
			}
		})
	}
	var runErr error
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		runErr = fmt.Errorf("serve: %w", err)
	case err := <-failed:
		runErr = err
	}

	// Drain: refuse new work and new connections, finish admitted work,
	// then close the connections once quiet.
	s.draining.Store(true) // from here every response carries Connection: close
	cl.Close()
	s.log.Info("draining", "timeout", s.cfg.DrainTimeout)
	drainCtx, cancel := context.WithTimeout(context.Background(), s.cfg.DrainTimeout)
	defer cancel()
	stopWork()
	workDone := make(chan struct{})
	go func() { wg.Wait(); close(workDone) }()
	var drainErr error
	select {
	case <-workDone:
	case <-drainCtx.Done():
	}
	if err := s.closeConns(drainCtx); err != nil || drainCtx.Err() != nil {
		// Past the timeout: the requests still running end with the cause
		// ErrDrainTimeout, answer 503, and their connections close.
		running := s.inFlight.Load()
		abortRequests(ErrDrainTimeout)
		graceCtx, cancelGrace := context.WithTimeout(context.Background(), drainGrace)
		defer cancelGrace()
		drainErr = fmt.Errorf("%w after %v: %d requests still running were answered 503 draining", ErrDrainTimeout, s.cfg.DrainTimeout, running)
		if err := s.closeConns(graceCtx); err != nil {
			drainErr = fmt.Errorf("%w; %w", drainErr, err)
		}
		select {
		case <-workDone:
		case <-graceCtx.Done():
			drainErr = fmt.Errorf("%w; a service's work did not finish", drainErr)
		}
		s.log.Warn("drain timed out", "timeout", s.cfg.DrainTimeout, "requests_answered_503", running)
	}
	srv.Close()
	<-serveErr
	for len(failed) > 0 { // services that failed while draining
		drainErr = errors.Join(drainErr, <-failed)
	}
	s.log.Info("stopped")
	return errors.Join(runErr, drainErr)
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
