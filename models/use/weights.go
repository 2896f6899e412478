package use

import (
	"fmt"
	"math"
	"strconv"

	"github.com/inferhq/infer/models/tfjs"
)

// Name prefixes of the weights in model.json.
const (
	encode  = "module_apply_default/Encoder_en/KonaTransformer/Encode/"
	stack   = encode + "TransformerStack/"
	kernels = "module/Encoder_en/KonaTransformer/Encode/"
)

// Weights are the model's parameters and the constants of its graph, read
// from the GraphModel by name and checked against each other.
type Weights struct {
	Vocab, Embed int       // rows and width of the token embedding
	Embeddings   []float32 // [Vocab, Embed]
	// InvTimescales are the frequencies of the timing signal, [Embed/2]:
	// position p adds sin(p·f) then cos(p·f) to its embedding.
	InvTimescales []float32
	Layers        []Layer
	Heads         int // attention heads of every layer
	// Epsilon is the layer norms' (1e-6), AttentionBias what a padding key
	// adds to a score (-1e9), MaxLen the tokens of an input the model reads
	// (128; it drops the rest), and NormFloor the floor of the squared norm
	// in the final L2 normalisation (1e-12).
	Epsilon, AttentionBias, NormFloor float32
	MaxLen                            int
	Width                             int       // of the output
	Tanh, TanhBias                    []float32 // [last layer's Out, Width], [Width]
}

// Layer is one transformer layer, from In wide to Out wide, whose attention
// is Attn wide (queries, keys and values; the output projection widens it
// to Out).
type Layer struct {
	In, Attn, Out, FFN int
	// QScale multiplies the queries: 1/√(head size).
	QScale                 float32
	Norm1Scale, Norm1Bias  []float32 // [In]
	QKV, QKVBias           []float32 // [In, 3·Attn] (queries, keys, values), [3·Attn]
	Output, OutputBias     []float32 // [Attn, Out], [Out]
	Residual, ResidualBias []float32 // [In, Out], [Out]: the residual's projection when In ≠ Out, else nil
	Norm2Scale, Norm2Bias  []float32 // [Out]
	FFN1, FFN1Bias         []float32 // [Out, FFN], [FFN]
	FFN2, FFN2Bias         []float32 // [FFN, Out], [Out]
}

// Params returns the number of float32 parameters (the constants aside).
func (w *Weights) Params() int {
	n := len(w.Embeddings) + len(w.InvTimescales) + len(w.Tanh) + len(w.TanhBias)
	for _, l := range w.Layers {
		for _, p := range [][]float32{l.Norm1Scale, l.Norm1Bias, l.QKV, l.QKVBias, l.Output, l.OutputBias,
			l.Residual, l.ResidualBias, l.Norm2Scale, l.Norm2Bias, l.FFN1, l.FFN1Bias, l.FFN2, l.FFN2Bias} {
			n += len(p)
		}
	}
	return n
}

// maxLayers bounds the layers LoadWeights looks for.
const maxLayers = 64

// LoadWeights reads the weights of the Universal Sentence Encoder lite from
// its GraphModel, checking every shape.
func LoadWeights(m *tfjs.Model) (*Weights, error) {
	r := reader{m: m}
	w := &Weights{}
	emb := r.tensor("module/Embeddings_en")
	if r.err == nil && len(emb.Shape) == 2 {
		w.Vocab, w.Embed = emb.Shape[0], emb.Shape[1]
	}
	w.Embeddings = r.f32("module/Embeddings_en", w.Vocab, w.Embed)
	w.InvTimescales = r.f32(stack+"Layer_0/AddTimingSignal/TimingSignal/ExpandDims_1", 1, w.Embed/2)
	w.Heads = r.int(stack + "Layer_1/TransformerLayer/MultiheadAttention/split_heads/split_last_dimension/Reshape/shape/2")
	w.Epsilon = r.scalar(stack + "Layer_1/TransformerLayer/FFN/layer_prepostprocess/layer_norm/Cast/x")
	w.AttentionBias = r.scalar(stack + "Layer_1/TransformerLayer/MultiheadAttention/DotProductAttention/attention_bias_ignore_padding/mul/y")
	w.MaxLen = r.int("module_apply_default/Encoder_en/KonaTransformer/ClipToMaxLength/Less/y")
	w.NormFloor = r.scalar("module_apply_default/Encoder_en/hidden_layers/l2_normalize/Maximum/y")
	if r.err != nil {
		return nil, r.err
	}
	if w.Embed%2 != 0 || w.Heads < 1 || w.MaxLen < 1 || w.MaxLen > 1<<16 || !(w.Epsilon > 0) || !(w.NormFloor > 0) {
		return nil, fmt.Errorf("use: implausible model: embedding width %d, %d heads, max length %d, epsilon %g, norm floor %g",
			w.Embed, w.Heads, w.MaxLen, w.Epsilon, w.NormFloor)
	}
	in := w.Embed
	for i := 0; i < maxLayers; i++ {
		qkvName := kernels + "Layer_" + strconv.Itoa(i) + "/TransformerLayer/MultiheadAttention/qkv_transform_single/kernel/part_0"
		if _, ok := m.Tensor(qkvName); !ok {
			break
		}
		l := r.layer(i, in, w.Heads)
		if r.err != nil {
			return nil, r.err
		}
		w.Layers = append(w.Layers, l)
		in = l.Out
	}
	if len(w.Layers) == 0 {
		return nil, fmt.Errorf("use: the model has no transformer layer")
	}
	tanh := r.tensor("module/Encoder_en/hidden_layers/tanh_layer_0/weights")
	if r.err == nil && len(tanh.Shape) == 2 {
		w.Width = tanh.Shape[1]
	}
	w.Tanh = r.f32("module/Encoder_en/hidden_layers/tanh_layer_0/weights", in, w.Width)
	w.TanhBias = r.f32("module/Encoder_en/hidden_layers/tanh_layer_0/bias", w.Width)
	if r.err != nil {
		return nil, r.err
	}
	return w, nil
}

