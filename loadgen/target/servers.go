package target

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"
)

// Servers are where a run's load goes, under one configuration of the
// sweep at a time: `infer serve` processes that infer bench starts
// (Started), or existing servers (Existing).
type Servers interface {
	// Pending reports whether the servers must change to run the
	// configuration numbered group.
	Pending(group int) bool
	// Use gives them configuration group, whose settings are set.
	Use(ctx context.Context, group int, set Settings) error
	// URLs returns their base URLs, like http://127.0.0.1:8080: where
	// the load goes.
	URLs() []string
	// Replicas returns the base URLs of the model servers whose /metrics
	// tell the servers' side: those behind a front (a router) when there
	// is one, else URLs.
	Replicas() []string
	// Model is the name of the model they serve; "" when unknown.
	Model() string
	// PID is the process id of a server infer started, whose CPU and
	// memory can be read (the router's, when it started replicas behind
	// one); 0 otherwise.
	PID() int
	// SwitchTime is the mean time a change of configuration has taken so
	// far, for estimates; 0 when none took measurable time.
	SwitchTime() time.Duration
	// Close stops the server infer started, or puts the settings of
	// existing ones back as they were. It may be called more than once.
	Close(ctx context.Context)
}

// Started runs the servers a scenario's server section describes: one
// `infer serve` at a time, started anew (with the configuration's
// settings as flags) for each configuration; or, with Spec.Replicas, that
// many `infer serve` replicas and an `infer route` in front of them (with
// the configuration's route policy), all started anew for each
// configuration, so that every policy meets cold caches.
type Started struct {
	Launcher Launcher
	Spec     *Serve
	// LogPath is the file that collects the servers' output, created at
	// the first start.
	LogPath string
	// Client probes the servers' readiness; its idle connections are
	// closed before a server is stopped, whose drain would otherwise
	// wait for them.
	Client *http.Client
	Logger *slog.Logger // nil: discard

	server    Server   // where the load goes: the one server, or the router
	replicas  []Server // the replicas behind the router; nil without one
	group     int
	log       *os.File
	starts    int
	startTime time.Duration // to ready, summed over starts
	model     string
}

var _ Servers = (*Started)(nil)

// stopTimeout bounds the wait for a server to drain and exit; infer
// serve's own drain timeout is 30s by default.
const stopTimeout = 40 * time.Second

// Pending implements Servers.
func (s *Started) Pending(group int) bool { return s.server == nil || group != s.group }

// Use implements Servers: it stops the running server, if any, and starts
// one with set, waiting until it is ready.
func (s *Started) Use(ctx context.Context, group int, set Settings) error {
	s.stop()
	if s.log == nil {
		f, err := os.OpenFile(s.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("create server log: %w", err)
		}
		s.log = f
	}
	start := time.Now()
	flags := s.Spec.Flags(set)
	if !s.Spec.Routed() {
		srv, model, err := s.launch(ctx, CommandServe, flags)
		if err != nil {
			return err
		}
		s.server, s.model = srv, model
	} else {
		urls := make([]string, 0, s.Spec.Replicas)
		for range s.Spec.Replicas {
			srv, model, err := s.launch(ctx, CommandServe, flags)
			if err != nil {
				s.stop()
				return err
			}
			s.replicas = append(s.replicas, srv)
			s.model = model
			urls = append(urls, srv.URL())
		}
		router, _, err := s.launch(ctx, CommandRoute, s.Spec.RouteFlags(set, urls))
		if err != nil {
			s.stop()
			return err
		}
		s.server = router
	}
	s.group = group
	s.starts++
	s.startTime += time.Since(start)
	return nil
}

// launch starts `infer command flags` and waits until it is ready; it
// returns the server and the model its /readyz named.
func (s *Started) launch(ctx context.Context, command string, flags []string) (Server, string, error) {
	fmt.Fprintf(s.log, "=== %s infer %s %v\n", time.Now().Format(time.RFC3339), command, flags)
	s.logger().Info("starting server", "command", command, "flags", flags)
	srv, err := s.Launcher.Launch(ctx, command, flags, s.log)
	if err != nil {
		return nil, "", fmt.Errorf("start infer %s %v: %w", command, flags, err)
	}
	model, err := WaitReady(ctx, s.Client, srv, s.Spec.ReadyTimeout)
	if err != nil {
		s.stopServer(srv)
		return nil, "", fmt.Errorf("start infer %s %v: %w", command, flags, err)
	}
	return srv, model, nil
}

// URLs implements Servers.
func (s *Started) URLs() []string {
	if s.server == nil {
		return nil
	}
	return []string{s.server.URL()}
}

// Replicas implements Servers.
func (s *Started) Replicas() []string {
	if s.replicas == nil {
		return s.URLs()
	}
	urls := make([]string, len(s.replicas))
	for i, r := range s.replicas {
		urls[i] = r.URL()
	}
	return urls
}

