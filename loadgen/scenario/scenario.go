package scenario

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/parser"

	"github.com/inferhq/infer/loadgen/llm"
	"github.com/inferhq/infer/loadgen/record"
	"github.com/inferhq/infer/loadgen/target"
)

// Scenario is a validated scenario file: what server to load, with what
// payload and load, over which sweep, judged by which thresholds. Load and
// Parse make one from YAML (see scenarios/reference.yaml for every key);
// defaults are applied, so every field holds the value the run will use.
type Scenario struct {
	Name        string // names the run directory; default the file's base name
	Description string
	File        string // the file it was read from; "" when parsed from bytes
	Source      []byte // the file's text, verbatim

	// Targets are the base URLs of existing servers (all frontends of one
	// deployment: each point spreads its load over them). Empty when
	// Server is set.
	Targets []string
	// Model names the model on the targets for the v2 endpoint; when
	// empty it is asked from the first target's /readyz.
	Model string
	// AdminTokenEnv names the environment variable that holds the
	// targets' admin token (target.admin_token_env), for sweeps that set
	// batching settings through PATCH /admin/batching; "" when unset.
	AdminTokenEnv string
	// Replicas are the model servers behind the targets (a front such as
	// HAProxy; target.replicas), whose /metrics tell each one's share;
	// empty when the targets are the servers.
	Replicas []string
	// Server, when set, has infer start `infer serve` for each distinct
	// server configuration of the sweep (server.replicas of them behind an
	// infer route, when set).
	Server *target.Serve

	Payload Payload
	Load    Load
	Sweep   Sweep
	SLO     SLO
}

// Payload is what each request carries.
type Payload struct {
	Items  []string // the corpus: a built-in one or a file's lines, with Inject applied
	Corpus string   // "builtin", "mixed" or the file's path as written
	N      int      // items per request. Default 1.
	Format string   // "json" (default) or "text"; the v2 endpoint always sends v2 JSON
	// Expect is how a 200 answer is checked: target.ExpectStatus (any
	// body), ExpectInfer (one output per item), ExpectKServe (a KServe v2
	// answer to a KServe v2 request, on any endpoint), or "" to choose per
	// point (Expectation).
	Expect string
	// Inject, when set, appends a text to every Every-th item of the
	// corpus (for fault injection, like infer serve --sim-fail-on); the
	// requests that carry it are counted apart (record.Injected).
	Inject *Inject
	// LLM, when set (payload.api), makes the scenario a streaming LLM
	// load on OpenAI-compatible endpoints; the fields above are then
	// unused.
	LLM *LLMPayload
}

// LLMPayload is the payload of a streaming LLM load: what each request to
// /v1/completions or /v1/chat/completions asks.
type LLMPayload struct {
	API llm.API
	// Stream asks for a stream with usage (default true); without, TTFT
	// is E2EL.
	Stream bool
	// PromptTokens and OutputTokens (sent as max_tokens) are fixed or
	// drawn per request; a zero Length leaves prompts as they are, or
	// takes the output length from the prompt set (llm.PayloadConfig).
	PromptTokens, OutputTokens llm.Length
	IgnoreEOS                  bool
	// Temperature is sent with every request: 0 (the default, as vLLM's
	// benchmark) asks for greedy decoding.
	Temperature float64
	// Prompts is "builtin" or the prompt file as written; Set holds its
	// prompts (nil: the built-in corpus), Skipped those it skipped.
	Prompts string
	Set     []llm.Prompt
	Skipped int
	// KeyHeader names the header that carries each request's key (its
	// tenant: a shared prefix's group, a session), for a router's hash
	// policy (infer route's X-Routing-Key); "" sends none.
	KeyHeader string
	// SharedPrefix, MultiTurn and Trace are a prefix-caching workload
	// (payload.shared_prefix, multi_turn, trace), at most one; TraceFile
	// is the trace's file as written.
	SharedPrefix *llm.SharedPrefix
	MultiTurn    *llm.MultiTurn
	Trace        *llm.TraceReplay
	TraceFile    string
}

// Config returns the payload generator's configuration for model.
func (p *LLMPayload) Config(model string) llm.PayloadConfig {
	return llm.PayloadConfig{API: p.API, Model: model, Stream: p.Stream, PromptTokens: p.PromptTokens,
		OutputTokens: p.OutputTokens, IgnoreEOS: p.IgnoreEOS, Prompts: p.Set, Seed: payloadSeed,
		Extra:        map[string]any{"temperature": p.Temperature},
		SharedPrefix: p.SharedPrefix, MultiTurn: p.MultiTurn, Trace: p.Trace}
}

// payloadSeed seeds every point's payload, so that the points of a sweep
// (continuous against static, say) get the same requests in the same order.
const payloadSeed = 1

// Expectation is the check of a point's answers on endpoint: the
// scenario's payload.expect, else KServe v2 for the v2 endpoint (and a
// /v2/models/NAME/infer path), infer's shape for an infer server, and the
// status alone for any other server (inferServer false).
func (p Payload) Expectation(endpoint string, inferServer bool) string {
	switch {
	case p.Expect != "":
		return p.Expect
	case target.Canonical(endpoint) == "v2":
		return target.ExpectKServe
	case inferServer:
		return target.ExpectInfer
	}
	return target.ExpectStatus
}

