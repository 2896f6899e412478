package gpt2

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/inferhq/infer/models/onnxgraph"
)

// Graph input and output names, as in optimum's decoder-with-past export.
const (
	InputIDs      = "input_ids"      // int64 [batch, sequence]
	AttentionMask = "attention_mask" // int64 [batch, past + sequence]; 1 = token, 0 = padding or hole
	PositionIDs   = "position_ids"   // int64 [batch, sequence]
	Logits        = "logits"         // float32 [batch, kept positions, vocab]
	// LogitsToKeep is int64 [1]: the LM head runs on the last k positions
	// of each row (0: all of them), as transformers' logits_to_keep
	// argument of forward. Prefill needs the logits of one position only,
	// and for GPT-2's vocabulary the LM head is most of a position's
	// compute (94 % of gpt2-tiny's); optimum's exports lack the input and
	// compute logits everywhere.
	LogitsToKeep = "logits_to_keep"
	// SeqLensK and TotalSequenceLength are the inputs of a graph with
	// Spec.GQA in place of the attention mask, as ONNX Runtime's
	// GroupQueryAttention names them: int32 [batch], each row's past + fed
	// positions − 1, and int32 [1], the longest row's past + fed positions.
	SeqLensK            = "seqlens_k"
	TotalSequenceLength = "total_sequence_length"
	// UseCacheBranch is the input of optimum's merged decoder that chooses
	// between its without-past and with-past subgraphs; bool [1].
	UseCacheBranch = "use_cache_branch"
)

// PastKey and the others name the KV cache of layer i: inputs
// past_key_values.{i}.key|value [batch, heads, past, head_dim] and outputs
// present.{i}.key|value [batch, heads, past + sequence, head_dim].
func PastKey(i int) string      { return "past_key_values." + strconv.Itoa(i) + ".key" }
func PastValue(i int) string    { return "past_key_values." + strconv.Itoa(i) + ".value" }
func PresentKey(i int) string   { return "present." + strconv.Itoa(i) + ".key" }
func PresentValue(i int) string { return "present." + strconv.Itoa(i) + ".value" }

// NewKey and NewValue name the outputs of a graph with Spec.InPlaceKV:
// new.{i}.key|value [batch, heads, sequence, head_dim], the keys and values
// of the tokens fed only, which the caller writes into its cache after the
// past's. Their names (instead of present's) mark the layout.
func NewKey(i int) string   { return "new." + strconv.Itoa(i) + ".key" }
func NewValue(i int) string { return "new." + strconv.Itoa(i) + ".value" }

// Metadata keys Generate stores in the model's metadata_props.
const (
	MetaArch      = "infer.arch"      // "gpt2-tiny"
	MetaShape     = "infer.shape"     // "L2/H128/A2/V50257/C1024"
	MetaTask      = "infer.task"      // "text-generation"
	MetaSeed      = "infer.seed"      // decimal
	MetaGenerator = "infer.generator" // "infer/gpt2 1"
	MetaContext   = "infer.context"   // most positions, decimal
	MetaEOS       = "infer.eos_token_id"
)

// Task is what the generated models do, as metadata and model listings name
// it.
const Task = "text-generation"

const (
	// DefaultSeed is the seed of a Spec whose Seed is 0.
	DefaultSeed = onnxgraph.DefaultSeed
	// generatorVersion changes whenever the same Spec would produce a
	// different file, so that cached files of older generators are not
	// reused.
	generatorVersion = "3"

	// opset is the graphs' ONNX opset: 21 for QuantizeLinear with blocks,
	// which rounds a row to its quantisation steps in one node (models/quant's
	// activations per row).
	opset, irVersion = 21, 10

	initStd   = 0.02 // GPT-2's initializer_range, for the embeddings
	layerNorm = 1e-5 // GPT-2's layer_norm_epsilon
	// blockGain sets the initialisation of the blocks' matrices:
	// N(0, (blockGain/√hidden)²). GPT-2's own (0.02, and 0.02/√(2·layers)
	// for the output projections) is made for training: untrained, the
	// blocks then barely change the residual stream, and greedy decoding
	// repeats one token whatever the prompt. At this gain the output
	// depends on the whole context, as a trained model's does.
	blockGain = 2.0
)

