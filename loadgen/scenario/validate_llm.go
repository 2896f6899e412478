package scenario

// Validation of the keys of streaming LLM scenarios (payload.api set):
// the payload of OpenAI-compatible requests, arrivals, the generation
// server's settings and the LLM thresholds.

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/inferhq/infer/loadgen/llm"
	"github.com/inferhq/infer/loadgen/target"
	"github.com/inferhq/infer/models/simlm"
	"github.com/inferhq/infer/server/generate"
)

// LLMDefaultEndpoint is the endpoint of an LLM scenario on a target that
// sweeps none: the server's /v1.
const LLMDefaultEndpoint = "/v1"

// LLMServerTimeout is the --timeout that infer bench gives the generation
// servers it starts, unless server.timeout says otherwise: a static batch
// under a closed loop holds a request for as long as its longest row runs,
// far beyond infer serve's default 30 s.
const LLMServerTimeout = 10 * time.Minute

// decoderHint names models known to be generative, for the hint when a
// scenario starts one without payload.api. It is not the list of what
// may be served: any model name is passed to infer serve, which decides.
func decoderHint(model string) bool {
	return model == simlm.Name || strings.HasPrefix(model, "gpt2") || strings.HasPrefix(model, "distilgpt2")
}

// maxTemperature bounds payload.temperature, as OpenAI's API does.
const maxTemperature = 2

// encoderPayloadKeys are the payload keys of encoder endpoints.
var encoderPayloadKeys = []string{"corpus", "items", "format", "expect", "inject"}

func (v *validator) llmPayload(p *filePayload, dir string) Payload {
	out := Payload{N: 1, LLM: &LLMPayload{Stream: true, Prompts: "builtin"}}
	lp := out.LLM
	api, err := llm.ParseAPI(p.API)
	if err != nil {
		v.errorf("$.payload.api", "payload.api %q: want completions (/v1/completions, a prompt) or chat (/v1/chat/completions, messages)", p.API)
	}
	lp.API = api
	for _, k := range encoderPayloadKeys {
		if find(v.ast.Docs[0].Body, "$.payload."+k) != nil {
			v.errorf("$.payload."+k, "payload.%s is for encoder endpoints; an LLM load (payload.api) takes prompts, prompt_tokens, output_tokens, ignore_eos, temperature and stream", k)
		}
	}
	if p.Stream != nil {
		lp.Stream = *p.Stream
	}
	lp.IgnoreEOS = p.IgnoreEOS
	lp.KeyHeader = v.keyHeader(p.KeyHeader)
	if t := p.Temperature; t != nil {
		if !(*t >= 0 && *t <= maxTemperature) {
			v.errorf("$.payload.temperature", "payload.temperature %v: want 0 (greedy) to %v", *t, maxTemperature)
		}
		lp.Temperature = *t
	}
	lp.PromptTokens = v.length("$.payload.prompt_tokens", p.PromptTokens)
	lp.OutputTokens = v.length("$.payload.output_tokens", p.OutputTokens)
	switch p.Prompts {
	case "", "builtin":
	default:
		lp.Prompts = p.Prompts
		path := p.Prompts
		if !filepath.IsAbs(path) {
			path = filepath.Join(dir, path)
		}
		set, skipped, err := llm.ReadPromptsFile(path)
		switch {
		case err != nil:
			v.errorf("$.payload.prompts", "payload.prompts: %v", unwrapPath(err))
		case len(set) == 0:
			v.errorf("$.payload.prompts", "payload.prompts %s: no prompts (%d records skipped)", p.Prompts, skipped)
		}
		lp.Set, lp.Skipped = set, skipped
	}
	v.workload(p, dir, lp)
	return out
}

// length reports a token length's decoding error at path; a zero Length
// is "not set".
func (v *validator) length(path string, l *located[llm.Length]) llm.Length {
	if l == nil {
		return llm.Length{}
	}
	if l.err != nil {
		v.decodeErrorf(path, l.err, "want a token count like 256, {dist: uniform, min: 32, max: 512} or {dist: lognormal, median: 100, sigma: 0.8, max: 1024}")
		return llm.Length{}
	}
	return l.v
}

// decodeErrorf reports an error from decoding the value at path: at the
// token goccy names when it does (an unknown key, a value of the wrong
// type), else at path's line.
func (v *validator) decodeErrorf(path string, err error, hint string) {
	if e, ok := yamlError(v.file, v.ast.Docs[0].Body, err).(*ScenarioError); ok && e.Line > 0 {
		if strings.HasPrefix(e.Msg, key(path)) { // a value under path, named
			e.Msg = fmt.Sprintf("%s; %s: %s", e.Msg, key(path), hint)
		} else {
			e.Msg = fmt.Sprintf("%s: %s; %s", key(path), e.Msg, hint)
		}
		v.errs = append(v.errs, e)
		return
	}
	msg := err.Error()
	if !strings.Contains(msg, "want") {
		msg += "; " + hint
	}
	v.errorf(path, "%s: %s", key(path), msg)
}

