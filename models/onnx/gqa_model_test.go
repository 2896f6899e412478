//go:build gqa

package onnx

// The whole-model side of the GroupQueryAttention prototype (see
// gqa_test.go): models/gpt2's graph with GQA as its attention, built here
// with the same weight names, so the same weights, as gpt2.Generate's.

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/gpt2"
	"github.com/inferhq/infer/models/onnxgraph"
)

// gqaGPT2 returns gpt2.Generate's graph of a (default seed) for decode and
// prefill with GroupQueryAttention: inputs input_ids and position_ids
// [batch, sequence], seqlens_k int32 [batch] (each row's past + sequence −
// 1), total_sequence_length int32 [1] and past_key_values.{i} [batch,
// heads, capacity, head_dim]; outputs logits [batch, sequence, vocab] and
// present.{i} of the past's shape, meant to be the past's own tensors.
// With int8Cache the pasts and presents are int8, each layer's keys and
// values with static scales per head and channel (k_scale.{i} and
// v_scale.{i}, all 1/32: for timing, not accuracy; gqa_int8_test.go).
func gqaGPT2(a gpt2.Arch, int8Cache bool) *onnxgraph.Graph {
	const (
		initStd   = 0.02 // gpt2's constants of the same names
		blockGain = 2.0
		layerNorm = 1e-5
	)
	seed := uint64(gpt2.DefaultSeed)
	g := onnxgraph.NewGraph(a.String() + "-gqa")
	batch, seq, capacity := onnxgraph.Sym("batch_size"), onnxgraph.Sym("sequence_length"), onnxgraph.Sym("capacity")
	heads, hd := onnxgraph.Fixed(int64(a.Heads)), onnxgraph.Fixed(int64(a.HeadDim()))
	ids := g.Input(gpt2.InputIDs, onnxgraph.Int64, batch, seq)
	positions := g.Input(gpt2.PositionIDs, onnxgraph.Int64, batch, seq)
	seqlens := g.Input("seqlens_k", int32Type, batch)
	total := g.Input("total_sequence_length", int32Type, onnxgraph.Fixed(1))
	cache := onnxgraph.Float32
	if int8Cache {
		cache = onnxgraph.Int8
	}
	for i := range a.Layers {
		g.Input(gpt2.PastKey(i), cache, batch, heads, capacity, hd)
		g.Input(gpt2.PastValue(i), cache, batch, heads, capacity, hd)
	}
	h := int64(a.Hidden)
	conv1D := func(prefix, x string, in, out int, std float64) string {
		w := g.Weight(prefix+".weight", []int64{int64(in), int64(out)}, onnxgraph.Normal(seed, prefix+".weight", std))
		bias := g.Weight(prefix+".bias", []int64{int64(out)}, onnxgraph.Fill(0))
		return g.Add(g.MatMul(x, w), bias)
	}
	norm := func(prefix, x string) string { return g.LayerNorm(prefix, x, h, layerNorm) }
	gelu := func(x string) string { // gpt2's, in the form ONNX Runtime fuses into FastGelu
		inner := g.Mul(g.Add(g.Mul(g.Mul(x, g.Scalar(0.044715)), x), g.Scalar(1)), g.Mul(x, g.Scalar(float32(math.Sqrt(2/math.Pi)))))
		return g.Mul(g.Mul(x, g.Scalar(0.5)), g.Add(g.Node("Tanh", []string{inner}), g.Scalar(1)))
	}
	wte := g.Weight("transformer.wte.weight", []int64{int64(a.Vocab), h}, onnxgraph.Normal(seed, "transformer.wte.weight", initStd))
	wpe := g.Weight("transformer.wpe.weight", []int64{int64(a.Context), h}, onnxgraph.Normal(seed, "transformer.wpe.weight", initStd))
	x := g.Add(g.Node("Gather", []string{wte, ids}), g.Node("Gather", []string{wpe, positions}))
	for i := range a.Layers {
		prefix := "transformer.h." + strconv.Itoa(i)
		std := blockGain / math.Sqrt(float64(a.Hidden))
		qkv := conv1D(prefix+".attn.c_attn", norm(prefix+".ln_1", x), a.Hidden, 3*a.Hidden, std)
		q, k, v := "Split_q_"+strconv.Itoa(i), "Split_k_"+strconv.Itoa(i), "Split_v_"+strconv.Itoa(i)
		g.NodeOut("Split", []string{qkv, g.Int64s(h, h, h)}, []string{q, k, v}, onnxgraph.Int("axis", -1))
		attn := "gqa_" + strconv.Itoa(i)
		ins := []string{q, k, v, gpt2.PastKey(i), gpt2.PastValue(i), seqlens, total}
		attrs := []onnxgraph.Attr{onnxgraph.Int("num_heads", int64(a.Heads)), onnxgraph.Int("kv_num_heads", int64(a.Heads))}
		if int8Cache {
			scale := func(name string) string {
				return g.Weight(name+"."+strconv.Itoa(i), []int64{1, int64(a.Heads), 1, int64(a.HeadDim())}, onnxgraph.Fill(1.0/32))
			}
			ins = append(ins, "", "", "", "", "", scale("k_scale"), scale("v_scale"))
			attrs = append(attrs, onnxgraph.String("k_quant_type", "PER_CHANNEL"), onnxgraph.String("v_quant_type", "PER_CHANNEL"),
				onnxgraph.Int("kv_cache_bit_width", 8))
		}
		g.NodeOut("GroupQueryAttention", ins, []string{attn, gpt2.PresentKey(i), gpt2.PresentValue(i)}, attrs...)
		x = g.Add(x, conv1D(prefix+".attn.c_proj", attn, a.Hidden, a.Hidden, std))
		inner := gelu(conv1D(prefix+".mlp.c_fc", norm(prefix+".ln_2", x), a.Hidden, 4*a.Hidden, std))
		x = g.Add(x, conv1D(prefix+".mlp.c_proj", inner, 4*a.Hidden, a.Hidden, std))
	}
	x = norm("transformer.ln_f", x)
	g.Classifier(x, wte, gpt2.Logits, h, int64(a.Vocab))
	g.Output(gpt2.Logits, onnxgraph.Float32, batch, seq, onnxgraph.Fixed(int64(a.Vocab)))
	for i := range a.Layers {
		g.Output(gpt2.PresentKey(i), cache, batch, heads, capacity, hd)
		g.Output(gpt2.PresentValue(i), cache, batch, heads, capacity, hd)
	}
	return g
}