// Spec says which model to generate.
type Spec struct {
	Arch Arch
	// Seed selects the random weights; 0 means DefaultSeed.
	Seed uint64
	// The graph's inputs can take two other shapes that real exports have,
	// so that what serves these models can be tested against them:
	//
	// NoPositionIDs leaves out position_ids: positions are numbered from
	// the past's length, as in exports made without them.
	NoPositionIDs bool
	// CacheBranch adds use_cache_branch, the input of a merged decoder
	// (decoder_model_merged.onnx). Its two subgraphs compute the same, so
	// this graph ignores the input.
	CacheBranch bool
	// AllLogits leaves out logits_to_keep: logits at every position, as
	// in optimum's exports.
	AllLogits bool
	// InPlaceKV makes a graph whose KV cache its caller writes in place:
	// past_key_values.{i} are buffers [batch, heads, capacity, head_dim]
	// whose row r holds its sequence's tokens at positions the mask marks
	// (with models/onnx, the first ones), the graph outputs only the fed
	// tokens' keys and values (new.{i}.key|value) instead of present's
	// concatenation of past and new, and attends to the past and the new
	// tokens without concatenating them: a decode step reads the past's
	// keys and values once, where the standard graph copies them into the
	// present and reads them again. It needs position_ids (the past's
	// length says nothing of a row's positions). Exports keep the standard
	// graph.
	InPlaceKV bool
	// GQA makes a graph whose attention is ONNX Runtime's
	// GroupQueryAttention (a com.microsoft operator, so the graph runs on
	// ONNX Runtime only), its KV cache in place in the operator itself:
	// past_key_values.{i} are buffers [batch, heads, capacity, head_dim]
	// whose row r holds its sequence's tokens at its first positions, the
	// graph takes seqlens_k and total_sequence_length instead of an
	// attention mask, and present.{i}.key|value, of the past's shape, are
	// meant to be the past's own tensors: the operator then writes the fed
	// tokens' keys and values after each row's past and copies nothing,
	// and attends over each row's own positions only. A run with a past
	// and several tokens must have one row (ONNX Runtime 1.30's CPU kernel
	// refuses more). It needs position_ids. With KVInt8 the cache is int8
	// with static scales per layer, head and channel (KVScales), which the
	// operator applies itself, and the products are float32 ones.
	GQA bool
	// KVInt8 makes GQA's KV cache int8: past_key_values.{i} and
	// present.{i} are int8, a quarter of float32's bytes. Only with GQA.
	KVInt8 bool
	// KVScales are the scales of the int8 KV cache of GQA with KVInt8.
	KVScales *KVScales
}

func (s Spec) withDefaults() Spec {
	if s.Seed == 0 {
		s.Seed = DefaultSeed
	}
	return s
}

func (s Spec) validate() error {
	switch {
	case (s.InPlaceKV || s.GQA) && s.NoPositionIDs:
		return fmt.Errorf("a graph with its KV cache in place needs position_ids")
	case s.GQA && (s.InPlaceKV || s.CacheBranch):
		return fmt.Errorf("a GroupQueryAttention graph has a layout of its own, and no use_cache_branch")
	case s.KVInt8 && !s.GQA:
		return fmt.Errorf("an int8 KV cache needs the GroupQueryAttention graph")
	case s.KVInt8 && (s.KVScales == nil || s.KVScales.ID == "" || s.KVScales.Compute == nil):
		return fmt.Errorf("a GroupQueryAttention graph with an int8 KV cache needs its scales")
	}
	return s.Arch.validate()
}

// KVScales are the scales of a GroupQueryAttention graph's int8 KV cache
// (Spec.GQA with KVInt8), fixed in the graph: one for each layer, keys and
// values, head and channel. A key or value is stored as round(x / scale),
// saturating at ±127 (ONNX Runtime's kernel does both), so they are best
// a channel's largest |x| over a calibration text, / 127.
type KVScales struct {
	// ID names the scales (how they were computed), for the file's hash.
	ID string
	// Compute returns the scales, Layers × 2 × Hidden of them: layer 0's
	// keys' (head by head, channel by channel), then its values', then
	// layer 1's. Generate calls it once; each must be positive and finite.
	Compute func() ([]float32, error)
}

// compute returns the scales, checked against a.
func (k *KVScales) compute(a Arch) ([]float32, error) {
	v, err := k.Compute()
	if err != nil {
		return nil, fmt.Errorf("KV cache scales: %w", err)
	}
	if len(v) != a.Layers*2*a.Hidden {
		return nil, fmt.Errorf("KV cache scales: %d of them, want %d", len(v), a.Layers*2*a.Hidden)
	}
	for i, x := range v {
		if !(x > 0) || math.IsInf(float64(x), 0) {
			return nil, fmt.Errorf("KV cache scales: scale %d is %v", i, x)
		}
	}
	return v, nil
}

