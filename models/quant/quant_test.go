package quant

import (
	"errors"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/inferhq/infer/models/bert"
	"github.com/inferhq/infer/models/gpt2"
	"github.com/inferhq/infer/models/onnxgraph"
)

// Small shapes of the generated architectures, so that tests are fast.
var (
	testBert = bert.Arch{Name: "test", Layers: 2, Hidden: 32, Heads: 2, Intermediate: 64, Vocab: 300, MaxPositions: 64, TypeVocab: 2}
	testGPT2 = gpt2.Arch{Name: "test", Layers: 2, Hidden: 32, Heads: 2, Vocab: 300, Context: 64}
)

// generate writes a model with gen into a temporary directory.
func generate(t *testing.T, name string, gen func(io.Writer) error) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := onnxgraph.WriteFile(path, gen); err != nil {
		t.Fatal(err)
	}
	return path
}

func bertModel(t *testing.T, task bert.Task) string {
	return generate(t, "bert.onnx", func(w io.Writer) error { return bert.Generate(w, bert.Spec{Arch: testBert, Task: task}) })
}

func gpt2Model(t *testing.T) string {
	return generate(t, "gpt2.onnx", func(w io.Writer) error { return gpt2.Generate(w, gpt2.Spec{Arch: testGPT2}) })
}

// ops counts a model's nodes by operator, over all its graphs.
func ops(t *testing.T, path string) map[string]int {
	t.Helper()
	f, err := onnxgraph.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := map[string]int{}
	for _, s := range f.Scopes() {
		for _, n := range s.Nodes() {
			m[n.Op]++
		}
	}
	return m
}

func initializers(t *testing.T, path string) map[string]onnxgraph.Initializer {
	t.Helper()
	f, err := onnxgraph.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := map[string]onnxgraph.Initializer{}
	for _, in := range f.Initializers() {
		m[in.Name] = in
	}
	return m
}

func TestInt8(t *testing.T) {
	// A 2×3 matrix whose columns have very different ranges.
	w := []float32{
		1, 0.01, 0,
		-0.5, 0.02, 0,
	}
	q, s, err := Int8(w, 2, 3, false, false)
	if err != nil {
		t.Fatal(err)
	}
	wantScales := []float32{1.0 / 127, 0.02 / 127, 1}
	for i := range s {
		if math.Abs(float64(s[i]-wantScales[i])) > 1e-9 {
			t.Fatalf("scales %v, want %v (per column; 1 for a zero column)", s, wantScales)
		}
	}
	// -0.5·127 = -63.5 rounds to even, -64; 0.01/(0.02/127) is 63.5 but
	// for the float32 scale's rounding, just under.
	if want := []int8{127, 63, 0, -64, 127, 0}; !slices.Equal(q, want) {
		t.Errorf("Int8 per channel = %v, want %v", q, want)
	}

	// Per tensor: one scale; the small column loses its precision.
	q, s, _ = Int8(w, 2, 3, false, true)
	if len(s) != 1 || s[0] != float32(1.0/127) || !slices.Equal(q, []int8{127, 1, 0, -64, 3, 0}) {
		t.Errorf("Int8 per tensor = %v, %v", q, s)
	}

	// Transposed: w is [N=2, K=3]; q is [K=3, N=2], scaled per row of w.
	q, s, _ = Int8(w, 2, 3, true, false)
	if len(s) != 2 || s[0] != float32(1.0/127) || s[1] != float32(0.5/127) || !slices.Equal(q, []int8{127, -127, 1, 5, 0, 0}) {
		t.Errorf("Int8 transposed = %v, %v", q, s)
	}

	// The error of each weight is at most half its scale.
	r := []float32{0.3, -1.7, 2.2, 0.001, -0.04, 9, 1e-6, 5}
	q, s, _ = Int8(r, 4, 2, false, false)
	for i, v := range r {
		back := float32(q[i]) * s[i%2]
		if math.Abs(float64(back-v)) > float64(s[i%2])/2+1e-7 {
			t.Errorf("weight %d = %v comes back as %v, scale %v", i, v, back, s[i%2])
		}
	}

	for _, bad := range [][]float32{{1, float32(math.NaN())}, {float32(math.Inf(1)), 1}} {
		if _, _, err := Int8(bad, 1, 2, false, false); err == nil {
			t.Errorf("Int8(%v): no error for a value that is not finite", bad)
		}
	}
	if _, _, err := Int8([]float32{1}, 1, 2, false, false); err == nil {
		t.Error("Int8 of 1 value for a 1×2 matrix: no error")
	}
}

