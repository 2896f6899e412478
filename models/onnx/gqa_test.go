//go:build gqa

package onnx

// A research prototype (issue 22, staggered lengths): ONNX Runtime's
// com.microsoft GroupQueryAttention (GQA) as the attention of the decode
// step, against the attention of the in-place graph (gpt2.Spec.InPlaceKV).
// GQA takes each row's length (seqlens_k) and computes a row over its own
// positions only, where the in-place graph computes every row over the
// buffer's whole length and masks the rest. Nothing outside these tests
// uses it yet, and the tests build only with the gqa tag:
//
//	go test -tags gqa -run GQA ./models/onnx
//	go test -tags gqa -run '^$' -bench GQA -benchtime 150x ./models/onnx
//
// What these tests found (ONNX Runtime 1.30, CPU):
//
//   - GQA runs with heads = kv heads, head_dim 64, no rotary (do_rotary 0,
//     cos_cache and sin_cache left out): GPT-2's learned positions are
//     added before attention, so GQA needs none. seqlens_k is a row's past
//     + new − 1; the new tokens' keys and values go to positions past..
//     of the row; total_sequence_length only decides the present's length
//     (max of it and the past's) and whether a run is a first prompt
//     (sequence = total), so a decode step passes the longest row + 1.
//   - Past and present share memory when the same ort.Value is given as
//     past_key input and present_key output: the kernel compares the
//     pointers (gqa_attention_base.h), then writes only the new tokens'
//     rows and copies nothing; otherwise it zeroes the whole present and
//     copies each row's past into it.
//   - It is exact: attention within 5e-7 of the in-place graph's, and a
//     whole gpt2-tiny step's logits within 8.3e-7.
//   - A prompt (no past) at batch > 1 works, right-padded (seqlens_k the
//     row's tokens − 1); a run with a past and several new tokens (a prefix
//     hit's prefill) only at batch 1: "batch_size must be 1 when
//     sequence_length > 1 and past context is given".
//   - CUDA's GQA kernels take float16 and bfloat16 only, not float32.

import (
	"bytes"
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/onnxgraph"
)

// int32Type is ONNX's int32, which onnxgraph names no constant for.
const int32Type = onnxgraph.DataType(6)

// attnShape is one attention layer's shape.
type attnShape struct{ heads, headDim int }

func (a attnShape) hidden() int { return a.heads * a.headDim }

