package gpt2

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"testing"
	"unsafe"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/inferhq/infer/models/bpe"
	"github.com/inferhq/infer/models/onnx"
	"github.com/inferhq/infer/models/onnxgraph"
)

// The graph alone in ONNX Runtime, for graphs models/onnx's decoder does
// not run yet (an int8 KV cache) and for timing the attention's forms
// without the decoder's work around a step.

// loadRuntime loads ONNX Runtime the way models/onnx does (by opening a
// decoder of micro's graph), or skips without it.
func loadRuntime(t testing.TB) {
	t.Helper()
	path, err := Ensure(t.TempDir(), Spec{Arch: micro, InPlaceKV: true})
	if err != nil {
		t.Fatal(err)
	}
	f, err := onnx.OpenDecoder(onnx.DecoderConfig{Path: path, Tokenizer: bpe.GPT2()})
	if tt, ok := t.(*testing.T); ok {
		requireRuntime(tt, err)
	} else if err != nil {
		t.Skip(err)
	}
	f.Close()
}

// graphRun runs one graph of a spec with InPlaceKV, KVInt8 or not.
type graphRun struct {
	s    Spec
	sess *ort.DynamicAdvancedSession
	ins  []string
	outs []string
}

// openGraph opens a session of the graph at path, made from s, with as
// many threads as CPUs (as models/onnx's decoder, one worker), or
// INFER_BENCH_THREADS; INFER_BENCH_PROFILE=prefix writes ONNX Runtime's
// profile of each session.
func openGraph(t testing.TB, path string, s Spec) *graphRun {
	t.Helper()
	loadRuntime(t)
	info, err := onnxgraph.Inspect(path)
	if err != nil {
		t.Fatal(err)
	}
	g := &graphRun{s: s}
	for _, x := range info.Inputs {
		g.ins = append(g.ins, x.Name)
	}
	for _, x := range info.Outputs {
		g.outs = append(g.outs, x.Name)
	}
	opts, err := ort.NewSessionOptions()
	if err != nil {
		t.Fatal(err)
	}
	defer opts.Destroy()
	threads := runtime.NumCPU()
	fmt.Sscan(os.Getenv("INFER_BENCH_THREADS"), &threads)
	if err := opts.SetIntraOpNumThreads(threads); err != nil {
		t.Fatal(err)
	}
	if err := opts.SetInterOpNumThreads(1); err != nil {
		t.Fatal(err)
	}
	if prefix := os.Getenv("INFER_BENCH_PROFILE"); prefix != "" {
		// ONNX Runtime's profile of each session, written when it ends.
		if err := opts.EnableProfiling(prefix); err != nil {
			t.Fatal(err)
		}
	}
	if g.sess, err = ort.NewDynamicAdvancedSession(path, g.ins, g.outs, opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.sess.Destroy() })
	return g
}

// kvCache is a batch's past: for each layer a key and a value [rows,
// heads, past, head_dim] (bytes of int8 or uint8, or float32) and with
// int8 their scales [rows, heads, past].
type kvCache struct {
	rows, past       int
	keys, values     [][]byte
	fkeys, fvalues   [][]float32
	kScales, vScales [][]float32
}

// garbageCache returns a past of n positions for rows rows whose contents
// are random: bytes, values in ±1 and scales in [0, 0.1) (what a row's
// stale positions may hold, and, for timing, what a past is like).
func garbageCache(s Spec, rows, n int, seed uint64) *kvCache {
	a := s.Arch
	r := rand.New(rand.NewPCG(seed, 1))
	c := &kvCache{rows: rows, past: n}
	size := rows * a.Heads * n * a.HeadDim()
	for range a.Layers {
		if !s.KVInt8 {
			k, v := make([]float32, size), make([]float32, size)
			for i := range k {
				k[i], v[i] = r.Float32()*2-1, r.Float32()*2-1
			}
			c.fkeys, c.fvalues = append(c.fkeys, k), append(c.fvalues, v)
			continue
		}
		k, v := make([]byte, size), make([]byte, size)
		for i := range k {
			k[i], v[i] = byte(r.Uint32()), byte(r.Uint32())
		}
		ks, vs := make([]float32, rows*a.Heads*n), make([]float32, rows*a.Heads*n)
		for i := range ks {
			ks[i], vs[i] = r.Float32()*0.1, r.Float32()*0.1
		}
		c.keys, c.values = append(c.keys, k), append(c.values, v)
		c.kScales, c.vScales = append(c.kScales, ks), append(c.vScales, vs)
	}
	return c
}