// stepModels holds, for one arch, sessions of the served in-place graph
// and of gqaGPT2's.
type stepModels struct {
	a            gpt2.Arch
	inPlace, gqa *ort.DynamicAdvancedSession
}

func openStepModels(t testing.TB, a gpt2.Arch, threads int) *stepModels {
	t.Helper()
	if _, err := loadRuntime(""); err != nil {
		t.Skip(err)
	}
	cpu := models.Device{Kind: "cpu"}
	var kvIn, newOut, presentOut []string
	for i := range a.Layers {
		kvIn = append(kvIn, gpt2.PastKey(i), gpt2.PastValue(i))
		newOut = append(newOut, gpt2.NewKey(i), gpt2.NewValue(i))
		presentOut = append(presentOut, gpt2.PresentKey(i), gpt2.PresentValue(i))
	}
	ip, err := newSession(testModel(t, gpt2.Spec{Arch: a, InPlaceKV: true}),
		append([]string{gpt2.InputIDs, gpt2.AttentionMask, gpt2.PositionIDs, gpt2.LogitsToKeep}, kvIn...),
		append([]string{gpt2.Logits}, newOut...), cpu, threads, false)
	if err != nil {
		t.Fatal(err)
	}
	gq, err := newSession(writeGraph(t, t.TempDir(), "gqa", gqaGPT2(a, false)),
		append([]string{gpt2.InputIDs, gpt2.PositionIDs, "seqlens_k", "total_sequence_length"}, kvIn...),
		append([]string{gpt2.Logits}, presentOut...), cpu, threads, false)
	if err != nil {
		ip.Destroy()
		t.Fatal(err)
	}
	t.Cleanup(func() { ip.Destroy(); gq.Destroy() })
	return &stepModels{a: a, inPlace: ip, gqa: gq}
}

