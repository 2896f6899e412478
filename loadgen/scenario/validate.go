package scenario

// Validation of a decoded scenario file: bounds, combinations and
// defaults, every problem at its line.

import (
	"fmt"
	"math"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"

	"github.com/inferhq/infer/loadgen/corpus"
	"github.com/inferhq/infer/loadgen/target"
	"github.com/inferhq/infer/models/sim"
	"github.com/inferhq/infer/server/batch"
	"github.com/inferhq/infer/server/generate"
)

// validator checks a decoded file, collecting errors at their lines.
type validator struct {
	file string
	ast  *ast.File
	errs []error
}

// errorf records a problem with the value at path (like "$.load.rate[1]";
// the line is that of the key or element, or of its nearest parent that
// exists).
func (v *validator) errorf(path, format string, args ...any) {
	e := &ScenarioError{File: v.file, Msg: fmt.Sprintf(format, args...)}
	for p := path; p != "$" && p != ""; p = parentPath(p) {
		if tok := find(v.ast.Docs[0].Body, p); tok != nil {
			e.Line, e.Column = tok.Position.Line, tok.Position.Column
			break
		}
	}
	v.errs = append(v.errs, e)
}

func (v *validator) duration(path string, s *string, def time.Duration, positive bool) time.Duration {
	if s == nil {
		return def
	}
	d, err := time.ParseDuration(*s)
	switch {
	case err != nil:
		v.errorf(path, "%s %q: want a duration like 10s or 250ms", key(path), *s)
	case positive && d <= 0:
		v.errorf(path, "%s %v: must be positive", key(path), d)
	case d < 0:
		v.errorf(path, "%s %v: must not be negative", key(path), d)
	}
	return d
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

func (v *validator) scenario(fs *fileScenario, dir string) *Scenario {
	sc := &Scenario{Name: fs.Name, Description: fs.Description}
	// payload.api makes it a streaming LLM load.
	gen := fs.Payload != nil && fs.Payload.API != ""
	if fs.Name != "" && !nameRE.MatchString(fs.Name) {
		v.errorf("$.name", "name %q: use letters, digits, '.', '_' and '-' (it names the run directory)", fs.Name)
	}
	switch {
	case fs.Target != nil && fs.Server != nil:
		v.errorf("$.target", "both target and server: a scenario loads existing servers (target) or servers infer starts (server), not both")
	case fs.Target == nil && fs.Server == nil:
		v.errorf("$", "no target or server: say which server to load (target: urls) or which infer serve to start (server: model)")
	case fs.Target != nil:
		sc.Targets, sc.Model, sc.AdminTokenEnv = v.target(fs.Target)
		sc.Replicas = v.targetReplicas(fs.Target)
	default:
		sc.Server = v.server(fs.Server, fs.Sweep != nil && len(fs.Sweep.Buckets) > 0, fs.Sweep != nil && len(fs.Sweep.Model) > 0, gen)
		v.routed(fs.Server, sc.Server)
	}
	if gen {
		sc.Payload = v.llmPayload(fs.Payload, dir)
		fs.Load = v.traceLoad(fs.Load, sc.Payload.LLM)
	} else {
		sc.Payload = v.payload(fs.Payload, dir)
	}
	sc.Load = v.load(fs.Load, gen)
	sc.Sweep = v.sweep(fs.Sweep, sc.Server != nil, gen)
	sc.Sweep.RoutePolicy = v.routePolicies(fs.Sweep, sc.Server)
	sc.SLO = v.slo(fs.SLO, gen)
	v.searchSLO(sc.Load.Search, &sc.SLO)
	if gen {
		v.workloadLoad(&sc.Load, sc.Payload.LLM)
		v.prefixSweep(fs.Sweep, &sc.Sweep, sc.Server)
		return sc
	}
	if sc.Payload.Format == "text" && slices.ContainsFunc(sc.Sweep.Endpoints, func(e string) bool { return target.Canonical(e) == "v2" }) {
		v.errorf("$.payload.format", "payload.format text cannot be sent to the v2 endpoint, which takes v2 JSON")
	}
	if sc.Payload.Format == "text" && sc.Payload.Expect == target.ExpectKServe {
		v.errorf("$.payload.format", "payload.format text cannot go with payload.expect kserve, which sends KServe v2 JSON")
	}
	if sc.Payload.Expect == target.ExpectInfer && slices.ContainsFunc(sc.Sweep.Endpoints, func(e string) bool { return target.Canonical(e) == "v2" }) {
		v.errorf("$.payload.expect", "payload.expect infer: the v2 endpoint answers in KServe v2's shape; use kserve, or leave expect out")
	}
	return sc
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func (v *validator) target(t *fileTarget) (urls []string, model, tokenEnv string) {
	if len(t.URLs) == 0 {
		v.errorf("$.target", "target.urls: want at least one URL, like http://127.0.0.1:8080")
	}
	urls = make([]string, 0, len(t.URLs))
	for i, s := range t.URLs {
		if err := checkBaseURL(s); err != nil {
			v.errorf(fmt.Sprintf("$.target.urls[%d]", i), "target.urls[%d]: %v", i, err)
		}
		urls = append(urls, strings.TrimSuffix(s, "/"))
	}
	if t.AdminTokenEnv != "" && !envNameRE.MatchString(t.AdminTokenEnv) {
		v.errorf("$.target.admin_token_env", "target.admin_token_env %q: name an environment variable (like INFER_ADMIN_TOKEN) that holds the token, not the token itself", t.AdminTokenEnv)
	}
	return urls, t.Model, t.AdminTokenEnv
}

// checkBaseURL accepts http(s)://host[:port][/prefix].
func checkBaseURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Errorf("%q: %w", s, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%q: want an http:// or https:// URL", s)
	case u.Host == "":
		return fmt.Errorf("%q: no host", s)
	case u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("%q: a base URL has no query or fragment", s)
	}
	return nil
}

// server validates the server section; bucketSweep tells that the sweep
// sets --buckets, modelSweep that it sets the model.
func (v *validator) server(s *fileServer, bucketSweep, modelSweep, gen bool) *target.Serve {
	spec := &target.Serve{Model: s.Model}
	switch {
	case modelSweep && s.Model != "":
		v.errorf("$.server.model", "server.model and sweep.model: name the models in sweep.model alone")
	case modelSweep:
	case s.Model == "" && gen:
		v.errorf("$.server", "server.model: name the generative model to serve, such as sim-lm")
	case s.Model == "":
		v.errorf("$.server", "server.model: name the model to serve (sim, a built-in name such as bert-mini, or an .onnx path)")
	case !gen && decoderHint(s.Model):
		v.errorf("$.server.model", "server.model %s is a generative model: set payload.api (completions or chat) to load its OpenAI-compatible endpoints", s.Model)
	}
	keys, other := genServerKeys, "a generation server's (payload.api set)"
	if gen {
		keys, other = encoderServerKeys, "an encoder model's"
	}
	for _, k := range keys {
		if find(v.ast.Docs[0].Body, "$.server."+k) != nil {
			v.errorf("$.server."+k, "server.%s is %s key", k, other)
		}
	}
	if gen {
		v.llmServer(s, spec)
	}
	spec.SimFixed = v.simCost("$.server.sim_fixed", s.SimFixed, s.Model, sim.Name)
	spec.SimPerItem = v.simCost("$.server.sim_per_item", s.SimPerItem, s.Model, sim.Name)
	if s.SimFailOn != "" {
		if s.Model != sim.Name {
			v.errorf("$.server.sim_fail_on", "server.sim_fail_on applies to model sim only, not %q", s.Model)
		}
		spec.SimFailOn = s.SimFailOn
	}
	spec.Devices = s.Devices
	if s.QueueCap != nil {
		spec.QueueCap = *s.QueueCap
		switch {
		case spec.QueueCap < 1:
			v.errorf("$.server.queue_cap", "server.queue_cap %d: must be at least 1", spec.QueueCap)
		case gen:
			v.generation("$.server.queue_cap", "server.queue_cap", generate.Config{QueueCap: spec.QueueCap})
		default:
			v.batching("$.server.queue_cap", "server.queue_cap", batch.Config{QueueCap: spec.QueueCap}, "")
		}
	}
	if s.Timeout != nil {
		spec.Timeout = v.duration("$.server.timeout", s.Timeout, 0, true)
	}
	for i, a := range s.Args {
		if f := target.SetByBench(a, bucketSweep, gen); f != "" {
			v.errorf(fmt.Sprintf("$.server.args[%d]", i), "server.args: %s is set by infer bench (use the sweep or server.model)", f)
		}
	}
	spec.Args = s.Args
	spec.ReadyTimeout = v.duration("$.server.ready_timeout", s.ReadyTimeout, DefaultReadyTimeout, true)
	return spec
}

// simCost checks the cost of a simulated model (server.sim_fixed…) at
// path, a key of model sim only; nil when unset.
func (v *validator) simCost(path string, val *string, model, sim string) *time.Duration {
	if val == nil {
		return nil
	}
	if model != sim {
		v.errorf(path, "%s applies to model %s only, not %q", key(path), sim, model)
	}
	d := v.duration(path, val, 0, false)
	return &d
}

func (v *validator) payload(p *filePayload, dir string) Payload {
	if p == nil {
		p = &filePayload{}
	}
	out := Payload{Corpus: p.Corpus, N: 1, Format: p.Format}
	for _, k := range []string{"stream", "prompt_tokens", "output_tokens", "ignore_eos", "temperature", "prompts", "key_header", "shared_prefix", "multi_turn", "trace"} {
		if v.ast != nil && find(v.ast.Docs[0].Body, "$.payload."+k) != nil {
			v.errorf("$.payload."+k, "payload.%s applies to LLM loads: set payload.api (completions or chat)", k)
		}
	}
	if p.Items != nil {
		out.N = *p.Items
		if out.N < 1 || out.N > 4096 {
			v.errorf("$.payload.items", "payload.items %d: want 1 to 4096 items per request", out.N)
		}
	}
	switch p.Expect {
	case "", target.ExpectStatus, target.ExpectInfer, target.ExpectKServe:
		out.Expect = p.Expect
	default:
		v.errorf("$.payload.expect", "payload.expect %q: want status (any 200 counts), infer (one output per item) or kserve (a KServe v2 answer)", p.Expect)
	}
	switch p.Format {
	case "":
		out.Format = "json"
	case "json":
	case "text":
		if out.N != 1 {
			v.errorf("$.payload.format", "payload.format text sends one item per request; payload.items is %d", out.N)
		}
	default:
		v.errorf("$.payload.format", "payload.format %q: want json or text", p.Format)
	}
	switch p.Corpus {
	case "", "builtin":
		out.Corpus = "builtin"
		out.Items = corpus.Masked()
	case "mixed":
		out.Items = corpus.Mixed()
	default:
		path := p.Corpus
		if !filepath.IsAbs(path) {
			path = filepath.Join(dir, path)
		}
		items, err := corpus.Load(path)
		if err != nil {
			v.errorf("$.payload.corpus", "payload.corpus: %v", err)
		}
		out.Items = items
	}
	if in := p.Inject; in != nil {
		switch {
		case in.Text == "":
			v.errorf("$.payload.inject", "payload.inject.text: name the text to inject, like poison")
		case in.Every < 1:
			v.errorf("$.payload.inject", "payload.inject.every %d: want 1 or more (every how many items carries the text)", in.Every)
		default:
			out.Inject = &Inject{Text: in.Text, Every: in.Every}
			out.Items = out.Inject.apply(out.Items)
		}
	}
	return out
}

func (v *validator) load(l *fileLoad, gen bool) Load {
	if l == nil {
		v.errorf("$", "no load: say how to drive the server (load: concurrency or load: rate)")
		return Load{}
	}
	out := Load{
		Concurrency: l.Concurrency,
		Rates:       l.Rate,
		Pacer:       l.Pacer,
		PerWorker:   l.PerWorker,
		Interleave:  l.Interleave,
		MaxInFlight: DefaultMaxInFlight,
		Repeats:     1,
	}
	v.search(l, &out, gen)
	open := len(l.Rate) > 0 || (out.Search != nil && out.Search.Open())
	switch {
	case out.Search != nil:
	case len(l.Concurrency) > 0 && len(l.Rate) > 0:
		v.errorf("$.load.rate", "load has both concurrency (closed loop) and rate (open loop); choose one")
	case len(l.Concurrency) == 0 && len(l.Rate) == 0:
		v.errorf("$.load", "load: set concurrency (closed loop: clients), rate (open loop: requests per second) or search (the capacity under the SLO)")
	}
	for i, c := range l.Concurrency {
		if c < 1 || c > 100000 {
			v.errorf(fmt.Sprintf("$.load.concurrency[%d]", i), "load.concurrency %d: want 1 to 100000 clients", c)
		}
	}
	for i, r := range l.Rate {
		if !(r > 0) || math.IsInf(r, 0) || r > 1e6 {
			v.errorf(fmt.Sprintf("$.load.rate[%d]", i), "load.rate %v: want a positive rate in requests per second, at most 1e6", r)
		}
	}
	switch l.Pacer {
	case "":
		out.Pacer = "constant"
	case "constant":
	case "ramp":
		if len(l.Rate) == 0 {
			v.errorf("$.load.pacer", "load.pacer ramp needs load.rate (the ramp's end)")
		}
	default:
		v.errorf("$.load.pacer", "load.pacer %q: want constant or ramp", l.Pacer)
	}
	if l.RampFrom != nil {
		out.RampFrom = *l.RampFrom
		switch {
		case out.Pacer != "ramp":
			v.errorf("$.load.ramp_from", "load.ramp_from applies to pacer ramp only")
		case !(out.RampFrom > 0):
			v.errorf("$.load.ramp_from", "load.ramp_from %v: want a positive rate", out.RampFrom)
		}
	} else if out.Pacer == "ramp" {
		v.errorf("$.load.pacer", "load.pacer ramp needs load.ramp_from (the starting rate)")
	}
	if l.MaxInFlight != nil {
		out.MaxInFlight = *l.MaxInFlight
		switch {
		case !open:
			v.errorf("$.load.max_in_flight", "load.max_in_flight applies to open loop (rate) only; in closed loop concurrency bounds it")
		case out.MaxInFlight < 1 || out.MaxInFlight > 100000:
			v.errorf("$.load.max_in_flight", "load.max_in_flight %d: want 1 to 100000", out.MaxInFlight)
		}
	}
	out.Warmup = v.duration("$.load.warmup", l.Warmup, DefaultWarmup, false)
	out.Duration = v.duration("$.load.duration", l.Duration, DefaultDuration, true)
	out.Timeout = v.duration("$.load.timeout", l.Timeout, DefaultTimeout, true)
	if l.Repeats != nil {
		out.Repeats = *l.Repeats
		if out.Repeats < 1 || out.Repeats > 100 {
			v.errorf("$.load.repeats", "load.repeats %d: want 1 to 100", out.Repeats)
		}
	}
	if gen {
		v.llmLoad(l, &out)
		return out
	}
	for _, k := range []string{"arrival", "burstiness", "drain"} {
		if find(v.ast.Docs[0].Body, "$.load."+k) != nil {
			v.errorf("$.load."+k, "load.%s applies to LLM loads (payload.api) only", k)
		}
	}
	return out
}

func (v *validator) sweep(s *fileSweep, server, gen bool) Sweep {
	if s == nil {
		s = &fileSweep{}
	}
	out := Sweep{Batch: s.Batch, Workers: s.Workers, Policy: s.Policy, Buckets: s.Buckets}
	v.models(s, &out, server, gen)
	if gen {
		v.llmSweep(s, &out, server)
		v.maxLatencies(s, &out)
		return out
	}
	for _, k := range []struct {
		name string
		n    int
	}{{"max_seqs", len(s.MaxSeqs)}, {"max_batched_tokens", len(s.MaxBatchedTokens)}, {"prefix_cache", len(s.PrefixCache)}} {
		if k.n > 0 {
			v.errorf("$.sweep."+k.name, "sweep.%s applies to generation servers (payload.api) only", k.name)
		}
	}
	if len(s.Endpoints) == 0 {
		out.Endpoints = []string{"batched"}
	}
	for i, e := range s.Endpoints {
		// infer's own paths are its endpoints, so that their points are
		// judged as such (the naive one once per load level) and joined
		// with their /metrics.
		if e == "/naive" || e == "/batched" {
			e = e[1:]
		}
		out.Endpoints = append(out.Endpoints, e)
		switch {
		case e == "naive" || e == "batched" || e == "v2":
		case strings.HasPrefix(e, "/"):
			if _, err := url.ParseRequestURI(e); err != nil {
				v.errorf(fmt.Sprintf("$.sweep.endpoints[%d]", i), "sweep.endpoints[%d] %q: not a URL path", i, e)
			}
		default:
			v.errorf(fmt.Sprintf("$.sweep.endpoints[%d]", i), "sweep.endpoints[%d] %q: want naive, batched, v2 or a path like /predict", i, e)
		}
	}
	if !server && len(s.Buckets) > 0 {
		v.errorf("$.sweep.buckets", "sweep.buckets: the admin API cannot set a target's buckets; sweep them with a server: section, which infer starts with --buckets")
	}
	// The batcher's own rule judges each value; below zero and zero are
	// caught here first, since the library takes zero for its default.
	for i, bs := range s.Buckets {
		v.batching(fmt.Sprintf("$.sweep.buckets[%d]", i), fmt.Sprintf("sweep.buckets[%d]", i), batch.Config{Buckets: bs},
			" (like [16, 32, 64], or [] for none)")
	}
	for i, b := range s.Batch {
		path := fmt.Sprintf("$.sweep.batch[%d]", i)
		if b < 1 {
			v.errorf(path, "sweep.batch %d: must be at least 1", b)
			continue
		}
		v.batching(path, "sweep.batch", batch.Config{MaxBatch: b}, "")
	}
	for i, w := range s.Workers {
		if w < 1 || w > 1024 {
			v.errorf(fmt.Sprintf("$.sweep.workers[%d]", i), "sweep.workers %d: want 1 to 1024", w)
		}
	}
	v.maxLatencies(s, &out)
	for i, p := range s.Policy {
		if p == "" {
			v.errorf(fmt.Sprintf("$.sweep.policy[%d]", i), "sweep.policy: empty; want %s", batch.PolicyNames())
			continue
		}
		v.batching(fmt.Sprintf("$.sweep.policy[%d]", i), "sweep.policy", batch.Config{Policy: batch.Policy(p)}, "")
	}
	return out
}

// maxModels bounds sweep.model: each model is one server started, loaded
// and measured in turn.
const maxModels = 16

// models checks sweep.model into out.
func (v *validator) models(s *fileSweep, out *Sweep, server, gen bool) {
	if len(s.Model) == 0 {
		return
	}
	if !server {
		v.errorf("$.sweep.model", "sweep.model: infer starts one server per model; it needs a server: section, not target:")
		return
	}
	if len(s.Model) > maxModels {
		v.errorf("$.sweep.model", "sweep.model: %d models; at most %d", len(s.Model), maxModels)
	}
	for i, m := range s.Model {
		path := fmt.Sprintf("$.sweep.model[%d]", i)
		switch {
		case m == "":
			v.errorf(path, "sweep.model[%d]: empty; name a model (a built-in such as bert-base-int8, or an .onnx path)", i)
		case slices.Contains(s.Model[:i], m):
			v.errorf(path, "sweep.model[%d] %s: named twice; run the scenario again (load.repeats) to measure a model twice", i, m)
		case !gen && decoderHint(m):
			v.errorf(path, "sweep.model[%d] %s is a generative model: set payload.api (completions or chat) to load its OpenAI-compatible endpoints", i, m)
		}
	}
	out.Model = s.Model
}

// maxLatencies checks sweep.max_latency into out.
func (v *validator) maxLatencies(s *fileSweep, out *Sweep) {
	for i, l := range s.MaxLatency {
		path := fmt.Sprintf("$.sweep.max_latency[%d]", i)
		d := v.duration(path, &l, 0, false)
		if d > 0 {
			v.batching(path, "sweep.max_latency", batch.Config{MaxLatency: d}, "")
		}
		out.MaxLatency = append(out.MaxLatency, d)
	}
}

// batching reports what the batcher's Config.Validate says of c, a config
// holding one swept value, as a problem with the key at path.
func (v *validator) batching(path, key string, c batch.Config, hint string) {
	if err := c.Validate(); err != nil {
		v.errorf(path, "%s: %v%s", key, err, hint)
	}
}

func (v *validator) slo(s *fileSLO, gen bool) SLO {
	if s == nil {
		return SLO{Require: "all"}
	}
	out := SLO{Require: s.Require}
	if gen {
		v.llmSLO(s, &out)
	} else {
		out.P99 = v.duration("$.slo.p99", s.P99, 0, true)
		for _, k := range []string{"ttft_p99", "tpot_p99", "e2el_p99", "min_goodput", "min_goodput_fraction"} {
			if find(v.ast.Docs[0].Body, "$.slo."+k) != nil {
				v.errorf("$.slo."+k, "slo.%s applies to LLM loads (payload.api) only", k)
			}
		}
	}
	if s.MaxErrorRate != nil {
		out.MaxErrorRate = *s.MaxErrorRate
		if out.MaxErrorRate < 0 || out.MaxErrorRate > 1 {
			v.errorf("$.slo.max_error_rate", "slo.max_error_rate %v: want a fraction from 0 to 1 (0.01 = 1 %%)", out.MaxErrorRate)
		}
	}
	if s.MinThroughput != nil {
		out.MinThroughput = *s.MinThroughput
		if out.MinThroughput < 0 {
			v.errorf("$.slo.min_throughput", "slo.min_throughput %v: must not be negative", out.MinThroughput)
		}
	}
	switch s.Require {
	case "":
		out.Require = "all"
	case "all", "any":
	default:
		v.errorf("$.slo.require", "slo.require %q: want all (every point passes) or any (some point passes)", s.Require)
	}
	return out
}
