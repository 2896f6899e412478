package gpt2

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/bpe"
	"github.com/inferhq/infer/models/onnx"
	"github.com/inferhq/infer/models/onnxgraph"
)

// micro is a GPT-2 small enough for the Go reference to check every
// position quickly: two layers, two heads, a 300-token vocabulary.
var micro = Arch{Name: "micro", Layers: 2, Hidden: 32, Heads: 2, Vocab: 300, Context: 64}

func TestParams(t *testing.T) {
	for _, a := range append(Archs(), micro) {
		g := build(Spec{Arch: a, Seed: 1}, nil)
		if got, want := g.Params(), a.Params(); got != want {
			t.Errorf("%s: the graph has %d parameters, Params() says %d", a, got, want)
		}
	}
	small, err := Lookup("GPT2-Small")
	if err != nil {
		t.Fatal(err)
	}
	// OpenAI's gpt2: 124,439,808 parameters with the LM head tied.
	if got := small.Params(); math.Abs(float64(got)-124.4e6)/124.4e6 > 0.01 || got != 124_439_808 {
		t.Errorf("gpt2-small has %d parameters, want 124,439,808 (124.4M ± 1%%)", got)
	}
	if small.Context != 1024 || small.Vocab != 50257 || small.EOS() != 50256 || small.Shape() != "L12/H768/A12" {
		t.Errorf("gpt2-small = %+v", small)
	}
	for _, name := range []string{"tiny", "bert-tiny", "gpt2-huge"} {
		if _, err := Lookup(name); err == nil || !strings.Contains(err.Error(), "known: gpt2-tiny, gpt2-mini, gpt2-small") {
			t.Errorf("Lookup(%q) = %v, want an error listing the known names", name, err)
		}
	}
	if bad := (Arch{Name: "odd", Layers: 1, Hidden: 10, Heads: 3, Vocab: 5, Context: 4}); bad.validate() == nil {
		t.Error("3 heads of a hidden size of 10 validated")
	}
}

func TestGenerate(t *testing.T) {
	var a, b bytes.Buffer
	s := Spec{Arch: micro}
	if err := errors.Join(Generate(&a, s), Generate(&b, s)); err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(a.Bytes()) != sha256.Sum256(b.Bytes()) {
		t.Error("two writes of the same spec differ")
	}
	var c bytes.Buffer
	if err := Generate(&c, Spec{Arch: micro, Seed: 2}); err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(a.Bytes(), c.Bytes()) {
		t.Error("seeds 1 and 2 wrote the same file")
	}
	names := map[string]bool{}
	specs := []Spec{s, {Arch: micro, Seed: 2}, {Arch: micro, NoPositionIDs: true}, {Arch: micro, CacheBranch: true}, {Arch: micro, AllLogits: true},
		{Arch: micro, InPlaceKV: true}, {Arch: micro, GQA: true},
		{Arch: micro, GQA: true, KVInt8: true, KVScales: scales("a", 0.1)}, {Arch: micro, GQA: true, KVInt8: true, KVScales: scales("b", 0.1)}}
	for _, v := range specs {
		names[v.FileName()] = true
	}
	if len(names) != len(specs) {
		t.Errorf("FileName gives %d names to %d different specs: %v", len(names), len(specs), names)
	}
	for _, bad := range []struct {
		what string
		s    Spec
	}{
		{"a KV cache in place without position_ids", Spec{Arch: micro, InPlaceKV: true, NoPositionIDs: true}},
		{"GQA without position_ids", Spec{Arch: micro, GQA: true, NoPositionIDs: true}},
		{"GQA and InPlaceKV", Spec{Arch: micro, GQA: true, InPlaceKV: true}},
		{"GQA with use_cache_branch", Spec{Arch: micro, GQA: true, CacheBranch: true}},
		{"an int8 KV cache without GQA", Spec{Arch: micro, KVInt8: true}},
		{"an int8 KV cache in place", Spec{Arch: micro, InPlaceKV: true, KVInt8: true, KVScales: scales("a", 0.1)}},
		{"GQA's int8 KV cache without scales", Spec{Arch: micro, GQA: true, KVInt8: true}},
		{"too few scales", Spec{Arch: micro, GQA: true, KVInt8: true, KVScales: &KVScales{ID: "x", Compute: func() ([]float32, error) { return []float32{1}, nil }}}},
		{"a zero scale", Spec{Arch: micro, GQA: true, KVInt8: true, KVScales: scales("z", 0)}},
		{"a NaN scale", Spec{Arch: micro, GQA: true, KVInt8: true, KVScales: scales("n", float32(math.NaN()))}},
		{"scales that fail", Spec{Arch: micro, GQA: true, KVInt8: true, KVScales: &KVScales{ID: "x", Compute: func() ([]float32, error) { return nil, errors.New("no") }}}},
	} {
		if err := Generate(&c, bad.s); err == nil {
			t.Errorf("Generate accepted %s", bad.what)
		}
	}
	c.Reset()
	if err := Generate(&c, Spec{Arch: micro, GQA: true, KVInt8: true, KVScales: scales("a", 0.1)}); err != nil {
		t.Error(err)
	}
	if err := Generate(&c, Spec{Arch: Arch{Name: "Bad Name", Layers: 1, Hidden: 2, Heads: 1, Vocab: 2, Context: 2}}); err == nil {
		t.Error("Generate accepted the name \"Bad Name\"")
	}
}

// scales are KVScales of micro, every one v.
func scales(id string, v float32) *KVScales {
	return &KVScales{ID: id, Compute: func() ([]float32, error) {
		return slices.Repeat([]float32{v}, micro.Layers*2*micro.Hidden), nil
	}}
}

