package quant

import (
	"fmt"
	"math"

	"github.com/inferhq/infer/models/onnxgraph"
)

// Activations per row and block: ONNX Runtime's com.microsoft MatMulNBits.

// msDomain is ONNX Runtime's operator domain.
const msDomain = onnxgraph.MicrosoftDomain

// accuracyInt8 is MatMulNBits's accuracy_level that quantises the
// activations to int8 per block of each row and computes in int8.
const accuracyInt8 = 4

// blocks returns the node that computes p's output with weights of
// opts.Bits bits in blocks and activations quantised per row and block.
func (w *writer) blocks(p product) ([]onnxgraph.Node, error) {
	f, bits, block := w.f, w.opts.Bits, w.opts.Block
	q, err := w.weight(p, func(v []float32, rows, cols int) (encoded, error) {
		packed, scales, err := Blocks(v, rows, cols, p.transposed, bits, block)
		if err != nil {
			return encoded{}, err
		}
		k, n, _ := matrix(v, rows, cols, p.transposed)
		dims := []int64{int64(n), int64((k + block - 1) / block), int64(block * bits / 8)}
		return encoded{dtype: onnxgraph.Uint8, dims: dims, raw: packed, scales: scales, scaleDims: []int64{int64(len(scales))}}, nil
	})
	if err != nil {
		return nil, err
	}
	bias, err := w.gemmBias(p)
	if err != nil {
		return nil, err
	}
	x, y, base := p.node.Inputs[0], p.node.Outputs[0], p.names()
	ins, out := []string{x, q.weight, q.scale}, y
	// MatMulNBits adds a bias of shape [N]; another C is added after.
	inline := false
	if in, ok := f.Initializer(bias); ok && len(in.Dims) == 1 && in.Dims[0] == q.n {
		ins, inline = append(ins, "", "", bias), true // no zero points, no g_idx
	} else if bias != "" {
		out = f.Unique(base + "_product")
	}
	nodes := []onnxgraph.Node{onnxgraph.NewNode(f.Unique(base+"_quantized"), "MatMulNBits", msDomain, ins, []string{out},
		onnxgraph.Int("K", q.k), onnxgraph.Int("N", q.n), onnxgraph.Int("bits", int64(bits)),
		onnxgraph.Int("block_size", int64(block)), onnxgraph.Int("accuracy_level", accuracyInt8))}
	if bias != "" && !inline {
		nodes = append(nodes, onnxgraph.NewNode(f.Unique(base+"_bias"), "Add", "", []string{out, bias}, []string{y}))
	}
	f.SetOpset(msDomain, max(f.Opset(msDomain), 1))
	return nodes, nil
}

// Blocks quantises a rows×cols float32 matrix w (row-major), the [K, N]
// right operand of a product (with transposed, w is [N, K]), into
// MatMulNBits's layout: for each column n, K in blocks of block weights,
// each block with one scale, symmetric: bits 8 store v+128 for v in
// [-127, 127]; bits 4 store v+8 for v in [-7, 7], two a byte, the first
// in the low nibble. It returns the N×blocks×(block·bits/8) bytes and the
// N×blocks scales, such that a weight ≈ v·scale. Padding past K holds 0.
func Blocks(w []float32, rows, cols int, transposed bool, bits, block int) ([]byte, []float32, error) {
	if len(w) != rows*cols {
		return nil, nil, fmt.Errorf("%d values for a %d×%d matrix", len(w), rows, cols)
	}
	if bits != 8 && bits != 4 || block < 2 || block%2 != 0 {
		return nil, nil, fmt.Errorf("bits %d, block %d: want 8 or 4 bits and an even block", bits, block)
	}
	if err := finite(w); err != nil {
		return nil, nil, err
	}
	k, n, at := matrix(w, rows, cols, transposed)
	blocks := (k + block - 1) / block
	levels := float64(int(1)<<(bits-1) - 1) // 127 or 7
	zero := 1 << (bits - 1)
	blob := block * bits / 8
	packed := make([]byte, n*blocks*blob)
	scales := make([]float32, n*blocks)
	vals := make([]int, block)
	for nn := range n {
		for b := range blocks {
			lo, hi := b*block, min(k, (b+1)*block)
			m := 0.0
			for kk := lo; kk < hi; kk++ {
				m = max(m, math.Abs(float64(at(kk, nn))))
			}
			s := float32(1)
			if m > 0 {
				s = float32(m / levels)
			}
			scales[nn*blocks+b] = s
			for i := range vals {
				vals[i] = zero
				if kk := lo + i; kk < hi {
					v := math.RoundToEven(float64(at(kk, nn)) / float64(s))
					vals[i] = zero + int(max(-levels, min(levels, v)))
				}
			}
			dst := packed[(nn*blocks+b)*blob:][:blob]
			if bits == 8 {
				for i, v := range vals {
					dst[i] = byte(v)
				}
				continue
			}
			for i := range dst {
				dst[i] = byte(vals[2*i]) | byte(vals[2*i+1])<<4
			}
		}
	}
	return packed, scales, nil
}
