// Package llama serves Llama-architecture decoders from llama2.c
// checkpoints: it reads the checkpoint (checkpoint.go), writes an ONNX graph
// of the model with a KV cache, with the inputs and outputs of GPT-2's
// graphs (models/gpt2, named as Hugging Face optimum's decoder-with-past
// export) so that models/onnx's decoder serves it (generate.go), and opens
// it with llama2.c's tokenizer (open.go). stories260k, a checkpoint trained
// on TinyStories, is built in.
//
// The model is llama2.c's: RMSNorm (ε 1e-5) before attention and before the
// feed-forward layer; rotary positions on consecutive pairs (i, i+1) of each
// head, at frequency 10000^(-i/head_size); grouped-query attention (each key
// and value head serves n_heads/n_kv_heads query heads); a SwiGLU
// feed-forward layer w2(silu(w1·x) ⊙ w3·x); a final RMSNorm; and the
// classifier, which is the token embedding table when the header says so.
package llama

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/inferhq/infer/models/onnxgraph"
)

// Graph input and output names, as in models/gpt2 and optimum's
// decoder-with-past export.
const (
	InputIDs      = "input_ids"      // int64 [batch, sequence]
	AttentionMask = "attention_mask" // int64 [batch, past + sequence]; 1 = token, 0 = padding or hole
	PositionIDs   = "position_ids"   // int64 [batch, sequence]
	LogitsToKeep  = "logits_to_keep" // int64 [1]: logits for the last k positions of each row (0: all)
	Logits        = "logits"         // float32 [batch, kept positions, vocab]
)

// PastKey and the others name the KV cache of layer i: inputs
// past_key_values.{i}.key|value [batch, kv_heads, past, head_size] and
// outputs present.{i}.key|value [batch, kv_heads, past + sequence,
// head_size].
func PastKey(i int) string      { return "past_key_values." + strconv.Itoa(i) + ".key" }
func PastValue(i int) string    { return "past_key_values." + strconv.Itoa(i) + ".value" }
func PresentKey(i int) string   { return "present." + strconv.Itoa(i) + ".key" }
func PresentValue(i int) string { return "present." + strconv.Itoa(i) + ".value" }

// Metadata keys Generate stores in the model's metadata_props; models/onnx
// reads infer.arch (the default name), infer.context and
// infer.eos_token_id.
const (
	MetaArch      = "infer.arch"      // the model's name, e.g. "stories260k"
	MetaShape     = "infer.shape"     // Config.Shape
	MetaTask      = "infer.task"      // "text-generation"
	MetaGenerator = "infer.generator" // "infer/llama 1"
	MetaContext   = "infer.context"   // seq_len
	MetaEOS       = "infer.eos_token_id"
	MetaSource    = "infer.source_sha256" // the checkpoint's SHA-256
)

// Task is what the generated models do, as metadata and model listings name
// it.
const Task = "text-generation"

// EOS is the end of a sequence: llama2.c stops when the model emits BOS
// (id 1), which delimits the stories of TinyStories.
const EOS = 1

const (
	// generatorVersion changes whenever the same checkpoint would produce
	// a different file, so that cached files of older generators are not
	// reused.
	generatorVersion = "1"
	rmsEps           = 1e-5 // llama2.c's RMSNorm epsilon
	ropeTheta        = 10000.0
)

// FileName returns the name Ensure gives the graph of a checkpoint whose
// SHA-256 is hash, served as name: "<name>-<hash>.onnx", where the hash
// covers the checkpoint, the name and the generator's version.
func FileName(name, hash string) string {
	sum := sha256.Sum256([]byte("generator=" + generatorVersion + " name=" + name + " checkpoint=" + hash))
	return fileSafe(name) + "-" + hex.EncodeToString(sum[:6]) + ".onnx"
}

// fileSafe returns name in lower case with anything but letters, digits,
// '-', '_' and '.' replaced by '-'.
func fileSafe(name string) string {
	name = strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		case r >= 'A' && r <= 'Z':
			return r + 'a' - 'A'
		}
		return '-'
	}, name)
	if name == "" {
		return "llama"
	}
	return name
}

// Ensure returns the path of the ONNX graph of ck, served as name, in
// cacheDir (onnxgraph.DefaultCacheDir() for the user's cache), generating
// it first if it is not there. Concurrent callers, in one process or
// several, are safe.
func Ensure(cacheDir string, ck *Checkpoint, name string) (string, error) {
	hash, err := ck.Hash()
	if err != nil {
		return "", err
	}
	return onnxgraph.EnsureFile(cacheDir, FileName(name, hash), func(w io.Writer) error { return Generate(w, ck, name) })
}