// stepResult is what a run returns: logits [rows, kept, vocab] and the
// fed tokens' keys and values as a kvCache of their positions.
type stepResult struct {
	logits []float32
	kept   int
	fresh  *kvCache
}

// run feeds tokens (one row each, all of one length) after the past c,
// whose positions mask says are the rows' (1) or holes (0); positions are
// the fed tokens' positions. keep is logits_to_keep.
func (g *graphRun) run(t testing.TB, c *kvCache, mask [][]int64, tokens [][]int32, positions [][]int64, keep int) stepResult {
	t.Helper()
	inputs, free := g.inputs(t, c, mask, tokens, positions, keep)
	defer free()
	outputs := g.exec(t, inputs)
	defer destroy(outputs)
	return g.results(t, outputs, len(tokens), len(tokens[0]))
}

func destroy(vals []ort.Value) {
	for _, v := range vals {
		if v != nil {
			v.Destroy()
		}
	}
}

// exec runs the session on inputs, in the order of g.ins.
func (g *graphRun) exec(t testing.TB, inputs []ort.Value) []ort.Value {
	outputs := make([]ort.Value, len(g.outs))
	if err := g.sess.Run(inputs, outputs); err != nil {
		t.Fatal(err)
	}
	return outputs
}

// inputs returns the inputs of a run (see run), in the order of g.ins, and
// the function that frees them. The past's tensors use c's memory.
func (g *graphRun) inputs(t testing.TB, c *kvCache, mask [][]int64, tokens [][]int32, positions [][]int64, keep int) ([]ort.Value, func()) {
	t.Helper()
	a := g.s.Arch
	rows, s := len(tokens), len(tokens[0])
	h, d := a.Heads, a.HeadDim()
	keyType, valueType := g.s.KVTypes()
	var ids, pos, m []int64
	for r := range rows {
		for _, x := range tokens[r] {
			ids = append(ids, int64(x))
		}
		pos = append(pos, positions[r]...)
		m = append(m, mask[r]...)
	}
	var vals []ort.Value
	in := map[string]ort.Value{}
	add := func(name string, v ort.Value, err error) {
		if err != nil {
			destroy(vals)
			t.Fatal(err)
		}
		vals = append(vals, v)
		in[name] = v
	}
	byteTensor := func(typ onnxgraph.DataType, shape ort.Shape, b []byte) (ort.Value, error) {
		if typ == onnxgraph.Uint8 {
			return ort.NewTensor(shape, b)
		}
		return ort.NewTensor(shape, unsafe.Slice((*int8)(unsafe.Pointer(unsafe.SliceData(b))), len(b)))
	}
	tensor := func(name string, shape ort.Shape, data []int64) {
		v, err := ort.NewTensor(shape, data)
		add(name, v, err)
	}
	tensor(InputIDs, ort.NewShape(int64(rows), int64(s)), ids)
	tensor(AttentionMask, ort.NewShape(int64(rows), int64(c.past+s)), m)
	tensor(PositionIDs, ort.NewShape(int64(rows), int64(s)), pos)
	tensor(LogitsToKeep, ort.NewShape(1), []int64{int64(keep)})
	kvShape := ort.NewShape(int64(rows), int64(h), int64(c.past), int64(d))
	scaleShape := ort.NewShape(int64(rows), int64(h), int64(c.past), 1)
	floats := func(name string, shape ort.Shape, data []float32) {
		v, err := ort.NewTensor(shape, data)
		add(name, v, err)
	}
	for l := range a.Layers {
		if !g.s.KVInt8 {
			floats(PastKey(l), kvShape, c.fkeys[l])
			floats(PastValue(l), kvShape, c.fvalues[l])
			continue
		}
		v, err := byteTensor(keyType, kvShape, c.keys[l])
		add(PastKey(l), v, err)
		v, err = byteTensor(valueType, kvShape, c.values[l])
		add(PastValue(l), v, err)
		floats(PastKeyScale(l), scaleShape, c.kScales[l])
		floats(PastValueScale(l), scaleShape, c.vScales[l])
	}
	inputs := make([]ort.Value, len(g.ins))
	for i, name := range g.ins {
		inputs[i] = in[name]
	}
	return inputs, func() { destroy(vals) }
}

