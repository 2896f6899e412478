package scenario_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inferhq/infer/loadgen"
	"github.com/inferhq/infer/loadgen/llm"
	"github.com/inferhq/infer/loadgen/scenario"
	"github.com/inferhq/infer/loadgen/target"
)

// traceFile writes a trace of 10 requests, one a second, 1,000 tokens in
// (2 blocks) and 100 out, and returns its directory.
func traceFile(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	var b strings.Builder
	for i := range 10 {
		b.WriteString(`{"timestamp": ` + strconv.Itoa(i*1000) + `, "input_length": 1000, "output_length": 100, "hash_ids": [0, ` + strconv.Itoa(i+1) + "]}\n")
	}
	if err := os.WriteFile(filepath.Join(dir, "t.jsonl"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestParseSharedPrefix(t *testing.T) {
	sc := mustParse(t, `
server:
  model: sim-lm
  block_size: 32
payload:
  api: chat
  shared_prefix: {groups: 16, prefix_tokens: 2048, question_tokens: 64}
  output_tokens: 128
load:
  concurrency: 32
sweep:
  max_seqs: 32
  prefix_cache: [true, false]
`)
	sp := sc.Payload.LLM.SharedPrefix
	if sp == nil || sp.Groups != 16 || sp.PrefixTokens != 2048 || sp.QuestionTokens != llm.Fixed(64) || sp.Pick != llm.PickRoundRobin {
		t.Fatalf("shared_prefix = %+v", sp)
	}
	if c := sc.Payload.LLM.Config("m"); c.SharedPrefix != sp {
		t.Error("the payload's config does not carry the workload")
	}
	plans := loadgen.Plans(sc)
	if len(plans) != 2 {
		t.Fatalf("%d plans, want cache on and off", len(plans))
	}
	for i, want := range []string{"true", "false"} {
		p := plans[i]
		if p.Point.PrefixCache == nil || *p.Point.PrefixCache != (want == "true") || !strings.Contains(p.Point.Name, "cache="+map[string]string{"true": "on", "false": "off"}[want]) {
			t.Errorf("plan %d: point %+v", i, p.Point)
		}
		if !slices.Contains(p.Serve, "--prefix-cache="+want) || !slices.Contains(p.Serve, "--block-size") {
			t.Errorf("plan %d: flags %q, want --prefix-cache=%s and --block-size", i, p.Serve, want)
		}
	}
	if p := plans[0].Settings; p.PrefixCache == nil || !*p.PrefixCache {
		t.Errorf("settings %+v", p)
	}
	one := mustParse(t, llmMinimal+"sweep:\n  prefix_cache: false\n")
	if got := loadgen.Shared(one); got != "cache=off" {
		t.Errorf("Shared = %q, want cache=off said once", got)
	}
}

func TestParseMultiTurn(t *testing.T) {
	sc := mustParse(t, `
server:
  model: sim-lm
payload:
  api: chat
  multi_turn: {turns: 5, think_time: 2s, first_tokens: 512, message_tokens: {dist: uniform, min: 64, max: 128}}
load:
  concurrency: 8
`)
	mt := sc.Payload.LLM.MultiTurn
	if mt == nil || mt.Turns != 5 || mt.ThinkTime != 2*time.Second || mt.FirstTokens != llm.Fixed(512) || mt.MessageTokens.Dist != "uniform" {
		t.Fatalf("multi_turn = %+v", mt)
	}
}

func TestParseTrace(t *testing.T) {
	dir := traceFile(t)
	sc, err := scenario.Parse("s.yaml", dir, []byte(`
server:
  model: sim-lm
payload:
  api: completions
  trace: {file: t.jsonl, speed: 2, start: 4s, duration: 4s, scale: 0.03125}
load:
  warmup: 1s
  repeats: 2
  interleave: true
sweep:
  prefix_cache: [true, false]
`))
	if err != nil {
		t.Fatal(err)
	}
	tr := sc.Payload.LLM.Trace
	if tr == nil || len(tr.Records) != 10 || tr.Speed != 2 || tr.Start != 4*time.Second || tr.Scale != 1.0/32 || tr.Warmup != time.Second ||
		sc.Payload.LLM.TraceFile != "t.jsonl" {
		t.Fatalf("trace = %+v", tr)
	}
	// The window holds the requests at 4 to 7 s: 4 over 2 s of wall time.
	l := sc.Load
	if !slices.Equal(l.Rates, []float64{2}) || l.Duration != 2*time.Second || l.Arrival != "trace" || l.Warmup != time.Second || l.Repeats != 2 {
		t.Errorf("load = %+v; want the window's 2 requests/s over 2s, arrivals from the trace", l)
	}
	if tr.WindowRequests() != 4 {
		t.Errorf("window of %d requests, want 4", tr.WindowRequests())
	}
}

func TestParseWorkloadErrors(t *testing.T) {
	dir := traceFile(t)
	if err := os.WriteFile(filepath.Join(dir, "bad.jsonl"), []byte(`{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}`+"\n"+`{"timestamp": 1, "input_length": 10}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	head := "server:\n  model: sim-lm\npayload:\n  api: completions\n"
	loadC := "load:\n  concurrency: 4\n"
	sp := "  shared_prefix: {groups: 4, prefix_tokens: 64, question_tokens: 8}\n"
	tr := "  trace: {file: t.jsonl, scale: 0.03125}\n"
	for _, tc := range []struct {
		name string
		src  string
		line int
		want string
	}{
		{"two workloads", head + sp + "  multi_turn: {turns: 2, first_tokens: 8, message_tokens: 8}\n" + loadC, 6, "payload.shared_prefix and payload.multi_turn: choose one"},
		{"prompt_tokens with shared_prefix", head + sp + "  prompt_tokens: 8\n" + loadC, 6, "payload.prompt_tokens does not apply to payload.shared_prefix"},
		{"prompts with trace", head + tr + "  prompts: p.jsonl\n" + "load:\n  warmup: 1s\n", 6, "payload.prompts does not apply to payload.trace"},
		{"groups zero", head + "  shared_prefix:\n    groups: 0\n    prefix_tokens: 64\n    question_tokens: 8\n" + loadC, 6, "payload.shared_prefix.groups 0: want 1 to 65536"},
		{"no question", head + "  shared_prefix:\n    groups: 2\n    prefix_tokens: 64\n" + loadC, 5, "payload.shared_prefix: question_tokens: want a token count"},
		{"bad question", head + "  shared_prefix:\n    groups: 2\n    prefix_tokens: 64\n    question_tokens: 0\n" + loadC, 8, "payload.shared_prefix.question_tokens: token length: count 0"},
		{"bad pick", head + "  shared_prefix:\n    groups: 2\n    prefix_tokens: 64\n    question_tokens: 8\n    pick: hash\n" + loadC, 9, `payload.shared_prefix.pick "hash": want round_robin or random`},
		{"shared_prefix typo", head + "  shared_prefix:\n    groups: 2\n    prefx_tokens: 64\n" + loadC, 7, `unknown field "prefx_tokens"`},
		{"turns zero", head + "  multi_turn:\n    turns: 0\n    first_tokens: 8\n" + loadC, 6, "payload.multi_turn.turns 0: want 1 to 100"},
		{"no message tokens", head + "  multi_turn:\n    turns: 3\n    first_tokens: 8\n" + loadC, 5, "payload.multi_turn: message_tokens: want a token count"},
		{"bad think time", head + "  multi_turn:\n    turns: 3\n    think_time: soon\n    first_tokens: 8\n    message_tokens: 8\n" + loadC, 7, `payload.multi_turn.think_time "soon"`},
		{"multi_turn open loop", head + "  multi_turn: {turns: 2, first_tokens: 8, message_tokens: 8}\nload:\n  rate: 2\n", 7, "runs its sessions on a closed loop"},
		{"trace without file", head + "  trace: {speed: 2}\nload:\n  warmup: 1s\n", 5, "payload.trace.file: name the trace"},
		{"trace missing", head + "  trace: {file: nowhere.jsonl}\nload:\n  warmup: 1s\n", 5, "payload.trace.file nowhere.jsonl: no such file"},
		{"trace bad line", head + "  trace:\n    file: bad.jsonl\nload:\n  warmup: 1s\n", 6, "bad.jsonl: line 2: no output_length"},
		{"trace scale", head + "  trace: {file: t.jsonl, scale: 0.03}\nload:\n  warmup: 1s\n", 5, "a block of 512 tokens becomes 15.36"},
		{"trace speed", head + "  trace:\n    file: t.jsonl\n    speed: 0\n", 7, "payload.trace.speed 0: must be positive"},
		{"trace speed over", head + "  trace:\n    file: t.jsonl\n    speed: 5000\n", 7, "payload.trace.speed 5000: want more than 0, at most 1000"},
		{"trace empty window", head + "  trace: {file: t.jsonl, start: 1h}\nload:\n  warmup: 1s\n", 5, "holds no request"},
		{"trace and rate", head + tr + "load:\n  rate: 5\n", 7, "load.rate does not apply to a trace replay"},
		{"trace and duration", head + tr + "load:\n  duration: 5s\n", 7, "load.duration does not apply to a trace replay"},
		{"trace and output_tokens", head + tr + "  output_tokens: 5\n", 6, "payload.output_tokens does not apply to payload.trace"},
		{"trace too slow", head + "  trace: {file: t.jsonl, speed: 0.0001}\n", 5, "the window lasts"},
		{"workload on encoder", "server:\n  model: sim\npayload:\n" + sp + loadC, 4, "payload.shared_prefix applies to LLM loads"},
		{"prefix_cache twice", head + loadC + "sweep:\n  prefix_cache: [true, true]\n", 8, "sweep.prefix_cache true: listed twice"},
		{"prefix_cache on encoder", "server:\n  model: sim\n" + loadC + "sweep:\n  prefix_cache: true\n", 6, "sweep.prefix_cache applies to generation servers"},
		{"prefix_cache in args", "server:\n  model: sim-lm\n  args: [--prefix-cache=false]\n" + "payload:\n  api: chat\n" + loadC + "sweep:\n  prefix_cache: [true, false]\n", 3, "--prefix-cache=false is set by sweep.prefix_cache"},
		{"block size in args", "server:\n  model: sim-lm\n  block_size: 16\n  args: [--block-size, \"8\"]\n" + "payload:\n  api: chat\n" + loadC, 4, "--block-size is set by server.block_size"},
		{"block size zero", "server:\n  model: sim-lm\n  block_size: 0\n" + "payload:\n  api: chat\n" + loadC, 3, "server.block_size 0: must be at least 1"},
		{"block size over", "server:\n  model: sim-lm\n  block_size: 4096\n" + "payload:\n  api: chat\n" + loadC, 3, "server.block_size: block size 4096"},
		{"block size on encoder", "server:\n  model: sim\n  block_size: 16\n" + loadC, 3, "server.block_size is a generation server's"},
	} {
		t.Run(tc.name, func(t *testing.T) { wantScenarioError(t, dir, tc.src, tc.line, tc.want) })
	}
}

// wantScenarioError parses src (its files relative to dir) and checks that
// it fails with a *scenario.ScenarioError at line that says want.
func wantScenarioError(t *testing.T, dir, src string, line int, want string) {
	t.Helper()
	_, err := scenario.Parse("s.yaml", dir, []byte(src))
	if err == nil {
		t.Fatalf("Parse succeeded, want an error containing %q", want)
	}
	var se *scenario.ScenarioError
	if !errors.As(err, &se) {
		t.Fatalf("error %v (%T) is not a *scenario.ScenarioError", err, err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error = %q, want it to contain %q", err, want)
	}
	if se.Line != line {
		t.Errorf("error at line %d, want %d (%v)", se.Line, line, err)
	}
}

// TestWithTargetsPrefixCache: sweep.prefix_cache reaches a target through
// its admin API, which sets /v1's only.
func TestWithTargetsPrefixCache(t *testing.T) {
	sc := mustParse(t, llmMinimal+"sweep:\n  prefix_cache: [true, false]\n")
	if !slices.Contains(sc.Sweep.AdminKeys(), "prefix_cache") {
		t.Errorf("admin keys %v, want prefix_cache", sc.Sweep.AdminKeys())
	}
	st := mustParse(t, llmMinimal+"sweep:\n  endpoints: [continuous, static]\n  prefix_cache: [true, false]\n")
	if _, err := st.WithTargets([]string{"http://a:1"}); err == nil || !strings.Contains(err.Error(), "prefix_cache") {
		t.Errorf("WithTargets with static: %v", err)
	}
	if f := (target.Settings{PrefixCache: new(bool)}).Flags(); !slices.Equal(f, []string{"--prefix-cache=false"}) {
		t.Errorf("flags %q", f)
	}
}