// inPlaceAttention builds the attention of gpt2's in-place graph alone (the
// same nodes as models/gpt2's block with InPlaceKV): inputs q, k, v [batch,
// sequence, hidden] (c_attn's split), past_key and past_value [batch,
// heads, past, head_dim] and the additive bias [batch, 1, sequence, past +
// sequence]; output attn [batch, sequence, hidden].
func inPlaceAttention(a attnShape) *onnxgraph.Graph {
	g := onnxgraph.NewGraph("inplace")
	batch, seq, past := onnxgraph.Sym("batch"), onnxgraph.Sym("sequence"), onnxgraph.Sym("past")
	hidden, heads, hd := onnxgraph.Fixed(int64(a.hidden())), onnxgraph.Fixed(int64(a.heads)), onnxgraph.Fixed(int64(a.headDim))
	q := g.Input("q", onnxgraph.Float32, batch, seq, hidden)
	k := g.Input("k", onnxgraph.Float32, batch, seq, hidden)
	v := g.Input("v", onnxgraph.Float32, batch, seq, hidden)
	pk := g.Input("past_key", onnxgraph.Float32, batch, heads, past, hd)
	pv := g.Input("past_value", onnxgraph.Float32, batch, heads, past, hd)
	bias := g.Input("bias", onnxgraph.Float32, batch, onnxgraph.Fixed(1), seq, onnxgraph.Sym("total"))
	split := g.Int64s(0, 0, int64(a.heads), int64(a.headDim))
	perm := func(t string, p ...int64) string {
		return g.Node("Transpose", []string{t}, onnxgraph.Ints("perm", p...))
	}
	reshape := func(t string) string { return g.Node("Reshape", []string{t, split}) }
	scale := g.Scalar(float32(1 / math.Sqrt(float64(a.headDim))))
	key, value := perm(reshape(k), 0, 2, 1, 3), perm(reshape(v), 0, 2, 1, 3)
	query := g.Mul(perm(reshape(q), 0, 2, 1, 3), scale)
	queryT := perm(reshape(g.Mul(q, scale)), 0, 2, 3, 1)
	onPastScores := perm(g.MatMul(pk, queryT), 0, 1, 3, 2)
	scores := g.Node("Concat", []string{onPastScores, g.MatMul(query, perm(key, 0, 1, 3, 2))}, onnxgraph.Int("axis", -1))
	probs := g.Node("Softmax", []string{g.Add(scores, bias)}, onnxgraph.Int("axis", -1))
	pastLen := g.Node("Shape", []string{pk}, onnxgraph.Int("start", 2), onnxgraph.Int("end", 3))
	last := g.Int64s(-1)
	onPast := g.Node("Slice", []string{probs, g.Int64s(0), pastLen, last})
	onNew := g.Node("Slice", []string{probs, pastLen, g.Int64s(math.MaxInt64), last})
	attn := g.Add(g.MatMul(onPast, pv), g.MatMul(onNew, value))
	ctx := perm(attn, 0, 2, 1, 3)
	g.NodeOut("Reshape", []string{ctx, g.Int64s(0, 0, int64(a.hidden()))}, []string{"attn"})
	g.Output("attn", onnxgraph.Float32, batch, seq, hidden)
	return g
}

// gqaAttention builds one GroupQueryAttention node (heads = kv heads, no
// rotary): inputs query, key, value [batch, sequence, hidden], past_key and
// past_value [batch, heads, capacity, head_dim], seqlens_k int32 [batch]
// (each row's past + sequence − 1) and total_sequence_length int32 [1];
// outputs attn and present_key, present_value [batch, heads, capacity,
// head_dim]. With int8Cache the past and present are int8, and their
// scales per head and channel are inputs k_scale and v_scale [1, heads, 1,
// head_dim] (inputs 12 and 13; 7 to 11, rotary, positions, bias and sink,
// left out): gqa_int8_test.go.
func gqaAttention(a attnShape, int8Cache bool) *onnxgraph.Graph {
	g := onnxgraph.NewGraph("gqa")
	batch, seq, capacity := onnxgraph.Sym("batch"), onnxgraph.Sym("sequence"), onnxgraph.Sym("capacity")
	hidden, heads, hd, one := onnxgraph.Fixed(int64(a.hidden())), onnxgraph.Fixed(int64(a.heads)), onnxgraph.Fixed(int64(a.headDim)), onnxgraph.Fixed(1)
	cache := onnxgraph.Float32
	if int8Cache {
		cache = onnxgraph.Int8
	}
	ins := []string{
		g.Input("q", onnxgraph.Float32, batch, seq, hidden),
		g.Input("k", onnxgraph.Float32, batch, seq, hidden),
		g.Input("v", onnxgraph.Float32, batch, seq, hidden),
		g.Input("past_key", cache, batch, heads, capacity, hd),
		g.Input("past_value", cache, batch, heads, capacity, hd),
		g.Input("seqlens_k", int32Type, batch),
		g.Input("total_sequence_length", int32Type, one),
	}
	attrs := []onnxgraph.Attr{onnxgraph.Int("num_heads", int64(a.heads)), onnxgraph.Int("kv_num_heads", int64(a.heads)), onnxgraph.Int("do_rotary", 0)}
	if int8Cache {
		ins = append(ins, "", "", "", "", "",
			g.Input("k_scale", onnxgraph.Float32, one, heads, one, hd), g.Input("v_scale", onnxgraph.Float32, one, heads, one, hd))
		attrs = append(attrs, onnxgraph.String("k_quant_type", "PER_CHANNEL"), onnxgraph.String("v_quant_type", "PER_CHANNEL"),
			onnxgraph.Int("kv_cache_bit_width", 8))
	}
	g.NodeOut("GroupQueryAttention", ins, []string{"attn", "present_key", "present_value"}, attrs...)
	g.Output("attn", onnxgraph.Float32, batch, seq, hidden)
	g.Output("present_key", cache, batch, heads, capacity, hd)
	g.Output("present_value", cache, batch, heads, capacity, hd)
	return g
}