// results reads a run's outputs.
func (g *graphRun) results(t testing.TB, outputs []ort.Value, rows, s int) stepResult {
	a := g.s.Arch
	res := stepResult{fresh: &kvCache{rows: rows, past: s}}
	bytesOf := func(v ort.Value) []byte {
		switch x := v.(type) {
		case *ort.Tensor[uint8]:
			return slices.Clone(x.GetData())
		case *ort.Tensor[int8]:
			b := make([]byte, len(x.GetData()))
			for i, y := range x.GetData() {
				b[i] = byte(y)
			}
			return b
		}
		t.Fatalf("output of type %T", v)
		return nil
	}
	floats := func(v ort.Value) []float32 { return slices.Clone(v.(*ort.Tensor[float32]).GetData()) }
	for i, name := range g.outs {
		v := outputs[i]
		switch name {
		case Logits:
			res.logits = floats(v)
			res.kept = int(v.(*ort.Tensor[float32]).GetShape()[1])
		}
	}
	for l := range a.Layers {
		get := func(name string) ort.Value { return outputs[slices.Index(g.outs, name)] }
		if !g.s.KVInt8 {
			res.fresh.fkeys = append(res.fresh.fkeys, floats(get(NewKey(l))))
			res.fresh.fvalues = append(res.fresh.fvalues, floats(get(NewValue(l))))
			continue
		}
		res.fresh.keys = append(res.fresh.keys, bytesOf(get(NewKey(l))))
		res.fresh.values = append(res.fresh.values, bytesOf(get(NewValue(l))))
		res.fresh.kScales = append(res.fresh.kScales, floats(get(NewKeyScale(l))))
		res.fresh.vScales = append(res.fresh.vScales, floats(get(NewValueScale(l))))
	}
	return res
}

// concat returns the past c followed by the positions of next, row by row
// and head by head.
func (c *kvCache) concat(a Arch, next *kvCache) *kvCache {
	h, d := a.Heads, a.HeadDim()
	out := &kvCache{rows: c.rows, past: c.past + next.past}
	join := func(x, y []byte, w int) []byte {
		var z []byte
		for rh := range c.rows * h {
			z = append(z, x[rh*c.past*w:(rh+1)*c.past*w]...)
			z = append(z, y[rh*next.past*w:(rh+1)*next.past*w]...)
		}
		return z
	}
	joinF := func(x, y []float32, w int) []float32 {
		var z []float32
		for rh := range c.rows * h {
			z = append(z, x[rh*c.past*w:(rh+1)*c.past*w]...)
			z = append(z, y[rh*next.past*w:(rh+1)*next.past*w]...)
		}
		return z
	}
	for l := range a.Layers {
		if c.keys == nil {
			out.fkeys = append(out.fkeys, joinF(c.fkeys[l], next.fkeys[l], d))
			out.fvalues = append(out.fvalues, joinF(c.fvalues[l], next.fvalues[l], d))
			continue
		}
		out.keys = append(out.keys, join(c.keys[l], next.keys[l], d))
		out.values = append(out.values, join(c.values[l], next.values[l], d))
		out.kScales = append(out.kScales, joinF(c.kScales[l], next.kScales[l], 1))
		out.vScales = append(out.vScales, joinF(c.vScales[l], next.vScales[l], 1))
	}
	return out
}
