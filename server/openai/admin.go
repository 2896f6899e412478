package openai

import (
	"cmp"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/inferhq/infer/internal/setting"
	"github.com/inferhq/infer/server"
	"github.com/inferhq/infer/server/generate"
)

// The admin API of a generative model (mounted on the host behind its admin
// token):
//
//	GET   /admin/batching  the /v1 engine's settings in effect
//	PATCH /admin/batching  change any of {"policy", "max_seqs",
//	                       "max_batched_tokens", "max_latency",
//	                       "prefix_cache", "block_size"}
//
// A PATCH applies all of its fields or none, from the engine's next step,
// and answers with what is in force. Turning prefix_cache off forgets what
// the cache holds; a new block_size empties the KV (the running sequences
// are recomputed).

type batching struct {
	Policy           generate.Policy `json:"policy"`
	MaxSeqs          int             `json:"max_seqs"`
	MaxBatchedTokens int             `json:"max_batched_tokens"`
	KVTokens         int             `json:"kv_tokens"`
	MaxLatency       string          `json:"max_latency"`
	PrefixCache      bool            `json:"prefix_cache"`
	BlockSize        int             `json:"block_size"`
}

// logAttrs are b's fields for a log line.
func (b batching) logAttrs() []any {
	return []any{"policy", b.Policy, "max_seqs", b.MaxSeqs, "max_batched_tokens", b.MaxBatchedTokens, "kv_tokens", b.KVTokens,
		"max_latency", b.MaxLatency, "prefix_cache", b.PrefixCache, "block_size", b.BlockSize}
}

type batchingPatch struct {
	Policy           *string `json:"policy"`
	MaxSeqs          *int    `json:"max_seqs"`
	MaxBatchedTokens *int    `json:"max_batched_tokens"`
	MaxLatency       *string `json:"max_latency"`
	PrefixCache      *bool   `json:"prefix_cache"`
	BlockSize        *int    `json:"block_size"`
}

// v1 is the engine behind /v1 (nil before Load).
func (s *Service) v1() *generate.Engine { return s.eps[0].engine }

func (s *Service) batching() batching {
	c := s.cfg.Engine
	if e := s.v1(); e != nil {
		c = e.Config()
	}
	return batching{Policy: c.Policy, MaxSeqs: c.MaxSeqs, MaxBatchedTokens: c.MaxBatchedTokens, KVTokens: c.KVTokens, MaxLatency: c.MaxLatency.String(),
		PrefixCache: !c.NoPrefixCache && s.dinfo.BlockKV, BlockSize: cmp.Or(c.BlockSize, generate.DefaultBlockSize)}
}

// admin handles GET and PATCH /admin/batching.
func (s *Service) admin() http.Handler {
	return server.Methods(map[string]http.Handler{
		http.MethodGet: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			server.WriteJSON(w, http.StatusOK, s.batching())
		}),
		http.MethodPatch: http.HandlerFunc(s.patchBatching),
	}, refuseMethod)
}

func (s *Service) patchBatching(w http.ResponseWriter, r *http.Request) {
	e := s.v1()
	if e == nil {
		writeError(w, errNotReady())
		return
	}
	var p batchingPatch
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		writeError(w, invalid(http.StatusBadRequest, "", "malformed_json", `want {"policy", "max_seqs", "max_batched_tokens", "max_latency", "prefix_cache", "block_size"}: %v`, err))
		return
	}
	s.adminMu.Lock()
	defer s.adminMu.Unlock()
	c := e.Config()
	if p.Policy != nil {
		pol, err := generate.ParsePolicy(*p.Policy)
		if err != nil {
			writeError(w, invalid(http.StatusUnprocessableEntity, "policy", "invalid_policy", "%v", err))
			return
		}
		c.Policy = pol
	}
	// A PATCH names values: 0, which the engine reads as "its default",
	// is not one. The ranges are the engine's own (Reconfigure checks them).
	for _, f := range []struct {
		name string
		v    *int
		dst  *int
	}{{"max_seqs", p.MaxSeqs, &c.MaxSeqs}, {"max_batched_tokens", p.MaxBatchedTokens, &c.MaxBatchedTokens}, {"block_size", p.BlockSize, &c.BlockSize}} {
		if f.v == nil {
			continue
		}
		if *f.v < 1 {
			writeError(w, invalid(http.StatusUnprocessableEntity, f.name, "invalid_"+f.name, "%s %d: want at least 1", f.name, *f.v))
			return
		}
		*f.dst = *f.v
	}
	if p.MaxLatency != nil {
		d, err := time.ParseDuration(*p.MaxLatency)
		if err != nil || d < 0 || d > time.Minute {
			writeError(w, invalid(http.StatusUnprocessableEntity, "max_latency", "invalid_max_latency", "max_latency %q: want a duration like 50ms, at most 1m", *p.MaxLatency))
			return
		}
		c.MaxLatency = d
	}
	if p.PrefixCache != nil {
		if *p.PrefixCache && !s.dinfo.BlockKV {
			writeError(w, invalid(http.StatusUnprocessableEntity, "prefix_cache", "invalid_prefix_cache", "model %s cannot reuse KV across requests (its decoder does not store KV by blocks), so its prefix cache stays off", s.info.Name))
			return
		}
		c.NoPrefixCache = !*p.PrefixCache
	}
	if err := e.Reconfigure(c); err != nil {
		writeError(w, settingError(err))
		return
	}
	st := s.batching()
	s.log.Info("batching changed", st.logAttrs()...)
	server.WriteJSON(w, http.StatusOK, st)
}

// settingError answers an engine's refusal of a configuration: a setting
// out of its range is named as its JSON field (max seqs → max_seqs).
func settingError(err error) *apiError {
	var se *setting.Error
	if !errors.As(err, &se) {
		return invalid(http.StatusUnprocessableEntity, "", "invalid_batching", "%v", err)
	}
	field := func(n setting.Name) string { return strings.ReplaceAll(string(n), " ", "_") }
	return invalid(http.StatusUnprocessableEntity, field(se.Name), "invalid_"+field(se.Name), "%s", se.Render(field))
}
