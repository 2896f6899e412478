package quant

import (
	"encoding/binary"
	"math"

	"github.com/inferhq/infer/models/onnxgraph"
)

// Activations per row: each row of a product's input quantised to uint8
// on its own (symmetric, zero point 128) in standard operators, the
// weights int8 per channel as with activations per tensor (tensor.go),
// and com.microsoft MatMulIntegerToFloat, which applies the row's scale to
// the row's outputs. From opset 21 the rounding is one QuantizeLinear a
// row (onnxgraph.RowBlocks) instead of four nodes, with the same bytes.

// rowConsts are the constants of the per-row quantisation, written once
// per model.
type rowConsts struct {
	levels, tiny, zero, zeroPoint, axes string
	// blocks: the graph's opset (21 or later) has QuantizeLinear with
	// blocks, which rounds a row in one node; zero (the float 128 that
	// Round's steps are shifted by) is then not written.
	blocks bool
}

// consts returns the constants, writing them on first use.
func (w *writer) consts() (rowConsts, error) {
	if w.rc.levels != "" {
		return w.rc, nil
	}
	f := w.f
	c := rowConsts{levels: f.Unique("row_quant_levels"), tiny: f.Unique("row_quant_tiny"),
		zeroPoint: f.Unique("row_quant_zero_point"), blocks: f.Opset("") >= 21}
	err := f.SetInitializer(c.levels, onnxgraph.Float32, nil, float32Bytes([]float32{127}))
	if err == nil {
		// The smallest normal float32: a row of zeros (or of values that
		// small) gets a normal scale that turns it into zeros, not NaNs.
		err = f.SetInitializer(c.tiny, onnxgraph.Float32, nil, float32Bytes([]float32{0x1p-126}))
	}
	if err == nil && !c.blocks {
		c.zero = f.Unique("row_quant_offset")
		err = f.SetInitializer(c.zero, onnxgraph.Float32, nil, float32Bytes([]float32{128}))
	}
	if err == nil {
		err = f.SetInitializer(c.zeroPoint, onnxgraph.Uint8, nil, []byte{128})
	}
	if err == nil && f.Opset("") >= 18 {
		c.axes = f.Unique("row_quant_axes")
		err = f.SetInitializer(c.axes, onnxgraph.Int64, []int64{1}, binary.LittleEndian.AppendUint64(nil, math.MaxUint64)) // -1: the last axis
	}
	if err != nil {
		return rowConsts{}, err
	}
	w.rc = c
	return c, nil
}

// quantizeRows returns the nodes that quantise each row of x (its last
// axis) on its own, and the names of the uint8 rows, their scales (shape
// [..., 1]) and their zero point (128):
//
//	s = max(ReduceMax(Abs(x)) / 127, tiny)
//	x_q = Cast<uint8>(Round(x / s) + 128)
//
// |x / s| ≤ 127, so x_q is in [1, 255] and needs no Clip. From opset 21,
// x_q = QuantizeLinear(x, s, 128s) with a block a row, the zero points
// expanded to the scales' shape (the standard requires the same shape):
// ONNX Runtime (1.30) computes x / s rounded half to even as Round does,
// in one vectorised node where Round alone is a scalar loop (3.2 µs for 16
// rows of 768 on the 2-core dev VM, 10.5 µs for 16 of 3072).
func (w *writer) quantizeRows(x string) ([]onnxgraph.Node, [3]string, error) {
	f := w.f
	c, err := w.consts()
	if err != nil {
		return nil, [3]string{}, err
	}
	abs, m, unguarded, s := f.Unique(x+"_abs"), f.Unique(x+"_row_max"), f.Unique(x+"_row_scale_unguarded"), f.Unique(x+"_row_scale")
	q := f.Unique(x + "_quantized")
	reduce := onnxgraph.NewNode(f.Unique(x+"_row_max"), "ReduceMax", "", []string{abs}, []string{m}, onnxgraph.Ints("axes", -1), onnxgraph.Int("keepdims", 1))
	if c.axes != "" {
		reduce = onnxgraph.NewNode(f.Unique(x+"_row_max"), "ReduceMax", "", []string{abs, c.axes}, []string{m}, onnxgraph.Int("keepdims", 1))
	}
	nodes := []onnxgraph.Node{
		onnxgraph.NewNode(f.Unique(x+"_abs"), "Abs", "", []string{x}, []string{abs}),
		reduce,
		onnxgraph.NewNode(f.Unique(x+"_row_scale"), "Div", "", []string{m, c.levels}, []string{unguarded}),
		onnxgraph.NewNode(f.Unique(x+"_guard"), "Max", "", []string{unguarded, c.tiny}, []string{s}),
	}
	if c.blocks {
		shape, zps := f.Unique(x+"_row_scale_shape"), f.Unique(x+"_row_zero_points")
		nodes = append(nodes,
			onnxgraph.NewNode(f.Unique(x+"_row_scale_shape"), "Shape", "", []string{s}, []string{shape}),
			onnxgraph.NewNode(f.Unique(x+"_row_zero_points"), "Expand", "", []string{c.zeroPoint, shape}, []string{zps}),
			onnxgraph.NewNode(f.Unique(x+"_quantize"), "QuantizeLinear", "", []string{x, s, zps}, []string{q}, onnxgraph.RowBlocks()...))
		return nodes, [3]string{q, s, c.zeroPoint}, nil
	}
	div, round, shifted := f.Unique(x+"_steps"), f.Unique(x+"_rounded"), f.Unique(x+"_shifted")
	nodes = append(nodes,
		onnxgraph.NewNode(f.Unique(x+"_steps"), "Div", "", []string{x, s}, []string{div}),
		onnxgraph.NewNode(f.Unique(x+"_round"), "Round", "", []string{div}, []string{round}),
		onnxgraph.NewNode(f.Unique(x+"_shift"), "Add", "", []string{round, c.zero}, []string{shifted}),
		onnxgraph.NewNode(f.Unique(x+"_to_uint8"), "Cast", "", []string{shifted}, []string{q}, onnxgraph.Int("to", int64(onnxgraph.Uint8))))
	return nodes, [3]string{q, s, c.zeroPoint}, nil
}
