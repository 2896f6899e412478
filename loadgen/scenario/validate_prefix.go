package scenario

// Validation of the prefix-caching keys of LLM scenarios: the workloads
// (payload.shared_prefix, multi_turn, trace), sweep.prefix_cache and
// server.block_size.

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/inferhq/infer/loadgen/llm"
	"github.com/inferhq/infer/loadgen/target"
	"github.com/inferhq/infer/server/generate"
)

// workloadKeys are the payload keys of the prefix-caching workloads.
var workloadKeys = []string{"shared_prefix", "multi_turn", "trace"}

// workload checks a prefix-caching workload into lp.
func (v *validator) workload(p *filePayload, dir string, lp *LLMPayload) {
	var set []string
	for _, k := range workloadKeys {
		if find(v.ast.Docs[0].Body, "$.payload."+k) != nil {
			set = append(set, k)
		}
	}
	if len(set) == 0 {
		return
	}
	if len(set) > 1 {
		v.errorf("$.payload."+set[1], "payload.%s and payload.%s: choose one workload", set[0], set[1])
		return
	}
	w := set[0]
	own := map[string]string{
		"shared_prefix": "its prompts are its groups' prefixes and questions (prefix_tokens, question_tokens)",
		"multi_turn":    "its prompts are its sessions' conversations (first_tokens, message_tokens)",
		"trace":         "its prompts are built from the trace's lengths and hash ids",
	}[w]
	for _, k := range []string{"prompts", "prompt_tokens"} {
		if find(v.ast.Docs[0].Body, "$.payload."+k) != nil {
			v.errorf("$.payload."+k, "payload.%s does not apply to payload.%s: %s", k, w, own)
		}
	}
	switch {
	case p.SharedPrefix != nil:
		lp.SharedPrefix = v.sharedPrefix(p.SharedPrefix)
	case p.MultiTurn != nil:
		lp.MultiTurn = v.multiTurn(p.MultiTurn)
	case p.Trace != nil:
		if find(v.ast.Docs[0].Body, "$.payload.output_tokens") != nil {
			v.errorf("$.payload.output_tokens", "payload.output_tokens does not apply to payload.trace: each request asks for its record's output_length (scaled)")
		}
		lp.Trace, lp.TraceFile = v.trace(p.Trace, dir), p.Trace.File
	default: // a key set to null
		v.errorf("$.payload."+w, "payload.%s: empty; see scenarios/reference-llm.yaml", w)
	}
}

// validateAt reports a workload's Validate error at the key it names
// first when the file has it ("groups 0: …" → path.groups), else at path.
func (v *validator) validateAt(path string, err error) bool {
	if err == nil {
		return true
	}
	k, _, _ := strings.Cut(err.Error(), " ")
	if k = strings.TrimSuffix(k, ":"); find(v.ast.Docs[0].Body, path+"."+k) != nil {
		v.errorf(path+"."+k, "%s.%v", key(path), err)
	} else {
		v.errorf(path, "%s: %v", key(path), err)
	}
	return false
}

func (v *validator) sharedPrefix(f *fileSharedPrefix) *llm.SharedPrefix {
	const path = "$.payload.shared_prefix"
	s := &llm.SharedPrefix{Groups: f.Groups, PrefixTokens: f.PrefixTokens, Pick: f.Pick}
	if f.QuestionTokens != nil {
		s.QuestionTokens = v.length(path+".question_tokens", f.QuestionTokens)
		if s.QuestionTokens.IsZero() {
			return nil // reported
		}
	}
	if s.Pick == "" {
		s.Pick = llm.PickRoundRobin
	}
	if !v.validateAt(path, s.Validate()) {
		return nil
	}
	return s
}

func (v *validator) multiTurn(f *fileMultiTurn) *llm.MultiTurn {
	const path = "$.payload.multi_turn"
	m := &llm.MultiTurn{Turns: f.Turns, ThinkTime: v.duration(path+".think_time", f.ThinkTime, 0, false)}
	bad := false
	for _, l := range []struct {
		name string
		f    *located[llm.Length]
		to   *llm.Length
	}{{"first_tokens", f.FirstTokens, &m.FirstTokens}, {"message_tokens", f.MessageTokens, &m.MessageTokens}} {
		if l.f != nil {
			*l.to = v.length(path+"."+l.name, l.f)
			bad = bad || l.to.IsZero()
		}
	}
	if bad || !v.validateAt(path, m.Validate()) {
		return nil
	}
	return m
}