// TestInspect reads the generated graph back: optimum's names and shapes.
func TestInspect(t *testing.T) {
	tiny, _ := Lookup("gpt2-tiny")
	dir := t.TempDir()
	path, err := Ensure(dir, Spec{Arch: tiny})
	if err != nil {
		t.Fatal(err)
	}
	if again, err := Ensure(dir, Spec{Arch: tiny}); err != nil || again != path {
		t.Errorf("second Ensure = %s, %v; want the cached %s", again, err, path)
	}
	info, err := onnxgraph.Inspect(path)
	if err != nil {
		t.Fatal(err)
	}
	ins, outs := tensorStrings(info.Inputs), tensorStrings(info.Outputs)
	wantIns := []string{
		"input_ids int64 [batch_size, sequence_length]",
		"attention_mask int64 [batch_size, past_sequence_length + sequence_length]",
		"position_ids int64 [batch_size, sequence_length]",
		"past_key_values.0.key float32 [batch_size, 2, past_sequence_length, 64]",
		"past_key_values.0.value float32 [batch_size, 2, past_sequence_length, 64]",
		"past_key_values.1.key float32 [batch_size, 2, past_sequence_length, 64]",
		"past_key_values.1.value float32 [batch_size, 2, past_sequence_length, 64]",
		"logits_to_keep int64 [1]",
	}
	wantOuts := []string{
		"logits float32 [batch_size, kept_length, 50257]",
		"present.0.key float32 [batch_size, 2, past_sequence_length + sequence_length, 64]",
		"present.0.value float32 [batch_size, 2, past_sequence_length + sequence_length, 64]",
		"present.1.key float32 [batch_size, 2, past_sequence_length + sequence_length, 64]",
		"present.1.value float32 [batch_size, 2, past_sequence_length + sequence_length, 64]",
	}
	if strings.Join(ins, "\n") != strings.Join(wantIns, "\n") || strings.Join(outs, "\n") != strings.Join(wantOuts, "\n") {
		t.Errorf("inputs:\n%s\noutputs:\n%s", strings.Join(ins, "\n"), strings.Join(outs, "\n"))
	}
	if info.Opset != 21 || info.Params != tiny.Params() || info.Metadata[MetaArch] != "gpt2-tiny" ||
		info.Metadata[MetaContext] != "1024" || info.Metadata[MetaEOS] != "50256" || info.Metadata[MetaTask] != Task {
		t.Errorf("opset %d, %d params, metadata %v", info.Opset, info.Params, info.Metadata)
	}
}

// TestORTReference runs generated graphs in ONNX Runtime through the
// decoder of models/onnx, token by token with the KV cache, against the Go
// reference at every position.
func TestORTReference(t *testing.T) {
	tiny, _ := Lookup("gpt2-tiny")
	for _, spec := range []Spec{{Arch: micro}, {Arch: tiny}, {Arch: micro, AllLogits: true}, {Arch: micro, InPlaceKV: true},
		{Arch: tiny, InPlaceKV: true}} {
		a := spec.Arch
		name := a.Name
		if spec.AllLogits {
			name += "/all-logits"
		}
		if spec.InPlaceKV {
			name += "/in-place"
		}
		t.Run(name, func(t *testing.T) {
			path, err := Ensure(t.TempDir(), spec)
			if err != nil {
				t.Fatal(err)
			}
			f, err := onnx.OpenDecoder(onnx.DecoderConfig{Path: path, Tokenizer: bpe.GPT2()})
			requireRuntime(t, err)
			defer f.Close()
			m, err := f.New(context.Background(), 0)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			d := m.(*onnx.Decoder)
			tokens := []int32{5, 17, 3, int32(a.Vocab - 1), 42, 8, 8, 1}
			want := reference{a: a, seed: DefaultSeed}.logits(tokens)
			// The first three as a prompt, then one token a step.
			next := make([]int32, 1)
			worst := 0.0
			for p := 2; p < len(tokens); p++ {
				seq := models.StepSeq{ID: 1, Past: p, Tokens: tokens[p : p+1], Sample: true}
				if p == 2 {
					seq = models.StepSeq{ID: 1, Tokens: tokens[:3], Sample: true}
				}
				if err := d.Step(context.Background(), []models.StepSeq{seq}, next); err != nil {
					t.Fatal(err)
				}
				got := d.Logits(0)
				for v := range got {
					diff := math.Abs(float64(got[v]) - want[p][v])
					worst = max(worst, diff)
					if diff > 1e-4 {
						t.Fatalf("position %d, token %d: logit %g, reference %g", p, v, got[v], want[p][v])
					}
				}
			}
			t.Logf("%d positions of %d logits within %.2g of the reference", len(tokens)-2, a.Vocab, worst)
		})
	}
}

// requireRuntime skips when err says the ONNX Runtime is missing, unless
// INFER_REQUIRE_ORT=1 (CI); it fails on any other error.
func requireRuntime(t *testing.T, err error) {
	t.Helper()
	switch {
	case err == nil:
	case errors.Is(err, onnx.ErrNoRuntime) && os.Getenv("INFER_REQUIRE_ORT") != "1":
		t.Skipf("no ONNX Runtime (run scripts/setup-ort.sh): %v", err)
	default:
		t.Fatal(err)
	}
}

// tensorStrings describes each tensor as onnxgraph.Tensor.String does.
func tensorStrings(ts []onnxgraph.Tensor) []string {
	var out []string
	for _, x := range ts {
		out = append(out, x.String())
	}
	return out
}
