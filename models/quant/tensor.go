package quant

import (
	"fmt"
	"math"
	"slices"

	"github.com/inferhq/infer/models/onnxgraph"
)

// Activations per tensor: DynamicQuantizeLinear, MatMulInteger, Cast and
// Mul, which ONNX Runtime fuses into DynamicQuantizeMatMul or
// MatMulIntegerToFloat. Activations per row: the same product of int8
// weights, its input quantised per row (rows.go), written as
// MatMulIntegerToFloat.

// tensor returns the nodes that compute p's output with int8 weights and
// activations quantised per tensor or per row. activations holds the
// run-time quantisation of each activation already written in the scope.
func (w *writer) tensor(p product, activations map[string][3]string) ([]onnxgraph.Node, error) {
	f := w.f
	q, err := w.weight(p, func(v []float32, rows, cols int) (encoded, error) {
		qw, scales, err := Int8(v, rows, cols, p.transposed, w.opts.PerTensor)
		if err != nil {
			return encoded{}, err
		}
		k, n, _ := matrix(v, rows, cols, p.transposed)
		var scaleDims []int64 // a scalar per tensor
		if !w.opts.PerTensor {
			scaleDims = []int64{int64(n)}
		}
		return encoded{dtype: onnxgraph.Int8, dims: []int64{int64(k), int64(n)}, raw: int8Bytes(qw), scales: scales, scaleDims: scaleDims}, nil
	})
	if err != nil {
		return nil, err
	}
	bias, err := w.gemmBias(p)
	if err != nil {
		return nil, err
	}
	x, y, base := p.node.Inputs[0], p.node.Outputs[0], p.names()
	var nodes []onnxgraph.Node
	act, ok := activations[x]
	switch {
	case ok:
	case w.opts.Activations == ActivationsRow:
		var q []onnxgraph.Node
		if q, act, err = w.quantizeRows(x); err != nil {
			return nil, err
		}
		nodes = append(nodes, q...)
		activations[x] = act
	default:
		act = [3]string{f.Unique(x + "_quantized"), f.Unique(x + "_scale"), f.Unique(x + "_zero_point")}
		nodes = append(nodes, onnxgraph.NewNode(f.Unique(base+"_quantize_input"), "DynamicQuantizeLinear", "", []string{x}, act[:]))
		activations[x] = act
	}
	out := y
	if bias != "" {
		out = f.Unique(base + "_product")
	}
	if w.opts.Activations == ActivationsRow {
		// ONNX Runtime's com.microsoft MatMulIntegerToFloat, written
		// here: the integer GEMM with the columns' scales applied as it
		// stores its output, and the rows' in one pass after. ONNX Runtime
		// (1.30) fuses the standard operators' form into it too, but then
		// takes in the bias that follows, which the kernel adds before it
		// applies a scale per row (the bias would be scaled); written
		// without one, with the bias added after, the product takes one
		// node instead of four (a decode step of gpt2-small at batch 16
		// runs 147 fewer).
		f.SetOpset(msDomain, max(f.Opset(msDomain), 1))
		nodes = append(nodes, onnxgraph.NewNode(f.Unique(base+"_matmul"), "MatMulIntegerToFloat", msDomain,
			[]string{act[0], q.weight, act[1], q.scale, act[2]}, []string{out}))
	} else {
		product, asFloat, scale := f.Unique(base+"_int32"), f.Unique(base+"_float"), f.Unique(base+"_scale")
		nodes = append(nodes,
			onnxgraph.NewNode(f.Unique(base+"_matmul"), "MatMulInteger", "", []string{act[0], q.weight, act[2]}, []string{product}),
			onnxgraph.NewNode(f.Unique(base+"_cast"), "Cast", "", []string{product}, []string{asFloat}, onnxgraph.Int("to", int64(onnxgraph.Float32))),
			onnxgraph.NewNode(f.Unique(base+"_scales"), "Mul", "", []string{act[1], q.scale}, []string{scale}),
			onnxgraph.NewNode(f.Unique(base+"_rescale"), "Mul", "", []string{asFloat, scale}, []string{out}))
	}
	if bias != "" {
		nodes = append(nodes, onnxgraph.NewNode(f.Unique(base+"_bias"), "Add", "", []string{out, bias}, []string{y}))
	}
	return nodes, nil
}

// Int8 quantises a rows×cols float32 matrix w (row-major) symmetrically to
// int8 in [-127, 127], as the [K, N] right operand of a product: w itself,
// or with transposed its transpose (w is then [N, K], as Gemm's transB
// reads it). It returns the K×N int8 matrix, row-major, and the scales: one
// per column N, or with perTensor one for all, such that w ≈ q·scale. A
// weight that is not finite is an error.
func Int8(w []float32, rows, cols int, transposed, perTensor bool) ([]int8, []float32, error) {
	if len(w) != rows*cols {
		return nil, nil, fmt.Errorf("%d values for a %d×%d matrix", len(w), rows, cols)
	}
	if err := finite(w); err != nil {
		return nil, nil, err
	}
	k, n, at := matrix(w, rows, cols, transposed)
	maxAbs := make([]float64, n)
	for kk := range k {
		for nn := range n {
			maxAbs[nn] = max(maxAbs[nn], math.Abs(float64(at(kk, nn))))
		}
	}
	if perTensor {
		maxAbs = []float64{slices.Max(maxAbs)}
	}
	scales := make([]float32, len(maxAbs))
	for i, m := range maxAbs {
		scales[i] = symmetricScale(m)
	}
	q := make([]int8, k*n)
	for kk := range k {
		for nn := range n {
			s := scales[0]
			if !perTensor {
				s = scales[nn]
			}
			q[kk*n+nn] = toInt8(at(kk, nn), s)
		}
	}
	return q, scales, nil
}