// writeGraph writes g to dir/name; nodes of ONNX Runtime's own operators
// (GroupQueryAttention) are moved to the com.microsoft domain, which
// onnxgraph.Graph does not write.
func writeGraph(t testing.TB, dir, name string, g *onnxgraph.Graph) string {
	t.Helper()
	return writeModel(t, dir, name, &onnxgraph.Model{Graph: g, Producer: "infer-test"})
}

// writeModel is writeGraph for a model of any opset.
func writeModel(t testing.TB, dir, name string, m *onnxgraph.Model) string {
	t.Helper()
	var buf bytes.Buffer
	if _, err := m.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	raw := filepath.Join(dir, name+".raw.onnx")
	if err := os.WriteFile(raw, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := onnxgraph.Open(raw)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	main := f.Scopes()[0]
	nodes := main.Nodes()
	for i, n := range nodes {
		if n.Op == "GroupQueryAttention" {
			nodes[i].Domain = "com.microsoft"
		}
	}
	main.SetNodes(nodes)
	f.SetOpset("com.microsoft", 1)
	path := filepath.Join(dir, name+".onnx")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteTo(out); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// attnCase is one batch: each row's past length, the new tokens' q, k, v
// and a past buffer [rows, heads, capacity, head_dim], rows left-aligned
// (positions past the row's length hold garbage, not zeros, so that a
// kernel reading them shows).
type attnCase struct {
	a            attnShape
	lens         []int
	seq          int
	capacity     int
	total        int       // total_sequence_length; 0: the longest row's past + seq
	q, k, v      []float32 // [rows, seq, hidden]
	pastK, pastV []float32
	// fed, if set, is each row's number of new tokens (≤ seq, the rest
	// padding on the right); otherwise every row has seq.
	fed []int
}

func newAttnCase(a attnShape, lens []int, seq, capacity int, seed uint64) *attnCase {
	r := rand.New(rand.NewPCG(seed, 3))
	rows := len(lens)
	randn := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		return x
	}
	c := &attnCase{a: a, lens: lens, seq: seq, capacity: capacity}
	c.q, c.k, c.v = randn(rows*seq*a.hidden()), randn(rows*seq*a.hidden()), randn(rows*seq*a.hidden())
	c.pastK, c.pastV = randn(rows*a.heads*capacity*a.headDim), randn(rows*a.heads*capacity*a.headDim)
	for _, buf := range [][]float32{c.pastK, c.pastV} { // garbage after each row's length
		for row, l := range lens {
			for h := range a.heads {
				base := ((row*a.heads+h)*capacity + l) * a.headDim
				end := ((row*a.heads+h)*capacity + capacity) * a.headDim
				for i := base; i < end; i++ {
					buf[i] = 1e3
				}
			}
		}
	}
	return c
}

func (c *attnCase) maxLen() int { return slices.Max(c.lens) }

// fedOf returns row r's number of new tokens.
func (c *attnCase) fedOf(r int) int {
	if c.fed != nil {
		return c.fed[r]
	}
	return c.seq
}

// pastTo returns the past buffer cut (or kept) to t positions per row, as
// the in-place graph reads it: [rows, heads, t, head_dim].
func (c *attnCase) pastTo(buf []float32, t int) []float32 {
	a := c.a
	out := make([]float32, len(c.lens)*a.heads*t*a.headDim)
	for rh := range len(c.lens) * a.heads {
		copy(out[rh*t*a.headDim:(rh+1)*t*a.headDim], buf[rh*c.capacity*a.headDim:])
	}
	return out
}

// bias returns the in-place graph's additive bias for a past of t
// positions: row r attends to its first lens[r] past positions and,
// causally, to the new ones.
func (c *attnCase) bias(t int) []float32 {
	rows, s := len(c.lens), c.seq
	out := make([]float32, rows*s*(t+s))
	for r, l := range c.lens {
		for i := range s {
			row := out[(r*s+i)*(t+s) : (r*s+i+1)*(t+s)]
			for j := range row {
				if (j < t && j >= l) || (j >= t && (j-t > i || j-t >= c.fedOf(r))) {
					row[j] = -math.MaxFloat32
				}
			}
		}
	}
	return out
}

// attnSessions holds both graphs' sessions for one shape.
type attnSessions struct {
	inPlace, gqa *ort.DynamicAdvancedSession
}

func openAttnSessions(t testing.TB, a attnShape, threads int) *attnSessions {
	t.Helper()
	if _, err := loadRuntime(""); err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	ip, err := newSession(writeGraph(t, dir, "inplace", inPlaceAttention(a)),
		[]string{"q", "k", "v", "past_key", "past_value", "bias"}, []string{"attn"}, models.Device{Kind: "cpu"}, threads, false)
	if err != nil {
		t.Fatal(err)
	}
	gq, err := newSession(writeGraph(t, dir, "gqa", gqaAttention(a, false)),
		[]string{"q", "k", "v", "past_key", "past_value", "seqlens_k", "total_sequence_length"},
		[]string{"attn", "present_key", "present_value"}, models.Device{Kind: "cpu"}, threads, false)
	if err != nil {
		ip.Destroy()
		t.Fatal(err)
	}
	t.Cleanup(func() { ip.Destroy(); gq.Destroy() })
	return &attnSessions{inPlace: ip, gqa: gq}
}

func tensor[T ort.TensorData](t testing.TB, data []T, dims ...int) *ort.Tensor[T] {
	t.Helper()
	shape := make(ort.Shape, len(dims))
	for i, d := range dims {
		shape[i] = int64(d)
	}
	x, err := ort.NewTensor(shape, data)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// inPlaceRun is a prepared run of the in-place graph over a past of t
// positions (the longest row's length, as the decoder passes it).
type inPlaceRun struct {
	in  []ort.Value
	out *ort.Tensor[float32]
}

func (c *attnCase) prepareInPlace(t testing.TB, past int) *inPlaceRun {
	rows, a := len(c.lens), c.a
	run := &inPlaceRun{
		in: []ort.Value{
			tensor(t, c.q, rows, c.seq, a.hidden()), tensor(t, c.k, rows, c.seq, a.hidden()), tensor(t, c.v, rows, c.seq, a.hidden()),
			tensor(t, c.pastTo(c.pastK, past), rows, a.heads, past, a.headDim),
			tensor(t, c.pastTo(c.pastV, past), rows, a.heads, past, a.headDim),
			tensor(t, c.bias(past), rows, 1, c.seq, past+c.seq),
		},
		out: tensor(t, make([]float32, rows*c.seq*a.hidden()), rows, c.seq, a.hidden()),
	}
	t.Cleanup(func() {
		for _, v := range run.in {
			v.Destroy()
		}
		run.out.Destroy()
	})
	return run
}

func (r *inPlaceRun) run(t testing.TB, s *ort.DynamicAdvancedSession) {
	if err := s.Run(r.in, []ort.Value{r.out}); err != nil {
		t.Fatal(err)
	}
}

// gqaRun is a prepared run of GroupQueryAttention. With shared, present_key
// and present_value are the past's tensors themselves (ONNX Runtime's CPU
// kernel then writes only the new tokens, in place); otherwise they are
// tensors of their own, which it fills with the past and the new tokens.
type gqaRun struct {
	c            *attnCase
	pastK, pastV *ort.Tensor[float32]
	in           []ort.Value
	out          []ort.Value
}

func (c *attnCase) prepareGQA(t testing.TB, shared bool) *gqaRun {
	rows, a := len(c.lens), c.a
	pk := tensor(t, slices.Clone(c.pastK), rows, a.heads, c.capacity, a.headDim)
	pv := tensor(t, slices.Clone(c.pastV), rows, a.heads, c.capacity, a.headDim)
	var presents []ort.Value
	if !shared {
		presents = []ort.Value{
			tensor(t, make([]float32, len(c.pastK)), rows, a.heads, c.capacity, a.headDim),
			tensor(t, make([]float32, len(c.pastV)), rows, a.heads, c.capacity, a.headDim)}
	}
	run := c.newGQARun(t, pk, pv, presents)
	run.pastK, run.pastV = pk, pv
	return run
}

// newGQARun prepares a run over the past tensors pk and pv, with presents
// of their own (nil: the pasts themselves) and extra inputs after the
// seven (the int8 graph's scales). The run destroys every tensor when the
// test ends.
func (c *attnCase) newGQARun(t testing.TB, pk, pv ort.Value, presents []ort.Value, extra ...ort.Value) *gqaRun {
	rows, a := len(c.lens), c.a
	seqlens := make([]int32, rows)
	for r, l := range c.lens {
		seqlens[r] = int32(l + c.fedOf(r) - 1)
	}
	run := &gqaRun{c: c}
	run.in = append([]ort.Value{
		tensor(t, c.q, rows, c.seq, a.hidden()), tensor(t, c.k, rows, c.seq, a.hidden()), tensor(t, c.v, rows, c.seq, a.hidden()),
		pk, pv, tensor(t, seqlens, rows), tensor(t, []int32{int32(cmp.Or(c.total, c.maxLen()+c.seq))}, 1),
	}, extra...)
	if presents == nil {
		presents = []ort.Value{pk, pv}
	}
	run.out = append([]ort.Value{tensor(t, make([]float32, rows*c.seq*a.hidden()), rows, c.seq, a.hidden())}, presents...)
	t.Cleanup(func() {
		for _, v := range run.in {
			v.Destroy()
		}
		run.out[0].Destroy()
		if presents[0] != pk {
			presents[0].Destroy()
			presents[1].Destroy()
		}
	})
	return run
}

func (r *gqaRun) run(t testing.TB, s *ort.DynamicAdvancedSession) {
	if err := s.Run(r.in, r.out); err != nil {
		t.Fatal(err)
	}
}

func (r *gqaRun) attn() []float32 { return r.out[0].(*ort.Tensor[float32]).GetData() }

// TestGQAMatchesInPlace checks that GroupQueryAttention with each row's
// length computes what the in-place graph's attention does over the
// masked buffer, for decode steps of staggered rows, with the present
// shared with the past (written in place) and not.
func TestGQAMatchesInPlace(t *testing.T) {
	for _, a := range []attnShape{{2, 64}, {12, 64}} {
		for _, v := range []struct {
			shared     bool
			toCapacity bool // total_sequence_length the buffer's capacity
		}{{true, false}, {false, false}, {true, true}} {
			shared := v.shared
			t.Run(fmt.Sprintf("heads=%d/shared=%v/total-capacity=%v", a.heads, shared, v.toCapacity), func(t *testing.T) {
				s := openAttnSessions(t, a, 2)
				lens := []int{16, 300, 1, 655, 42, 656, 100, 7, 0} // 0: a hole, no sequence
				c := newAttnCase(a, lens, 1, 700, 1)
				if v.toCapacity {
					c.total = c.capacity
				}
				ip := c.prepareInPlace(t, c.maxLen())
				ip.run(t, s.inPlace)
				g := c.prepareGQA(t, shared)
				g.run(t, s.gqa)
				d := maxDiff(ip.out.GetData(), g.attn())
				if d > 1e-5 {
					t.Errorf("attention differs by %g", d)
				}
				t.Logf("largest difference %g", d)
				// The new token's key and value are at each row's length
				// in the present, the rest of the past unchanged.
				presentK := g.out[1].(*ort.Tensor[float32]).GetData()
				hd := a.headDim
				for r, l := range lens {
					for h := range a.heads {
						base := (r*a.heads + h) * c.capacity * hd
						newK := c.k[r*a.hidden()+h*hd : r*a.hidden()+(h+1)*hd]
						if d := maxDiff(presentK[base+l*hd:base+(l+1)*hd], newK); d != 0 {
							t.Fatalf("row %d head %d: new key not at its length (%g)", r, h, d)
						}
						if d := maxDiff(presentK[base:base+l*hd], c.pastK[base:base+l*hd]); d != 0 {
							t.Fatalf("row %d head %d: past keys changed (%g)", r, h, d)
						}
						if shared {
							if d := maxDiff(presentK[base+(l+1)*hd:base+c.capacity*hd], c.pastK[base+(l+1)*hd:base+c.capacity*hd]); d != 0 {
								t.Fatalf("row %d head %d: shared buffer changed after the new key (%g)", r, h, d)
							}
						}
					}
				}
				if shared && &presentK[0] != &g.pastK.GetData()[0] {
					t.Fatal("present is not the past's memory")
				}
			})
		}
	}
}

// TestGQAPrefill checks GQA's runs of several tokens: a prompt (no past)
// at batch 2, and a prefix hit (a past and several new tokens), which the
// decoder's prefill of a prefix hit would need at batch > 1.
func TestGQAPrefill(t *testing.T) {
	a := attnShape{2, 64}
	s := openAttnSessions(t, a, 2)
	for _, tc := range []struct {
		name string
		lens []int
		seq  int
	}{
		{"prompt/batch=2", []int{0, 0}, 5},
		{"prompt/batch=3/right-padded", []int{0, 0, 0}, 5},
		{"prefix-hit/batch=1", []int{37}, 5},
		{"prefix-hit/batch=2", []int{37, 37}, 5},
		{"prefix-hit/batch=2/staggered", []int{37, 12}, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newAttnCase(a, tc.lens, tc.seq, 64, 2)
			if strings.HasSuffix(tc.name, "right-padded") {
				c.fed = []int{5, 3, 1}
			}
			ip := c.prepareInPlace(t, c.maxLen())
			ip.run(t, s.inPlace)
			g := c.prepareGQA(t, true)
			if err := s.gqa.Run(g.in, g.out); err != nil {
				t.Skipf("GQA refuses it: %v", err)
			}
			d := 0.0 // over the fed positions (padding's output is garbage either way)
			h := a.hidden()
			for r := range tc.lens {
				at := r * c.seq * h
				d = max(d, maxDiff(ip.out.GetData()[at:at+c.fedOf(r)*h], g.attn()[at:at+c.fedOf(r)*h]))
			}
			if d > 1e-5 {
				t.Errorf("attention differs by %g", d)
			}
			t.Logf("largest difference %g", d)
			// The fed tokens' keys are in the shared buffer after each
			// row's past.
			presentK, hd := g.pastK.GetData(), a.headDim
			for r, l := range tc.lens {
				for h := range a.heads {
					for i := range c.fedOf(r) {
						at := ((r*a.heads+h)*c.capacity + l + i) * hd
						src := (r*c.seq+i)*a.hidden() + h*hd
						if d := maxDiff(presentK[at:at+hd], c.k[src:src+hd]); d != 0 {
							t.Fatalf("row %d head %d: token %d's key not at %d (%g)", r, h, i, l+i, d)
						}
					}
				}
			}
		})
	}
}

// staggeredLens returns 32 lengths spread uniformly over 16..656 (mean
// 336) in a shuffled order, as a served batch's rows (slots) are, or 32 of
// 256.
func staggeredLens(staggered bool) []int {
	lens := sortedLens(staggered)
	r := rand.New(rand.NewPCG(9, 9))
	r.Shuffle(len(lens), func(i, j int) { lens[i], lens[j] = lens[j], lens[i] })
	return lens
}

// sortedLens is staggeredLens in increasing order. GQA's CPU kernel splits
// rows × heads among its threads in contiguous ranges by a cost that counts
// the buffer's capacity, not a row's length, so sorted rows could load the
// threads unevenly; at 2 threads they do not: GQA staggered/aligned 1.16 to
// 1.30 sorted against 1.25 to 1.51 shuffled (2 and 12 heads, load 8-9 on
// the 2-core dev VM).
func sortedLens(staggered bool) []int {
	lens := make([]int, 32)
	for i := range lens {
		lens[i] = 256
		if staggered {
			lens[i] = 16 + i*640/31
		}
	}
	return lens
}

// BenchmarkGQAStep measures one decode step's attention (32 rows, one new
// token each) in five forms taking turns, run by run: the in-place graph
// and GQA (present shared with the past), each at aligned lengths (256)
// and staggered ones (16..656), and GQA with the staggered rows sorted.
// Metrics are median milliseconds and the
// staggered/aligned ratios.
func BenchmarkGQAStep(b *testing.B) {
	threads := 2
	for _, a := range []attnShape{{2, 64}, {12, 64}} {
		b.Run(fmt.Sprintf("heads=%d", a.heads), func(b *testing.B) {
			s := openAttnSessions(b, a, threads)
			room := 32
			var runs []func()
			names := []string{"inplace-aligned", "inplace-staggered", "gqa-aligned", "gqa-staggered", "gqa-sorted"}
			for _, stag := range []bool{false, true} {
				c := newAttnCase(a, staggeredLens(stag), 1, 0, 4)
				c = newAttnCase(a, c.lens, 1, c.maxLen()+room, 4)
				ip := c.prepareInPlace(b, c.maxLen())
				runs = append(runs, func() { ip.run(b, s.inPlace) })
			}
			for _, lens := range [][]int{staggeredLens(false), staggeredLens(true), sortedLens(true)} {
				c := newAttnCase(a, lens, 1, slices.Max(lens)+room, 4)
				g := c.prepareGQA(b, true)
				runs = append(runs, func() { g.run(b, s.gqa) })
			}
			med := medianRounds(b, runs)
			for i := range runs {
				b.ReportMetric(med[i], names[i]+"-us")
			}
			b.ReportMetric(med[1]/med[0], "inplace-stag/aligned")
			b.ReportMetric(med[3]/med[2], "gqa-stag/aligned")
			b.ReportMetric(med[2]/med[0], "gqa/inplace-aligned")
			b.ReportMetric(med[3]/med[1], "gqa/inplace-stag")
			b.ReportMetric(med[4]/med[2], "gqa-sorted/aligned")
		})
	}
}

// medianRounds runs each of runs once to warm up, then all in turn, one
// round per iteration of b, and returns each one's median time in µs.
func medianRounds(b *testing.B, runs []func()) []float64 {
	for _, r := range runs {
		r()
	}
	times := make([][]time.Duration, len(runs))
	for b.Loop() {
		for i, r := range runs {
			t0 := time.Now()
			r()
			times[i] = append(times[i], time.Since(t0))
		}
	}
	med := make([]float64, len(runs))
	for i, t := range times {
		med[i] = 1e3 * medianMs(t)
	}
	return med
}