// Generate writes the ONNX graph of ck, served as name, to w. Weights are
// read from the checkpoint as they are written, one matrix at a time.
func Generate(w io.Writer, ck *Checkpoint, name string) error {
	hash, err := ck.Hash()
	if err != nil {
		return err
	}
	src := &weights{ck: ck}
	c := ck.Arch
	m := &onnxgraph.Model{
		Graph:           build(c, src),
		Producer:        "infer",
		ProducerVersion: "llama " + generatorVersion,
		Doc: fmt.Sprintf("%s (%s, %d parameters), a Llama-architecture decoder with a KV cache, "+
			"generated by infer from a llama2.c checkpoint (sha256 %s).", name, c.Shape(), c.Params(), hash),
		Metadata: map[string]string{
			MetaArch: name, MetaShape: c.Shape(), MetaTask: Task, MetaGenerator: "infer/llama " + generatorVersion,
			MetaContext: strconv.Itoa(c.Context), MetaEOS: strconv.Itoa(EOS), MetaSource: hash,
		},
	}
	_, err = m.WriteTo(w)
	if err == nil {
		err = src.err
	}
	if err != nil {
		return fmt.Errorf("generate %s: %w", name, err)
	}
	return nil
}

// weights produces the graph's weights from the checkpoint while the graph
// is written, one array at a time. Values cannot fail, so the first read
// error is kept in err, which fails the write.
type weights struct {
	ck  *Checkpoint
	err error
}

// values returns Values that produce what load returns.
func (w *weights) values(load func() ([]float32, error)) onnxgraph.Values {
	return func() func([]float32) {
		v, err := load()
		if err != nil && w.err == nil {
			w.err = err
		}
		return func(dst []float32) {
			n := copy(dst, v)
			v = v[n:]
			clear(dst[n:]) // only after an error
		}
	}
}

// array returns Values of layer l of t as the checkpoint has it.
func (w *weights) array(t tensor, l int) onnxgraph.Values {
	return w.values(func() ([]float32, error) { return w.ck.read(t, l) })
}

// inputMajor returns Values of layer l of the matrices ts (see matrix).
func (w *weights) inputMajor(l int, ts ...tensor) onnxgraph.Values {
	return w.values(func() ([]float32, error) { return w.matrix(l, ts...) })
}

// matrix returns layer l of the matrices ts (each [out_i, in], as llama2.c
// stores them), stacked along out and transposed: [in, Σ out_i], the
// right-hand side of x·W.
func (w *weights) matrix(l int, ts ...tensor) ([]float32, error) {
	in, outs := ts[0].cols, 0
	mats := make([][]float32, len(ts))
	for i, t := range ts {
		m, err := w.ck.read(t, l)
		if err != nil {
			return nil, err
		}
		mats[i], outs = m, outs+t.rows
	}
	v := make([]float32, in*outs)
	col := 0
	for i, t := range ts {
		for o := range t.rows {
			for j := range in {
				v[j*outs+col+o] = mats[i][o*in+j]
			}
		}
		col += t.rows
	}
	return v, nil
}

// qkv returns Values of layer l's query, key and value projections as one
// input-major matrix [dim, dim + 2·kv_dim], the queries' columns scaled by
// 1/√head_size, the attention's scale: rotary positions are linear, so the
// scores are those of llama2.c, which scales them after the dot product.
func (w *weights) qkv(l int) onnxgraph.Values {
	return w.values(func() ([]float32, error) {
		t, c := w.ck.layout(), w.ck.Arch
		m, err := w.matrix(l, t.wq, t.wk, t.wv)
		if err != nil {
			return nil, err
		}
		scale := float32(1 / math.Sqrt(float64(c.HeadSize())))
		width := c.Dim + 2*c.KVDim()
		for row := 0; row < len(m); row += width {
			for i := range c.Dim {
				m[row+i] *= scale
			}
		}
		return m, nil
	})
}

// builder assembles the graph of one checkpoint.
type builder struct {
	*onnxgraph.Graph
	c Arch
	t tensors
	w *weights
}

func (b *builder) node(op string, attrs []onnxgraph.Attr, inputs ...string) string {
	return b.Node(op, inputs, attrs...)
}

// split splits x along its last axis into parts of the given sizes, whose
// outputs are named prefix.0, prefix.1, ….
func (b *builder) split(prefix, x string, sizes ...int64) []string {
	outs := make([]string, len(sizes))
	for i := range outs {
		outs[i] = prefix + "." + strconv.Itoa(i)
	}
	b.NodeOut("Split", []string{x, b.Int64s(sizes...)}, outs, onnxgraph.Int("axis", -1))
	return outs
}