// FileName returns the name Ensure gives the model of s:
// "gpt2-tiny-<hash>.onnx", where the hash covers everything that determines
// the file's content (shape, seed and generator version).
func (s Spec) FileName() string {
	s = s.withDefaults()
	a := s.Arch
	key := fmt.Sprintf("generator=%s name=%s L=%d H=%d A=%d V=%d C=%d seed=%d nopos=%v branch=%v all-logits=%v",
		generatorVersion, a.Name, a.Layers, a.Hidden, a.Heads, a.Vocab, a.Context, s.Seed, s.NoPositionIDs, s.CacheBranch, s.AllLogits)
	if s.InPlaceKV {
		key += " in-place=2"
	}
	switch {
	case s.KVInt8 && s.KVScales != nil:
		key += " gqa=1 kv-int8-static=1 scales=" + s.KVScales.ID
	case s.GQA:
		key += " gqa=1"
	}
	sum := sha256.Sum256([]byte(key))
	return fmt.Sprintf("%s-%s.onnx", a, hex.EncodeToString(sum[:6]))
}

// Ensure returns the path of the model of s in cacheDir
// (onnxgraph.DefaultCacheDir() for the user's cache), generating it first if
// it is not there. Concurrent callers, in one process or several, are safe.
// gpt2-small writes about 500 MB.
func Ensure(cacheDir string, s Spec) (string, error) {
	s = s.withDefaults()
	if err := s.validate(); err != nil {
		return "", fmt.Errorf("generate %s: %w", s.Arch, err)
	}
	return onnxgraph.EnsureFile(cacheDir, s.FileName(), func(w io.Writer) error { return Generate(w, s) })
}

// Generate writes the ONNX model s describes to w. The same Spec always
// yields the same bytes. Weights are produced as they are written, so memory
// use stays small whatever the size of the model.
func Generate(w io.Writer, s Spec) error {
	s = s.withDefaults()
	if err := s.validate(); err != nil {
		return fmt.Errorf("generate %s: %w", s.Arch, err)
	}
	var scales []float32
	if s.KVInt8 {
		var err error
		if scales, err = s.KVScales.compute(s.Arch); err != nil {
			return fmt.Errorf("generate %s: %w", s.Arch, err)
		}
	}
	if _, err := model(s, scales).WriteTo(w); err != nil {
		return fmt.Errorf("generate %s: %w", s.Arch, err)
	}
	return nil
}

// model builds the ONNX model of a valid spec with defaults applied.
func model(s Spec, scales []float32) *onnxgraph.Model {
	a := s.Arch
	shape := fmt.Sprintf("%s/V%d/C%d", a.Shape(), a.Vocab, a.Context)
	doc := fmt.Sprintf("%s (%s) with random weights (seed %d). Generated by infer: the weights mean nothing, "+
		"the computation is GPT-2's, with a KV cache.", a, shape, s.Seed)
	return &onnxgraph.Model{
		Graph:           build(s, scales),
		Opset:           opset,
		IRVersion:       irVersion,
		Producer:        "infer",
		ProducerVersion: "gpt2 " + generatorVersion,
		Doc:             doc,
		Metadata: map[string]string{
			MetaArch: a.String(), MetaShape: shape, MetaTask: Task,
			MetaSeed: strconv.FormatUint(s.Seed, 10), MetaGenerator: "infer/gpt2 " + generatorVersion,
			MetaContext: strconv.Itoa(a.Context), MetaEOS: strconv.Itoa(int(a.EOS())),
		},
	}
}

// builder assembles the graph of one spec.
type builder struct {
	*onnxgraph.Graph
	s Spec
	// scales are the static scales of GQA's int8 KV cache (KVScales).
	scales []float32
	// seqLens and total are GQA's inputs.
	seqLens, total string
}

func (b *builder) op(op string, attrs []onnxgraph.Attr, inputs ...string) string {
	return b.Node(op, inputs, attrs...)
}

// conv1D is GPT-2's Conv1D, x·W + b with W of shape [in, out], initialised
// N(0, std²) and b zero.
func (b *builder) conv1D(prefix, x string, in, out int, std float64) string {
	w := b.Weight(prefix+".weight", []int64{int64(in), int64(out)}, onnxgraph.Normal(b.s.Seed, prefix+".weight", std))
	bias := b.Weight(prefix+".bias", []int64{int64(out)}, onnxgraph.Fill(0))
	return b.Add(b.MatMul(x, w), bias)
}

