// Package openai serves a generative model through an OpenAI-compatible HTTP
// API, so that any OpenAI client or LLM benchmark works by base URL:
//
//	POST /v1/completions          continuous batching (or the policy set by
//	POST /v1/chat/completions     Config.Engine.Policy or the admin API)
//	GET  /v1/models, /v1/models/{model}
//	     /static/v1/…             the same on static batching
//	     /naive/v1/…              the same, one sequence at a time
//
// Each prefix has its own engine (server/generate) over its own decoder
// instance, so the three run side by side on the same model. With
// "stream": true the answer is Server-Sent Events in OpenAI's chunk schema:
// one event per generated token, flushed at once, then data: [DONE].
//
// The API is a service of the host (package server): the host keeps the
// listener, the drain, health, readiness, /metrics, the admin token, and
// the request limits (default deadline, largest body) that the API reads
// its requests with.
package openai

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/server"
	"github.com/inferhq/infer/server/generate"
)

// Config configures a Service. The zero value is valid.
type Config struct {
	// Engine configures the engine behind /v1 (default continuous
	// batching). The /static and /naive engines copy it with their own
	// policy.
	Engine generate.Config
	// MaxTokens bounds a request's max_tokens. Default: the context.
	MaxTokens int
	// WriteTimeout bounds each write of a stream to its client: a client
	// that stops reading is cut after it (and after the engine's stream
	// buffer fills). Default 10s.
	WriteTimeout time.Duration
	// StreamInterval is how many tokens a stream gathers into one write
	// after its first, which goes out at once (vLLM's --stream-interval):
	// 1 (the default) writes each token as it is decoded; n > 1 makes a
	// client's inter-token gaps n steps apart and costs the server one
	// write, and one network send, per n tokens. 1 to MaxStreamInterval.
	StreamInterval int
	// Logger receives lifecycle events; nil discards them.
	Logger *slog.Logger
}

// DefaultStreamInterval is Config.StreamInterval's default: every token is
// written as it comes.
const DefaultStreamInterval = 1

// MaxStreamInterval bounds Config.StreamInterval well below the engine's
// stream buffer, which cuts a reader that far behind.
const MaxStreamInterval = 64

// CheckStreamInterval says whether n is a valid Config.StreamInterval (not
// 0, which New takes for the default).
func CheckStreamInterval(n int) error {
	if n < 1 || n > MaxStreamInterval {
		return fmt.Errorf("%d: want 1 to %d tokens", n, MaxStreamInterval)
	}
	return nil
}

// Service is the OpenAI-compatible API over one generative model.
type Service struct {
	cfg     Config
	factory models.DecoderFactory
	info    models.Info
	dinfo   models.DecoderInfo
	tok     models.Tokenizer
	// maxTokenBytes is the most bytes a token stands for: a prompt's
	// length bounds its tokens (see encode).
	maxTokenBytes int
	log           *slog.Logger
	limits        server.Limits // the host's, set by Mount
	metrics       *metrics

	// One per route prefix, in the order of prefixes.
	eps []*endpoint

	mu       sync.Mutex // guards decoders
	decoders []models.Decoder
	adminMu  sync.Mutex // serialises admin changes

	ready    atomic.Bool // the engines run
	draining atomic.Bool // Run's context ended: new work is refused
}

// endpoint is one route prefix and its engine.
type endpoint struct {
	name   string // metrics label: continuous (for /v1), static, naive
	prefix string // "" for /v1, "/static", "/naive"
	policy generate.Policy
	engine *generate.Engine // set by Load
	step   time.Duration    // a step of one sequence, timed by Load
	m      *epMetrics
}

// New returns the API over the model made by f. It loads nothing yet.
func New(cfg Config, f models.DecoderFactory) (*Service, error) {
	if err := cfg.Engine.Validate(); err != nil {
		return nil, err
	}
	dinfo := f.Decoder()
	if cfg.MaxTokens <= 0 || cfg.MaxTokens > dinfo.Context {
		cfg.MaxTokens = dinfo.Context
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 10 * time.Second
	}
	if cfg.StreamInterval == 0 {
		cfg.StreamInterval = DefaultStreamInterval
	}
	if err := CheckStreamInterval(cfg.StreamInterval); err != nil {
		return nil, fmt.Errorf("stream interval %w", err)
	}
	if b := cfg.Engine.StreamBuffer; b > 0 && cfg.StreamInterval >= b {
		return nil, fmt.Errorf("stream interval %d: want fewer tokens than the engine's stream buffer (%d)", cfg.StreamInterval, b)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Engine.Policy == "" {
		cfg.Engine.Policy = generate.Continuous
	}
	s := &Service{cfg: cfg, factory: f, info: f.Info(), dinfo: dinfo, tok: f.Tokenizer(), log: cfg.Logger}
	s.maxTokenBytes = maxTokenBytes(s.tok, dinfo.Vocab)
	s.eps = []*endpoint{
		{name: "v1", prefix: "", policy: cfg.Engine.Policy},
		{name: string(generate.Static), prefix: "/static", policy: generate.Static},
		{name: string(generate.Naive), prefix: "/naive", policy: generate.Naive},
	}
	s.metrics = newMetrics(s)
	return s, nil
}

// Info describes the model served.
func (s *Service) Info() models.Info { return s.info }

// load creates and warms one decoder instance per prefix and their engines.
// On failure it closes what it created.
func (s *Service) loadAll(ctx context.Context) error {
	if err := s.load(ctx); err != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, d := range s.decoders {
			err = errors.Join(err, d.Close())
		}
		s.decoders = nil
		return err
	}
	return nil
}

