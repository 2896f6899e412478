package gpt2

import (
	"math"
	"strconv"

	"github.com/inferhq/infer/models/onnxgraph"
)

// The attention of a graph with Spec.KVInt8: the KV cache in 8 bits.
//
// A token's key and value, for each head, are quantised on their own,
// symmetric, with one scale for the head's head_dim values:
//
//	s = max(max|x| / 127, tiny)      x_q = Round(x / s)      (+ 128 as uint8)
//
// so that a token's bytes depend on its own float key or value alone, and
// the caller keeps them in its cache as the graph outputs them. The new
// tokens attend to themselves through the same quantised form as to the
// past, and the products are split so that the past's part and the new
// tokens' add exactly: a row's logits do not depend on whether its earlier
// tokens came in as past or were fed in the same run (beyond float32's
// summation order), which the decoder's prefix cache and batching rely on.
//
//   - Scores: the query of each (row, head, position) is quantised per row
//     at run time; key·query is an integer product (exact), and each
//     position's is scaled by its key's scale and the query's. Past and new
//     positions are scaled alike, position by position.
//   - Weighted sum: each position's value scale is folded into its
//     probability, p·s_v (≥ 0), and the row of those, over the past and the
//     new positions together, is quantised once to uint8 (0..255, its own
//     scale); the integer products with the past's values and with the new
//     ones are added as int32, then scaled by the row's scale.
//
// Positions the mask leaves out get the bias's lowest float32, so a weight
// of exactly zero whatever their bytes and scales hold (the decoder leaves
// stale ones there), provided these are finite.
//
// The types and the order of the score product were chosen by measuring
// every form (TestKVInt8Forms with INFER_KV_FORMS=1, the graph alone in
// ONNX Runtime): see kvDefault.

// kvForm is one integer form of the attention; the zero value is
// kvDefault.
type kvForm struct {
	key, value onnxgraph.DataType // Int8, or Uint8 with zero point 128
	// queryUint8 quantises the query to uint8 (zero point 128) instead of
	// int8, for past·queryᵀ with uint8 keys.
	queryUint8 bool
	// queryFirst computes the past's scores as query·pastᵀ (the past
	// transposed) instead of past·queryᵀ; the query is uint8.
	queryFirst bool
}

// kvDefault is the form Spec.KVInt8 graphs take: uint8 keys (zero point
// 128) scored as past·queryᵀ by an int8 query, and uint8 values (zero
// point 128) weighted by the uint8 probabilities.
//
// BenchmarkKVInt8Forms, gpt2-small's -int8 twin (int8 weights), decode
// steps of 16 rows after 256 positions, the graphs alone stepping in turn
// in one process, 120–200 steps each, on the 2-core dev VM (AVX-512 VNNI)
// under a load average of 2.7 to 6.4 from other work. The median step of
// uint8 keys by an int8 query with int8 values (uint8 by int8 both) was
// 39–46 ms with 2 threads (81–86 in the busiest runs) and 28–41 ms with
// 1; the others' speed-ups against it, run by run:
//
//	keys, values (query)             2 threads                           1 thread
//	uint8, uint8 (int8): chosen      1.04 0.94 1.07 1.04 1.00 1.00 0.96  0.97 1.00 0.98 0.97 0.90
//	uint8, uint8 (uint8)             0.92 0.97                           0.86 0.89
//	int8, int8 (int8)                0.87 0.72
//	int8, uint8 (int8)               0.88 0.82
//	int8, int8 (query·pastᵀ, uint8)  0.81 0.74
//	uint8, int8 (query·pastᵀ, uint8) 0.79 0.79
//
// Int8 keys are slower: ONNX Runtime's int8-by-int8 kernels are not its
// fast ones (MLAS runs uint8 by int8 with VNNI). query·pastᵀ copies the
// past transposed, as in the float32 graph (generate.go). uint8 and int8
// values are within the noise of each other here (0.90–1.07), and uint8
// values are chosen for exactness on every x86 CPU: without VNNI, MLAS
// multiplies uint8 by int8 with VPMADDUBSW, which saturates the sum of
// two adjacent products at 32767, and p·V's adjacent products belong to
// adjacent positions (two weights near 255 by values near 127 saturate),
// so splitting the positions between the past and the new tokens would
// change the sums; uint8 by uint8 widens to 16 bits first and never
// saturates. The scores' pairs lie within one position's head_dim, which
// keeps them exact (one position's score is computed the same whatever
// the split), at the cost of precision only where it saturates, as the
// weights' products of models/quant do (uint8 rows by int8 weights).
var kvDefault = kvForm{key: onnxgraph.Uint8, value: onnxgraph.Uint8}

func (f kvForm) resolve() kvForm {
	if f == (kvForm{}) {
		return kvDefault
	}
	return f
}

// String describes the form (the default's for the zero value), for the
// file's hash.
func (f kvForm) String() string {
	f = f.resolve()
	return "key=" + f.key.String() + " value=" + f.value.String() + " query-uint8=" + strconv.FormatBool(f.queryUint8) +
		" query-first=" + strconv.FormatBool(f.queryFirst)
}