// layerNorm normalises over the last axis with a learned scale (1) and
// shift (0).
func (b *builder) layerNorm(prefix, x string) string {
	return b.LayerNorm(prefix, x, int64(b.s.Arch.Hidden), layerNorm)
}

// gelu is GPT-2's activation ("gelu_new"), the tanh approximation
// ½·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), written as
// (x·½)·(1 + tanh((x·0.044715·x + 1)·(x·√(2/π)))): the form ONNX Runtime's
// FastGeluFusion recognises, so that it runs as one com.microsoft FastGelu
// (with c_fc's bias added in it) instead of ten nodes a layer. The graph
// stays standard ONNX.
func (b *builder) gelu(x string) string {
	inner := b.Mul(b.Add(b.Mul(b.Mul(x, b.Scalar(0.044715)), x), b.Scalar(1)), b.Mul(x, b.Scalar(float32(math.Sqrt(2/math.Pi)))))
	return b.Mul(b.Mul(x, b.Scalar(0.5)), b.Add(b.op("Tanh", nil, inner), b.Scalar(1)))
}

// build returns the graph of a valid spec: embeddings, the blocks, the final
// LayerNorm and the LM head tied to the token embeddings.
func build(s Spec, scales []float32) *onnxgraph.Graph {
	a := s.Arch
	b := &builder{Graph: onnxgraph.NewGraph(a.String()), s: s, scales: scales}
	batch, seq := onnxgraph.Sym("batch_size"), onnxgraph.Sym("sequence_length")
	past, total := onnxgraph.Sym("past_sequence_length"), onnxgraph.Sym("past_sequence_length + sequence_length")
	heads, headDim := onnxgraph.Fixed(int64(a.Heads)), onnxgraph.Fixed(int64(a.HeadDim()))
	ids := b.Input(InputIDs, onnxgraph.Int64, batch, seq)
	var mask string
	if s.GQA {
		past, total = onnxgraph.Sym("capacity"), onnxgraph.Sym("capacity")
		b.seqLens = b.Input(SeqLensK, onnxgraph.Int32, batch)
		b.total = b.Input(TotalSequenceLength, onnxgraph.Int32, onnxgraph.Fixed(1))
	} else {
		mask = b.Input(AttentionMask, onnxgraph.Int64, batch, total)
	}
	var positions string
	if !s.NoPositionIDs {
		positions = b.Input(PositionIDs, onnxgraph.Int64, batch, seq)
	}
	kvType := s.kvType()
	for i := range a.Layers {
		b.Input(PastKey(i), kvType, batch, heads, past, headDim)
		b.Input(PastValue(i), kvType, batch, heads, past, headDim)
	}
	if s.CacheBranch {
		b.Input(UseCacheBranch, onnxgraph.Bool, onnxgraph.Fixed(1))
	}
	var keep string
	if !s.AllLogits {
		keep = b.Input(LogitsToKeep, onnxgraph.Int64, onnxgraph.Fixed(1))
	}
	if s.NoPositionIDs {
		// [1, sequence]: past .. past+sequence-1, the same for every row.
		total := b.Dim(mask, 1)
		positions = b.op("Unsqueeze", nil,
			b.op("Range", nil, b.op("Sub", nil, total, b.Dim(ids, 1)), total, b.Int64(1)), b.Int64s(0))
	}

	h := int64(a.Hidden)
	wte := b.Weight("transformer.wte.weight", []int64{int64(a.Vocab), h}, onnxgraph.Normal(s.Seed, "transformer.wte.weight", initStd))
	wpe := b.Weight("transformer.wpe.weight", []int64{int64(a.Context), h}, onnxgraph.Normal(s.Seed, "transformer.wpe.weight", initStd))
	x := b.Add(b.op("Gather", nil, wte, ids), b.op("Gather", nil, wpe, positions))

	var bias string // GroupQueryAttention masks by itself
	if !s.GQA {
		bias = b.CausalBias(ids, mask)
	}
	for i := range a.Layers {
		x = b.block(i, x, bias)
	}
	x = b.layerNorm("transformer.ln_f", x)
	kept := seq
	if keep != "" {
		x = b.LastPositions(x, keep)
		kept = onnxgraph.Sym("kept_length")
	}

	// The LM head is x·wteᵀ (a third of gpt2-small's weights).
	b.Classifier(x, wte, Logits, h, int64(a.Vocab))

	b.Output(Logits, onnxgraph.Float32, batch, kept, onnxgraph.Fixed(int64(a.Vocab)))
	for i := range a.Layers {
		if s.InPlaceKV {
			b.Output(NewKey(i), kvType, batch, heads, seq, headDim)
			b.Output(NewValue(i), kvType, batch, heads, seq, headDim)
			continue
		}
		b.Output(PresentKey(i), kvType, batch, heads, total, headDim)
		b.Output(PresentValue(i), kvType, batch, heads, total, headDim)
	}
	return b.Graph
}