func (s *Service) load(ctx context.Context) error {
	for i, ep := range s.eps {
		dec, err := s.factory.New(ctx, i)
		if err != nil {
			return fmt.Errorf("decoder instance %d: %w", i, err)
		}
		s.mu.Lock()
		s.decoders = append(s.decoders, dec)
		s.mu.Unlock()
		if err := s.warm(ctx, dec); err != nil {
			return fmt.Errorf("warm up decoder instance %d: %w", i, err)
		}
		// A second step, timed, is the model's own cost of a step: the
		// engine's deadline admission starts from it.
		t0 := time.Now()
		if err := s.warm(ctx, dec); err != nil {
			return fmt.Errorf("warm up decoder instance %d: %w", i, err)
		}
		ep.step = time.Since(t0)
		ecfg := s.cfg.Engine
		if ecfg.ColdStep == 0 {
			ecfg.ColdStep = ep.step
		}
		ecfg.Policy = ep.policy
		ecfg.OnStep = ep.m.observeStep
		e, err := generate.New(ecfg, dec, s.dinfo, s.tok)
		if err != nil {
			return err
		}
		ep.engine = e
	}
	return nil
}

// warm runs one step of one token (lazy initialisation of a real backend).
func (s *Service) warm(ctx context.Context, dec models.Decoder) error {
	const id = models.SeqID(1<<63 - 1) // engines count up from 1
	defer dec.Free(id)
	next := make([]int32, 1)
	return dec.Step(ctx, []models.StepSeq{{ID: id, Tokens: []int32{s.dinfo.EOS}, PromptLen: 1, Sample: true}}, next)
}

// Run loads the model instances, calls ready, and runs the engines until ctx
// is done; then it refuses new requests, lets the engines finish what they
// admitted, and closes the decoders.
func (s *Service) Run(ctx context.Context, ready func()) error {
	if err := s.loadAll(ctx); err != nil {
		return err
	}
	s.ready.Store(true)
	ready()
	s.log.Info("ready", append([]any{"model", s.info.Name, "paths", "/v1, /static/v1, /naive/v1"}, s.batching().logAttrs()...)...)
	var wg sync.WaitGroup
	wg.Go(func() {
		<-ctx.Done()
		s.draining.Store(true)
	})
	errs := make([]error, len(s.eps))
	for i, ep := range s.eps {
		if ep.engine == nil {
			continue
		}
		wg.Go(func() { errs[i] = ep.engine.Run(ctx) })
	}
	wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.decoders {
		errs = append(errs, d.Close())
	}
	s.decoders = nil
	return errors.Join(errs...)
}

// Mount registers the API's routes, its model, its metrics and its admin
// API (/admin/batching) on the host.
func (s *Service) Mount(m *server.Mount) {
	s.limits = m.Limits()
	for _, ep := range s.eps {
		h := &handler{s: s, ep: ep}
		m.Handle(ep.prefix+"/v1/completions", h.only(http.MethodPost, h.completions(false)))
		m.Handle(ep.prefix+"/v1/chat/completions", h.only(http.MethodPost, h.completions(true)))
		m.Handle(ep.prefix+"/v1/models", h.only(http.MethodGet, http.HandlerFunc(h.models)))
		m.Handle(ep.prefix+"/v1/models/", h.only(http.MethodGet, http.HandlerFunc(h.model)))
		m.Handle(ep.prefix+"/v1/", http.HandlerFunc(notFound))
	}
	m.Admin("/admin/batching", s.admin())
	m.Model(s.info)
	m.Collect(s.metrics.collectors()...)
}

// notFound answers a path under a /v1 prefix that the API does not have, in
// OpenAI's error shape (other paths get the server's 404).
func notFound(w http.ResponseWriter, r *http.Request) {
	writeError(w, &apiError{Status: http.StatusNotFound, Type: typeInvalid, Code: "not_found",
		Message: fmt.Sprintf("no endpoint %s; see /v1/completions, /v1/chat/completions, /v1/models (and the same under /static and /naive)", r.URL.Path)})
}
