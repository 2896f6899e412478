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
	"github.com/inferhq/infer/loadgen/scenario"
	"github.com/inferhq/infer/loadgen/target"
)

func mustParse(t *testing.T, src string) *scenario.Scenario {
	t.Helper()
	sc, err := scenario.Parse("test.yaml", t.TempDir(), []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

const minimal = `
server:
  model: sim
load:
  concurrency: 8
`

func TestParseDefaults(t *testing.T) {
	sc, err := scenario.Parse("dir/min.yaml", "dir", []byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	if sc.Name != "min" {
		t.Errorf("Name = %q, want min (from the file name)", sc.Name)
	}
	l := sc.Load
	if l.Warmup != scenario.DefaultWarmup || l.Duration != scenario.DefaultDuration || l.Timeout != scenario.DefaultTimeout || l.Repeats != 1 || l.Pacer != "constant" {
		t.Errorf("load defaults = %+v", l)
	}
	if !slices.Equal(l.Concurrency, []int{8}) || l.Open() {
		t.Errorf("concurrency = %v, open = %v; want [8], closed", l.Concurrency, l.Open())
	}
	if p := sc.Payload; p.N != 1 || p.Format != "json" || p.Corpus != "builtin" || len(p.Items) < 100 {
		t.Errorf("payload = %+v items, %d", p.Corpus, len(p.Items))
	}
	if !slices.Equal(sc.Sweep.Endpoints, []string{"batched"}) {
		t.Errorf("endpoints = %v, want [batched]", sc.Sweep.Endpoints)
	}
	if sc.Server == nil || sc.Server.Model != "sim" || sc.Server.ReadyTimeout != scenario.DefaultReadyTimeout {
		t.Errorf("server = %+v", sc.Server)
	}
	if sc.SLO.Require != "all" {
		t.Errorf("slo.require = %q, want all", sc.SLO.Require)
	}
}

func TestParseFull(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "items.txt"), []byte("a [MASK]\nb [MASK]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	src := `
name: full
server:
  model: sim
  sim_fixed: 4ms
  sim_per_item: 0.1ms
  queue_cap: 512
  timeout: 5s
  args: [--max-items, "64"]
  ready_timeout: 10s
payload:
  corpus: items.txt
  items: 4
load:
  rate: [100, 250.5]
  pacer: ramp
  ramp_from: 10
  max_in_flight: 64
  warmup: 0s
  duration: 3s
  repeats: 2
  timeout: 2s
sweep:
  endpoints: [naive, batched, v2]
  batch: [8, 64]
  workers: 2
  max_latency: [1ms, 10ms]
  policy: [fixed, immediate]
slo:
  p99: 250ms
  max_error_rate: 0.01
  min_throughput: 100
  require: any
`
	sc, err := scenario.Parse(filepath.Join(dir, "full.yaml"), dir, []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	wantFlags := []string{"--model", "sim", "--sim-fixed", "4ms", "--sim-per-item", "100µs", "--queue-cap", "512", "--timeout", "5s", "--max-items", "64"}
	if !slices.Equal(sc.Server.Flags(target.Settings{}), wantFlags) || sc.Server.ReadyTimeout != 10*time.Second {
		t.Errorf("server flags = %q, ready %v; want %q, 10s", sc.Server.Flags(target.Settings{}), sc.Server.ReadyTimeout, wantFlags)
	}
	if !slices.Equal(sc.Payload.Items, []string{"a [MASK]", "b [MASK]"}) || sc.Payload.N != 4 {
		t.Errorf("payload = %q × %d", sc.Payload.Items, sc.Payload.N)
	}
	l := sc.Load
	if !slices.Equal(l.Rates, []float64{100, 250.5}) || l.Pacer != "ramp" || l.RampFrom != 10 || l.MaxInFlight != 64 ||
		l.Warmup != 0 || l.Duration != 3*time.Second || l.Repeats != 2 || l.Timeout != 2*time.Second {
		t.Errorf("load = %+v", l)
	}
	sw := sc.Sweep
	if !slices.Equal(sw.Batch, []int{8, 64}) || !slices.Equal(sw.Workers, []int{2}) ||
		!slices.Equal(sw.MaxLatency, []time.Duration{time.Millisecond, 10 * time.Millisecond}) || !slices.Equal(sw.Policy, []string{"fixed", "immediate"}) {
		t.Errorf("sweep = %+v", sw)
	}
	if s := sc.SLO; s.P99 != 250*time.Millisecond || s.MaxErrorRate != 0.01 || s.MinThroughput != 100 || s.Require != "any" {
		t.Errorf("slo = %+v", s)
	}
	if !strings.Contains(string(sc.Source), "require: any") {
		t.Error("Source does not hold the file's text")
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  string
		line int
		want string
	}{
		{"typo", "server:\n  model: sim\nload:\n  concurrency: 8\n  duraton: 3s\n", 5, `unknown field "duraton" (did you mean "duration"?)`},
		{"nested typo", "server:\n  model: sim\npayload:\n  inject: {text: x, evrey: 5}\nload:\n  concurrency: 8\n", 4, `unknown field "evrey" (did you mean "every"?)`},
		{"unknown section", "server:\n  model: sim\nloads:\n  concurrency: 8\n", 3, `unknown field "loads" (did you mean "load"?)`},
		// A key of another section: where it belongs, not itself as a typo.
		{"misplaced key", "server:\n  model: sim\n  max_seqs: 8\nload:\n  concurrency: 8\n", 3, `unknown field "max_seqs" here: it is a key of sweep`},
		{"misplaced key of several", "server:\n  model: sim\nload:\n  concurrency: 8\n  model: x\n", 5, `unknown field "model" here: it is a key of target, server and sweep`},
		{"bad duration", "server:\n  model: sim\nload:\n  concurrency: 8\n  duration: 3 seconds\n", 5, `load.duration "3 seconds": want a duration like 10s`},
		{"bare number duration", "server:\n  model: sim\nload:\n  concurrency: 8\n  warmup: 3\n", 5, `load.warmup "3": want a duration`},
		{"zero duration", "server:\n  model: sim\nload:\n  concurrency: 8\n  duration: 0s\n", 5, "load.duration 0s: must be positive"},
		{"wrong type", "server:\n  model: sim\nload:\n  concurrency: [8, lots]\n", 4, `load.concurrency[1] "lots": want a whole number`},
		{"list for a string", "server:\n  model: sim\n  sim_fixed: [1ms, 2ms]\nload:\n  concurrency: 8\n", 3, "server.sim_fixed (a list): want a string"},
		{"not a bool", "server:\n  model: sim\nload:\n  concurrency: 8\n  interleave: sometimes\n", 5, `load.interleave "sometimes": want true or false`},
		{"batch zero", "server:\n  model: sim\nload:\n  concurrency: 8\nsweep:\n  batch: [1, 0]\n", 6, "sweep.batch 0: must be at least 1"},
		{"bad latency", "server:\n  model: sim\nload:\n  concurrency: 8\nsweep:\n  max_latency: [1ms, soon]\n", 6, `sweep.max_latency[1] "soon"`},
		{"bad policy", "server:\n  model: sim\nload:\n  concurrency: 8\nsweep:\n  policy: sometimes\n", 6, "unknown batching policy"},
		{"bad endpoint", "server:\n  model: sim\nload:\n  concurrency: 8\nsweep:\n  endpoints: [batched, fast]\n", 6, `sweep.endpoints[1] "fast"`},
		{"no load", "server:\n  model: sim\n", 0, "no load"},
		{"both loops", "server:\n  model: sim\nload:\n  concurrency: 8\n  rate: 100\n", 5, "both concurrency"},
		{"neither loop", "server:\n  model: sim\nload:\n  duration: 1s\n", 3, "set concurrency"},
		{"negative rate", "server:\n  model: sim\nload:\n  rate: [10, -1]\n", 4, "load.rate -1"},
		{"ramp without start", "server:\n  model: sim\nload:\n  rate: 100\n  pacer: ramp\n", 5, "needs load.ramp_from"},
		{"ramp closed", "server:\n  model: sim\nload:\n  concurrency: 8\n  pacer: ramp\n  ramp_from: 1\n", 5, "ramp needs load.rate"},
		{"in flight closed", "server:\n  model: sim\nload:\n  concurrency: 8\n  max_in_flight: 9\n", 5, "open loop (rate) only"},
		{"no server", "load:\n  concurrency: 8\n", 0, "no target or server"},
		{"both", "server:\n  model: sim\ntarget:\n  urls: http://x\nload:\n  concurrency: 8\n", 3, "both target and server"},
		{"no model", "server:\n  devices: cpu\nload:\n  concurrency: 8\n", 1, "server.model"},
		{"sim flag on bert", "server:\n  model: bert-mini\n  sim_fixed: 1ms\nload:\n  concurrency: 8\n", 3, "applies to model sim only"},
		{"fail on bert", "server:\n  model: bert-mini\n  sim_fail_on: x\nload:\n  concurrency: 8\n", 3, "sim_fail_on applies to model sim only"},
		{"bench flag in args", "server:\n  model: sim\n  args: [--batch, \"8\"]\nload:\n  concurrency: 8\n", 3, "--batch is set by infer bench"},
		{"bad url", "target:\n  urls: [http://a:1, ftp://b]\nload:\n  concurrency: 8\n", 2, `target.urls[1]: "ftp://b"`},
		{"buckets on target", "target:\n  urls: http://a:1\nload:\n  concurrency: 8\nsweep:\n  buckets: [16, 32]\n", 6, "the admin API cannot set a target's buckets"},
		{"buckets decrease", "server:\n  model: sim\nload:\n  concurrency: 8\nsweep:\n  buckets: [[], [32, 16]]\n", 6, "sweep.buckets[1]: buckets [32 16]: want positive, increasing bounds (like [16, 32, 64]"},
		{"buckets in args", "server:\n  model: sim\n  args: [--buckets, \"8\"]\nload:\n  concurrency: 8\nsweep:\n  buckets: [[], [8]]\n", 3, "--buckets is set by infer bench"},
		{"literal token", "target:\n  urls: http://a:1\n  admin_token_env: s3cr3t-token!\nload:\n  concurrency: 8\n", 3, "name an environment variable"},
		{"inject without text", "server:\n  model: sim\npayload:\n  inject: {every: 5}\nload:\n  concurrency: 8\n", 4, "payload.inject.text"},
		{"inject every 0", "server:\n  model: sim\npayload:\n  inject: {text: x, every: 0}\nload:\n  concurrency: 8\n", 4, "payload.inject.every 0"},
		{"text items", "server:\n  model: sim\npayload:\n  format: text\n  items: 2\nload:\n  concurrency: 8\n", 4, "one item per request"},
		{"text v2", "server:\n  model: sim\npayload:\n  format: text\nload:\n  concurrency: 8\nsweep:\n  endpoints: v2\n", 4, "cannot be sent to the v2"},
		{"bad expect", "target:\n  urls: http://a:1\npayload:\n  expect: json\nload:\n  concurrency: 8\n", 4, `payload.expect "json": want status`},
		{"infer on v2", "target:\n  urls: http://a:1\n  model: m\npayload:\n  expect: infer\nload:\n  concurrency: 8\nsweep:\n  endpoints: [/v2/models/m/infer]\n", 5, "the v2 endpoint answers in KServe v2's shape"},
		{"text to kserve", "target:\n  urls: http://a:1\npayload:\n  expect: kserve\n  format: text\nload:\n  concurrency: 8\nsweep:\n  endpoints: [/triton]\n", 5, "cannot go with payload.expect kserve"},
		{"missing corpus", "server:\n  model: sim\npayload:\n  corpus: nowhere.txt\nload:\n  concurrency: 8\n", 4, "nowhere.txt"},
		{"bad name", "name: my run\nserver:\n  model: sim\nload:\n  concurrency: 8\n", 1, "names the run directory"},
		{"error rate", "server:\n  model: sim\nload:\n  concurrency: 8\nslo:\n  max_error_rate: 5\n", 6, "fraction from 0 to 1"},
		{"require", "server:\n  model: sim\nload:\n  concurrency: 8\nslo:\n  require: most\n", 6, "slo.require"},
		{"syntax", "server:\n  model: [sim\nload:\n  concurrency: 8\n", 3, "must be specified"},
		{"duplicate key", "server:\n  model: sim\nserver:\n  model: sim\n", 3, "already defined"},
		{"models of targets", "target:\n  urls: http://a:1\nload:\n  concurrency: 8\nsweep:\n  model: [a, b]\n", 6, "sweep.model: infer starts one server per model"},
		{"model twice", "server: {}\nload:\n  concurrency: 8\nsweep:\n  model: [bert-base, bert-base-int8, bert-base]\n", 5, "sweep.model[2] bert-base: named twice"},
		{"model and models", "server:\n  model: sim\nload:\n  concurrency: 8\nsweep:\n  model: [a, b]\n", 2, "server.model and sweep.model"},
		{"empty model", "server: {}\nload:\n  concurrency: 8\nsweep:\n  model: [a, \"\"]\n", 5, "sweep.model[1]: empty"},
		{"decoder model", "server: {}\nload:\n  concurrency: 8\nsweep:\n  model: [gpt2-small, gpt2-small-int8]\n", 5, "sweep.model[0] gpt2-small is a generative model"},
		{"not a mapping", "- a\n- b\n", 1, "sequence was used where mapping is expected"},
		{"empty", "", 0, "want one YAML document"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := scenario.Parse("s.yaml", t.TempDir(), []byte(tc.src))
			if err == nil {
				t.Fatalf("Parse succeeded, want an error containing %q", tc.want)
			}
			var se *scenario.ScenarioError
			if !errors.As(err, &se) {
				t.Fatalf("error %v (%T) is not a *scenario.ScenarioError", err, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %q, want it to contain %q", err, tc.want)
			}
			if se.File != "s.yaml" || se.Line != tc.line {
				t.Errorf("error at %s:%d, want s.yaml:%d (%v)", se.File, se.Line, tc.line, err)
			}
			if tc.line > 0 && !strings.HasPrefix(err.Error(), "s.yaml:") {
				t.Errorf("error %q does not start with the file and line", err)
			}
		})
	}
}

func TestLoadFileMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.yaml")
	_, err := scenario.LoadFile(path)
	var se *scenario.ScenarioError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("scenario.LoadFile(missing) = %v, want a *scenario.ScenarioError naming the file", err)
	}
}

func TestWithTargets(t *testing.T) {
	sc, err := scenario.Parse("s.yaml", ".", []byte(minimal+"sweep:\n  endpoints: [naive, batched]\n  batch: [1, 8]\n  workers: 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := sc.WithTargets([]string{"http://10.0.0.1:8080/", "http://10.0.0.2:8080"})
	if err != nil {
		t.Fatal(err)
	}
	if got.Server != nil || !slices.Equal(got.Targets, []string{"http://10.0.0.1:8080", "http://10.0.0.2:8080"}) {
		t.Errorf("targets = %v, server %v", got.Targets, got.Server)
	}
	// The batching settings stay: the targets' admin API applies them.
	if !slices.Equal(got.Sweep.Batch, []int{1, 8}) || !slices.Equal(got.Sweep.Workers, []int{2}) || !slices.Equal(got.Sweep.AdminKeys(), []string{"batch", "workers"}) ||
		!slices.Equal(got.Sweep.Endpoints, []string{"naive", "batched"}) {
		t.Errorf("sweep = %+v", got.Sweep)
	}
	for _, p := range loadgen.Plans(got) {
		if p.Serve != nil {
			t.Errorf("plan %q starts a server: %q", p.Point.Name, p.Serve)
		}
	}
	if sc.Server == nil {
		t.Error("WithTargets changed the original")
	}
	if _, err := sc.WithTargets([]string{"localhost:8080"}); err == nil {
		t.Error("WithTargets accepted a URL without a scheme")
	}
	buckets, err := scenario.Parse("s.yaml", ".", []byte(minimal+"sweep:\n  buckets: [[], [16, 64]]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := buckets.WithTargets([]string{"http://10.0.0.1:8080"}); err == nil || !strings.Contains(err.Error(), "buckets") {
		t.Errorf("WithTargets of a bucket sweep = %v, want an error: the admin API cannot set buckets", err)
	}
}

func TestParseBucketsInject(t *testing.T) {
	sc := mustParse(t, `
server:
  model: sim
  sim_fail_on: poison
payload:
  corpus: mixed
  inject: {text: poison, every: 4}
load:
  concurrency: 2
sweep:
  batch: 8
  buckets: [[], [16, 32, 64]]
`)
	if !slices.EqualFunc(sc.Sweep.Buckets, [][]int{{}, {16, 32, 64}}, slices.Equal) {
		t.Errorf("buckets = %v", sc.Sweep.Buckets)
	}
	var names []string
	var flags [][]string
	for _, p := range loadgen.Plans(sc) {
		names = append(names, p.Point.Name)
		flags = append(flags, p.Serve)
	}
	if want := []string{"batched buckets=none c=2", "batched buckets=16,32,64 c=2"}; !slices.Equal(names, want) {
		t.Errorf("points = %q, want %q", names, want)
	}
	if f := strings.Join(flags[0], " "); f != "--model sim --sim-fail-on poison --batch 8 --buckets none" {
		t.Errorf("no-bucket server flags %q (the server's own default has buckets)", f)
	}
	if f := strings.Join(flags[1], " "); f != "--model sim --sim-fail-on poison --batch 8 --buckets 16,32,64" {
		t.Errorf("bucket server flags %q", f)
	}
	items := sc.Payload.Items
	if len(items) != 128 || sc.Payload.Corpus != "mixed" || sc.Payload.Inject == nil {
		t.Fatalf("payload = %s, %d items, inject %v", sc.Payload.Corpus, len(items), sc.Payload.Inject)
	}
	for i, it := range items {
		if got, want := strings.HasSuffix(it, " poison"), i%4 == 3; got != want {
			t.Errorf("item %d %q: injected %v, want %v", i, it, got, want)
		}
	}
	// A single list is one bucket configuration.
	one := mustParse(t, minimal+"sweep:\n  buckets: [16, 64]\n")
	if !slices.EqualFunc(one.Sweep.Buckets, [][]int{{16, 64}}, slices.Equal) {
		t.Errorf("buckets: [16, 64] = %v, want [[16 64]]", one.Sweep.Buckets)
	}
}

// TestScenarioFiles loads and validates every scenario shipped in
// scenarios/.
func TestScenarioFiles(t *testing.T) {
	files, err := filepath.Glob("../../scenarios/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"bert.yaml", "bucketing.yaml", "demo.yaml", "int8-bert.yaml", "isolation.yaml", "llm-onnx-ceiling.yaml", "llm-onnx-defaults.yaml", "llm-onnx-memory.yaml", "llm-onnx-staggered.yaml", "llm-onnx-static.yaml", "llm-onnx.yaml", "llm-quick.yaml", "llm-sim-closed.yaml",
		"llm-sim-poisson.yaml", "llm-sim.yaml", "overload.yaml", "policies-bert.yaml", "policies-closed-sim-fast.yaml",
		"policies-closed-sim.yaml", "policies-quick.yaml", "policies-sim-fast.yaml", "policies-sim.yaml", "prefix-multiturn.yaml",
		"prefix-shared-poisson.yaml", "prefix-shared.yaml", "prefix-trace-kv256k.yaml", "prefix-trace.yaml", "quick.yaml",
		"reference-llm.yaml", "reference.yaml", "route-llmd-haproxy.yaml", "route-llmd-poisson.yaml", "route-llmd.yaml", "route-trace.yaml",
		"search-llm-sim-fine-continuous.yaml", "search-llm-sim-fine-static.yaml",
		"search-llm-sim.yaml", "search-sim-fine.yaml", "search-sim.yaml", "sim-gpu.yaml", "single-client.yaml"}
	var got []string
	for _, f := range files {
		got = append(got, filepath.Base(f))
	}
	if !slices.Equal(got, want) {
		t.Errorf("scenarios = %v, want %v", got, want)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			sc, err := scenario.LoadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if len(loadgen.Plans(sc)) == 0 && len(loadgen.SearchPlans(sc)) == 0 {
				t.Error("no points")
			}
			if sc.Server != nil && !slices.Contains(sc.Server.Flags(target.Settings{}), "--model") {
				t.Errorf("server flags %q do not name the model", sc.Server.Flags(target.Settings{}))
			}
		})
	}
}

func TestQuickScenarioFitsTwoMinutes(t *testing.T) {
	sc, err := scenario.LoadFile("../../scenarios/quick.yaml")
	if err != nil {
		t.Fatal(err)
	}
	plans := loadgen.Plans(sc)
	load := time.Duration(len(plans)) * sc.Estimate()
	if load > 80*time.Second {
		t.Errorf("quick.yaml plans %v of load (%d points); keep it well under two minutes", load, len(plans))
	}
	eps := map[string]bool{}
	for _, p := range plans {
		eps[p.Point.Endpoint] = true
	}
	if !eps["naive"] || !eps["batched"] {
		t.Errorf("quick.yaml endpoints %v; the report needs naive and batched", eps)
	}
}

func TestLLMQuickScenarioFitsAMinute(t *testing.T) {
	sc, err := scenario.LoadFile("../../scenarios/llm-quick.yaml")
	if err != nil {
		t.Fatal(err)
	}
	plans := loadgen.Plans(sc)
	// Load, and the naive point's drain: 16 streams of at most 160 tokens
	// queue for one slot.
	if load := time.Duration(len(plans)) * sc.Estimate(); load > 25*time.Second || sc.Load.Drain > 20*time.Second {
		t.Errorf("llm-quick.yaml plans %v of load and drains up to %v; keep the run under a minute", load, sc.Load.Drain)
	}
	if sc.Payload.LLM == nil || len(plans) != 3 {
		t.Errorf("llm-quick.yaml: %d points, LLM %v", len(plans), sc.Payload.LLM != nil)
	}
}