// layer reads layer i, in wide.
func (r *reader) layer(i, in, heads int) Layer {
	p := "Layer_" + strconv.Itoa(i) + "/TransformerLayer/"
	mha := p + "MultiheadAttention/"
	l := Layer{In: in}
	if qkv := r.tensor(kernels + mha + "qkv_transform_single/kernel/part_0"); r.err == nil && len(qkv.Shape) == 4 {
		l.Attn = qkv.Shape[3] / 3
	}
	if o := r.tensor(kernels + mha + "output_transform_single/kernel/part_0"); r.err == nil && len(o.Shape) == 4 {
		l.Out = o.Shape[3]
	}
	if ffn := r.tensor(stack + p + "FFN/conv1/Tensordot/Reshape_1"); r.err == nil && len(ffn.Shape) == 2 {
		l.FFN = ffn.Shape[1]
	}
	if r.err == nil && (l.Attn < 1 || l.Attn%heads != 0 || l.Out < 1) {
		r.err = fmt.Errorf("use: layer %d attends %d wide, which %d heads do not divide", i, l.Attn, heads)
		return l
	}
	l.QScale = r.scalar(stack + mha + "mul/y")
	if r.err == nil {
		if want := 1 / math.Sqrt(float64(l.Attn/heads)); math.Abs(float64(l.QScale)-want) > 1e-6 {
			r.err = fmt.Errorf("use: layer %d scales queries by %g, not 1/√(head size %d)", i, l.QScale, l.Attn/heads)
		}
	}
	norm := p + "layer_prepostprocess/layer_norm/"
	l.Norm1Scale = r.f32(encode+norm+"layer_norm_scale/ConcatPartitions/concat", in)
	l.Norm1Bias = r.f32(encode+norm+"layer_norm_bias/ConcatPartitions/concat", in)
	l.QKV = r.f32(kernels+mha+"qkv_transform_single/kernel/part_0", 1, 1, in, 3*l.Attn)
	l.QKVBias = r.f32(encode+mha+"qkv_transform_single/bias/ConcatPartitions/concat", 3*l.Attn)
	l.Output = r.f32(kernels+mha+"output_transform_single/kernel/part_0", 1, 1, l.Attn, l.Out)
	l.OutputBias = r.f32(encode+mha+"output_transform_single/bias/ConcatPartitions/concat", l.Out)
	if in != l.Out {
		l.Residual = r.f32(encode+p+"dense/kernel/ConcatPartitions/concat", in, l.Out)
		l.ResidualBias = r.f32(encode+p+"dense/bias/ConcatPartitions/concat", l.Out)
	}
	ffnNorm := p + "FFN/layer_prepostprocess/layer_norm/"
	l.Norm2Scale = r.f32(encode+ffnNorm+"layer_norm_scale/ConcatPartitions/concat", l.Out)
	l.Norm2Bias = r.f32(encode+ffnNorm+"layer_norm_bias/ConcatPartitions/concat", l.Out)
	l.FFN1 = r.f32(stack+p+"FFN/conv1/Tensordot/Reshape_1", l.Out, l.FFN)
	l.FFN1Bias = r.f32(encode+p+"FFN/conv1/bias/ConcatPartitions/concat", l.FFN)
	l.FFN2 = r.f32(stack+p+"FFN/conv2/Tensordot/Reshape_1", l.FFN, l.Out)
	l.FFN2Bias = r.f32(encode+p+"FFN/conv2/bias/ConcatPartitions/concat", l.Out)
	return l
}

// reader reads weights by name, keeping the first error.
type reader struct {
	m   *tfjs.Model
	err error
}

func (r *reader) tensor(name string) *tfjs.Tensor {
	if r.err != nil {
		return nil
	}
	t, ok := r.m.Tensor(name)
	if !ok {
		r.err = fmt.Errorf("use: the model has no weight %q: not the Universal Sentence Encoder lite", name)
	}
	return t
}

func (r *reader) f32(name string, shape ...int) []float32 {
	if r.err != nil {
		return nil
	}
	v, err := r.m.Float32(name, shape...)
	if err != nil {
		r.err = fmt.Errorf("use: %w", err)
	}
	return v
}

func (r *reader) scalar(name string) float32 {
	if v := r.f32(name); r.err == nil {
		return v[0]
	}
	return 0
}

func (r *reader) int(name string) int {
	if r.err != nil {
		return 0
	}
	v, err := r.m.Int32(name)
	if err != nil {
		r.err = fmt.Errorf("use: %w", err)
		return 0
	}
	return int(v[0])
}
