package cmd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/inferhq/infer/loadgen/target"
	"github.com/inferhq/infer/models/bert"
	"github.com/inferhq/infer/models/gpt2"
	"github.com/inferhq/infer/models/onnx"
	"github.com/inferhq/infer/models/onnxgraph"
	"github.com/inferhq/infer/models/quant"
	"github.com/inferhq/infer/report"
)

func TestQuantizeFlags(t *testing.T) {
	var got *modelsQuantizeOptions
	cmd := newCmdModelsQuantize(func(_ context.Context, o *modelsQuantizeOptions) error { got = o; return nil })
	if !execFlags(t, cmd, []string{"in.onnx", "out.onnx", "--per-tensor", "--exclude", "a*", "--exclude", "b,c", "--keep-head",
		"--keep-embeddings", "--activations", "tensor", "--json"}, "") {
		return
	}
	if got.In != "in.onnx" || got.Out != "out.onnx" || !got.PerTensor || !slices.Equal(got.Exclude, []string{"a*", "b,c"}) ||
		!got.KeepHead || !got.KeepEmbed || got.Activations != "tensor" || got.Bits != 8 || got.Block != 0 || !got.JSON {
		t.Errorf("options = %+v", got)
	}
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"in.onnx"}, "takes an input model and an output .onnx file"},
		{[]string{"a", "b", "c"}, "takes an input model"},
		{[]string{"a", "b", "--bogus"}, "unknown flag"},
		{[]string{"a", "b", "--bits", "x"}, `--bits "x": want a whole number`},
	} {
		cmd := newCmdModelsQuantize(func(context.Context, *modelsQuantizeOptions) error { return nil })
		execFlags(t, cmd, tc.args, tc.wantErr)
	}
}

// tinyBert writes a small BERT graph (fill-mask or embed) and returns its
// path.
func tinyBert(t *testing.T, task bert.Task) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tiny-"+string(task)+".onnx")
	arch := bert.Arch{Name: "t", Layers: 1, Hidden: 32, Heads: 2, Intermediate: 64, Vocab: 30522, MaxPositions: 128, TypeVocab: 2}
	if err := onnxgraph.WriteFile(path, func(w io.Writer) error { return bert.Generate(w, bert.Spec{Arch: arch, Task: task}) }); err != nil {
		t.Fatal(err)
	}
	return path
}

// skipWithoutRuntime skips t when err says that ONNX Runtime is missing,
// unless INFER_REQUIRE_ORT=1.
func skipWithoutRuntime(t *testing.T, err error) {
	t.Helper()
	if errors.Is(err, onnx.ErrNoRuntime) {
		if os.Getenv("INFER_REQUIRE_ORT") == "1" {
			t.Fatal(err)
		}
		t.Skip("no ONNX Runtime (run scripts/setup-ort.sh)")
	}
}

// infer runs the command line and returns its exit code and what it wrote.
func infer(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	root := newCmdRoot(&out, &out)
	root.SetArgs(args)
	err := execute(context.Background(), root)
	skipWithoutRuntime(t, err)
	return exitCode(err, &out), out.String()
}

