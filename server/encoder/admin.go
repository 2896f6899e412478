package encoder

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/server"
	"github.com/inferhq/infer/server/batch"
)

// The admin API exists only when the host has an admin token
// (server.Config.AdminToken):
//
//	GET   /admin/batching  the batching settings in effect
//	PATCH /admin/batching  change any of {"batch", "max_latency", "policy", "workers"}
//
// Both need "Authorization: Bearer <token>". A PATCH applies whole or not at
// all, within the host's request timeout: adding workers loads and warms
// new model instances first, and nothing changes unless all are ready;
// values past the bounds of server/batch are refused with 422. A removed
// worker finishes its current batch, then its instance is closed. The answer
// is the settings in force.

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
func (s *Service) batching() batching {
	if b := s.batcher(); b != nil {
		c := b.Config()
		return batching{Batch: c.MaxBatch, MaxLatency: c.MaxLatency, Policy: c.Policy, Workers: b.Workers()}
	}
	c := s.cfg.Batch
	return batching{Batch: c.MaxBatch, MaxLatency: c.MaxLatency, Policy: c.Policy, Workers: s.cfg.Workers}
}

// adminHandler serves GET and PATCH /admin/batching.
func (s *Service) adminHandler() http.Handler {
	return server.Methods(map[string]http.Handler{
		http.MethodGet: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			server.WriteJSON(w, http.StatusOK, s.batching())
		}),
		http.MethodPatch: http.HandlerFunc(s.patchBatching),
	}, server.RefuseMethod)
}

type batchingPatch struct {
	Batch      *int    `json:"batch"`
	MaxLatency *string `json:"max_latency"`
	Policy     *string `json:"policy"`
	Workers    *int    `json:"workers"`
}

// decodePatch reads a body holding one JSON object of known fields. It reads
// to the end, so that the request's context follows the client from then on
// (net/http watches the connection only once the body is consumed).
func decodePatch(body io.Reader) (batchingPatch, error) {
	var p batchingPatch
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return p, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return p, errors.New("more than one JSON value")
	}
	return p, nil
}

// apply returns the settings the patch asks for, given those in force. The
// bounds are checked by batch.Config.Validate and batch.ValidateWorkers, as
// for the command line's flags.
func (p batchingPatch) apply(cfg batch.Config, workers int) (batch.Config, int, error) {
	if p.Batch != nil {
		if *p.Batch < 1 {
			return cfg, 0, fmt.Errorf("batch %d: want 1 to %d", *p.Batch, batch.MaxBatchLimit)
		}
		cfg.MaxBatch = *p.Batch
	}
	if p.MaxLatency != nil {
		d, err := time.ParseDuration(*p.MaxLatency)
		if err != nil {
			return cfg, 0, fmt.Errorf("max_latency %q: want a duration like 50ms", *p.MaxLatency)
		}
		cfg.MaxLatency = d
	}
	if p.Policy != nil {
		pol, err := batch.ParsePolicy(*p.Policy)
		if err != nil {
			return cfg, 0, err
		}
		cfg.Policy = pol
	}
	if p.Workers != nil {
		workers = *p.Workers
	}
	if err := cfg.Validate(); err != nil {
		return cfg, 0, err
	}
	return cfg, workers, batch.ValidateWorkers(workers)
}

// patchBatching applies a PATCH whole or not at all, within the host's
// request timeout, and answers with the settings in force.
func (s *Service) patchBatching(w http.ResponseWriter, r *http.Request) {
	b := s.batcher()
	if b == nil {
		server.WriteError(w, server.Errorf(http.StatusConflict, "not_local", "batches do not run in this process (not loaded yet, or distributed mode)"))
		return
	}
	p, err := decodePatch(http.MaxBytesReader(w, r.Body, 64<<10))
	if err != nil {
		server.WriteError(w, server.Errorf(http.StatusBadRequest, "malformed_json", "want one object of \"batch\", \"max_latency\", \"policy\", \"workers\": %v", err))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.limits.Timeout)
	defer cancel()
	select { // one change at a time
	case s.admin <- struct{}{}:
		defer func() { <-s.admin }()
	case <-ctx.Done():
		server.WriteError(w, s.adminError(ctx, "waiting for another admin change"))
		return
	}
	cfg, workers, err := p.apply(b.Config(), b.Workers())
	if err != nil {
		server.WriteError(w, server.Errorf(http.StatusUnprocessableEntity, "invalid_batching", "%v", err))
		return
	}
	if err := s.setBatching(ctx, b, cfg, workers); err != nil {
		if ctx.Err() != nil {
			server.WriteError(w, s.adminError(ctx, err.Error()))
		} else {
			server.WriteError(w, server.Errorf(http.StatusInternalServerError, "load_failed", "%v; nothing changed", err))
		}
		return
	}
	st := s.batching()
	s.log.Info("batching changed", "batch", st.Batch, "max_latency", st.MaxLatency, "policy", st.Policy, "workers", st.Workers)
	server.WriteJSON(w, http.StatusOK, st)
}

// adminError is the answer of a change cut short by its context: its client
// went away, or it ran past the host's request timeout.
func (s *Service) adminError(ctx context.Context, doing string) *server.Error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		e := server.Errorf(http.StatusServiceUnavailable, "admin_timeout", "%s took longer than %v (--timeout); nothing changed", doing, s.limits.Timeout)
		e.RetryAfter = 1
		return e
	}
	return server.Errorf(server.StatusClientClosed, "client_closed", "client went away")
}

// setBatching puts cfg and the worker count in force, all of it or none: new
// instances are loaded and warmed first, and nothing changes unless all of
// them are ready before ctx ends. Removed workers finish their current batch;
// the batcher then closes their instances (it owns them), and setBatching
// waits for that while ctx lasts. s.admin must be held.
func (s *Service) setBatching(ctx context.Context, b *batch.Batcher[models.Input, models.Output], cfg batch.Config, workers int) error {
	var added []models.Model
	var timed []warmup
	for i := b.Workers(); i < workers; i++ {
		err := ctx.Err()
		var m models.Model
		if err == nil {
			m, err = s.factory.New(ctx, i)
		}
		if m != nil {
			added = append(added, m)
		}
		var ws []warmup
		if err == nil {
			ws, err = s.warm(ctx, m, cfg.MaxBatch)
		}
		if err == nil {
			err = ctx.Err()
		}
		if err != nil {
			return errors.Join(fmt.Errorf("load worker %d: %w", i, err), closeAll(added))
		}
		timed = append(timed, ws...)
	}
	// Commit: nothing below can fail, cfg and workers being valid.
	if err := b.Reconfigure(cfg); err != nil {
		return errors.Join(err, closeAll(added))
	}
	for _, w := range timed {
		b.Observe(w.n, w.d)
	}
	for _, m := range added {
		b.AddInstance(m)
	}
	for b.Workers() > workers {
		if _, err := b.RemoveWorker(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("removed worker", "err", err)
		}
	}
	return nil
}