func TestRewriteBert(t *testing.T) {
	in := bertModel(t, bert.FillMask)
	out := filepath.Join(t.TempDir(), "int8.onnx")
	rep, err := File(in, out, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Per layer: Q, K, V, attention output, FFN in and out; the head's
	// transform and its Gemm tied to the word embeddings. The two
	// attention products multiply activations.
	layers := testBert.Layers
	if want := 6*layers + 2; len(rep.Quantized) != want || rep.Products != want+2*layers {
		t.Errorf("quantised %d of %d products, want %d of %d", len(rep.Quantized), rep.Products, want, want+2*layers)
	}
	if rep.Head == "" || !slices.Contains(rep.Quantized, rep.Head) {
		t.Errorf("head %q: want the tied Gemm found and quantised", rep.Head)
	}
	for _, s := range rep.Skipped {
		if !strings.Contains(s.Reason, "two activations") {
			t.Errorf("skipped %s: %s; want only products of two activations", s.Node, s.Reason)
		}
	}
	// The word, position and type embeddings.
	if rep.Tables != 3 || len(rep.Lookups) != 3 {
		t.Errorf("%d of %d embedding lookups quantised, want 3 of 3", len(rep.Lookups), rep.Tables)
	}
	if !(rep.BytesAfter < rep.BytesBefore) {
		t.Errorf("weights %d → %d bytes: want smaller", rep.BytesBefore, rep.BytesAfter)
	}

	got := ops(t, out)
	want := map[string]int{"DynamicQuantizeLinear": 0, "MatMulInteger": len(rep.Quantized), "MatMul": 2 * layers, "Gemm": 0, "Gather": 7}
	// One DynamicQuantizeLinear per activation: Q, K and V share theirs.
	want["DynamicQuantizeLinear"] = len(rep.Quantized) - 2*layers
	for op, n := range want {
		if got[op] != n {
			t.Errorf("%d %s nodes, want %d (all: %v)", got[op], op, n, got)
		}
	}
	// Per lookup, a Gather of int8 rows and one of their scales (the
	// sequence length's Gather is the seventh).
	if got["Cast"] != 18 {
		t.Errorf("%d Cast nodes, want 18: one per product and per lookup, and the mask's", got["Cast"])
	}
	inits := initializers(t, out)
	if _, ok := inits["embeddings.word_embeddings.weight"]; ok {
		t.Error("the float32 word embeddings are still there")
	}
	rows, scales := inits["embeddings.word_embeddings.weight_rows_int8"], inits["embeddings.word_embeddings.weight_row_scales"]
	if rows.Type != onnxgraph.Int8 || !slices.Equal(rows.Dims, []int64{300, 32}) || !slices.Equal(scales.Dims, []int64{300, 1}) {
		t.Errorf("word embeddings %+v, scales %+v: want int8 [300 32] and [300 1] scales", rows, scales)
	}
	if _, ok := inits["encoder.layer.0.attention.self.query.weight"]; ok {
		t.Error("the float32 query weight is still there")
	}
	q, s := inits["encoder.layer.0.attention.self.query.weight_quantized"], inits["encoder.layer.0.attention.self.query.weight_scale"]
	if q.Type != onnxgraph.Int8 || !slices.Equal(q.Dims, []int64{32, 32}) || !slices.Equal(s.Dims, []int64{32}) {
		t.Errorf("query weight %+v, scales %+v: want int8 [32 32] and 32 scales", q, s)
	}
	// The tied head reads the table transposed: [hidden, vocab].
	if h := inits["embeddings.word_embeddings.weight_quantized"]; !slices.Equal(h.Dims, []int64{32, 300}) {
		t.Errorf("head weight %+v, want int8 [32 300]", h)
	}
	info, err := onnxgraph.Inspect(out)
	if err != nil {
		t.Fatal(err)
	}
	orig, _ := onnxgraph.Inspect(in)
	if !slices.EqualFunc(info.Inputs, orig.Inputs, sameTensor) || !slices.EqualFunc(info.Outputs, orig.Outputs, sameTensor) {
		t.Errorf("inputs or outputs changed: %v → %v, %v → %v", orig.Inputs, info.Inputs, orig.Outputs, info.Outputs)
	}
	if info.Metadata[MetaQuantization] != "int8, weights per channel, activations per tensor at run time; 14 of 18 products; 3 of 3 embedding lookups" || info.Metadata[bert.MetaArch] != "bert-test" {
		t.Errorf("metadata %v", info.Metadata)
	}

	// Quantising it again is refused.
	_, err = File(out, filepath.Join(t.TempDir(), "again.onnx"), Options{})
	var ie *InputError
	if !errors.Is(err, ErrQuantized) || !errors.As(err, &ie) {
		t.Errorf("quantising a quantised model: %v, want ErrQuantized as an InputError", err)
	}
}

func sameTensor(a, b onnxgraph.Tensor) bool { return a.String() == b.String() }

func TestOptions(t *testing.T) {
	in := bertModel(t, bert.Embed)
	dir := t.TempDir()

	rep, err := File(in, filepath.Join(dir, "pt.onnx"), Options{PerTensor: true})
	if err != nil {
		t.Fatal(err)
	}
	inits := initializers(t, filepath.Join(dir, "pt.onnx"))
	if s := inits["encoder.layer.0.attention.self.query.weight_scale"]; len(s.Dims) != 0 {
		t.Errorf("per-tensor scale %+v: want a scalar", s)
	}
	if rep.Head != "" {
		t.Errorf("embed model: head %q, want none", rep.Head)
	}

	// Exclude by weight name (layer 0) and by node name.
	rep, err = File(in, filepath.Join(dir, "ex.onnx"), Options{Exclude: []string{"encoder.layer.0.*", "MatMul_1"}})
	if err != nil {
		t.Fatal(err)
	}
	excluded := 0
	for _, s := range rep.Skipped {
		if strings.HasPrefix(s.Reason, "excluded by") {
			excluded++
		}
	}
	if excluded != 6 {
		t.Errorf("%d products excluded, want layer 0's 6 (MatMul_1 is its query): %v", excluded, rep.Skipped)
	}
	if _, ok := initializers(t, filepath.Join(dir, "ex.onnx"))["encoder.layer.0.output.dense.weight"]; !ok {
		t.Error("an excluded weight was dropped")
	}

	// Keep the head: the tied Gemm stays in float32.
	fm := bertModel(t, bert.FillMask)
	rep, err = File(fm, filepath.Join(dir, "head.onnx"), Options{KeepHead: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := ops(t, filepath.Join(dir, "head.onnx"))["Gemm"]; got != 1 || !slices.ContainsFunc(rep.Skipped, func(s Skip) bool {
		return s.Node == rep.Head && strings.Contains(s.Reason, "LM head")
	}) {
		t.Errorf("%d Gemm left, skipped %v: want the head kept", got, rep.Skipped)
	}
	inits = initializers(t, filepath.Join(dir, "head.onnx"))
	if _, ok := inits["embeddings.word_embeddings.weight_quantized"]; ok {
		t.Error("the head was kept but its int8 copy written")
	}
	// The head reads the word embeddings in float32, so their Gather does
	// too: an int8 copy beside them would only add memory. The position
	// and type embeddings are quantised.
	if _, ok := inits["embeddings.word_embeddings.weight_rows_int8"]; ok || len(rep.Lookups) != 2 ||
		!slices.ContainsFunc(rep.Skipped, func(s Skip) bool { return strings.Contains(s.Reason, "table also read in float32 by Gemm") }) {
		t.Errorf("head kept: lookups %v, skipped %v; want the word embeddings kept for the head", rep.Lookups, rep.Skipped)
	}

	// Keep the embeddings.
	rep, err = File(fm, filepath.Join(dir, "emb.onnx"), Options{KeepEmbeddings: true})
	if err != nil {
		t.Fatal(err)
	}
	inits = initializers(t, filepath.Join(dir, "emb.onnx"))
	if w := inits["embeddings.word_embeddings.weight"]; w.Type != onnxgraph.Float32 || len(rep.Lookups) != 0 || rep.Tables != 3 ||
		ops(t, filepath.Join(dir, "emb.onnx"))["Gather"] != 4 || rep.Head == "" || !slices.Contains(rep.Quantized, rep.Head) {
		t.Errorf("embeddings kept: %+v, lookups %v of %d, head %q; want the tables in float32, the head int8", w, rep.Lookups, rep.Tables, rep.Head)
	}

	if _, err := File(in, filepath.Join(dir, "bad.onnx"), Options{Exclude: []string{"[a-"}}); !isInput(err) {
		t.Errorf("a bad pattern: %v, want an InputError", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "bad.onnx")); err == nil {
		t.Error("a failed quantisation left its output")
	}
}

func isInput(err error) bool {
	var ie *InputError
	return errors.As(err, &ie)
}

func TestRewriteGPT2(t *testing.T) {
	in := gpt2Model(t)
	out := filepath.Join(t.TempDir(), "int8.onnx")
	rep, err := File(in, out, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Per block: c_attn, attn c_proj, c_fc, mlp c_proj; and the head; each
	// input quantised per row once (no two products read one input).
	want := 4*testGPT2.Layers + 1
	if got := ops(t, out); len(rep.Quantized) != want || got["MatMulIntegerToFloat"] != want || got["ReduceMax"] != want ||
		got["MatMulInteger"] != 0 || got["DynamicQuantizeLinear"] != 0 || got["MatMulNBits"] != 0 {
		t.Errorf("quantised %d products, want %d as MatMulIntegerToFloat with activations per row: %v, %v", len(rep.Quantized), want, got, rep.Skipped)
	}
	if rep.Form != "int8, weights per channel, activations per row at run time" {
		t.Errorf("form %q: a decoder gets activations per row", rep.Form)
	}
	inits := initializers(t, out)
	// The head reads the table [vocab, hidden] transposed: [K 32, N 300].
	if h := inits["transformer.wte.weight_quantized"]; h.Type != onnxgraph.Int8 || !slices.Equal(h.Dims, []int64{32, 300}) {
		t.Errorf("head weight %+v: want int8 [hidden 32, vocab 300]", h)
	}
	if s := inits["transformer.h.0.attn.c_attn.weight_scale"]; !slices.Equal(s.Dims, []int64{96}) {
		t.Errorf("c_attn scales %+v: want one per column, 96", s)
	}
	// The token and position embeddings are read in int8 rows; the head
	// has its own copy of the token embeddings in blocks.
	if _, ok := inits["transformer.wte.weight"]; ok || len(rep.Lookups) != 2 {
		t.Errorf("lookups %v: want the float32 token embeddings replaced by int8 rows", rep.Lookups)
	}
	if r := inits["transformer.wte.weight_rows_int8"]; r.Type != onnxgraph.Int8 || !slices.Equal(r.Dims, []int64{300, 32}) {
		t.Errorf("token embeddings %+v: want int8 [300 32]", r)
	}
	info, err := onnxgraph.Inspect(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Inputs) != 3+2*testGPT2.Layers+1 {
		t.Errorf("inputs %v: the KV cache inputs must stay", info.Inputs)
	}

	// Activations per tensor and per block on request; int4 weights.
	rep, err = File(in, filepath.Join(t.TempDir(), "tensor.onnx"), Options{Activations: ActivationsTensor})
	if err != nil || !strings.Contains(rep.Form, "per tensor") {
		t.Errorf("activations per tensor: %v, %v", rep, err)
	}
	block := filepath.Join(t.TempDir(), "block.onnx")
	rep, err = File(in, block, Options{Activations: ActivationsBlock})
	if err != nil || rep.Form != "int8, weights in blocks of 128, activations per row and block at run time" || ops(t, block)["MatMulNBits"] != want {
		t.Fatalf("activations per block: %v, %v", rep, err)
	}
	// N rows of K in blocks (one block of 128 for K = 32, padded).
	if h := initializers(t, block)["transformer.wte.weight_quantized"]; h.Type != onnxgraph.Uint8 || !slices.Equal(h.Dims, []int64{300, 1, 128}) {
		t.Errorf("head weight in blocks %+v: want uint8 [vocab 300, 1 block, 128]", h)
	}
	int4 := filepath.Join(t.TempDir(), "int4.onnx")
	rep, err = File(in, int4, Options{Bits: 4, Block: 32})
	if err != nil || rep.Form != "int4, weights in blocks of 32, activations per row and block at run time" {
		t.Fatalf("int4: %v, %v", rep, err)
	}
	if h := initializers(t, int4)["transformer.wte.weight_quantized"]; !slices.Equal(h.Dims, []int64{300, 1, 16}) {
		t.Errorf("int4 head weight %+v: want [300, 1, 16]: 32 weights of 4 bits a block", h)
	}
}

func TestBlocks(t *testing.T) {
	// K = 5, N = 2, blocks of 4: two blocks a column, the second padded.
	w := []float32{
		1, -8,
		-0.5, 4,
		0.25, 2,
		0, 1,
		3, 0,
	}
	packed, scales, err := Blocks(w, 5, 2, false, 8, 4)
	if err != nil {
		t.Fatal(err)
	}
	wantScales := []float32{1.0 / 127, 3.0 / 127, 8.0 / 127, 1}
	for i := range wantScales {
		if math.Abs(float64(scales[i]-wantScales[i])) > 1e-9 {
			t.Fatalf("scales %v, want %v (column-major blocks; 1 for a zero block)", scales, wantScales)
		}
	}
	// Column 0: 127, -63.5→-64 (even), 31.75→32, 0 | 127, pad… ; stored +128.
	want := []byte{255, 64, 160, 128, 255, 128, 128, 128, 1, 192, 160, 144, 128, 128, 128, 128}
	if !slices.Equal(packed, want) {
		t.Errorf("packed %v, want %v", packed, want)
	}
	// Transposed input gives the same for the transposed matrix.
	wt := make([]float32, len(w))
	for kk := range 5 {
		for nn := range 2 {
			wt[nn*5+kk] = w[kk*2+nn]
		}
	}
	p2, s2, _ := Blocks(wt, 2, 5, true, 8, 4)
	if !slices.Equal(p2, packed) || !slices.Equal(s2, scales) {
		t.Errorf("transposed: %v %v, want %v %v", p2, s2, packed, scales)
	}
	// 4 bits: two a byte, low nibble first, v+8 with v in [-7, 7].
	p4, s4, _ := Blocks([]float32{7, -7, 3.5, 0}, 4, 1, false, 4, 4)
	if !slices.Equal(p4, []byte{15 | 1<<4, 12 | 8<<4}) || s4[0] != 1 {
		t.Errorf("4 bits: %v %v, want [31 140] [1]", p4, s4)
	}
	for _, bad := range []struct {
		w          []float32
		bits, size int
	}{{[]float32{1, float32(math.NaN())}, 8, 4}, {[]float32{1, 2}, 5, 4}, {[]float32{1, 2}, 8, 3}, {[]float32{1}, 8, 4}} {
		if _, _, err := Blocks(bad.w, 1, 2, false, bad.bits, bad.size); err == nil {
			t.Errorf("Blocks(%v, bits %d, block %d): no error", bad.w, bad.bits, bad.size)
		}
	}
}

func TestCheck(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Bits: 6}, "bits 6"},
		{Options{Bits: 4, Activations: ActivationsTensor}, "int4"},
		{Options{Bits: 4, Activations: ActivationsRow}, "int4"},
		{Options{Block: 100}, "block 100"},
		{Options{Block: 32, Activations: ActivationsTensor}, "block size"},
		{Options{Block: 32, Activations: ActivationsRow}, "block size"},
		{Options{PerTensor: true, Activations: ActivationsRow}, "per tensor"},
		{Options{PerTensor: true, Activations: ActivationsBlock}, "per tensor"},
		{Options{PerTensor: true, Bits: 4}, "per tensor"},
		{Options{Activations: 7}, "activations 7"},
		{Options{Exclude: []string{"["}}, "pattern"},
	} {
		if err := c.o.Check(); err == nil || !isInput(err) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v.Check() = %v, want an InputError saying %q", c.o, err, c.want)
		}
	}
	for _, a := range []Activations{ActivationsAuto, ActivationsTensor, ActivationsRow, ActivationsBlock} {
		if got, err := ParseActivations(a.String()); err != nil || got != a {
			t.Errorf("ParseActivations(%q) = %v, %v", a, got, err)
		}
	}
	if _, err := ParseActivations("column"); err == nil {
		t.Error("ParseActivations(column): no error")
	}
}