func TestQuantizeCommand(t *testing.T) {
	src := tinyBert(t, bert.FillMask)
	dir := t.TempDir()
	out := filepath.Join(dir, "q.onnx")
	code, text := infer(t, "models", "quantize", src, out)
	if code != exitOK || !strings.Contains(text, "8 of 10 MatMul/Gemm nodes quantised (int8, weights per channel, activations per tensor at run time), 3 of 3 embedding lookups int8 per row") ||
		!strings.Contains(text, "LM head: Gemm_1, quantised") || !strings.Contains(text, "left in float32: 2, no constant weight") {
		t.Fatalf("quantize: exit %d\n%s", code, text)
	}
	info, err := onnxgraph.Inspect(out)
	if err != nil || !strings.HasPrefix(info.Metadata[quant.MetaQuantization], "int8, weights per channel") {
		t.Errorf("output: %v, %v", info, err)
	}
	// models info counts the int8 weights, not only what stayed float.
	srcInfo, err := onnxgraph.Inspect(src)
	if err != nil || info.IntegerParams < srcInfo.Params/2 || info.Params > srcInfo.Params/2 {
		t.Errorf("parameters: float32 %d → %d, int8 %d (%v)", srcInfo.Params, info.Params, info.IntegerParams, err)
	}
	// A built-in's name is not a file: a usage error that says so.
	for arg, want := range map[string]string{
		"gpt2-small-int8":  "gpt2-small-int8 is a built-in model, not a file: models info reads an .onnx file",
		dir + "/none.onnx": dir + "/none.onnx: no such file",
	} {
		if code, text := infer(t, "models", "info", arg); code != exitUsage || !strings.Contains(text, want) {
			t.Errorf("models info %s: exit %d, want %d and %q in:\n%s", arg, code, exitUsage, want, text)
		}
	}
	code, text = infer(t, "models", "info", out)
	if want := fmt.Sprintf("parameters: %d (%s) in integers of 8 bits or fewer, as stored; %d (%s) in floating point",
		info.IntegerParams, millions(info.IntegerParams), info.Params, millions(info.Params)); code != exitOK || !strings.Contains(text, want) {
		t.Errorf("models info: exit %d, want %q in:\n%s", code, want, text)
	}

	code, text = infer(t, "models", "quantize", src, filepath.Join(dir, "q.json.onnx"), "--json", "--keep-head", "--activations", "block", "--bits", "4", "--block", "16")
	var rep quantizeReport
	// The head kept in float32 keeps the word embeddings it is tied to.
	if code != exitOK || json.Unmarshal([]byte(text), &rep) != nil || len(rep.Quantized) != 7 || rep.Head != "Gemm_1" ||
		rep.Form != "int4, weights in blocks of 16, activations per row and block at run time" || rep.Tables != 3 || len(rep.Lookups) != 2 {
		t.Errorf("quantize --json: exit %d, %+v\n%s", code, rep, text)
	}
	code, text = infer(t, "models", "quantize", src, filepath.Join(dir, "q.emb.onnx"), "--json", "--keep-embeddings")
	rep = quantizeReport{}
	if code != exitOK || json.Unmarshal([]byte(text), &rep) != nil || len(rep.Quantized) != 8 || rep.Tables != 3 || len(rep.Lookups) != 0 {
		t.Errorf("quantize --keep-embeddings: exit %d, %+v\n%s", code, rep, text)
	}

	text2 := filepath.Join(dir, "notes.txt")
	os.WriteFile(text2, []byte("hello\n"), 0o644)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{text2, filepath.Join(dir, "x.onnx")}, "not an ONNX model"},
		{[]string{out, filepath.Join(dir, "x.onnx")}, "already quantised"},
		{[]string{src, filepath.Join(dir, "x.onnx"), "--exclude", "*"}, "nothing to quantise"},
		{[]string{src, filepath.Join(dir, "x.onnx"), "--exclude", "[x"}, "exclude pattern"},
		{[]string{src, filepath.Join(dir, "x.onnx"), "--activations", "column"}, "--activations"},
		{[]string{src, filepath.Join(dir, "x.onnx"), "--bits", "3"}, "bits 3"},
		{[]string{src, filepath.Join(dir, "x.onnx"), "--per-tensor", "--activations", "row"}, "per tensor"},
		{[]string{src, filepath.Join(dir, "x.onnx"), "--bits", "4", "--activations", "row"}, "int4"},
		{[]string{src, filepath.Join(dir, "none", "x.onnx")}, "directory does not exist"},
		{[]string{src, src}, "is the input"},
		{[]string{filepath.Join(dir, "missing.onnx"), filepath.Join(dir, "x.onnx")}, "no such file"},
		{[]string{"gpt-17", filepath.Join(dir, "x.onnx")}, `"gpt-17": unknown model`},
		{[]string{"sim", filepath.Join(dir, "x.onnx")}, "a simulated model"},
		{[]string{"bert-tiny-int8", filepath.Join(dir, "x.onnx")}, "already quantised"},
		{[]string{src, filepath.Join(dir, "x.onnx"), "--unknown"}, "unknown flag"},
	} {
		code, text := infer(t, append([]string{"models", "quantize"}, tc.args...)...)
		if code != exitUsage || !strings.Contains(text, tc.want) {
			t.Errorf("quantize %v: exit %d, %q; want exit 2 saying %q", tc.args, code, text, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "x.onnx")); err == nil {
		t.Error("a refused quantisation left an output")
	}
}