// Model implements Servers: what the server's /readyz named.
func (s *Started) Model() string { return s.model }

// PID implements Servers.
func (s *Started) PID() int {
	if s.server == nil {
		return 0
	}
	return s.server.PID()
}

// SwitchTime implements Servers: the mean time to ready of the starts.
func (s *Started) SwitchTime() time.Duration {
	if s.starts == 0 {
		return 0
	}
	return s.startTime / time.Duration(s.starts)
}

// Close implements Servers: it stops the server and closes the log.
func (s *Started) Close(context.Context) {
	s.stop()
	if s.log != nil {
		s.log.Close()
		s.log = nil
	}
}

// stop stops the router first (it drains its streams), then the
// replicas.
func (s *Started) stop() {
	if s.server != nil {
		s.stopServer(s.server)
		s.server = nil
	}
	for _, r := range s.replicas {
		s.stopServer(r)
	}
	s.replicas = nil
}

// stopServer drains and stops srv. The probes' idle connection is closed
// first: the server's drain would otherwise wait for it to be quiet (a
// second) before closing it itself.
func (s *Started) stopServer(srv Server) {
	s.Client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	if err := srv.Stop(ctx); err != nil {
		s.logger().Warn("stop server", "err", err)
	}
}

func (s *Started) logger() *slog.Logger {
	if s.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Logger
}

// ExistingConfig configures NewExisting.
type ExistingConfig struct {
	URLs  []string
	Model string
	// Replicas are the model servers behind the URLs (a front such as
	// HAProxy), whose /metrics tell the servers' side; none: the URLs'.
	Replicas []string
	// AdminKeys name the sweep keys (like "batch", "max_latency") whose
	// settings the run applies through the servers' admin API; none: the
	// servers are loaded as they are.
	AdminKeys  []string
	AdminToken string
	Logger     *slog.Logger // nil: discard
}

// Existing are servers that infer bench loads but did not start. When the
// sweep sets their settings it applies each configuration through their
// admin API (PATCH /admin/batching), checks that it took, and puts their
// own settings back at Close.
type Existing struct {
	urls     []string
	replicas []string
	model    string
	admin    *admin // nil when the sweep sets no settings
	orig     []batching
	applied  bool // a configuration was applied, maybe in part
	group    int
	logger   *slog.Logger
}

var _ Servers = (*Existing)(nil)

// NewExisting returns the servers of cfg. When the sweep sets settings,
// every server's admin API must answer with the token now, before any
// load; an absent API or a refused token is an error wrapping ErrAdminAPI
// that names the fix.
func NewExisting(ctx context.Context, cfg ExistingConfig) (*Existing, error) {
	e := &Existing{urls: cfg.URLs, replicas: cfg.Replicas, model: cfg.Model, logger: cfg.Logger}
	if e.logger == nil {
		e.logger = slog.New(slog.DiscardHandler)
	}
	if len(cfg.AdminKeys) == 0 {
		return e, nil
	}
	e.admin = &admin{client: &http.Client{}, token: cfg.AdminToken, keys: cfg.AdminKeys}
	for _, u := range e.urls {
		b, err := e.admin.check(ctx, u)
		if err != nil {
			return nil, err
		}
		e.orig = append(e.orig, b)
	}
	return e, nil
}

// Pending implements Servers.
func (e *Existing) Pending(group int) bool {
	return e.admin != nil && (!e.applied || group != e.group)
}

// Use implements Servers: it applies set to every server and reads each
// back to check that it took.
func (e *Existing) Use(ctx context.Context, group int, set Settings) error {
	if e.admin == nil {
		return errors.New("configure targets: the run sets no settings")
	}
	e.logger.Info("configuring targets", "settings", patchOf(set))
	e.applied = true // from the first try: a PATCH may take on some targets and fail on others
	if err := e.admin.apply(ctx, e.urls, set); err != nil {
		return err
	}
	e.group = group
	return nil
}

// URLs implements Servers.
func (e *Existing) URLs() []string { return e.urls }

// Replicas implements Servers.
func (e *Existing) Replicas() []string {
	if len(e.replicas) == 0 {
		return e.urls
	}
	return e.replicas
}

// Model implements Servers.
func (e *Existing) Model() string { return e.model }

// PID implements Servers: 0, an existing server's process is not known.
func (e *Existing) PID() int { return 0 }

// SwitchTime implements Servers: 0, a change through the admin API is
// not counted in estimates.
func (e *Existing) SwitchTime() time.Duration { return 0 }

// Close implements Servers: it puts the servers' settings back as they
// were, if the run changed them.
func (e *Existing) Close(ctx context.Context) {
	if !e.applied {
		return
	}
	e.applied = false
	if err := e.admin.restore(context.WithoutCancel(ctx), e.urls, e.orig); err != nil {
		e.logger.Warn("restore the targets' batching settings", "err", err)
	}
}
