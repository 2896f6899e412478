package server

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/server/batch"
)

// The admin API exists only when Config.AdminToken is set:
//
//	GET   /admin/batching  the batching settings in effect
//	PATCH /admin/batching  change any of {"batch", "max_latency", "policy", "workers"}
//
// Both need "Authorization: Bearer <token>". Changes apply at once; adding
// workers loads and warms new model instances first, removing one waits for
// its current batch.

// batching is the admin API's view of the batching settings.
type batching struct {
	Batch      int           `json:"batch"`
	MaxLatency time.Duration `json:"-"`
	Policy     batch.Policy  `json:"policy"`
	Workers    int           `json:"workers"`
}

func (b batching) MarshalJSON() ([]byte, error) {
	type plain batching
	return json.Marshal(struct {
		plain
		MaxLatency string `json:"max_latency"`
	}{plain(b), b.MaxLatency.String()})
}

// batching returns the settings in effect.
func (s *Server) batching() batching {
	if b := s.batcher(); b != nil {
		c := b.Config()
		return batching{Batch: c.MaxBatch, MaxLatency: c.MaxLatency, Policy: c.Policy, Workers: b.Workers()}
	}
	c := s.cfg.Batch
	return batching{Batch: c.MaxBatch, MaxLatency: c.MaxLatency, Policy: c.Policy, Workers: s.cfg.Workers}
}

func (s *Server) adminRoutes(mux *http.ServeMux) {
	if s.cfg.AdminToken == "" {
		return
	}
	mux.Handle("/admin/batching", s.authorized(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			writeJSON(w, http.StatusOK, s.batching())
		case http.MethodPatch:
			s.patchBatching(w, r)
		default:
			w.Header().Set("Allow", "GET, PATCH")
			writeError(w, errorf(http.StatusMethodNotAllowed, "method_not_allowed", "%s /admin/batching: use GET or PATCH", r.Method))
		}
	})))
}

// authorized checks the bearer token in constant time.
func (s *Server) authorized(h http.Handler) http.Handler {
	want := []byte(s.cfg.AdminToken)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="infer admin"`)
			writeError(w, errorf(http.StatusUnauthorized, "unauthorized", "admin API needs Authorization: Bearer <--admin-token>"))
			return
		}
		h.ServeHTTP(w, r)
	})
}

type batchingPatch struct {
	Batch      *int    `json:"batch"`
	MaxLatency *string `json:"max_latency"`
	Policy     *string `json:"policy"`
	Workers    *int    `json:"workers"`
}

func (s *Server) patchBatching(w http.ResponseWriter, r *http.Request) {
	b := s.batcher()
	if b == nil {
		writeError(w, errorf(http.StatusConflict, "not_local", "batches do not run in this process (not loaded yet, or distributed mode)"))
		return
	}
	var p batchingPatch
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		writeError(w, errorf(http.StatusBadRequest, "malformed_json", "want {\"batch\", \"max_latency\", \"policy\", \"workers\"}: %v", err))
		return
	}
	s.adminMu.Lock()
	defer s.adminMu.Unlock()
	cfg := b.Config()
	if p.Batch != nil {
		if *p.Batch < 1 {
			writeError(w, errorf(http.StatusUnprocessableEntity, "invalid_batch", "batch %d: must be at least 1", *p.Batch))
			return
		}
		cfg.MaxBatch = *p.Batch
	}
	if p.MaxLatency != nil {
		d, err := time.ParseDuration(*p.MaxLatency)
		if err != nil || d < 0 {
			writeError(w, errorf(http.StatusUnprocessableEntity, "invalid_max_latency", "max_latency %q: want a duration like 50ms", *p.MaxLatency))
			return
		}
		cfg.MaxLatency = d
	}
	if p.Policy != nil {
		pol, err := batch.ParsePolicy(*p.Policy)
		if err != nil {
			writeError(w, errorf(http.StatusUnprocessableEntity, "invalid_policy", "%v", err))
			return
		}
		cfg.Policy = pol
	}
	if p.Workers != nil && *p.Workers < 1 {
		writeError(w, errorf(http.StatusUnprocessableEntity, "invalid_workers", "workers %d: must be at least 1", *p.Workers))
		return
	}
	if err := b.Reconfigure(cfg); err != nil {
		writeError(w, errorf(http.StatusUnprocessableEntity, "invalid_batching", "%v", err))
		return
	}
	if p.Workers != nil {
		if err := s.setWorkers(r.Context(), b, *p.Workers); err != nil {
			writeError(w, errorf(http.StatusInternalServerError, "workers", "%v", err))
			return
		}
	}
	st := s.batching()
	s.log.Info("batching changed", "batch", st.Batch, "max_latency", st.MaxLatency, "policy", st.Policy, "workers", st.Workers)
	writeJSON(w, http.StatusOK, st)
}

// setWorkers adds warmed instances or removes the newest ones until n run.
// s.adminMu must be held.
func (s *Server) setWorkers(ctx context.Context, b *batch.Batcher[models.Input, models.Output], n int) error {
	for len(s.instances) < n {
		m, err := s.factory.New(ctx, len(s.instances))
		if err != nil {
			return fmt.Errorf("load instance %d: %w", len(s.instances), err)
		}
		timed, err := s.warm(ctx, m)
		if err != nil {
			return errors.Join(err, m.Close())
		}
		for _, w := range timed {
			b.Observe(w.n, w.d)
		}
		s.instances = append(s.instances, m)
		b.AddWorker(m.Predict)
	}
	for len(s.instances) > n {
		if _, err := b.RemoveWorker(ctx); err != nil {
			return fmt.Errorf("remove worker: %w", err)
		}
		last := s.instances[len(s.instances)-1]
		s.instances = s.instances[:len(s.instances)-1]
		if err := last.Close(); err != nil {
			return fmt.Errorf("close instance: %w", err)
		}
	}
	return nil
}