// KVTypes returns the element types of the graph's past_key_values.{i}.key
// and .value inputs (and of new.{i}.key and .value, or present's): float32
// without KVInt8; with it, int8 (symmetric) or uint8 (the same plus 128),
// int8 with GQA.
func (s Spec) KVTypes() (key, value onnxgraph.DataType) {
	switch {
	case !s.KVInt8:
		return onnxgraph.Float32, onnxgraph.Float32
	case s.GQA:
		return onnxgraph.Int8, onnxgraph.Int8
	}
	f := s.kv.resolve()
	return f.key, f.value
}

// KVBytesPerToken is the size of the KV cache of one token in the graph
// of s: a key and a value per layer, float32, or with KVInt8 a byte per
// element and a float32 scale per head (GQA's scales are the graph's).
func (s Spec) KVBytesPerToken() int64 {
	if !s.KVInt8 {
		return s.Arch.KVBytesPerToken()
	}
	a := s.Arch
	if s.GQA { // static scales
		return int64(2 * a.Layers * a.Hidden)
	}
	return int64(2 * a.Layers * a.Heads * (a.HeadDim() + 4))
}

// kvConsts are the constants of the quantisation, written once.
type kvConsts struct {
	levels, probLevels, tiny, offset, zeroPoint string
	// past is the past's positions, [1], and hasPast 1 when there are any
	// (int32, [1]): the same for every layer, so computed once (a decode
	// step's cost is per node).
	past, hasPast string
}

func (b *builder) kvConsts() kvConsts {
	if b.kvc.levels == "" {
		b.kvc = kvConsts{
			levels: b.Scalar(127), probLevels: b.Scalar(255),
			// The smallest normal float32: a row of zeros gets a normal
			// scale that makes it zeros, not NaNs.
			tiny:      b.Scalar(0x1p-126),
			offset:    b.Scalar(128),
			zeroPoint: b.op("Cast", []onnxgraph.Attr{onnxgraph.Int("to", int64(onnxgraph.Uint8))}, b.Int64(128)),
			past:      b.op("Shape", []onnxgraph.Attr{onnxgraph.Int("start", 2), onnxgraph.Int("end", 3)}, PastKey(0)),
		}
		b.kvc.hasPast = b.op("Cast", []onnxgraph.Attr{onnxgraph.Int("to", int64(onnxgraph.Int32))},
			b.op("Greater", nil, b.kvc.past, b.Int64s(0)))
	}
	return b.kvc
}

// quantize returns the rounded steps of x along its last axis, x / s as
// float32 integers in ±127, and the scales s [..., 1].
func (b *builder) quantize(x string) (steps, scale string) {
	c := b.kvConsts()
	scale = b.op("Max", nil, b.op("Div", nil,
		b.op("ReduceMax", []onnxgraph.Attr{onnxgraph.Int("keepdims", 1)}, b.op("Abs", nil, x), b.Int64s(-1)),
		c.levels), c.tiny)
	return b.op("Round", nil, b.op("Div", nil, x, scale)), scale
}

// cast returns steps (quantize's) as t: Int8, or Uint8 plus 128.
func (b *builder) cast(steps string, t onnxgraph.DataType) string {
	if t == onnxgraph.Uint8 {
		steps = b.Add(steps, b.kvConsts().offset)
	}
	return b.op("Cast", []onnxgraph.Attr{onnxgraph.Int("to", int64(t))}, steps)
}

// zeroPoint returns the zero point of an operand of type t for
// MatMulInteger: 128 for uint8, none for int8.
func (b *builder) zeroPoint(t onnxgraph.DataType) string {
	if t == onnxgraph.Uint8 {
		return b.kvConsts().zeroPoint
	}
	return ""
}