// A graph whose attention is ONNX Runtime's GroupQueryAttention over an
// int8 KV cache (the -int8 twins' before quantisation) has its weights
// quantised as any decoder's, its com.microsoft nodes and their scales
// kept, and the result is refused as quantised.
func TestRewriteKVInt8(t *testing.T) {
	in := generate(t, "gpt2-kv-int8.onnx", func(w io.Writer) error {
		return gpt2.Generate(w, gpt2.Spec{Arch: testGPT2, GQA: true, KVInt8: true, KVScales: &gpt2.KVScales{ID: "test",
			Compute: func() ([]float32, error) {
				return slices.Repeat([]float32{0.05}, testGPT2.Layers*2*testGPT2.Hidden), nil
			}}})
	})
	before := ops(t, in)
	out := filepath.Join(t.TempDir(), "int8.onnx")
	rep, err := File(in, out, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := 4*testGPT2.Layers + 1
	got := ops(t, out)
	if len(rep.Quantized) != want || rep.Products != want || got["MatMulIntegerToFloat"] != want ||
		got["GroupQueryAttention"] != testGPT2.Layers || before["GroupQueryAttention"] != testGPT2.Layers || got["MatMul"] != 0 {
		t.Errorf("quantised %d of %d products, want %d: %v (before: %v)", len(rep.Quantized), rep.Products, want, got, before)
	}
	if rep.Form != "int8, weights per channel, activations per row at run time" {
		t.Errorf("form %q: a decoder gets activations per row", rep.Form)
	}
	info, err := onnxgraph.Inspect(out)
	if err != nil {
		t.Fatal(err)
	}
	orig, _ := onnxgraph.Inspect(in)
	if !slices.EqualFunc(info.Inputs, orig.Inputs, sameTensor) || !slices.EqualFunc(info.Outputs, orig.Outputs, sameTensor) {
		t.Errorf("inputs or outputs changed: %v → %v, %v → %v", orig.Inputs, info.Inputs, orig.Outputs, info.Outputs)
	}
	for _, opts := range []Options{{}, {Bits: 4, Block: 32}} {
		_, err = File(out, filepath.Join(t.TempDir(), "again.onnx"), opts)
		if !errors.Is(err, ErrQuantized) || !isInput(err) {
			t.Errorf("quantising the int8 twin of a graph with an int8 KV cache (%+v): %v, want ErrQuantized", opts, err)
		}
	}
}

func TestRefused(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "text.onnx")
	os.WriteFile(text, []byte("not a model\n"), 0o644)

	// A graph with no product.
	noProduct := generate(t, "add.onnx", func(w io.Writer) error {
		g := onnxgraph.NewGraph("add")
		x := g.Input("x", onnxgraph.Float32, onnxgraph.Fixed(2))
		g.NodeOut("Add", []string{x, g.Weight("b", []int64{2}, onnxgraph.Fill(1))}, []string{"y"})
		g.Output("y", onnxgraph.Float32, onnxgraph.Fixed(2))
		_, err := (&onnxgraph.Model{Graph: g}).WriteTo(w)
		return err
	})
	// Products of activations only.
	activations := generate(t, "mm.onnx", func(w io.Writer) error {
		g := onnxgraph.NewGraph("mm")
		x := g.Input("x", onnxgraph.Float32, onnxgraph.Fixed(2), onnxgraph.Fixed(2))
		g.NodeOut("MatMul", []string{x, x}, []string{"y"})
		g.Output("y", onnxgraph.Float32, onnxgraph.Fixed(2), onnxgraph.Fixed(2))
		_, err := (&onnxgraph.Model{Graph: g}).WriteTo(w)
		return err
	})
	oldOpset := generate(t, "old.onnx", func(w io.Writer) error {
		return modelWithOpset(w, 10)
	})
	bertPath := bertModel(t, bert.Embed)

	for _, c := range []struct {
		name, in string
		opts     Options
		want     string
		is       error
	}{
		{"not onnx", text, Options{}, "not an ONNX model", nil},
		{"missing", filepath.Join(dir, "none.onnx"), Options{}, "no such file", nil},
		{"directory", dir, Options{}, "directory", nil},
		{"no product", noProduct, Options{}, "no MatMul or Gemm", ErrNothing},
		{"activations", activations, Options{}, "1 no constant weight", ErrNothing},
		{"all excluded", bertPath, Options{Exclude: []string{"*"}}, "excluded by", ErrNothing},
		{"opset", oldOpset, Options{}, "opset 10", nil},
		{"same file", bertPath, Options{}, "is the input", nil},
	} {
		out := filepath.Join(t.TempDir(), "out.onnx")
		if c.name == "same file" {
			out = c.in
		}
		_, err := File(c.in, out, c.opts)
		if err == nil || !isInput(err) || !strings.Contains(err.Error(), c.want) || (c.is != nil && !errors.Is(err, c.is)) {
			t.Errorf("%s: %v, want an InputError saying %q", c.name, err, c.want)
		}
	}
}