// Inject is payload.inject: Text is appended, after a space, to items
// Every-1, 2·Every-1, … of the corpus.
type Inject struct {
	Text  string
	Every int
}

// Load is how the generator drives each point. Exactly one of Concurrency
// (closed loop) and Rates (open loop) is set; each value is one load level
// of the sweep.
type Load struct {
	Concurrency []int     // closed loop: clients, each sending its next request when the last is answered
	Rates       []float64 // open loop: requests per second, sent on schedule whatever the answers
	// PerWorker scales each level (rate, ramp start, clients) by the
	// point's sweep.workers (1 when the sweep leaves workers to the server,
	// and for the naive endpoint), so that levels are shares of each
	// configuration's capacity.
	PerWorker bool
	// Pacer is "constant" (default) or "ramp": a linear ramp from RampFrom
	// to the level's rate over the measured duration (warm-up runs at
	// RampFrom).
	Pacer    string
	RampFrom float64
	// MaxInFlight bounds outstanding requests in open loop; when the
	// server is slower than the rate, sending falls behind and the point
	// is flagged. Default 1000.
	MaxInFlight int
	Warmup      time.Duration // before each repeat, not recorded. Default 2s.
	Duration    time.Duration // measured, per repeat. Default 10s.
	Repeats     int           // default 1
	Timeout     time.Duration // per request. Default 30s; 10m for LLM loads.
	// Arrival is the open loop's arrival process: "constant" (default),
	// "poisson" or "gamma" (of shape Burstiness: below 1 burstier than
	// Poisson, above 1 more regular). LLM loads only.
	Arrival    string
	Burstiness float64
	// Drain is how long an LLM point's streams sent in the window may
	// finish after it before they are cut off. Default 1m.
	Drain time.Duration
	// Interleave runs the repeats of the points at one endpoint and load
	// level in rounds: repeat 1 of every server configuration, then
	// repeat 2 of every one, and so on, instead of each point's repeats
	// one after another; configurations compared at a level then share
	// the machine's good and bad minutes. A started server is restarted
	// wherever the configuration changes.
	Interleave bool
	// Search, when set (load.search), takes the place of Concurrency and
	// Rates: each configuration's levels are chosen by a capacity search.
	Search *Search
}

// Open reports whether the load is open loop.
func (l Load) Open() bool { return len(l.Rates) > 0 || (l.Search != nil && l.Search.Open()) }

// Sweep lists the values each dimension takes; points are their product.
// A server dimension left empty is not passed to infer serve, which then
// uses its own default. Batch, Workers, MaxLatency and Policy reach
// existing targets through their admin API; Buckets only servers infer
// starts.
type Sweep struct {
	// Model are the models of a server infer starts, one server each, side
	// by side (bert-base and bert-base-int8); empty: server.model alone.
	Model      []string
	Endpoints  []string // "naive", "batched", "v2", or a URL path. Default [batched].
	Batch      []int
	Workers    []int
	MaxLatency []time.Duration
	Policy     []string
	Buckets    [][]int // --buckets bounds; an empty list: no buckets
	// Generation servers (LLM loads): --max-seqs and --max-batched-tokens;
	// MaxLatency is then static batching's wait to form a batch.
	MaxSeqs          []int
	MaxBatchedTokens []int
	// RoutePolicy lists the policies of the infer route in front of
	// server.replicas.
	RoutePolicy []string
	// PrefixCache turns a generation server's prefix cache on and off
	// (--prefix-cache; on a target, PATCH /admin/batching of /v1).
	PrefixCache []bool
}

// AdminKeys names the sweep keys set that the admin API applies to
// existing targets.
func (s Sweep) AdminKeys() []string {
	var keys []string
	for _, d := range []struct {
		name string
		n    int
	}{{"batch", len(s.Batch)}, {"workers", len(s.Workers)}, {"max_latency", len(s.MaxLatency)}, {"policy", len(s.Policy)},
		{"max_seqs", len(s.MaxSeqs)}, {"max_batched_tokens", len(s.MaxBatchedTokens)}, {"prefix_cache", len(s.PrefixCache)}} {
		if d.n > 0 {
			keys = append(keys, d.name)
		}
	}
	return keys
}

// SLO thresholds, checked on every point; a zero field is not checked.
type SLO struct {
	P99           time.Duration
	MaxErrorRate  float64
	MinThroughput float64 // successful requests per second
	// Require is "all" (default): every point must pass; or "any": at
	// least one point must pass (the question a sweep asks: does some
	// configuration meet the SLO?).
	Require string
	// LLM loads: p99 TTFT, TPOT and E2EL at most (each also a
	// per-request bound for goodput), good requests per second at least.
	TTFTP99, TPOTP99, E2ELP99 time.Duration
	MinGoodput                float64
	// MinGoodputFraction is the least share of requests that are good
	// (record.LLM.GoodFraction): goodput against the load, where
	// MinGoodput is absolute.
	MinGoodputFraction float64
}

