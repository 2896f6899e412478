package server

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inferhq/infer/models"
)

// Service is a model served through endpoints of its own instead of /naive,
// /batched and /v2: a generative model's OpenAI-compatible API
// (server/openai) plugs in here through Config.Service. The server keeps
// what every model shares: the listener and its timeouts, the drain,
// /healthz, /readyz, /metrics and the admin token.
type Service interface {
	// Info describes the model served.
	Info() models.Info
	// Routes mounts the service's endpoints on mux; "/" is the service's
	// to answer. Its handlers refuse new work while st is not ready or is
	// draining.
	Routes(mux *http.ServeMux, st State)
	// Admin handles /admin/batching behind the admin token; nil for none.
	Admin() http.Handler
	// Load creates and warms the model instances; the server turns ready
	// once it returns nil.
	Load(ctx context.Context) error
	// Run serves until ctx is done, then stops admitting, finishes what it
	// admitted, releases the instances and returns.
	Run(ctx context.Context) error
	// Len is the number of requests admitted and not finished.
	Len() int
	// Collectors are registered on the server's /metrics.
	Collectors() []prometheus.Collector
}

// State is what a Service's handlers need from the server.
type State interface {
	Ready() bool
	Draining() bool
	// RequestTimeout is a request's deadline: Config.Timeout, shortened
	// by its X-Request-Timeout header; an error for a malformed header.
	RequestTimeout(r *http.Request) (time.Duration, error)
}

// Draining reports whether the server is shutting down.
func (s *Server) Draining() bool { return s.draining.Load() }

// RequestTimeout implements State.
func (s *Server) RequestTimeout(r *http.Request) (time.Duration, error) { return s.requestTimeout(r) }

// serviceRoutes are the routes of a server with a Service.
func (s *Server) serviceRoutes() http.Handler {
	mux := http.NewServeMux()
	s.cfg.Service.Routes(mux, s)
	if h := s.cfg.Service.Admin(); h != nil && s.cfg.AdminToken != "" {
		mux.Handle("/admin/batching", s.authorized(h))
	}
	mux.Handle("/healthz", only(http.MethodGet, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})))
	mux.Handle("/readyz", only(http.MethodGet, http.HandlerFunc(s.handleReady)))
	mux.Handle("/metrics", only(http.MethodGet, s.metrics.handler()))
	return recoverPanics(mux)
}

// loadService loads the service and runs it under runCtx.
func (s *Server) loadService(ctx, runCtx context.Context, wg *sync.WaitGroup) error {
	start := time.Now()
	if err := s.cfg.Service.Load(ctx); err != nil {
		return fmt.Errorf("load %s: %w", s.info.Name, err)
	}
	wg.Go(func() {
		if err := s.cfg.Service.Run(runCtx); err != nil {
			s.log.Error("service stopped", "err", err)
		}
	})
	s.log.Info("model loaded", "model", s.info.Name, "took", time.Since(start).Round(time.Millisecond))
	return nil
}
