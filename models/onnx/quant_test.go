package onnx

import (
	"context"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"testing"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/inferhq/infer/loadgen/corpus"
	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/bert"
	"github.com/inferhq/infer/models/compare"
	"github.com/inferhq/infer/models/gpt2"
	"github.com/inferhq/infer/models/onnxgraph"
	"github.com/inferhq/infer/models/quant"
)

// Tests of the quantised models of models/quant under the real runtime:
// the graph forms it writes are the ones ONNX Runtime fuses, they compute
// what the float32 models compute within the quantisation's error, and a
// quantised decoder is still exact under batching.

// quantized returns the path of src quantised with opts, written once per
// test binary.
func quantized(t testing.TB, src string, opts quant.Options) string {
	t.Helper()
	path, err := quant.Ensure(testModels, src, opts)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

func bertTiny(t testing.TB, task bert.Task) string {
	t.Helper()
	arch, err := bert.Lookup("bert-tiny")
	if err != nil {
		t.Fatal(err)
	}
	path, err := bert.Ensure(testModels, bert.Spec{Arch: arch, Task: task})
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// optimizedOps loads path in a session that saves the graph ONNX Runtime
// optimised, and counts that graph's nodes by operator.
func optimizedOps(t *testing.T, path string, inputs, outputs []string) map[string]int {
	t.Helper()
	requireRuntime(t)
	opts, err := sessionOptions(models.Device{Kind: "cpu"}, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	defer opts.Destroy()
	saved := filepath.Join(t.TempDir(), "optimized.onnx")
	if err := opts.SetOptimizedModelFilePath(saved); err != nil {
		t.Fatal(err)
	}
	s, err := ort.NewDynamicAdvancedSession(path, inputs, outputs, opts)
	if err != nil {
		t.Fatal(err)
	}
	s.Destroy()
	f, err := onnxgraph.Open(saved)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	counts := map[string]int{}
	for _, sc := range f.Scopes() {
		for _, n := range sc.Nodes() {
			counts[n.Op]++
		}
	}
	return counts
}

// TestQuantizedFused checks that ONNX Runtime runs the quantised products
// in its integer kernels: with activations per tensor, every MatMulInteger
// becomes DynamicQuantizeMatMul or MatMulIntegerToFloat (the int8 GEMM
// with the scales and the bias applied in one pass); with activations per
// row, the MatMulIntegerToFloat written stays, its bias not fused into it
// (see models/quant's package documentation), and with activations per
// block MatMulNBits stays.
func TestQuantizedFused(t *testing.T) {
	src := bertTiny(t, bert.FillMask)
	path := quantized(t, src, quant.Options{})
	got := optimizedOps(t, path, []string{inputIDs, attentionMask, tokenTypeIDs}, []string{"mask_positions", "top_scores", "top_ids"})
	fused := got["DynamicQuantizeMatMul"] + got["MatMulIntegerToFloat"]
	// bert-tiny: 6 products in each of 2 layers, and the head's 2. The
	// word, position and type embeddings are read as int8 rows (two
	// Gathers and a Cast each), not folded back into float32 tables.
	if fused != 14 || got["MatMulInteger"] != 0 || got["Cast"] != 1+3 || got["Gather"] != 1+2*3 {
		t.Errorf("bert-tiny per tensor, optimised: %v; want 14 fused products, no MatMulInteger, 3 lookups of int8 rows", got)
	}
	t.Logf("bert-tiny, activations per tensor, as ONNX Runtime runs it: %v", got)

	ins := []string{gpt2.InputIDs, gpt2.AttentionMask, gpt2.PositionIDs, gpt2.LogitsToKeep}
	outs := []string{gpt2.Logits}
	for i := range 2 {
		ins = append(ins, gpt2.PastKey(i), gpt2.PastValue(i))
		outs = append(outs, gpt2.PresentKey(i), gpt2.PresentValue(i))
	}
	got = optimizedOps(t, quantized(t, testModel(t, tinySpec()), quant.Options{}), ins, outs)
	if got["MatMulIntegerToFloat"] != 9 || got["ReduceMax"] != 9 || got["MatMulInteger"] != 0 {
		t.Errorf("gpt2-tiny per row, optimised: %v; want 9 MatMulIntegerToFloat, each input quantised per row", got)
	}
	t.Logf("gpt2-tiny, activations per row, as ONNX Runtime runs it: %v", got)
	got = optimizedOps(t, quantized(t, testModel(t, tinySpec()), quant.Options{Activations: quant.ActivationsBlock}), ins, outs)
	if got["MatMulNBits"] != 9 {
		t.Errorf("gpt2-tiny per block, optimised: %v; want 9 MatMulNBits", got)
	}
}

// TestQuantizedEncoder compares bert-tiny quantised with activations per
// tensor against float32 on the built-in corpus.
func TestQuantizedEncoder(t *testing.T) {
	texts := corpus.Masked()[:160]
	run := func(path string) []models.Output {
		f := newFactory(t, Config{Path: path})
		m, err := f.New(context.Background(), 0)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		out, err := compare.Predict(context.Background(), f, m, texts, 32)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	src := bertTiny(t, bert.Embed)
	a, b := run(src), run(quantized(t, src, quant.Options{}))
	var va, vb [][]float32
	for i := range a {
		va, vb = append(va, a[i].([]float32)), append(vb, b[i].([]float32))
	}
	emb, err := compare.Embeddings(va, vb)
	if err != nil {
		t.Fatal(err)
	}
	if emb.Cosine.Min < 0.99 || emb.KendallTau < 0.95 {
		t.Errorf("bert-tiny embed int8 against float32: %+v; want cosines ≥ 0.99, tau ≥ 0.95", emb)
	}
	t.Logf("embed: %+v", emb)

	src = bertTiny(t, bert.FillMask)
	a, b = run(src), run(quantized(t, src, quant.Options{}))
	var ia, ib [][]int64
	for i := range a {
		for j, m := range a[i].(*FillMask).Masks {
			ia = append(ia, ids(m))
			ib = append(ib, ids(b[i].(*FillMask).Masks[j]))
		}
	}
	fm, err := compare.FillMask(ia, ib)
	if err != nil {
		t.Fatal(err)
	}
	if fm.Top1 < 0.9 || fm.Top5 < 0.9 {
		t.Errorf("bert-tiny fill-mask int8 against float32: %+v; want top-1 and top-5 ≥ 0.9", fm)
	}
	t.Logf("fill-mask: %+v", fm)
}

func ids(m Mask) []int64 {
	out := make([]int64, len(m.Candidates))
	for i, c := range m.Candidates {
		out[i] = c.ID
	}
	return out
}

// openDecoderFile returns an instance of the decoder at path.
func openDecoderFile(t testing.TB, path string) *Decoder {
	t.Helper()
	_, d := openDecoderConfig(t, DecoderConfig{Path: path})
	return d
}

// TestQuantizedDecoderBatchComposition: gpt2-tiny quantised as a decoder
// is by default (activations per row), and per block (MatMulNBits, 8 and 4
// bits), decodes a prompt alone as it does
// while 15 others of different lengths join and leave its batches, prefill
// in chunks and are preempted: the same greedy tokens in every schedule.
//
// Each row is quantised from its own values alone, so most steps give the
// logits they give alone (within 1e-4, as TestDecoderBatchComposition asks
// of float32). Float32 itself differs by about 1e-6 between a row alone and
// a row in a batch (its pasts are padded to the longest), and now and then
// such a difference moves an activation across a rounding boundary of its
// quantisation: a step's logits then differ by up to about 1e-2, which the
// test bounds at 0.05. (With activations per tensor every step of a
// batched sequence differs, by the other rows' ranges, and the greedy text
// diverges within tens of tokens: that is why decoders get activations per
// row; see docs/quantization.md.)
func TestQuantizedDecoderBatchComposition(t *testing.T) {
	for _, c := range []struct {
		name string
		spec gpt2.Spec
		opts quant.Options
	}{{"int8", twinSpec(t, tinySpec().Arch), quant.Options{}}, {"int8-float-kv", tinySpec(), quant.Options{}},
		{"int8-block", tinySpec(), quant.Options{Activations: quant.ActivationsBlock}}, {"int4", tinySpec(), quant.Options{Bits: 4, Block: 32}}} {
		t.Run(c.name, func(t *testing.T) {
			d := openDecoderFile(t, quantized(t, testModel(t, c.spec), c.opts))
			target := prompt(5, 23)
			const steps = 32
			alone := decodeAlone(t, d, 1, target, steps, models.Sampling{})
			if slices.Equal(alone.tokens[:8], slices.Repeat(alone.tokens[:1], 8)) {
				t.Fatalf("greedy tokens %v repeat one token: a weak test", alone.tokens)
			}
			for seed := uint64(1); seed <= 3; seed++ {
				mixed := mixedSchedule(t, d, target, steps, models.Sampling{}, seed, nil)
				worst, close := 0.0, 0
				for k := range alone.tokens {
					diff := maxDiff(alone.logits[k], mixed.logits[k])
					worst = max(worst, diff)
					if diff <= 1e-4 {
						close++
					}
					if diff > 0.05 || alone.tokens[k] != mixed.tokens[k] {
						t.Fatalf("schedule %d, token %d: alone %d, in company %d; logits differ by %g",
							seed, k, alone.tokens[k], mixed.tokens[k], diff)
					}
				}
				if close < 2*len(alone.tokens)/3 {
					t.Errorf("schedule %d: %d of %d steps within 1e-4 of alone: the rows are not computed on their own", seed, close, len(alone.tokens))
				}
				t.Logf("schedule %d: %d greedy tokens equal; %d steps within 1e-4, the worst %.2g", seed, len(alone.tokens), close, worst)
			}
		})
	}
}

// TestQuantizedDecoderAgreement compares gpt2-tiny quantised with float32
// along the text of float32's greedy runs (teacher forcing). Its random
// weights make nearly flat distributions (a mean log-probability near
// -log(vocab)), where a small error changes the most likely token: a hard
// case, so the bounds are low; trained models agree far more.
func TestQuantizedDecoderAgreement(t *testing.T) {
	src := testModel(t, tinySpec())
	a := openDecoderFile(t, src)
	var prompts [][]int32
	for i := range 8 {
		prompts = append(prompts, prompt(uint64(100+i), 10+3*i))
	}
	for _, c := range []struct {
		name     string
		src      string
		opts     quant.Options
		minAgree float64
	}{{"int8", testModel(t, twinSpec(t, tinySpec().Arch)), quant.Options{}, 0.85}, {"int8-float-kv", src, quant.Options{}, 0.85},
		{"int8-block", src, quant.Options{Activations: quant.ActivationsBlock}, 0.85}, {"int4", src, quant.Options{Bits: 4, Block: 32}, 0.25}} {
		b := openDecoderFile(t, quantized(t, c.src, c.opts))
		rep, err := compare.Decode(context.Background(), a, b, prompts, compare.DecodeConfig{Tokens: 32, EOS: -1})
		if err != nil {
			t.Fatal(err)
		}
		positions := 0
		for _, p := range prompts {
			positions += len(p) - 1 + 32
		}
		if rep.Top1 < c.minAgree || rep.Positions != positions {
			t.Errorf("%s: %+v; want top-1 ≥ %v over every position", c.name, rep, c.minAgree)
		}
		t.Logf("%s: %+v", c.name, rep)
	}
}

// TestQuantizedLookup: ONNX Runtime reads a quantised embedding table's
// rows as they are dequantised by hand, q·scale, bit for bit (one float32
// product each), for any index the float32 Gather takes (repeated,
// negative), and refuses an index out of range as it did. The table is
// not folded back into float32: the optimised graph still gathers int8
// rows.
func TestQuantizedLookup(t *testing.T) {
	requireRuntime(t)
	const rows, width = 50, 24
	src := filepath.Join(t.TempDir(), "lookup.onnx")
	err := onnxgraph.WriteFile(src, func(w io.Writer) error {
		g := onnxgraph.NewGraph("lookup")
		ids := g.Input("ids", onnxgraph.Int64, onnxgraph.Sym("n"))
		table := g.Weight("table", []int64{rows, width}, random(7))
		g.NodeOut("Gather", []string{table, ids}, []string{"y"})
		g.Output("y", onnxgraph.Float32, onnxgraph.Sym("n"), onnxgraph.Fixed(width))
		_, err := (&onnxgraph.Model{Graph: g}).WriteTo(w)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	q := filepath.Join(t.TempDir(), "lookup-int8.onnx")
	rep, err := quant.File(src, q, quant.Options{})
	if err != nil || len(rep.Lookups) != 1 {
		t.Fatalf("quantise: %v, %+v", err, rep)
	}
	f, err := onnxgraph.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	v, err := f.Float32s("table")
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	qv, scales, err := quant.Rows(v, rows, width)
	if err != nil {
		t.Fatal(err)
	}

	opts, err := sessionOptions(models.Device{Kind: "cpu"}, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	defer opts.Destroy()
	s, err := ort.NewDynamicAdvancedSession(q, []string{"ids"}, []string{"y"}, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	lookup := func(ids []int64) ([]float32, error) {
		in, err := ort.NewTensor(ort.NewShape(int64(len(ids))), ids)
		if err != nil {
			t.Fatal(err)
		}
		defer in.Destroy()
		out := []ort.Value{nil}
		if err := s.Run([]ort.Value{in}, out); err != nil {
			return nil, err
		}
		defer out[0].Destroy()
		return slices.Clone(out[0].(*ort.Tensor[float32]).GetData()), nil
	}
	ids := []int64{0, 49, 7, 7, -1, -50, 23}
	got, err := lookup(ids)
	if err != nil {
		t.Fatal(err)
	}
	worst := 0.0
	for i, id := range ids {
		r := int((id + rows) % rows)
		for c := range width {
			want := float32(qv[r*width+c]) * scales[r]
			if g := got[i*width+c]; g != want {
				t.Fatalf("id %d, column %d: %v, want %v (int8 %d × scale %v)", id, c, g, want, qv[r*width+c], scales[r])
			}
			worst = max(worst, math.Abs(float64(want-v[r*width+c]))/float64(scales[r]))
		}
	}
	if worst > 0.5+1e-6 {
		t.Errorf("a value is %.3f scales from the float32 table's, want at most half a scale", worst)
	}
	for _, bad := range [][]int64{{50}, {-51}} {
		if _, err := lookup(bad); err == nil {
			t.Errorf("index %v: no error, want the runtime's out-of-range error", bad)
		}
	}

	got2 := optimizedOps(t, q, []string{"ids"}, []string{"y"})
	if got2["Gather"] != 2 || got2["Cast"] != 1 || got2["DequantizeLinear"] != 0 {
		t.Errorf("optimised: %v; want the two Gathers (int8 rows, scales) and the Cast kept", got2)
	}
}

// TestQuantizedRowProduct: with activations per row, ONNX Runtime computes
// each row of a product from that row alone: a row's outputs are the same,
// bit for bit, alone and in a batch, and they are what the per-row rule
// gives by hand (the row's scale max|x|/127, its values rounded in those
// steps, the integer product, the scales and the bias) within float32
// rounding. Two products read the same input, one with a bias added after
// the product (as GPT-2's Conv1D), one through Gemm with C.
func TestQuantizedRowProduct(t *testing.T) {
	requireRuntime(t)
	// ReduceMax's axes an attribute, an input; and QuantizeLinear with a
	// block a row (opset 21) instead of Div, Round, Add and Cast.
	for _, opset := range []int64{17, 18, 21} {
		t.Run(fmt.Sprint("opset", opset), func(t *testing.T) { rowProductTest(t, opset) })
	}
}

// rowProductTest is TestQuantizedRowProduct on a graph of opset opset.
func rowProductTest(t *testing.T, opset int64) {
	const k, n = 40, 24
	src := filepath.Join(t.TempDir(), "product.onnx")
	err := onnxgraph.WriteFile(src, func(w io.Writer) error {
		g := onnxgraph.NewGraph("product")
		x := g.Input("x", onnxgraph.Float32, onnxgraph.Sym("rows"), onnxgraph.Fixed(k))
		w1 := g.Weight("w1", []int64{k, n}, random(11))
		b1 := g.Weight("b1", []int64{n}, random(12))
		w2 := g.Weight("w2", []int64{n, k}, random(13))
		b2 := g.Weight("b2", []int64{n}, random(14))
		g.NodeOut("Add", []string{g.Node("MatMul", []string{x, w1}), b1}, []string{"y1"})
		g.NodeOut("Gemm", []string{x, w2, b2}, []string{"y2"}, onnxgraph.Int("transB", 1))
		g.Output("y1", onnxgraph.Float32, onnxgraph.Sym("rows"), onnxgraph.Fixed(n))
		g.Output("y2", onnxgraph.Float32, onnxgraph.Sym("rows"), onnxgraph.Fixed(n))
		_, err := (&onnxgraph.Model{Graph: g, Opset: opset}).WriteTo(w)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	q := filepath.Join(t.TempDir(), "product-int8.onnx")
	if _, err := quant.File(src, q, quant.Options{Activations: quant.ActivationsRow}); err != nil {
		t.Fatal(err)
	}
	// One quantisation of x for both products; each bias added after its
	// product, not fused into it.
	adds, quantizers := 2+1, 0 // the biases', and the chain's + 128
	if opset >= 21 {
		adds, quantizers = 2, 1
	}
	if got := optimizedOps(t, q, []string{"x"}, []string{"y1", "y2"}); got["ReduceMax"] != 1 || got["MatMulIntegerToFloat"] != 2 ||
		got["Add"] != adds || got["QuantizeLinear"] != quantizers {
		t.Errorf("optimised: %v; want x quantised once (%d QuantizeLinear), two MatMulIntegerToFloat, each with its bias's Add", got, quantizers)
	}
	f, err := onnxgraph.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	weights := map[string][]float32{}
	for _, name := range []string{"w1", "b1", "w2", "b2"} {
		if weights[name], err = f.Float32s(name); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()

	opts, err := sessionOptions(models.Device{Kind: "cpu"}, 2, false)
	if err != nil {
		t.Fatal(err)
	}
	defer opts.Destroy()
	s, err := ort.NewDynamicAdvancedSession(q, []string{"x"}, []string{"y1", "y2"}, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	run := func(x []float32) [2][]float32 {
		in, err := ort.NewTensor(ort.NewShape(int64(len(x)/k), k), x)
		if err != nil {
			t.Fatal(err)
		}
		defer in.Destroy()
		out := []ort.Value{nil, nil}
		if err := s.Run([]ort.Value{in}, out); err != nil {
			t.Fatal(err)
		}
		defer out[0].Destroy()
		defer out[1].Destroy()
		return [2][]float32{slices.Clone(out[0].(*ort.Tensor[float32]).GetData()), slices.Clone(out[1].(*ort.Tensor[float32]).GetData())}
	}

	// Rows of different ranges: ordinary, large, tiny, zeros, one spike.
	rng := random(15)()
	var x []float32
	for r, scale := range []float32{1, 300, 1e-6, 0, 1} {
		row := make([]float32, k)
		rng(row)
		for i := range row {
			row[i] *= scale
		}
		if r == 4 {
			row[7] = 50
		}
		x = append(x, row...)
	}
	// Ties: the scale is 1 and every other value lies halfway between two
	// steps, rounded to even (-63.5 to -64, -62.5 to -62).
	ties := make([]float32, k)
	for i := range ties {
		ties[i] = float32(i%64) - 63.5
	}
	ties[0] = 127
	x = append(x, ties...)
	rows := len(x) / k
	batch := run(x)
	for _, c := range []struct {
		y          int
		w, b       string
		transposed bool
	}{{0, "w1", "b1", false}, {1, "w2", "b2", true}} {
		rowsW, colsW := k, n
		if c.transposed {
			rowsW, colsW = n, k
		}
		wq, ws, err := quant.Int8(weights[c.w], rowsW, colsW, c.transposed, false)
		if err != nil {
			t.Fatal(err)
		}
		for r := range rows {
			alone := run(x[r*k : (r+1)*k])[c.y]
			if got := batch[c.y][r*n : (r+1)*n]; !slices.Equal(got, alone) {
				t.Fatalf("y%d row %d: %v in the batch, %v alone", c.y+1, r, got, alone)
			}
			want := rowProduct(x[r*k:(r+1)*k], wq, ws, weights[c.b], n)
			for j, wv := range want {
				if g := alone[j]; math.Abs(float64(g-wv)) > 1e-5*(1+math.Abs(float64(wv))) {
					t.Fatalf("y%d row %d column %d: %v, want %v by the per-row rule", c.y+1, r, j, g, wv)
				}
			}
		}
	}
}

// rowProduct is one row x times the int8 weights wq [K, N] with their
// scales ws, plus bias, by the per-row rule.
func rowProduct(x []float32, wq []int8, ws, bias []float32, n int) []float32 {
	m := float32(0)
	for _, v := range x {
		m = max(m, float32(math.Abs(float64(v))))
	}
	s := max(m/127, 0x1p-126)
	y := make([]float32, n)
	for j := range n {
		acc := int32(0)
		for i, v := range x {
			acc += int32(math.RoundToEven(float64(v/s))) * int32(wq[i*n+j])
		}
		y[j] = float32(acc)*s*ws[j] + bias[j]
	}
	return y
}