// rmsNorm is llama2.c's rmsnorm: x / √(mean(x²) + ε) ⊙ weight, over the
// last axis.
func (b *builder) rmsNorm(name, x string, t tensor, l int) string {
	w := b.Weight(name, []int64{int64(b.c.Dim)}, b.w.array(t, l))
	ms := b.node("ReduceMean", []onnxgraph.Attr{onnxgraph.Ints("axes", -1), onnxgraph.Int("keepdims", 1)},
		b.node("Pow", nil, x, b.Scalar(2)))
	return b.Mul(b.node("Div", nil, x, b.node("Sqrt", nil, b.Add(ms, b.Scalar(rmsEps)))), w)
}

// build returns the graph of a valid configuration.
func build(c Arch, w *weights) *onnxgraph.Graph {
	b := &builder{Graph: onnxgraph.NewGraph("llama"), c: c, t: c.layout(), w: w}
	batch, seq := onnxgraph.Sym("batch_size"), onnxgraph.Sym("sequence_length")
	past, total := onnxgraph.Sym("past_sequence_length"), onnxgraph.Sym("past_sequence_length + sequence_length")
	kvHeads, headSize := onnxgraph.Fixed(int64(c.KVHeads)), onnxgraph.Fixed(int64(c.HeadSize()))
	ids := b.Input(InputIDs, onnxgraph.Int64, batch, seq)
	mask := b.Input(AttentionMask, onnxgraph.Int64, batch, total)
	positions := b.Input(PositionIDs, onnxgraph.Int64, batch, seq)
	for i := range c.Layers {
		b.Input(PastKey(i), onnxgraph.Float32, batch, kvHeads, past, headSize)
		b.Input(PastValue(i), onnxgraph.Float32, batch, kvHeads, past, headSize)
	}
	keep := b.Input(LogitsToKeep, onnxgraph.Int64, onnxgraph.Fixed(1))

	embed := b.Weight("model.embed_tokens.weight", []int64{int64(c.Vocab), int64(c.Dim)}, w.array(b.t.tokenEmbedding, 0))
	x := b.node("Gather", nil, embed, ids)
	cos, sin := b.rotary(positions)
	// The attention bias of one head's queries, [batch, 1, sequence, past
	// + sequence], repeated for each query head that shares a key head:
	// [batch, 1, group·sequence, past + sequence].
	group := int64(c.Heads / c.KVHeads)
	bias := b.node("Tile", nil, b.CausalBias(ids, mask), b.Int64s(1, 1, group, 1))
	for l := range c.Layers {
		x = b.block(l, x, cos, sin, bias)
	}
	x = b.LastPositions(b.rmsNorm("model.norm.weight", x, b.t.rmsFinal, 0), keep)
	table := embed
	if !c.Shared {
		table = b.Weight("lm_head.weight", []int64{int64(c.Vocab), int64(c.Dim)}, w.array(b.t.wcls, 0))
	}
	b.Classifier(x, table, Logits, int64(c.Dim), int64(c.Vocab))

	b.Output(Logits, onnxgraph.Float32, batch, onnxgraph.Sym("kept_length"), onnxgraph.Fixed(int64(c.Vocab)))
	for i := range c.Layers {
		b.Output(PresentKey(i), onnxgraph.Float32, batch, kvHeads, total, headSize)
		b.Output(PresentValue(i), onnxgraph.Float32, batch, kvHeads, total, headSize)
	}
	return b.Graph
}

// rotary returns the tables of rotary positions, [batch, sequence, 1,
// head_size], by which rotate multiplies a head and its pair-swapped copy:
// element i of a head turns by position · 10000^(-(i - i mod 2)/head_size)
// (the angle of its pair), the cosine for both elements of a pair, the sine
// negated for the first.
func (b *builder) rotary(positions string) (cos, sin string) {
	hs := b.c.HeadSize()
	freq, sign := make([]float32, hs), make([]float32, hs)
	for i := range freq {
		freq[i] = float32(1 / math.Pow(ropeTheta, float64(i-i%2)/float64(hs)))
		sign[i] = float32(2*(i%2) - 1)
	}
	pos := b.node("Cast", []onnxgraph.Attr{onnxgraph.Int("to", int64(onnxgraph.Float32))}, positions)
	angles := b.Mul(b.node("Unsqueeze", nil, pos, b.Int64s(-1, -2)), b.Floats(freq...)) // [batch, sequence, 1, head_size]
	return b.node("Cos", nil, angles), b.Mul(b.node("Sin", nil, angles), b.Floats(sign...))
}