func (v *validator) trace(f *fileTrace, dir string) *llm.TraceReplay {
	const path = "$.payload.trace"
	t := &llm.TraceReplay{Speed: 1, Scale: 1}
	bad := false
	for _, k := range []struct {
		name string
		v    *float64
		to   *float64
	}{{"speed", f.Speed, &t.Speed}, {"scale", f.Scale, &t.Scale}} {
		if k.v == nil {
			continue
		}
		if !(*k.v > 0) {
			v.errorf(path+"."+k.name, "payload.trace.%s %v: must be positive", k.name, *k.v)
			bad = true
		}
		*k.to = *k.v
	}
	t.Start = v.duration(path+".start", f.Start, 0, false)
	t.Duration = v.duration(path+".duration", f.Duration, 0, true)
	if f.File == "" {
		v.errorf(path, "payload.trace.file: name the trace, a JSONL file of Mooncake's format (relative to the scenario)")
		return nil
	}
	file := f.File
	if !filepath.IsAbs(file) {
		file = filepath.Join(dir, file)
	}
	recs, err := llm.ReadTraceFile(file)
	var pe *os.PathError
	switch {
	case errors.As(err, &pe):
		v.errorf(path+".file", "payload.trace.file %s: %v", f.File, pe.Err)
		return nil
	case err != nil:
		v.errorf(path+".file", "payload.trace.file: %v", err)
		return nil
	}
	t.Records = recs
	if bad || !v.validateAt(path, t.Validate()) {
		return nil
	}
	return t
}

// traceLoad checks the load keys of a trace replay, whose arrivals and
// window the trace gives, and returns l with them as an open loop of the
// window's mean rate: the load the sweep and the record see.
func (v *validator) traceLoad(l *fileLoad, lp *LLMPayload) *fileLoad {
	if lp == nil || find(v.ast.Docs[0].Body, "$.payload.trace") == nil {
		return l
	}
	if l == nil {
		l = &fileLoad{}
	}
	for _, k := range []string{"rate", "concurrency", "duration", "arrival", "burstiness", "pacer", "ramp_from"} {
		if find(v.ast.Docs[0].Body, "$.load."+k) != nil {
			v.errorf("$.load."+k, "load.%s does not apply to a trace replay: its arrivals and window are the trace's (payload.trace speed, start and duration)", k)
		}
	}
	rate, wall := 1.0, time.Second // stand-ins when the trace is bad (reported)
	if lp.Trace != nil {
		rate, wall = math.Round(lp.Trace.Rate()*1000)/1000, lp.Trace.WallDuration()
		if wall > maxTraceWall {
			v.errorf("$.payload.trace", "payload.trace: the window lasts %v in wall time, over %v; raise speed or shorten duration", wall.Round(time.Second), maxTraceWall)
		}
	}
	d := wall.String()
	c := *l
	c.Rate, c.Concurrency, c.Duration, c.Arrival, c.Burstiness, c.Pacer, c.RampFrom = list[float64]{rate}, nil, &d, "", nil, "", nil
	return &c
}

// workloadLoad completes the load of a prefix-caching workload: a trace's
// arrivals and warm-up; a multi-turn workload's closed loop.
func (v *validator) workloadLoad(out *Load, lp *LLMPayload) {
	switch {
	case lp == nil:
	case lp.Trace != nil:
		out.Arrival = "trace"
		lp.Trace.Warmup = out.Warmup
		v.validateAt("$.payload.trace", lp.Trace.Validate())
	case lp.MultiTurn != nil && len(out.Rates) > 0:
		v.errorf("$.load.rate", "load.rate: payload.multi_turn runs its sessions on a closed loop; set load.concurrency, the sessions at once")
	}
}

// prefixSweep checks sweep.prefix_cache and the flags it and
// server.block_size set.
func (v *validator) prefixSweep(s *fileSweep, out *Sweep, srv *target.Serve) {
	if s != nil {
		for i, on := range s.PrefixCache {
			if slices.Index(s.PrefixCache, on) < i {
				v.errorf(fmt.Sprintf("$.sweep.prefix_cache[%d]", i), "sweep.prefix_cache %t: listed twice", on)
			}
		}
		out.PrefixCache = s.PrefixCache
	}
	if srv == nil {
		return
	}
	for i, a := range srv.Args {
		switch {
		case len(out.PrefixCache) > 0 && target.SetsFlag(a, "prefix_cache"):
			v.errorf(fmt.Sprintf("$.server.args[%d]", i), "server.args: %s is set by sweep.prefix_cache", a)
		case srv.BlockSize > 0 && target.SetsFlag(a, "block_size"):
			v.errorf(fmt.Sprintf("$.server.args[%d]", i), "server.args: %s is set by server.block_size", a)
		}
	}
}

// blockSize checks server.block_size into spec.
func (v *validator) blockSize(s *fileServer, spec *target.Serve) {
	if s.BlockSize == nil {
		return
	}
	spec.BlockSize = *s.BlockSize
	if spec.BlockSize < 1 {
		v.errorf("$.server.block_size", "server.block_size %d: must be at least 1", spec.BlockSize)
		return
	}
	v.generation("$.server.block_size", "server.block_size", generate.Config{BlockSize: spec.BlockSize})
}

// maxTraceWall bounds a trace replay's window in wall time, as any
// duration a scenario sets is bounded by the user's patience: a day.
const maxTraceWall = 24 * time.Hour