// llmLoad checks the load keys of an LLM scenario; out holds the common
// ones.
func (v *validator) llmLoad(l *fileLoad, out *Load) {
	if l.Timeout == nil {
		out.Timeout = llm.DefaultTimeout
	}
	out.Drain = v.duration("$.load.drain", l.Drain, llm.DefaultDrain, false)
	if l.PerWorker {
		v.errorf("$.load.per_worker", "load.per_worker: a generation server has no workers to scale by")
	}
	if len(l.Concurrency) > 0 {
		for i, c := range l.Concurrency {
			if c > llm.MaxStreams {
				v.errorf(fmt.Sprintf("$.load.concurrency[%d]", i), "load.concurrency %d: want at most %d streams", c, llm.MaxStreams)
			}
		}
	}
	if l.MaxInFlight == nil {
		out.MaxInFlight = llm.DefaultMaxInFlight
	}
	switch l.Arrival {
	case "", "constant":
		out.Arrival = "constant"
	case "poisson", "gamma":
		out.Arrival = l.Arrival
		if !out.Open() {
			v.errorf("$.load.arrival", "load.arrival %s: arrivals pace an open loop; set load.rate", l.Arrival)
		}
		if out.Pacer == "ramp" {
			v.errorf("$.load.arrival", "load.arrival %s: a ramp (load.pacer ramp) paces constant arrivals only", l.Arrival)
		}
	default:
		v.errorf("$.load.arrival", "load.arrival %q: want constant, poisson or gamma (with load.burstiness)", l.Arrival)
	}
	switch {
	case l.Burstiness == nil && out.Arrival == "gamma":
		v.errorf("$.load.arrival", "load.arrival gamma needs load.burstiness (the gaps' shape: 1 is Poisson, below 1 burstier, above 1 more regular)")
	case l.Burstiness == nil:
	case out.Arrival != "gamma":
		v.errorf("$.load.burstiness", "load.burstiness applies to load.arrival gamma only (poisson is burstiness 1)")
	case !(*l.Burstiness > 0) || math.IsInf(*l.Burstiness, 0):
		v.errorf("$.load.burstiness", "load.burstiness %v: want a positive number (1 is Poisson)", *l.Burstiness)
	default:
		out.Burstiness = *l.Burstiness
	}
	if out.Arrival == "poisson" {
		out.Burstiness = 1
	}
}

// llmSweep checks the sweep keys of an LLM scenario; out holds the
// common ones, endpoints not yet checked.
func (v *validator) llmSweep(s *fileSweep, out *Sweep, server bool) {
	for _, k := range []struct {
		name string
		n    int
	}{{"batch", len(s.Batch)}, {"workers", len(s.Workers)}, {"policy", len(s.Policy)}, {"buckets", len(s.Buckets)}} {
		if k.n > 0 {
			v.errorf("$.sweep."+k.name, "sweep.%s is for encoder endpoints; a generation server sweeps endpoints (continuous, static, naive), max_seqs, max_batched_tokens and max_latency", k.name)
		}
	}
	out.Batch, out.Workers, out.Policy, out.Buckets = nil, nil, nil, nil
	if len(s.Endpoints) == 0 {
		out.Endpoints = []string{LLMDefaultEndpoint}
		if server {
			out.Endpoints = []string{target.EndpointContinuous}
		}
	} else {
		out.Endpoints = nil
	}
	for i, e := range s.Endpoints {
		path := fmt.Sprintf("$.sweep.endpoints[%d]", i)
		switch {
		case e == target.EndpointContinuous || e == target.EndpointStatic || e == target.EndpointNaive:
		case strings.HasPrefix(e, "/"):
			if err := checkPath(e); err != nil {
				v.errorf(path, "sweep.endpoints[%d] %q: %v", i, e, err)
			}
		default:
			v.errorf(path, "sweep.endpoints[%d] %q: want continuous, static, naive (infer's schedulers) or a path prefix like /v1 or /static/v1", i, e)
		}
		if slices.Contains(out.Endpoints, e) {
			v.errorf(path, "sweep.endpoints[%d] %q: listed twice", i, e)
		}
		out.Endpoints = append(out.Endpoints, e)
	}
	// The engine's own rule judges each value, and each max_batched_tokens
	// against the largest valid max_seqs (every pairing runs); below one
	// is caught here first, since the library takes zero for its default.
	seqs := 1 // without max_seqs the server's own is unknown here: the range alone
	for i, n := range s.MaxSeqs {
		path := fmt.Sprintf("$.sweep.max_seqs[%d]", i)
		if n < 1 {
			v.errorf(path, "sweep.max_seqs %d: must be at least 1", n)
		} else if v.generation(path, "sweep.max_seqs", generate.Config{MaxSeqs: n}) {
			seqs = max(seqs, n)
		}
	}
	out.MaxSeqs = s.MaxSeqs
	for i, n := range s.MaxBatchedTokens {
		path := fmt.Sprintf("$.sweep.max_batched_tokens[%d]", i)
		if n < 1 {
			v.errorf(path, "sweep.max_batched_tokens %d: must be at least 1", n)
			continue
		}
		v.generation(path, "sweep.max_batched_tokens", generate.Config{MaxSeqs: seqs, MaxBatchedTokens: n})
	}
	out.MaxBatchedTokens = s.MaxBatchedTokens
	if !server && (len(s.MaxSeqs) > 0 || len(s.MaxBatchedTokens) > 0 || len(s.MaxLatency) > 0) {
		for i, e := range out.Endpoints {
			if target.GenLabel(e) == "static" { // naive runs one sequence whatever they say
				v.errorf(fmt.Sprintf("$.sweep.endpoints[%d]", i), "sweep.endpoints %s on a target: the admin API sets the /v1 engine's max_seqs, max_batched_tokens and max_latency only, not static's; sweep them with a server: section, or drop %s", e, e)
			}
		}
	}
}