// rotate applies rotary positions to t [batch, sequence, heads·head_size]
// and returns it as [batch, heads, sequence, head_size]: each pair (x0, x1)
// of a head becomes (x0·cos − x1·sin, x1·cos + x0·sin), t·cos plus t with
// its pairs swapped times sin (see rotary).
func (b *builder) rotate(t string, heads int, cos, sin string) string {
	hs := b.c.HeadSize()
	swap := make([]int64, hs)
	for i := range swap {
		swap[i] = int64(i ^ 1)
	}
	t = b.node("Reshape", nil, t, b.Int64s(0, 0, int64(heads), int64(hs)))
	swapped := b.node("Gather", []onnxgraph.Attr{onnxgraph.Int("axis", -1)}, t, b.Int64s(swap...))
	rotated := b.Add(b.Mul(t, cos), b.Mul(swapped, sin))
	return b.node("Transpose", []onnxgraph.Attr{onnxgraph.Ints("perm", 0, 2, 1, 3)}, rotated)
}

// block is one Llama block: RMSNorm, grouped-query self-attention over the
// past and the current tokens, added to the residual; then RMSNorm and the
// SwiGLU feed-forward layer, added to the residual. It outputs the layer's
// present key and value.
func (b *builder) block(l int, x, cos, sin, bias string) string {
	c, t := b.c, b.t
	prefix := "model.layers." + strconv.Itoa(l)
	d, kv, hs, heads, kvHeads := int64(c.Dim), int64(c.KVDim()), int64(c.HeadSize()), int64(c.Heads), int64(c.KVHeads)

	h := b.rmsNorm(prefix+".input_layernorm.weight", x, t.rmsAtt, l)
	qkvW := b.Weight(prefix+".self_attn.qkv_proj.weight", []int64{d, d + 2*kv}, b.w.qkv(l))
	qkv := b.split(prefix+".self_attn.qkv", b.MatMul(h, qkvW), d, kv, kv)
	q := b.rotate(qkv[0], c.Heads, cos, sin)
	k := b.rotate(qkv[1], c.KVHeads, cos, sin)
	v := b.node("Transpose", []onnxgraph.Attr{onnxgraph.Ints("perm", 0, 2, 1, 3)},
		b.node("Reshape", nil, qkv[2], b.Int64s(0, 0, kvHeads, hs)))
	concat := []onnxgraph.Attr{onnxgraph.Int("axis", 2)}
	b.NodeOut("Concat", []string{PastKey(l), k}, []string{PresentKey(l)}, concat...)
	b.NodeOut("Concat", []string{PastValue(l), v}, []string{PresentValue(l)}, concat...)

	// Query head h uses key and value head h / (heads/kv_heads): the
	// queries [batch, heads, sequence, head_size] as [batch, kv_heads,
	// group·sequence, head_size] against their key head's keys and values.
	// The queries come scaled by 1/√head_size (see weights.qkv).
	query := b.node("Reshape", nil, q, b.Int64s(0, kvHeads, -1, hs))
	keyT := b.node("Transpose", []onnxgraph.Attr{onnxgraph.Ints("perm", 0, 1, 3, 2)}, PresentKey(l))
	probs := b.node("Softmax", []onnxgraph.Attr{onnxgraph.Int("axis", -1)}, b.Add(b.MatMul(query, keyT), bias))
	ctx := b.node("Reshape", nil, b.MatMul(probs, PresentValue(l)), b.Int64s(0, heads, -1, hs))
	ctx = b.node("Reshape", nil, b.node("Transpose", []onnxgraph.Attr{onnxgraph.Ints("perm", 0, 2, 1, 3)}, ctx), b.Int64s(0, 0, d))
	woW := b.Weight(prefix+".self_attn.o_proj.weight", []int64{d, d}, b.w.inputMajor(l, t.wo))
	x = b.Add(x, b.MatMul(ctx, woW))

	h = b.rmsNorm(prefix+".post_attention_layernorm.weight", x, t.rmsFFN, l)
	hidden := int64(c.Hidden)
	gateUpW := b.Weight(prefix+".mlp.gate_up_proj.weight", []int64{d, 2 * hidden}, b.w.inputMajor(l, t.w1, t.w3))
	gu := b.split(prefix+".mlp.gate_up", b.MatMul(h, gateUpW), hidden, hidden)
	act := b.Mul(b.Mul(gu[0], b.node("Sigmoid", nil, gu[0])), gu[1])
	downW := b.Weight(prefix+".mlp.down_proj.weight", []int64{hidden, d}, b.w.inputMajor(l, t.w2))
	return b.Add(x, b.MatMul(act, downW))
}