// int8Attention returns the attention of layer i, [batch, heads, sequence,
// head_dim], from c_attn's output qkv ([batch, sequence, 3·hidden]) and the
// causal bias, and writes the layer's new.* outputs.
func (b *builder) int8Attention(i int, qkv, bias string) string {
	a := b.s.Arch
	f := b.s.kv.resolve()
	d := a.HeadDim()
	perm := func(t string, p ...int64) string {
		return b.op("Transpose", []onnxgraph.Attr{onnxgraph.Ints("perm", p...)}, t)
	}
	axis := func(n int64) []onnxgraph.Attr { return []onnxgraph.Attr{onnxgraph.Int("axis", n)} }
	matmulInt := func(x, y, xZero, yZero string) string {
		ins := []string{x, y, xZero, yZero}
		for len(ins) > 2 && ins[len(ins)-1] == "" {
			ins = ins[:len(ins)-1]
		}
		return b.op("MatMulInteger", nil, ins...)
	}
	toFloat := func(t string) string {
		return b.op("Cast", []onnxgraph.Attr{onnxgraph.Int("to", int64(onnxgraph.Float32))}, t)
	}
	split3 := func(t string) (string, string, string) {
		var outs [3]string
		for j, part := range []string{"q", "k", "v"} {
			outs[j] = t + "_" + part
		}
		b.NodeOut("Split", []string{t}, outs[:], onnxgraph.Int("axis", 2), onnxgraph.Int("num_outputs", 3)) // in three equal parts
		return outs[0], outs[1], outs[2]
	}

	// The query, key and value of each token and head quantised at once,
	// as [batch, sequence, 3·heads, head_dim] (one chain of nodes for the
	// three instead of three: 14 nodes a layer fewer; a decode step's
	// tensors are small, and its cost is per node). The query is quantised
	// before its 1/√head_dim, which goes into its scale.
	steps, scales := b.quantize(b.op("Reshape", nil, qkv, b.Int64s(0, 0, int64(3*a.Heads), int64(d))))
	qSteps, kSteps, vSteps := split3(steps)
	qScale, kScale, vScale := split3(scales)
	// The new tokens' keys and values, transposed in 8 bits to [batch,
	// heads, sequence, head_dim|1].
	newKV := func(steps, scale string, t onnxgraph.DataType, out, outScale string) {
		b.NodeOut("Transpose", []string{b.cast(steps, t)}, []string{out}, onnxgraph.Ints("perm", 0, 2, 1, 3))
		b.NodeOut("Transpose", []string{scale}, []string{outScale}, onnxgraph.Ints("perm", 0, 2, 1, 3))
	}
	newKV(kSteps, kScale, f.key, NewKey(i), NewKeyScale(i))
	newKV(vSteps, vScale, f.value, NewValue(i), NewValueScale(i))
	qScale = b.Mul(qScale, b.Scalar(float32(1/math.Sqrt(float64(d)))))

	// Keys' scales over the past and the new positions, [batch, heads,
	// past + sequence, 1].
	keyScales := b.op("Concat", axis(2), PastKeyScale(i), NewKeyScale(i))
	var scores string // [batch, heads, sequence, past + sequence]
	if f.queryFirst {
		// query·keyᵀ: the query uint8 (MatMulInteger takes uint8 by
		// int8 or by uint8, not int8 by uint8).
		qq, qs := perm(b.cast(qSteps, onnxgraph.Uint8), 0, 2, 1, 3), perm(qScale, 0, 2, 1, 3) // [batch, heads, sequence, head_dim|1]
		zk := b.zeroPoint(f.key)
		ints := b.op("Concat", axis(3),
			matmulInt(qq, perm(PastKey(i), 0, 1, 3, 2), b.kvConsts().zeroPoint, zk),
			matmulInt(qq, perm(NewKey(i), 0, 1, 3, 2), b.kvConsts().zeroPoint, zk))
		scores = b.Mul(b.Mul(toFloat(ints), perm(keyScales, 0, 1, 3, 2)), qs)
	} else {
		// key·queryᵀ, [batch, heads, past + sequence, sequence], then
		// transposed: the past is read as it lies. The query int8 (uint8
		// or int8 keys by int8) or uint8 (uint8 keys by uint8).
		qt := onnxgraph.Int8
		if f.queryUint8 {
			qt = onnxgraph.Uint8
		}
		qq, qs := perm(b.cast(qSteps, qt), 0, 2, 3, 1), perm(qScale, 0, 2, 3, 1) // [batch, heads, head_dim|1, sequence]
		zk, zq := b.zeroPoint(f.key), b.zeroPoint(qt)
		ints := b.op("Concat", axis(2), matmulInt(PastKey(i), qq, zk, zq), matmulInt(NewKey(i), qq, zk, zq))
		scores = perm(b.Mul(b.Mul(toFloat(ints), keyScales), qs), 0, 1, 3, 2)
	}
	probs := b.op("Softmax", axis(-1), b.Add(scores, bias))

	// p·s_v over the past and the new positions, quantised per row to
	// uint8 (p·s_v ≥ 0: 255 levels), and the two integer products.
	c := b.kvConsts()
	weighted := b.Mul(probs, perm(b.op("Concat", axis(2), PastValueScale(i), NewValueScale(i)), 0, 1, 3, 2))
	ps := b.op("Max", nil, b.op("Div", nil,
		b.op("ReduceMax", []onnxgraph.Attr{onnxgraph.Int("keepdims", 1)}, weighted, b.Int64s(-1)),
		c.probLevels), c.tiny)
	// Round(p·s_v / ps) as uint8 (zero point 0, saturating at 255, which
	// no value exceeds), in one node: QuantizeLinear with one block the
	// width of any row.
	pq := b.op("QuantizeLinear", onnxgraph.RowBlocks(), weighted, ps)
	past := c.past
	last := b.Int64s(-1)
	onPast := b.op("Slice", nil, pq, b.Int64s(0), past, last)
	onNew := b.op("Slice", nil, pq, past, b.Int64s(math.MaxInt64), last)
	zv := b.zeroPoint(f.value)
	// With no past (a prefill from the start) the past's product sums over
	// no positions, and ONNX Runtime (1.30) leaves MatMulInteger's output
	// unwritten when K is 0: it is multiplied by 0 then (0 or 1, past > 0).
	onPastInts := b.Mul(matmulInt(onPast, PastValue(i), "", zv), c.hasPast)
	ints := b.Add(onPastInts, matmulInt(onNew, NewValue(i), "", zv))
	return b.Mul(toFloat(ints), ps)
}