// block is one GPT-2 block: pre-LayerNorm self-attention over the past and
// the current tokens, then a pre-LayerNorm MLP, each added to the residual.
// It outputs the layer's present key and value.
func (b *builder) block(i int, x, bias string) string {
	a := b.s.Arch
	prefix := "transformer.h." + strconv.Itoa(i)
	hidden, d := a.Hidden, a.HeadDim()
	std := blockGain / math.Sqrt(float64(hidden))

	qkv := b.conv1D(prefix+".attn.c_attn", b.layerNorm(prefix+".ln_1", x), hidden, 3*hidden, std)
	q, k, v := "Split_q_"+strconv.Itoa(i), "Split_k_"+strconv.Itoa(i), "Split_v_"+strconv.Itoa(i)
	b.NodeOut("Split", []string{qkv, b.Int64s(int64(hidden), int64(hidden), int64(hidden))}, []string{q, k, v},
		onnxgraph.Int("axis", -1))
	// [batch, sequence, hidden] → [batch, heads, sequence, head_dim]
	split := b.Int64s(0, 0, int64(a.Heads), int64(d))
	heads := func(t string) string {
		return b.op("Transpose", []onnxgraph.Attr{onnxgraph.Ints("perm", 0, 2, 1, 3)}, b.op("Reshape", nil, t, split))
	}
	scale := func() string { return b.Mul(heads(q), b.Scalar(float32(1/math.Sqrt(float64(d))))) }
	transpose := func(t string) string {
		return b.op("Transpose", []onnxgraph.Attr{onnxgraph.Ints("perm", 0, 1, 3, 2)}, t)
	}
	softmax := func(scores string) string {
		return b.op("Softmax", []onnxgraph.Attr{onnxgraph.Int("axis", -1)}, b.Add(scores, bias))
	}
	var attn string // [batch, heads, sequence, head_dim]
	switch {
	case b.s.GQA:
		attn = b.gqaAttention(i, q, k, v)
	case b.s.InPlaceKV:
		// Scores over the past and the new tokens side by side (the bias
		// spans both), and the weighted sum of each part's values:
		// nothing of the size of the past is copied.
		key, value := NewKey(i), NewValue(i)
		b.NodeOut("Transpose", []string{b.op("Reshape", nil, k, split)}, []string{key}, onnxgraph.Ints("perm", 0, 2, 1, 3))
		b.NodeOut("Transpose", []string{b.op("Reshape", nil, v, split)}, []string{value}, onnxgraph.Ints("perm", 0, 2, 1, 3))
		query := scale()
		// The past's scores as past·queryᵀ ([batch, heads, past,
		// sequence], then turned to [batch, heads, sequence, past]), the
		// query's transpose made from [batch, sequence, heads, head_dim]
		// so that ONNX Runtime keeps it a tensor of its own instead of
		// folding it into the product. query·pastᵀ, which it runs as one
		// product with the past transposed, took 2.2 times as long at 32
		// rows of about 600 positions (4.3 against 1.9 ms a decode step
		// for gpt2-tiny's two layers, in ONNX Runtime's profile on the
		// 2-core dev VM): the largest part of what a step's positions
		// cost, so of what staggered lengths cost a batch.
		queryT := b.op("Transpose", []onnxgraph.Attr{onnxgraph.Ints("perm", 0, 2, 3, 1)},
			b.op("Reshape", nil, b.Mul(q, b.Scalar(float32(1/math.Sqrt(float64(d))))), split))
		onPastScores := transpose(b.MatMul(PastKey(i), queryT))
		scores := b.op("Concat", []onnxgraph.Attr{onnxgraph.Int("axis", -1)},
			onPastScores, b.MatMul(query, transpose(key)))
		probs := softmax(scores)
		past := b.op("Shape", []onnxgraph.Attr{onnxgraph.Int("start", 2), onnxgraph.Int("end", 3)}, PastKey(i)) // [1]
		last := b.Int64s(-1)
		onPast := b.op("Slice", nil, probs, b.Int64s(0), past, last)
		onNew := b.op("Slice", nil, probs, past, b.Int64s(math.MaxInt64), last)
		attn = b.Add(b.MatMul(onPast, PastValue(i)), b.MatMul(onNew, value))
	default:
		concat := []onnxgraph.Attr{onnxgraph.Int("axis", 2)}
		b.NodeOut("Concat", []string{PastKey(i), heads(k)}, []string{PresentKey(i)}, concat...)
		b.NodeOut("Concat", []string{PastValue(i), heads(v)}, []string{PresentValue(i)}, concat...)
		query := scale()
		attn = b.MatMul(softmax(b.MatMul(query, transpose(PresentKey(i)))), PresentValue(i))
	}
	ctx := attn // GroupQueryAttention's is [batch, sequence, hidden] already
	if !b.s.GQA {
		ctx = b.op("Transpose", []onnxgraph.Attr{onnxgraph.Ints("perm", 0, 2, 1, 3)}, attn)
		ctx = b.op("Reshape", nil, ctx, b.Int64s(0, 0, int64(hidden)))
	}
	x = b.Add(x, b.conv1D(prefix+".attn.c_proj", ctx, hidden, hidden, std))

	inner := b.gelu(b.conv1D(prefix+".mlp.c_fc", b.layerNorm(prefix+".ln_2", x), hidden, 4*hidden, std))
	return b.Add(x, b.conv1D(prefix+".mlp.c_proj", inner, 4*hidden, hidden, std))
}