// Record returns the thresholds in the results' schema.
func (s SLO) Record() record.SLO {
	return record.SLO{P99: record.Duration(s.P99), MaxErrorRate: s.MaxErrorRate, MinThroughput: s.MinThroughput,
		TTFTP99: record.Duration(s.TTFTP99), TPOTP99: record.Duration(s.TPOTP99), E2ELP99: record.Duration(s.E2ELP99),
		MinGoodput: s.MinGoodput, MinGoodputFraction: s.MinGoodputFraction}
}

// Set reports whether any threshold is set.
func (s SLO) Set() bool {
	return s.P99 > 0 || s.MaxErrorRate > 0 || s.MinThroughput > 0 || s.TTFTP99 > 0 || s.TPOTP99 > 0 || s.E2ELP99 > 0 || s.MinGoodput > 0 ||
		s.MinGoodputFraction > 0
}

// Estimate is the time one point's load takes: warm-up and measurement,
// for every repeat.
func (s *Scenario) Estimate() time.Duration {
	return time.Duration(s.Load.Repeats) * (s.Load.Warmup + s.Load.Duration)
}

// Load defaults.
const (
	DefaultWarmup       = 2 * time.Second
	DefaultDuration     = 10 * time.Second
	DefaultTimeout      = 30 * time.Second
	DefaultMaxInFlight  = 1000
	DefaultReadyTimeout = 2 * time.Minute
)

// LoadFile reads and validates the scenario at path. A corpus file it names
// is read relative to the scenario's directory. Every problem is a
// *ScenarioError (several are joined).
func LoadFile(path string) (*Scenario, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, &ScenarioError{File: path, Msg: fmt.Sprintf("cannot read: %v", unwrapPath(err))}
	}
	return Parse(path, filepath.Dir(path), src)
}

func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Parse validates a scenario held in memory; name labels its errors, and a
// corpus file is read relative to dir.
func Parse(name, dir string, src []byte) (*Scenario, error) {
	f, err := parser.ParseBytes(src, 0)
	if err != nil {
		return nil, yamlError(name, nil, err)
	}
	if len(f.Docs) != 1 || f.Docs[0].Body == nil {
		return nil, &ScenarioError{File: name, Msg: fmt.Sprintf("want one YAML document holding a mapping, got %d documents", len(f.Docs))}
	}
	var fs fileScenario
	dec := yaml.NewDecoder(bytes.NewReader(nil), yaml.DisallowUnknownField())
	if err := dec.DecodeFromNode(f.Docs[0].Body, &fs); err != nil {
		return nil, yamlError(name, f.Docs[0].Body, err)
	}
	v := &validator{file: name, ast: f}
	sc := v.scenario(&fs, dir)
	if len(v.errs) > 0 {
		return nil, errors.Join(v.errs...)
	}
	sc.File = name
	sc.Source = src
	if sc.Name == "" {
		base := filepath.Base(name)
		sc.Name = strings.TrimSuffix(base, filepath.Ext(base))
	}
	return sc, nil
}

// apply returns a copy of items with the text appended to every Every-th.
func (in *Inject) apply(items []string) []string {
	out := slices.Clone(items)
	for i := in.Every - 1; i < len(out); i += in.Every {
		out[i] += " " + in.Text
	}
	return out
}

// WithTargets returns a copy of s that loads the servers at urls instead of
// what the file says. The sweep's batch, workers, max_latency and policy
// then go through the targets' admin API; a sweep of buckets, which it
// cannot set, is an error.
func (s *Scenario) WithTargets(urls []string) (*Scenario, error) {
	for _, u := range urls {
		if err := checkBaseURL(u); err != nil {
			return nil, fmt.Errorf("--target: %w", err)
		}
	}
	if len(s.Sweep.RoutePolicy) > 0 {
		return nil, errors.New("--target: the scenario sweeps route_policy, the policies of an infer route it starts in front of server.replicas; run it with its server section")
	}
	if len(s.Sweep.Buckets) > 0 {
		return nil, errors.New("--target: the scenario sweeps buckets, which the admin API cannot set on a target; run it with its server section")
	}
	if s.Payload.LLM != nil && (len(s.Sweep.MaxSeqs) > 0 || len(s.Sweep.MaxBatchedTokens) > 0 || len(s.Sweep.MaxLatency) > 0 || len(s.Sweep.PrefixCache) > 0) &&
		slices.ContainsFunc(s.Sweep.Endpoints, func(e string) bool { return target.GenLabel(e) == "static" }) {
		return nil, errors.New("--target: the scenario sweeps max_seqs, max_batched_tokens, max_latency or prefix_cache with the static endpoint; the admin API sets the /v1 engine's only, so run it with its server section")
	}
	c := *s
	c.Targets = make([]string, len(urls))
	for i, u := range urls {
		c.Targets[i] = strings.TrimSuffix(u, "/")
	}
	c.Server = nil
	return &c, nil
}
