package onnxgraph

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/inferhq/infer/models/onnxgraph/internal/onnxpb"
)

// The pieces below are what the transformer generators (models/bert,
// models/gpt2) build alike.

// Add appends x + y and returns its output.
func (g *Graph) Add(x, y string) string { return g.Node("Add", []string{x, y}) }

// Mul appends x · y (elementwise) and returns its output.
func (g *Graph) Mul(x, y string) string { return g.Node("Mul", []string{x, y}) }

// MatMul appends the matrix product x·y and returns its output.
func (g *Graph) MatMul(x, y string) string { return g.Node("MatMul", []string{x, y}) }

// LayerNorm appends a LayerNormalization over the last axis of x, whose
// size is width, with a learned scale (prefix.weight, 1) and shift
// (prefix.bias, 0), and returns its output.
func (g *Graph) LayerNorm(prefix, x string, width int64, epsilon float32) string {
	gamma := g.Weight(prefix+".weight", []int64{width}, Fill(1))
	beta := g.Weight(prefix+".bias", []int64{width}, Fill(0))
	return g.Node("LayerNormalization", []string{x, gamma, beta}, Int("axis", -1), Float("epsilon", epsilon))
}

// LayerShape returns a transformer's depth and width in the notation of the
// BERT miniatures: "L4/H256/A4" for 4 layers, hidden size 256 and 4 heads.
func LayerShape(layers, hidden, heads int) string {
	return "L" + strconv.Itoa(layers) + "/H" + strconv.Itoa(hidden) + "/A" + strconv.Itoa(heads)
}

// CheckArch reports an architecture the generators cannot build: a name
// unfit for a file name (lower-case letters, digits, '-', '_' and '.'), a
// size below 1 (hidden, heads and the others in sizes), or heads that do not divide the hidden size.
func CheckArch(name string, hidden, heads int, sizes ...int) error {
	switch {
	case name == "" || strings.ContainsFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.')
	}):
		return fmt.Errorf("architecture name %q: want lower-case letters, digits, '-', '_' or '.'", name)
	case hidden < 1 || heads < 1 || slices.ContainsFunc(sizes, func(n int) bool { return n < 1 }):
		return fmt.Errorf("architecture %s: every size must be at least 1", name)
	case hidden%heads != 0:
		return fmt.Errorf("architecture %s: %d heads do not divide hidden size %d", name, heads, hidden)
	}
	return nil
}

// The pieces below are what the decoder generators (models/gpt2,
// models/llama) build alike: graphs with optimum's decoder-with-past inputs
// (input_ids [batch, sequence], attention_mask [batch, past + sequence]) and
// logits_to_keep.

// Dim appends the nodes that give dimension i of x's shape as an int64
// scalar, and returns its name.
func (g *Graph) Dim(x string, i int64) string {
	return g.Node("Gather", []string{g.Node("Shape", []string{x}), g.Int64(i)}, Int("axis", 0))
}

// Floats appends a Constant node holding a 1-D float32 tensor and returns
// its output. Constants are nodes, not initializers, so they do not count
// as parameters.
func (g *Graph) Floats(v ...float32) string {
	return g.constant(&onnxpb.TensorProto{
		Dims: []int64{int64(len(v))}, DataType: int32(Float32), FloatData: append([]float32(nil), v...),
	})
}

// CausalBias appends the additive bias of a decoder's attention scores,
// [batch, 1, sequence, past + sequence], and returns its name: 0 where query
// position i (the past's length plus i in the whole sequence) may attend to
// key position j, that is j ≤ its position and mask[j] = 1; the lowest
// float32 elsewhere, as Hugging Face's decoders use. ids is input_ids and
// mask attention_mask.
func (g *Graph) CausalBias(ids, mask string) string {
	total := g.Dim(mask, 1)
	pastLen := g.Node("Sub", []string{total, g.Dim(ids, 1)})
	query := g.Node("Unsqueeze", []string{g.Node("Range", []string{pastLen, total, g.Int64(1)}), g.Int64s(1)}) // [sequence, 1]
	key := g.Node("Range", []string{g.Int64(0), total, g.Int64(1)})                                            // [past + sequence]
	causal := g.Node("LessOrEqual", []string{key, query})                                                      // [sequence, past + sequence]
	attended := g.Node("Cast", []string{g.Node("Unsqueeze", []string{mask, g.Int64s(1, 2)})},
		Int("to", int64(Bool))) // [batch, 1, 1, past + sequence]
	allowed := g.Node("And", []string{causal, attended})
	return g.Node("Where", []string{allowed, g.Scalar(0), g.Scalar(-math.MaxFloat32)})
}

// LastPositions appends the Slice of x [batch, sequence, …] to its last k
// positions, k being the int64 [1] input keep (logits_to_keep): every
// position for k = 0, and for k past the sequence.
func (g *Graph) LastPositions(x, keep string) string {
	return g.Node("Slice", []string{x, g.Node("Neg", []string{keep}), g.Int64s(math.MaxInt64), g.Int64s(1)})
}

// Classifier appends a decoder's head: logits x·tableᵀ for x [batch, n,
// width] and table [vocab, width] (a tied embedding table or a classifier
// of its own), written to the value called out, [batch, n, vocab]. Gemm
// reads the table transposed in place, where a Transpose node would make
// ONNX Runtime fold a second copy of it into the session.
func (g *Graph) Classifier(x, table, out string, width, vocab int64) {
	flat := g.Node("Reshape", []string{x, g.Int64s(-1, width)})
	logits := g.Node("Gemm", []string{flat, table}, Int("transB", 1))
	rows := g.Node("Shape", []string{x}, Int("start", 0), Int("end", 2)) // [batch, n]
	shape := g.Node("Concat", []string{rows, g.Int64s(vocab)}, Int("axis", 0))
	g.NodeOut("Reshape", []string{logits, shape}, []string{out})
}