// modelWithOpset writes y = x·W at an opset.
func modelWithOpset(w io.Writer, opset int64) error {
	g := onnxgraph.NewGraph("mm")
	x := g.Input("x", onnxgraph.Float32, onnxgraph.Fixed(1), onnxgraph.Fixed(2))
	g.NodeOut("MatMul", []string{x, g.Weight("w", []int64{2, 2}, onnxgraph.Fill(1))}, []string{"y"})
	g.Output("y", onnxgraph.Float32, onnxgraph.Fixed(1), onnxgraph.Fixed(2))
	_, err := (&onnxgraph.Model{Graph: g, Opset: opset}).WriteTo(w)
	return err
}

func TestGemm(t *testing.T) {
	// y = 2·(x·Wᵀ) + 3·C, with W [N=3, K=2] read transposed.
	path := generate(t, "gemm.onnx", func(w io.Writer) error {
		g := onnxgraph.NewGraph("gemm")
		x := g.Input("x", onnxgraph.Float32, onnxgraph.Sym("batch"), onnxgraph.Fixed(2))
		wt := g.Weight("w", []int64{3, 2}, onnxgraph.Fill(0.5))
		c := g.Weight("c", []int64{3}, onnxgraph.Fill(1))
		g.NodeOut("Gemm", []string{x, wt, c}, []string{"y"}, onnxgraph.Int("transB", 1), onnxgraph.Float("alpha", 2), onnxgraph.Float("beta", 3))
		g.Output("y", onnxgraph.Float32, onnxgraph.Sym("batch"), onnxgraph.Fixed(3))
		_, err := (&onnxgraph.Model{Graph: g}).WriteTo(w)
		return err
	})
	out := filepath.Join(t.TempDir(), "q.onnx")
	if _, err := File(path, out, Options{}); err != nil {
		t.Fatal(err)
	}
	f, err := onnxgraph.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// alpha folds into the scales: 0.5 → 127 at scale 0.5/127, times 2.
	scale, err := f.Float32s("w_scale")
	if err != nil || len(scale) != 3 || math.Abs(float64(scale[0])-1.0/127) > 1e-9 {
		t.Errorf("scales %v, %v; want 3 of 2·0.5/127", scale, err)
	}
	bias, err := f.Float32s("c_scaled")
	if err != nil || !slices.Equal(bias, []float32{3, 3, 3}) {
		t.Errorf("bias %v, %v; want beta·C = 3 3 3", bias, err)
	}
	if _, ok := f.Initializer("c"); ok {
		t.Error("C, replaced by beta·C, is still there")
	}
	nodes := f.Scopes()[0].Nodes()
	last := nodes[len(nodes)-1]
	if last.Op != "Add" || !slices.Equal(last.Inputs[1:], []string{"c_scaled"}) || !slices.Equal(last.Outputs, []string{"y"}) {
		t.Errorf("last node %+v: want Add(·, c_scaled) → y", last)
	}
}