func TestCompareFlags(t *testing.T) {
	var got *modelsCompareOptions
	cmd := newCmdModelsCompare(func(_ context.Context, o *modelsCompareOptions) error { got = o; return nil })
	if !execFlags(t, cmd, []string{"a", "b"}, "") {
		return
	}
	if got.A != "a" || got.B != "b" || got.Items != 0 || got.Prompts != 16 || got.Tokens != 128 || got.Task != "" || got.MaxSeqLen != 128 {
		t.Errorf("defaults = %+v", got)
	}
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"a"}, "takes two models"},
		{[]string{"a", "b", "--items", "-1"}, "--items -1"},
		{[]string{"a", "b", "--items", "1000000"}, "--items 1000000"},
		{[]string{"a", "b", "--prompts", "0"}, "--prompts 0"},
		{[]string{"a", "b", "--tokens", "-3"}, "--tokens -3"},
		{[]string{"a", "b", "--threads", "-1"}, "--threads -1"},
		{[]string{"nope.onnx", "b"}, "no such file"},
		{[]string{"sim-lm", "gpt2-tiny"}, "a simulated model"},
	} {
		cmd := newCmdModelsCompare(runModelsCompare)
		execFlags(t, cmd, tc.args, tc.wantErr)
	}
}

func TestCompareCommand(t *testing.T) {
	dir := t.TempDir()
	fm, emb := tinyBert(t, bert.FillMask), tinyBert(t, bert.Embed)
	fmq, embq := filepath.Join(dir, "fm.onnx"), filepath.Join(dir, "emb.onnx")
	for _, p := range [][2]string{{fm, fmq}, {emb, embq}} {
		if code, text := infer(t, "models", "quantize", p[0], p[1]); code != exitOK {
			t.Fatalf("quantize: %s", text)
		}
	}
	code, text := infer(t, "models", "compare", fm, fmq, "--items", "50")
	if code != exitOK || !regexp.MustCompile(`fill-mask, \d+ masks: top-1 agreement (0\.9\d+|1\.0000), top-5 overlap 0\.\d+`).MatchString(text) {
		t.Errorf("compare fill-mask: exit %d\n%s", code, text)
	}
	code, text = infer(t, "models", "compare", emb, embq, "--items", "40", "--json")
	var rep compareReport
	if code != exitOK || json.Unmarshal([]byte(text), &rep) != nil || rep.Embedding == nil || rep.Embedding.Items != 40 ||
		rep.Embedding.Cosine.Min < 0.99 || rep.Task != "embed" {
		t.Errorf("compare embed --json: exit %d, %+v\n%s", code, rep, text)
	}
	if code, text := infer(t, "models", "compare", fm, emb); code != exitUsage || !strings.Contains(text, "one task") {
		t.Errorf("compare fill-mask with embed: exit %d, %s; want a usage error", code, text)
	}
}