// kvType returns the element type of the graph's past_key_values.{i}.key
// and .value inputs (and present's or new's): int8 with KVInt8, else
// float32.
func (s Spec) kvType() onnxgraph.DataType {
	if s.KVInt8 {
		return onnxgraph.Int8
	}
	return onnxgraph.Float32
}

// KVBytesPerToken is the size of the KV cache of one token in the graph
// of s: a key and a value per layer, float32, or a byte per element with
// KVInt8 (its scales are the graph's).
func (s Spec) KVBytesPerToken() int64 {
	if s.KVInt8 {
		return int64(2 * s.Arch.Layers * s.Arch.Hidden)
	}
	return s.Arch.KVBytesPerToken()
}

// gqaAttention returns the attention of layer i of a GQA graph, [batch,
// sequence, hidden], from the split query, key and value [batch, sequence,
// hidden]: one GroupQueryAttention (heads = kv heads, no rotary: GPT-2's
// positions are learned and added before the blocks), which writes the
// layer's present, the past's own buffer. With KVInt8 the cache is int8
// with the layer's static scales per head and channel, inputs 12 and 13
// (7 to 11, rotary, positions, bias and sink, left out).
func (b *builder) gqaAttention(i int, q, k, v string) string {
	a := b.s.Arch
	out := "gqa_" + strconv.Itoa(i)
	ins := []string{q, k, v, PastKey(i), PastValue(i), b.seqLens, b.total}
	attrs := []onnxgraph.Attr{onnxgraph.Int("num_heads", int64(a.Heads)), onnxgraph.Int("kv_num_heads", int64(a.Heads))}
	if b.s.KVInt8 {
		shape := []int64{1, int64(a.Heads), 1, int64(a.HeadDim())}
		at := i * 2 * a.Hidden
		kScale := b.Weight("kv_cache."+strconv.Itoa(i)+".key_scale", shape, onnxgraph.Floats(b.scales[at:at+a.Hidden]))
		vScale := b.Weight("kv_cache."+strconv.Itoa(i)+".value_scale", shape, onnxgraph.Floats(b.scales[at+a.Hidden:at+2*a.Hidden]))
		ins = append(ins, "", "", "", "", "", kScale, vScale)
		attrs = append(attrs, onnxgraph.String("k_quant_type", "PER_CHANNEL"), onnxgraph.String("v_quant_type", "PER_CHANNEL"),
			onnxgraph.Int("kv_cache_bit_width", 8))
	}
	b.DomainNodeOut(onnxgraph.MicrosoftDomain, "GroupQueryAttention", ins, []string{out, PresentKey(i), PresentValue(i)}, attrs...)
	return out
}
