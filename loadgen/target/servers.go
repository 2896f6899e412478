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
	// URLs returns their base URLs, like http://127.0.0.1:8080.
	URLs() []string
	// Model is the name of the model they serve; "" when unknown.
	Model() string
	// PID is the process id of a server infer started, whose CPU and
	// memory can be read; 0 otherwise.
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
// settings as flags) for each configuration.
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

	server    Server
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
	flags := s.Spec.Flags(set)
	fmt.Fprintf(s.log, "=== %s infer serve %v\n", time.Now().Format(time.RFC3339), flags)
	s.logger().Info("starting server", "flags", flags)
	start := time.Now()
	srv, err := s.Launcher.Launch(ctx, flags, s.log)
	if err != nil {
		return fmt.Errorf("start server %v: %w", flags, err)
	}
	model, err := WaitReady(ctx, s.Client, srv, s.Spec.ReadyTimeout)
	if err != nil {
		s.stopServer(srv)
		return fmt.Errorf("start server %v: %w", flags, err)
	}
	s.server, s.group, s.model = srv, group, model
	s.starts++
	s.startTime += time.Since(start)
	return nil
}

// URLs implements Servers.
func (s *Started) URLs() []string {
	if s.server == nil {
		return nil
	}
	return []string{s.server.URL()}
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

func (s *Started) stop() {
	if s.server != nil {
		s.stopServer(s.server)
		s.server = nil
	}
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
	urls    []string
	model   string
	admin   *admin // nil when the sweep sets no settings
	orig    []batching
	applied bool // a configuration was applied, maybe in part
	group   int
	logger  *slog.Logger
}

var _ Servers = (*Existing)(nil)

// NewExisting returns the servers of cfg. When the sweep sets settings,
// every server's admin API must answer with the token now, before any
// load; an absent API or a refused token is an error wrapping ErrAdminAPI
// that names the fix.
func NewExisting(ctx context.Context, cfg ExistingConfig) (*Existing, error) {
	e := &Existing{urls: cfg.URLs, model: cfg.Model, logger: cfg.Logger}
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
