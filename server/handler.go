package server

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/server/batch"
)

// routes builds the handler of every path: the encoder endpoints (when the
// server has a model), the services' routes, health, readiness and metrics,
// all inside the lifecycle's wrapper (Connection: close on drain) and panic
// recovery.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	if s.factory != nil {
		naive := &endpoint{name: endpointNaive, metrics: s.metrics.naive, do: func(ctx context.Context, ins []models.Input) ([]models.Output, batch.Stats, error) {
			return s.naive.Load().Do(ctx, ins)
		}}
		batched := &endpoint{name: endpointBatched, metrics: s.metrics.batched, do: func(ctx context.Context, ins []models.Input) ([]models.Output, batch.Stats, error) {
			return s.scheduler().Do(ctx, ins)
		}}
		mux.Handle("/naive", only(http.MethodPost, s.inferHandler(naive)))
		mux.Handle("/batched", only(http.MethodPost, s.inferHandler(batched)))
		// v2 requests run in the batched endpoint's batches, counted apart.
		s.v2Routes(mux, &endpoint{name: endpointV2, metrics: s.metrics.v2, do: batched.do})
		s.adminRoutes(mux)
	}
	for _, svc := range s.cfg.Services {
		svc.Mount(mux)
	}
	if s.factory == nil && s.cfg.AdminToken != "" {
		for _, svc := range s.cfg.Services {
			if a, ok := svc.(AdminService); ok {
				mux.Handle("/admin/batching", s.authorized(a.Admin()))
				break
			}
		}
	}
	mux.Handle("/healthz", only(http.MethodGet, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})))
	mux.Handle("/readyz", only(http.MethodGet, http.HandlerFunc(s.handleReady)))
	mux.Handle("/metrics", only(http.MethodGet, s.metrics.handler()))
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.factory == nil {
			writeError(w, errorf(http.StatusNotFound, "not_found", "no endpoint %s", r.URL.Path))
			return
		}
		writeError(w, errorf(http.StatusNotFound, "not_found", "no endpoint %s; see /naive, /batched, /v2/models/%s/infer", r.URL.Path, s.info.Name))
	}))
	return lifecycle(&s.draining, recoverPanics(mux))
}

// only answers 405 with Allow for any method but m (and HEAD for GET).
func only(m string, h http.Handler) http.Handler {
	return Methods(map[string]http.Handler{m: h}, refuseMethod)
}

func refuseMethod(w http.ResponseWriter, msg string) {
	writeError(w, errorf(http.StatusMethodNotAllowed, "method_not_allowed", "%s", msg))
}

// Methods serves each request with the handler of its method in hs (HEAD
// with GET's, unless hs has one for HEAD) and answers any other method 405
// with Allow, the refusal written by refuse with its message. It is the one
// method check of the server's routes and of the APIs mounted on it
// (server/openai), whose errors each have their own shape.
func Methods(hs map[string]http.Handler, refuse func(w http.ResponseWriter, msg string)) http.Handler {
	methods := slices.Sorted(maps.Keys(hs))
	var allow []string
	for _, m := range methods {
		allow = append(allow, m)
		if m == http.MethodGet && hs[http.MethodHead] == nil {
			allow = append(allow, http.MethodHead)
		}
	}
	allowHeader, use := strings.Join(allow, ", "), strings.Join(methods, " or ")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := hs[r.Method]
		if h == nil && r.Method == http.MethodHead {
			h = hs[http.MethodGet]
		}
		if h == nil {
			w.Header().Set("Allow", allowHeader)
			refuse(w, fmt.Sprintf("%s %s: use %s", r.Method, r.URL.Path, use))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// recoverPanics turns a handler's panic into a JSON 500: no stack trace
// reaches a client.
func recoverPanics(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				writeError(w, errorf(http.StatusInternalServerError, "internal", "internal error"))
			}
		}()
		h.ServeHTTP(w, r)
	})
}

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	switch err := s.schedulerErr(); {
	case s.draining.Load():
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "draining"})
	case !s.ready.Load() || s.unready.Load() > 0:
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "loading"})
	case err != nil:
		e := s.toAPIError(err)
		if e.Status != http.StatusServiceUnavailable {
			e = errorf(http.StatusServiceUnavailable, "unavailable", "batch scheduler unavailable")
		}
		writeJSON(w, e.Status, map[string]string{"status": e.Code, "reason": e.Message})
	default:
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready", "model": s.modelNames()})
	}
}

// serving reports whether the server is ready and its batched scheduler can
// serve: what /readyz, /v2/health/ready and infer_ready say.
func (s *Server) serving() bool { return s.Ready() && s.schedulerErr() == nil }

// schedulerErr returns why the batched scheduler cannot serve now, for a
// scheduler that can say so (see Scheduler), or nil.
func (s *Server) schedulerErr() error {
	if r, ok := s.scheduler().(interface{ Ready() error }); ok {
		return r.Ready()
	}
	return nil
}