func TestCompareDecoders(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "dec.onnx")
	arch := gpt2.Arch{Name: "t", Layers: 1, Hidden: 32, Heads: 2, Vocab: 50257, Context: 128}
	if err := onnxgraph.WriteFile(src, func(w io.Writer) error { return gpt2.Generate(w, gpt2.Spec{Arch: arch}) }); err != nil {
		t.Fatal(err)
	}
	q := filepath.Join(dir, "dec-int8.onnx")
	if code, text := infer(t, "models", "quantize", src, q); code != exitOK || !strings.Contains(text, "activations per row") {
		t.Fatalf("quantize a decoder: exit %d\n%s", code, text)
	}
	code, text := infer(t, "models", "compare", src, q, "--prompts", "4", "--tokens", "8", "--json")
	var rep compareReport
	if code != exitOK || json.Unmarshal([]byte(text), &rep) != nil || rep.Decoding == nil || rep.Decoding.Runs != 4 ||
		rep.Decoding.Positions < 4*8 || rep.Task != "text-generation" {
		t.Fatalf("compare decoders: exit %d, %+v\n%s", code, rep, text)
	}
	if code, text := infer(t, "models", "compare", src, q, "--tokens", "200"); code != exitUsage || !strings.Contains(text, "context") {
		t.Errorf("--tokens past the context: exit %d, %s", code, text)
	}
	if code, text := infer(t, "models", "compare", src, tinyBert(t, bert.Embed)); code != exitUsage || !strings.Contains(text, "decoder") {
		t.Errorf("a decoder against an encoder: exit %d, %s", code, text)
	}
}

// infer bench runs a sweep of models side by side, one server each, and
// its summary gives each model's throughput, p99 and memory with the
// accuracy of the second against the first.
func TestBenchModels(t *testing.T) {
	src := tinyBert(t, bert.FillMask)
	q := filepath.Join(t.TempDir(), "tiny-int8.onnx")
	if code, text := infer(t, "models", "quantize", src, q); code != exitOK {
		t.Fatalf("quantize: %s", text)
	}
	scenario := writeScenario(t, fmt.Sprintf(`
name: models
server: {}
load:
  concurrency: 2
  warmup: 100ms
  duration: 400ms
sweep:
  model: [%s, %s]
  batch: 8
`, src, q))
	var stdout, stderr bytes.Buffer
	opts := &benchOptions{
		Scenario: scenario, Out: filepath.Join(t.TempDir(), "run"), Output: "text", Log: logOptions{Level: "info", Format: "text"},
		Stdout: &stdout, Stderr: &stderr,
		Launcher: target.ExecLauncher{Path: os.Args[0], Env: []string{mainEnv + "=1"}},
	}
	err := runBench(context.Background(), opts)
	skipWithoutRuntime(t, err)
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, stderr.String())
	}
	text := stdout.String()
	want := regexp.MustCompile(`models side by side \(ratios to \S+tiny-fill-mask.onnx\):
  \S+tiny-fill-mask.onnx: \S+ items/s \(1.00×\), p99 \S+ \(1.00×\), RSS \d+ MiB \(1.00×\) at batched c=2
  \S+tiny-int8.onnx: \S+ items/s \(\d+\.\d\d×\), p99 \S+ \(\d+\.\d\d×\), RSS \d+ MiB \(\d+\.\d\d×\) at batched c=2
    against \S+: fill-mask top-1 agreement (0\.9\d+|1\.0000), top-5 overlap \d\.\d+ over \d+ masks
`)
	if !want.MatchString(text) {
		t.Errorf("summary:\n%s\nwant the models side by side", text)
	}
	t.Logf("summary:\n%s", text)

	// infer report draws the same from the run directory, the accuracy
	// kept in its manifest.
	var rep bytes.Buffer
	if err := runReport(context.Background(), &reportOptions{Run: opts.Out, Stdout: &rep}); err != nil {
		t.Fatalf("report: %v\n%s", err, rep.String())
	}
	md, err := os.ReadFile(filepath.Join(report.DefaultDir(opts.Out), report.SummaryFile))
	if err != nil {
		t.Fatal(err)
	}
	want = regexp.MustCompile(`## Models side by side

.*

- \S+tiny-fill-mask.onnx: \S+ items/s \(1.00×\), p99 \S+ \(1.00×\), RSS \d+ MiB \(1.00×\) at batched c=2
- \S+tiny-int8.onnx: \S+ items/s \(\d+\.\d\d×\), p99 \S+ \(\d+\.\d\d×\), RSS \d+ MiB \(\d+\.\d\d×\) at batched c=2
  - against \S+: fill-mask top-1 agreement (0\.9\d+|1\.0000), top-5 overlap \d\.\d+ over \d+ masks
`)
	if !want.Match(md) {
		t.Errorf("report summary.md:\n%s\nwant the models side by side", md)
	}
}