// stepState is one decode step of rows with the given past lengths: each
// layer's past [rows, heads, capacity, head_dim] (random, the same for
// both graphs), one new token a row.
type stepState struct {
	lens     []int
	capacity int
	ids      []int64
	past     [][]float32 // per layer: key, value, key, value, …
}

func newStepState(a gpt2.Arch, lens []int, capacity int, seed uint64) *stepState {
	r := rand.New(rand.NewPCG(seed, 5))
	s := &stepState{lens: lens, capacity: capacity}
	for range lens {
		s.ids = append(s.ids, int64(r.IntN(a.Vocab)))
	}
	for range 2 * a.Layers {
		buf := make([]float32, len(lens)*a.Heads*capacity*a.HeadDim())
		for i := range buf {
			buf[i] = float32(r.NormFloat64())
		}
		s.past = append(s.past, buf)
	}
	return s
}

// inPlaceStep prepares the in-place graph's run over a past of t
// positions: the mask marks each row's first lens[r] and the new token.
func (s *stepState) inPlaceStep(tb testing.TB, a gpt2.Arch, t int) func(*ort.DynamicAdvancedSession) []float32 {
	rows := len(s.lens)
	mask := make([]int64, rows*(t+1))
	pos := make([]int64, rows)
	for r, l := range s.lens {
		for j := range l {
			mask[r*(t+1)+j] = 1
		}
		mask[r*(t+1)+t] = 1
		pos[r] = int64(l)
	}
	in := []ort.Value{tensor(tb, s.ids, rows, 1), tensor(tb, mask, rows, t+1), tensor(tb, pos, rows, 1), tensor(tb, []int64{1}, 1)}
	for _, buf := range s.past {
		cut := make([]float32, rows*a.Heads*t*a.HeadDim())
		for rh := range rows * a.Heads {
			copy(cut[rh*t*a.HeadDim():(rh+1)*t*a.HeadDim()], buf[rh*s.capacity*a.HeadDim():])
		}
		in = append(in, tensor(tb, cut, rows, a.Heads, t, a.HeadDim()))
	}
	out := []ort.Value{tensor(tb, make([]float32, rows*a.Vocab), rows, 1, a.Vocab)}
	for range 2 * a.Layers {
		out = append(out, tensor(tb, make([]float32, rows*a.Hidden), rows, a.Heads, 1, a.HeadDim()))
	}
	tb.Cleanup(func() {
		for _, v := range append(in, out...) {
			v.Destroy()
		}
	})
	return func(sess *ort.DynamicAdvancedSession) []float32 {
		if err := sess.Run(in, out); err != nil {
			tb.Fatal(err)
		}
		return out[0].(*ort.Tensor[float32]).GetData()
	}
}

// gqaStep prepares gqaGPT2's run, presents shared with the pasts; with
// int8Cache the pasts are the random values' steps of 1/32 as int8.
func (s *stepState) gqaStep(tb testing.TB, a gpt2.Arch, int8Cache bool) func(*ort.DynamicAdvancedSession) []float32 {
	rows := len(s.lens)
	seqlens := make([]int32, rows)
	pos := make([]int64, rows)
	for r, l := range s.lens {
		seqlens[r], pos[r] = int32(l), int64(l)
	}
	in := []ort.Value{tensor(tb, s.ids, rows, 1), tensor(tb, pos, rows, 1), tensor(tb, seqlens, rows),
		tensor(tb, []int32{int32(slices.Max(s.lens) + 1)}, 1)}
	logits := tensor(tb, make([]float32, rows*a.Vocab), rows, 1, a.Vocab)
	out := []ort.Value{logits}
	for _, buf := range s.past {
		var p ort.Value
		if int8Cache {
			steps := make([]int8, len(buf))
			for i, v := range buf {
				steps[i] = int8(max(-127, min(127, math.Round(float64(v*32)))))
			}
			p = tensor(tb, steps, rows, a.Heads, s.capacity, a.HeadDim())
		} else {
			p = tensor(tb, slices.Clone(buf), rows, a.Heads, s.capacity, a.HeadDim())
		}
		in = append(in, p)
		out = append(out, p)
	}
	tb.Cleanup(func() {
		for _, v := range append(in, logits) {
			v.Destroy()
		}
	})
	return func(sess *ort.DynamicAdvancedSession) []float32 {
		if err := sess.Run(in, out); err != nil {
			tb.Fatal(err)
		}
		return logits.GetData()
	}
}

