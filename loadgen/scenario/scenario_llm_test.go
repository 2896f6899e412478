package scenario_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/inferhq/infer/loadgen"
	"github.com/inferhq/infer/loadgen/llm"
	"github.com/inferhq/infer/loadgen/scenario"
	"github.com/inferhq/infer/loadgen/target"
)

const llmMinimal = `
server:
  model: sim-lm
payload:
  api: completions
load:
  concurrency: 8
`

func TestParseLLMDefaults(t *testing.T) {
	sc, err := scenario.Parse("llm.yaml", "", []byte(llmMinimal))
	if err != nil {
		t.Fatal(err)
	}
	lp := sc.Payload.LLM
	if lp == nil || lp.API != llm.Completions || !lp.Stream || lp.Prompts != "builtin" || lp.Set != nil || !lp.PromptTokens.IsZero() {
		t.Fatalf("payload = %+v", lp)
	}
	if c := lp.Config("m"); c.Extra["temperature"] != 0.0 {
		t.Errorf("requests carry %v, want temperature 0 (greedy, as vLLM's benchmark)", c.Extra)
	}
	if l := sc.Load; l.Timeout != llm.DefaultTimeout || l.Drain != llm.DefaultDrain || l.Arrival != "constant" || l.MaxInFlight != llm.DefaultMaxInFlight {
		t.Errorf("load = %+v", l)
	}
	if !slices.Equal(sc.Sweep.Endpoints, []string{target.EndpointContinuous}) {
		t.Errorf("endpoints = %v, want [continuous]", sc.Sweep.Endpoints)
	}
	if want := []string{"--model", "sim-lm", "--timeout", scenario.LLMServerTimeout.String()}; !slices.Equal(sc.Server.Flags(target.Settings{}), want) {
		t.Errorf("server flags %q, want %q", sc.Server.Flags(target.Settings{}), want)
	}
	tgt, err := scenario.Parse("t.yaml", "", []byte("target:\n  urls: http://a:1\npayload:\n  api: chat\nload:\n  concurrency: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(tgt.Sweep.Endpoints, []string{scenario.LLMDefaultEndpoint}) {
		t.Errorf("target endpoints = %v, want [/v1]", tgt.Sweep.Endpoints)
	}
}

func TestParseLLMFull(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.jsonl"), []byte(`{"prompt": "hello there"}`+"\n"+`{"messages": [{"role": "user", "content": "hi"}]}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	src := `
server:
  model: sim-lm
  sim_step: 4ms
  sim_per_seq: 0.1ms
  sim_per_prefill_token: 10us
  kv_tokens: 32768
  timeout: 2m
payload:
  api: chat
  stream: false
  prompt_tokens: {dist: uniform, min: 32, max: 512}
  output_tokens: {dist: lognormal, median: 100, sigma: 0.8, max: 1024}
  ignore_eos: true
  temperature: 0.7
  prompts: p.jsonl
load:
  rate: [1, 2.5]
  arrival: gamma
  burstiness: 0.5
  drain: 30s
  max_in_flight: 64
sweep:
  endpoints: [continuous, static, naive, /custom/v1]
  max_seqs: [8, 32]
  max_batched_tokens: 4096
  max_latency: 50ms
slo:
  ttft_p99: 2s
  tpot_p99: 50ms
  e2el_p99: 20s
  min_goodput: 0.5
  max_error_rate: 0.01
`
	sc, err := scenario.Parse("full.yaml", dir, []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	lp := sc.Payload.LLM
	if lp.API != llm.Chat || lp.Stream || !lp.IgnoreEOS || len(lp.Set) != 2 || lp.Prompts != "p.jsonl" {
		t.Errorf("payload = %+v", lp)
	}
	if c := lp.Config("m"); c.Extra["temperature"] != 0.7 {
		t.Errorf("requests carry %v, want temperature 0.7", c.Extra)
	}
	if lp.PromptTokens != (llm.Length{Dist: "uniform", Min: 32, Max: 512}) || lp.OutputTokens != (llm.Length{Dist: "lognormal", Median: 100, Sigma: 0.8, Max: 1024}) {
		t.Errorf("lengths %+v, %+v", lp.PromptTokens, lp.OutputTokens)
	}
	if l := sc.Load; l.Arrival != "gamma" || l.Burstiness != 0.5 || l.Drain != 30*time.Second || l.MaxInFlight != 64 {
		t.Errorf("load = %+v", l)
	}
	want := []string{"--model", "sim-lm", "--sim-step", "4ms", "--sim-per-seq", "100µs", "--sim-per-prefill-token", "10µs", "--kv-tokens", "32768", "--timeout", "2m0s"}
	if !slices.Equal(sc.Server.Flags(target.Settings{}), want) {
		t.Errorf("server flags %q, want %q", sc.Server.Flags(target.Settings{}), want)
	}
	if s := sc.SLO; s.TTFTP99 != 2*time.Second || s.TPOTP99 != 50*time.Millisecond || s.E2ELP99 != 20*time.Second || s.MinGoodput != 0.5 || !s.Set() {
		t.Errorf("slo = %+v", s)
	}
	plans := loadgen.Plans(sc)
	// 2 max-seqs × (continuous, static, path) × 2 rates, and naive once per rate.
	if len(plans) != 14 {
		t.Fatalf("%d plans, want 14", len(plans))
	}
	var names []string
	for _, p := range plans {
		names = append(names, p.Point.Name)
	}
	if names[0] != "continuous seqs=8 rate=1/s" || !slices.Contains(names, "naive rate=2.5/s") || !slices.Contains(names, "/custom/v1 seqs=32 rate=1/s") {
		t.Errorf("names %q", names)
	}
	if p := plans[0]; p.Point.Load.Arrival != "gamma" || p.Point.Load.Burstiness != 0.5 || p.Point.MaxSeqs != 8 || p.Point.MaxBatchedTokens != 4096 {
		t.Errorf("point %+v", p.Point)
	}
	if f := strings.Join(plans[0].Serve, " "); !strings.Contains(f, "--max-seqs 8 --max-batched-tokens 4096") || !strings.Contains(f, "--max-latency 50ms") {
		t.Errorf("serve flags %q", f)
	}
	if sh := loadgen.Shared(sc); sh != "lat=50ms mbt=4096" {
		t.Errorf("Shared() = %q", sh)
	}
}

func TestParseLLMErrors(t *testing.T) {
	head := "server:\n  model: sim-lm\npayload:\n  api: completions\n"
	loadC := "load:\n  concurrency: 4\n"
	for _, tc := range []struct {
		name string
		src  string
		line int
		want string
	}{
		// Errors inside a length's own decoder, found by the key's path.
		{"zero length", "server:\n  model: sim-lm\npayload:\n  api: completions\n  output_tokens: 0\n" + loadC, 5, "payload.output_tokens: token length: count 0"},
		{"bad dist", head + "  prompt_tokens: {dist: normal, min: 1, max: 2}\n" + loadC, 5, `dist "normal": want uniform or lognormal`},
		{"min over max", head + "  prompt_tokens:\n    dist: uniform\n    min: 9\n    max: 2\n" + loadC, 5, "min 9 > max 2"},
		{"lognormal without max", head + "  output_tokens: {dist: lognormal, median: 100, sigma: 0.8}\n" + loadC, 5, "lognormal needs a max"},
		{"length typo", head + "  output_tokens:\n    dist: lognormal\n    medain: 100\n" + loadC, 7, `unknown field "medain" (did you mean "median"?)`},
		{"length text", head + "  output_tokens: lots\n" + loadC, 5, "payload.output_tokens"},
		{"length wrong type", head + "  output_tokens:\n    dist: lognormal\n    median: lots\n" + loadC, 7, `payload.output_tokens.median "lots": want a number; payload.output_tokens: want a token count`},
		{"bad api", "server:\n  model: sim-lm\npayload:\n  api: embeddings\n" + loadC, 4, `payload.api "embeddings"`},
		{"encoder key", head + "  items: 4\n" + loadC, 5, "payload.items is for encoder endpoints"},
		{"llm key without api", "server:\n  model: sim\npayload:\n  prompt_tokens: 8\n" + loadC, 4, "set payload.api"},
		{"decoder without api", "server:\n  model: sim-lm\n" + loadC, 2, "is a generative model: set payload.api"},
		{"sim key on sim-lm", "server:\n  model: sim-lm\n  sim_fixed: 1ms\npayload:\n  api: chat\n" + loadC, 3, "server.sim_fixed is an encoder model's key"},
		{"gen key on encoder", "server:\n  model: sim\n  kv_tokens: 5\n" + loadC, 3, "server.kv_tokens is a generation server's"},
		{"sim-lm key on gpt2", "server:\n  model: gpt2-tiny\n  sim_step: 1ms\npayload:\n  api: chat\n" + loadC, 3, "applies to model sim-lm only"},
		{"max-seqs in args", "server:\n  model: sim-lm\n  args: [--max-seqs, \"8\"]\npayload:\n  api: chat\n" + loadC, 3, "--max-seqs is set by infer bench"},
		{"bad endpoint", head + loadC + "sweep:\n  endpoints: [continuous, batched]\n", 8, `sweep.endpoints[1] "batched": want continuous, static, naive`},
		{"twice", head + loadC + "sweep:\n  endpoints: [static, static]\n", 8, "listed twice"},
		{"batch on llm", head + loadC + "sweep:\n  batch: 8\n", 8, "sweep.batch is for encoder endpoints"},
		{"max seqs zero", head + loadC + "sweep:\n  max_seqs: [8, 0]\n", 8, "sweep.max_seqs 0"},
		{"mbt below seqs", head + loadC + "sweep:\n  max_seqs: [16, 64]\n  max_batched_tokens: 32\n", 9, "sweep.max_batched_tokens: max batched tokens 32: want at least max seqs (64)"},
		{"max seqs over", head + loadC + "sweep:\n  max_seqs: [8, 5000]\n", 8, "sweep.max_seqs: max seqs 5000: want 1 to 4096"},
		{"mbt over", head + loadC + "sweep:\n  max_batched_tokens: [64, 2000000]\n", 8, "sweep.max_batched_tokens: max batched tokens 2000000: want 1 to 1048576"},
		{"mbt zero", head + loadC + "sweep:\n  max_batched_tokens: [64, 0]\n", 8, "sweep.max_batched_tokens 0: must be at least 1"},
		{"gen queue cap", "server:\n  model: sim-lm\n  queue_cap: 100000\n" + "payload:\n  api: completions\n" + loadC, 3, "server.queue_cap: queue capacity 100000: want 0 (default) to 65536"},
		{"kv tokens zero", "server:\n  model: sim-lm\n  kv_tokens: 0\n" + "payload:\n  api: completions\n" + loadC, 3, "server.kv_tokens 0: must be at least 1"},
		{"max seqs on encoder", "server:\n  model: sim\n" + loadC + "sweep:\n  max_seqs: 8\n", 6, "generation servers (payload.api) only"},
		{"static on target", "target:\n  urls: http://a:1\npayload:\n  api: chat\n" + loadC + "sweep:\n  endpoints: [continuous, static]\n  max_seqs: [8, 16]\n", 8, "the admin API sets the /v1 engine's"},
		{"arrival closed", head + "load:\n  concurrency: 4\n  arrival: poisson\n", 7, "arrivals pace an open loop"},
		{"gamma no burstiness", head + "load:\n  rate: 4\n  arrival: gamma\n", 7, "needs load.burstiness"},
		{"burstiness poisson", head + "load:\n  rate: 4\n  arrival: poisson\n  burstiness: 2\n", 8, "applies to load.arrival gamma only"},
		{"bad burstiness", head + "load:\n  rate: 4\n  arrival: gamma\n  burstiness: -1\n", 8, "load.burstiness -1"},
		{"bad arrival", head + "load:\n  rate: 4\n  arrival: bursty\n", 7, `load.arrival "bursty"`},
		{"arrival on encoder", "server:\n  model: sim\nload:\n  rate: 4\n  arrival: poisson\n", 5, "LLM loads (payload.api) only"},
		{"slo p99 on llm", head + loadC + "slo:\n  p99: 1s\n", 8, "use slo.ttft_p99"},
		{"bad ttft", head + loadC + "slo:\n  ttft_p99: soon\n", 8, `slo.ttft_p99 "soon"`},
		{"ttft on encoder", "server:\n  model: sim\n" + loadC + "slo:\n  ttft_p99: 1s\n", 6, "slo.ttft_p99 applies to LLM loads"},
		{"negative goodput", head + loadC + "slo:\n  min_goodput: -1\n", 8, "slo.min_goodput -1"},
		{"missing prompts", head + "  prompts: nowhere.jsonl\n" + loadC, 5, "payload.prompts: no such file"},
		{"temperature over 2", head + "  temperature: 3\n" + loadC, 5, "payload.temperature 3: want 0 (greedy) to 2"},
		{"negative temperature", head + "  temperature: -0.5\n" + loadC, 5, "payload.temperature -0.5"},
		{"temperature on encoder", "server:\n  model: sim\npayload:\n  temperature: 0\n" + loadC, 4, "set payload.api"},
		{"per worker", head + "load:\n  concurrency: 4\n  per_worker: true\n", 7, "no workers to scale by"},
	} {
		t.Run(tc.name, func(t *testing.T) { wantScenarioError(t, t.TempDir(), tc.src, tc.line, tc.want) })
	}
}

func TestParsePromptFileErrors(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bad.jsonl"), []byte("{\"prompt\": \"a\"}\nnot json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := scenario.Parse("s.yaml", dir, []byte("server:\n  model: sim-lm\npayload:\n  api: completions\n  prompts: bad.jsonl\nload:\n  concurrency: 1\n"))
	var se *scenario.ScenarioError
	if !errors.As(err, &se) || se.Line != 5 || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("error = %v, want one at line 5 naming the file's line 2", err)
	}
}

// TestReferenceLLM loads scenarios/reference-llm.yaml, the documented LLM
// scenario, and checks that it documents every key an LLM scenario may hold.
func TestReferenceLLM(t *testing.T) {
	const file = "../../scenarios/reference-llm.yaml"
	sc, err := scenario.LoadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if sc.Payload.LLM == nil || sc.Load.Arrival != "gamma" || len(sc.Sweep.MaxSeqs) != 2 || sc.SLO.MinGoodput != 0.5 {
		t.Errorf("parsed %+v", sc)
	}
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"api", "stream", "prompt_tokens", "output_tokens", "ignore_eos", "temperature", "prompts", "arrival",
		"burstiness", "max_in_flight", "drain", "endpoints", "max_seqs", "max_batched_tokens", "max_latency", "ttft_p99", "tpot_p99",
		"e2el_p99", "min_goodput", "sim_step", "sim_per_seq", "sim_per_prefill_token", "kv_tokens", "urls", "model",
		"block_size", "prefix_cache"} {
		if !strings.Contains(string(src), "  "+k+":") {
			t.Errorf("reference-llm.yaml does not document %s", k)
		}
	}
	// The workloads, one at a time, are documented in comments, each
	// with every key of its own.
	for _, k := range []string{"# shared_prefix: {groups:", "prefix_tokens:", "question_tokens:", "pick:", "# multi_turn: {turns:",
		"think_time:", "first_tokens:", "message_tokens:", "# trace: {file:", "speed:", "start:", "duration:", "scale:"} {
		if !strings.Contains(string(src), k) {
			t.Errorf("reference-llm.yaml does not document %s", k)
		}
	}
	// The encoder reference leaves the LLM keys to it, and says so.
	enc, err := os.ReadFile("../../scenarios/reference.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(enc), "reference-llm.yaml") {
		t.Error("reference.yaml does not point to reference-llm.yaml")
	}
}

func TestWithTargetsLLM(t *testing.T) {
	sc, err := scenario.LoadFile("../../scenarios/llm-quick.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sc.WithTargets([]string{"http://a:1"}); err == nil || !strings.Contains(err.Error(), "the admin API sets the /v1 engine's only") {
		t.Errorf("WithTargets(llm-quick) = %v, want the static endpoint refused", err)
	}
	plain, err := scenario.Parse("p.yaml", "", []byte(llmMinimal))
	if err != nil {
		t.Fatal(err)
	}
	tg, err := plain.WithTargets([]string{"http://a:1/"})
	if err != nil || tg.Server != nil || tg.Targets[0] != "http://a:1" {
		t.Errorf("WithTargets = %+v, %v", tg, err)
	}
}

// TestParseLLMBatchedTokensAlone: swept without max_seqs, max_batched_tokens
// is judged by its range alone, not against the engine library's default
// max_seqs: the server's own default (per model) is unknown here.
func TestParseLLMBatchedTokensAlone(t *testing.T) {
	sc := mustParse(t, llmMinimal+"sweep:\n  max_batched_tokens: [16, 64]\n")
	if !slices.Equal(sc.Sweep.MaxBatchedTokens, []int{16, 64}) {
		t.Errorf("max_batched_tokens = %v", sc.Sweep.MaxBatchedTokens)
	}
}