// checkPath accepts a URL path without query or fragment.
func checkPath(p string) error {
	if strings.ContainsAny(p, "?# ") {
		return errors.New("a path prefix, without query, fragment or spaces")
	}
	return nil
}

// llmServer checks the server keys of a generation server into spec.
func (v *validator) llmServer(s *fileServer, spec *target.Serve) {
	spec.SimStep = v.simCost("$.server.sim_step", s.SimStep, s.Model, simlm.Name)
	spec.SimPerSeq = v.simCost("$.server.sim_per_seq", s.SimPerSeq, s.Model, simlm.Name)
	spec.SimPerPrefillToken = v.simCost("$.server.sim_per_prefill_token", s.SimPerPrefillToken, s.Model, simlm.Name)
	if s.KVTokens != nil {
		spec.KVTokens = *s.KVTokens
		if spec.KVTokens < 1 {
			v.errorf("$.server.kv_tokens", "server.kv_tokens %d: must be at least 1", spec.KVTokens)
		} else {
			v.generation("$.server.kv_tokens", "server.kv_tokens", generate.Config{KVTokens: spec.KVTokens})
		}
	}
	if s.Timeout == nil {
		spec.Timeout = LLMServerTimeout
	}
	v.blockSize(s, spec)
}

// generation reports what the generation engine's Config.Validate says
// of c, a config holding the values at path, as a problem with the key;
// it returns whether c is valid.
func (v *validator) generation(path, key string, c generate.Config) bool {
	if err := c.Validate(); err != nil {
		v.errorf(path, "%s: %v", key, err)
		return false
	}
	return true
}

// encoderServerKeys are server keys of encoder models only.
var encoderServerKeys = []string{"sim_fixed", "sim_per_item", "sim_fail_on"}

// genServerKeys are server keys of generation models only.
var genServerKeys = []string{"sim_step", "sim_per_seq", "sim_per_prefill_token", "kv_tokens", "block_size"}

func (v *validator) llmSLO(s *fileSLO, out *SLO) {
	if s.P99 != nil {
		v.errorf("$.slo.p99", "slo.p99: an LLM point has several latencies; use slo.ttft_p99, slo.tpot_p99 or slo.e2el_p99")
	}
	out.TTFTP99 = v.duration("$.slo.ttft_p99", s.TTFTP99, 0, true)
	out.TPOTP99 = v.duration("$.slo.tpot_p99", s.TPOTP99, 0, true)
	out.E2ELP99 = v.duration("$.slo.e2el_p99", s.E2ELP99, 0, true)
	if s.MinGoodput != nil {
		out.MinGoodput = *s.MinGoodput
		if !(out.MinGoodput >= 0) || math.IsInf(out.MinGoodput, 0) {
			v.errorf("$.slo.min_goodput", "slo.min_goodput %v: want good requests per second, 0 or more", out.MinGoodput)
		}
	}
	if s.MinGoodputFraction != nil {
		out.MinGoodputFraction = *s.MinGoodputFraction
		if !(out.MinGoodputFraction > 0 && out.MinGoodputFraction <= 1) {
			v.errorf("$.slo.min_goodput_fraction", "slo.min_goodput_fraction %v: want a share of good requests above 0, at most 1 (0.9 = 90 %%)", out.MinGoodputFraction)
		}
	}
}