// TestGQAModelMatchesInPlace checks gqaGPT2's logits against the served
// in-place graph's for a decode step of staggered rows.
func TestGQAModelMatchesInPlace(t *testing.T) {
	a, err := gpt2.Lookup("gpt2-tiny")
	if err != nil {
		t.Fatal(err)
	}
	m := openStepModels(t, a, 2)
	lens := []int{16, 300, 1, 655, 42, 656, 100, 7}
	s := newStepState(a, lens, 700, 1)
	want := s.inPlaceStep(t, a, slices.Max(lens))(m.inPlace)
	got := s.gqaStep(t, a, false)(m.gqa)
	d := maxDiff(want, got)
	if d > 1e-5 {
		t.Errorf("logits differ by %g", d)
	}
	t.Logf("largest difference of the logits %g", d)
}

// staggered256 returns 32 lengths over 16..656 with a mean of about 256,
// as the served batch has (16 + 640·x^1.7 for x evenly over 0..1,
// shuffled).
func staggered256() []int {
	lens := make([]int, 32)
	for i := range lens {
		lens[i] = 16 + int(640*math.Pow(float64(i)/31, 1.7))
	}
	r := rand.New(rand.NewPCG(9, 9))
	r.Shuffle(len(lens), func(i, j int) { lens[i], lens[j] = lens[j], lens[i] })
	return lens
}

// BenchmarkGQAModelStep measures gpt2-tiny's (and INFER_BENCH_ARCHS')
// whole decode step, 32 rows, on the in-place graph and on gqaGPT2's, at
// aligned lengths (256), staggered ones (16..656, mean 336) and
// staggered ones of mean 256 (staggered256), the six taking
// turns run by run. The in-place graph's past is the longest row's length
// (the least the decoder can pass). Metrics are median milliseconds and
// the ratios the issue asks about: aligned/staggered step time is the
// served staggered throughput against the aligned one.
func BenchmarkGQAModelStep(b *testing.B) {
	for _, a := range benchArchs(b) {
		b.Run(a.String(), func(b *testing.B) {
			m := openStepModels(b, a, 2)
			const room = 32
			var runs []func()
			names := []string{"inplace-aligned", "inplace-staggered", "inplace-stag256", "gqa-aligned", "gqa-staggered", "gqa-stag256"}
			sets := [][]int{staggeredLens(false), staggeredLens(true), staggered256()}
			for _, lens := range sets {
				s := newStepState(a, lens, slices.Max(lens), 4)
				run := s.inPlaceStep(b, a, slices.Max(lens))
				runs = append(runs, func() { run(m.inPlace) })
			}
			for _, lens := range sets {
				s := newStepState(a, lens, slices.Max(lens)+room, 4)
				run := s.gqaStep(b, a, false)
				runs = append(runs, func() { run(m.gqa) })
			}
			med := medianRounds(b, runs)
			for i := range runs {
				b.ReportMetric(med[i]/1e3, names[i]+"-ms")
			}
			b.ReportMetric(med[0]/med[1], "inplace-aligned/stag")
			b.ReportMetric(med[0]/med[2], "inplace-aligned/stag256")
			b.ReportMetric(med[3]/med[4], "gqa-aligned/stag")
			b.ReportMetric(med[3]/med[5], "gqa-aligned/stag256")
			b.ReportMetric(med[0]/med[4], "inplace-aligned/gqa-stag")
			b.ReportMetric(med[0]/med[5], "inplace-aligned/gqa-stag256")
		})
	}
}