func TestEnsure(t *testing.T) {
	src := bertModel(t, bert.Embed)
	cache := t.TempDir()
	p1, err := Ensure(cache, src, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(filepath.Base(p1), "bert-int8-") || filepath.Dir(p1) != cache {
		t.Errorf("Ensure = %s, want %s/bert-int8-<hash>.onnx", p1, cache)
	}
	st1, _ := os.Stat(p1)
	p2, err := Ensure(cache, src, Options{})
	st2, _ := os.Stat(p2)
	if err != nil || p2 != p1 || !st2.ModTime().Equal(st1.ModTime()) {
		t.Errorf("second Ensure = %s, %v: want the same file, not rewritten", p2, err)
	}
	p3, err := Ensure(cache, src, Options{PerTensor: true})
	if err != nil || p3 == p1 {
		t.Errorf("Ensure per tensor = %s, %v: want another file", p3, err)
	}
	// A twin with the embedding tables kept is another file: one made
	// before they were quantised (quantizer version 1) is never served
	// for today's default options.
	if p, err := Ensure(cache, src, Options{KeepEmbeddings: true}); err != nil || p == p1 {
		t.Errorf("Ensure with the embeddings kept = %s, %v: want another file", p, err)
	}
	// Another source of the same name gets another file.
	other := generate(t, "bert.onnx", func(w io.Writer) error {
		return bert.Generate(w, bert.Spec{Arch: testBert, Task: bert.Embed, Seed: 2})
	})
	if p4, err := Ensure(cache, other, Options{}); err != nil || p4 == p1 {
		t.Errorf("Ensure of changed weights = %s, %v: want another file", p4, err)
	}

	// A failure leaves nothing in the cache.
	bad := filepath.Join(t.TempDir(), "bad.onnx")
	os.WriteFile(bad, []byte("junk"), 0o644)
	before, _ := os.ReadDir(cache)
	if _, err := Ensure(cache, bad, Options{}); !isInput(err) {
		t.Errorf("Ensure(junk) = %v, want an InputError", err)
	}
	if after, _ := os.ReadDir(cache); len(after) != len(before) {
		t.Errorf("the cache holds %d files after a failure, %d before", len(after), len(before))
	}
}

// TestSubgraph quantises products inside the branches of an If that read
// the main graph's weight: both branches share one int8 weight.
func TestSubgraph(t *testing.T) {
	path := filepath.Join(t.TempDir(), "if.onnx")
	if err := os.WriteFile(path, ifModel(), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "q.onnx")
	rep, err := File(path, out, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Quantized) != 2 {
		t.Errorf("quantised %v, want both branches' products", rep.Quantized)
	}
	got := ops(t, out)
	if got["MatMulInteger"] != 2 || got["MatMul"] != 0 {
		t.Errorf("ops %v: want 2 MatMulInteger", got)
	}
	inits := initializers(t, out)
	if _, ok := inits["w"]; ok || inits["w_quantized"].Type != onnxgraph.Int8 || len(inits) != 2 {
		t.Errorf("initializers %v: want w replaced by one int8 weight and its scales", inits)
	}
}

// ifModel returns a model whose If branches both compute x·w, w a weight
// of the main graph.
func ifModel() []byte {
	g := onnxgraph.NewGraph("if")
	cond := g.Input("cond", onnxgraph.Bool, onnxgraph.Fixed(1))
	x := g.Input("x", onnxgraph.Float32, onnxgraph.Fixed(1), onnxgraph.Fixed(2))
	w := g.Weight("w", []int64{2, 2}, onnxgraph.Fill(0.25))
	branch := func(name string) onnxgraph.Attr {
		b := onnxgraph.NewGraph(name)
		b.NodeOut("MatMul", []string{x, w}, []string{name + "_y"})
		b.Output(name+"_y", onnxgraph.Float32, onnxgraph.Fixed(1), onnxgraph.Fixed(2))
		return onnxgraph.Subgraph(name+"_branch", b)
	}
	g.NodeOut("If", []string{cond}, []string{"z"}, branch("then"), branch("else"))
	g.Output("z", onnxgraph.Float32, onnxgraph.Fixed(1), onnxgraph.Fixed(2))
	var buf strings.Builder
	if _, err := (&onnxgraph.Model{Graph: g}).WriteTo(&buf); err != nil {
		panic(err)
	}
	return []byte(buf.String())
}

func TestTwin(t *testing.T) {
	for _, c := range []struct {
		name, base string
		bits       int
		ok         bool
	}{
		{"gpt2-small-int8", "gpt2-small", 0, true},
		{"stories260k-int4", "stories260k", 4, true},
		{"bert-base", "bert-base", 0, false},
		{"-int8", "-int8", 0, false},
	} {
		base, opts, ok := Twin(c.name)
		if base != c.base || opts.Bits != c.bits || ok != c.ok {
			t.Errorf("Twin(%q) = %q, %+v, %v; want %q, bits %d, %v", c.name, base, opts, ok, c.base, c.bits, c.ok)
		}
	}
}

func TestPerTensorDecoder(t *testing.T) {
	in := gpt2Model(t)
	if _, err := File(in, filepath.Join(t.TempDir(), "x.onnx"), Options{PerTensor: true}); !isInput(err) || !strings.Contains(err.Error(), "KV cache") {
		t.Errorf("per-tensor weights on a decoder by default: %v, want an InputError naming the KV cache", err)
	}
	if _, err := File(in, filepath.Join(t.TempDir(), "y.onnx"), Options{PerTensor: true, Activations: ActivationsTensor}); err != nil {
		t.Errorf("per-tensor weights and activations on a decoder: %v", err)
	}
}

func TestRows(t *testing.T) {
	w := []float32{
		1, -0.5, 0.25,
		0, 0, 0,
		-0.02, 0.01, 0.005,
	}
	q, s, err := Rows(w, 3, 3)
	if err != nil {
		t.Fatal(err)
	}
	wantS := []float32{1.0 / 127, 1, 0.02 / 127}
	for i := range s {
		if math.Abs(float64(s[i]-wantS[i])) > 1e-9 {
			t.Fatalf("scales %v, want %v (per row; 1 for a row of zeros)", s, wantS)
		}
	}
	// -0.5·127 = -63.5 rounds to even; 0.01/(0.02/127) is 63.5 but for
	// the float32 scale's rounding, just under.
	if want := []int8{127, -64, 32, 0, 0, 0, -127, 63, 32}; !slices.Equal(q, want) {
		t.Errorf("Rows = %v, want %v", q, want)
	}
	for i, v := range w {
		if back := float32(q[i]) * s[i/3]; math.Abs(float64(back-v)) > float64(s[i/3])/2+1e-9 {
			t.Errorf("value %d = %v comes back as %v, scale %v", i, v, back, s[i/3])
		}
	}
	for _, bad := range [][]float32{{1, float32(math.NaN())}, {float32(math.Inf(-1)), 1}} {
		if _, _, err := Rows(bad, 1, 2); err == nil {
			t.Errorf("Rows(%v): no error for a value that is not finite", bad)
		}
	}
	if _, _, err := Rows(w, 2, 3); err == nil {
		t.Error("Rows of 9 values as 2×3: no error")
	}
}

// TestLookupsHostile: only a Gather of rows of a float32 [rows, width]
// initializer, by computed indices, reads its table in int8. The others
// are left as they are, each with its reason: rows of an activation (not a
// table), tables of int64 or int8 (quantised already), of rank 1,
// gathered along the columns, or by constant indices, and a table that
// another node also reads in float32.
func TestLookupsHostile(t *testing.T) {
	src := generate(t, "gathers.onnx", func(w io.Writer) error {
		g := onnxgraph.NewGraph("gathers")
		ids := g.Input("ids", onnxgraph.Int64, onnxgraph.Sym("n"))
		x := g.Input("x", onnxgraph.Float32, onnxgraph.Fixed(10), onnxgraph.Fixed(4))
		table := func(name string, dims ...int64) string { return g.Weight(name, dims, onnxgraph.Fill(0.5)) }
		gather := func(out, data, idx string, attrs ...onnxgraph.Attr) {
			g.NodeOut("Gather", []string{data, idx}, []string{out}, attrs...)
			g.Output(out, onnxgraph.Float32)
		}
		gather("ok", table("words", 10, 4), ids)
		gather("ok2", "words", ids) // a second Gather of one table
		gather("activation", x, ids)
		gather("int64", table("t64", 10, 4), ids)
		gather("int8", table("t8", 10, 4), ids)
		gather("rank1", table("vector", 10), ids)
		gather("columns", table("wide", 4, 10), ids, onnxgraph.Int("axis", 1))
		gather("constant", table("fixed", 10, 4), table("const_ids", 2))
		gather("shared_rows", table("shared", 10, 4), ids)
		g.NodeOut("Add", []string{x, "shared"}, []string{"sum"})
		g.Output("sum", onnxgraph.Float32)
		_, err := (&onnxgraph.Model{Graph: g}).WriteTo(w)
		return err
	})
	// Make t64 and t8 tables of int64 and int8, and const_ids indices.
	f, err := onnxgraph.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		t    onnxgraph.DataType
		size int
	}{{"t64", onnxgraph.Int64, 8}, {"t8", onnxgraph.Int8, 1}, {"const_ids", onnxgraph.Int64, 8}} {
		in, _ := f.Initializer(c.name)
		if err := f.SetInitializer(c.name, c.t, in.Dims, make([]byte, int(in.Elements())*c.size)); err != nil {
			t.Fatal(err)
		}
	}
	edited := filepath.Join(t.TempDir(), "edited.onnx")
	err = onnxgraph.WriteFile(edited, func(w io.Writer) error { _, err := f.WriteTo(w); return err })
	f.Close()
	if err != nil {
		t.Fatal(err)
	}

	out := filepath.Join(t.TempDir(), "q.onnx")
	rep, err := File(edited, out, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Lookups, []string{"ok", "ok2"}) || rep.Tables != 8 {
		t.Errorf("lookups %v of %d Gathers of a table: want the two of words, of 8", rep.Lookups, rep.Tables)
	}
	reasons := map[string]string{}
	for _, s := range rep.Skipped {
		reasons[s.Node] = s.Reason
	}
	want := map[string]string{
		"int64":       "table of type int64",
		"int8":        "table of type int8",
		"rank1":       "table of rank 1",
		"columns":     "Gather along the table's columns",
		"constant":    "constant indices (folded into a constant by the runtime)",
		"shared_rows": "table also read in float32 by Add sum",
	}
	if !maps.Equal(reasons, want) {
		t.Errorf("skipped %v, want %v", reasons, want)
	}
	inits := initializers(t, out)
	if _, ok := inits["words"]; ok || inits["words_rows_int8"].Type != onnxgraph.Int8 || inits["shared"].Type != onnxgraph.Float32 {
		t.Errorf("initializers %v: want words replaced by int8 rows (once), shared kept", slices.Sorted(maps.Keys(inits)))
	}
	if got := ops(t, out); got["Gather"] != 7+4 || got["Cast"] != 2 || got["Mul"] != 2 {
		t.Errorf("ops %v: want the 7 Gathers left and 2×2 for the lookups of words, each with its Cast and Mul", got)
	}

	// A table that is not finite is refused, and nothing written.
	nan := generate(t, "nan.onnx", func(w io.Writer) error {
		g := onnxgraph.NewGraph("nan")
		ids := g.Input("ids", onnxgraph.Int64, onnxgraph.Sym("n"))
		g.NodeOut("Gather", []string{g.Weight("t", []int64{2, 2}, onnxgraph.Fill(float32(math.NaN()))), ids}, []string{"y"})
		g.Output("y", onnxgraph.Float32)
		_, err := (&onnxgraph.Model{Graph: g}).WriteTo(w)
		return err
	})
	bad := filepath.Join(t.TempDir(), "nan-int8.onnx")
	if _, err := File(nan, bad, Options{}); !isInput(err) || !strings.Contains(err.Error(), "embedding table") {
		t.Errorf("a table of NaN: %v, want an InputError naming the table", err)
	}
	if _, err := os.Stat(bad); err == nil {
		t.Error("a refused table left its output")
	}
	// Kept in float32 on request: nothing else to quantise.
	if _, err := File(nan, bad, Options{KeepEmbeddings: true}); !errors.Is(err, ErrNothing) || !strings.Contains(err.Error(), "1 embedding table kept in float32") {
		t.Errorf("embeddings kept, no product: %v, want ErrNothing saying why", err)
	}
}
