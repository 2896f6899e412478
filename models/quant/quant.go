// Package quant writes dynamically quantised versions of ONNX models: the
// float32 weights of MatMul and Gemm nodes become int8 (or int4) with
// scales, and the activations that meet them are quantised at run time from
// their own range. Embedding tables (the float32 initializers Gather reads
// rows of) become int8, one scale per row, and only the rows read are turned
// back into float32 (gather.go).
//
// It writes one of three graph forms, the ones that ONNX Runtime runs in
// its fast integer kernels (VNNI where the CPU has it);
// docs/quantization.md has the measurements behind them:
//
//   - Activations per tensor (the form of ONNX Runtime's own
//     quantize_dynamic, in standard operators), weights int8 per output
//     channel or per tensor:
//
//     x ─ DynamicQuantizeLinear ─ MatMulInteger(x_q, W_q, x_zero) ─ Cast ─ Mul(·, x_scale·w_scale) [─ Add(bias)]
//
//     ONNX Runtime fuses each product into DynamicQuantizeMatMul, or into
//     MatMulIntegerToFloat after one shared DynamicQuantizeLinear when
//     several products read one activation (Q, K and V), with the scales
//     and the bias applied in the same pass. It is the fastest for large
//     batches (encoders), but the one scale of an activation comes from the
//     whole batch: an item's result depends, within the quantisation's
//     error, on the items it is batched with.
//
//   - Activations per row (rows.go), weights int8 per output channel:
//     each row of x (its last axis) is quantised on its own, in standard
//     operators, symmetric, to uint8 with the zero point 128 that the
//     integer GEMM takes as a scalar, and its products are scaled by the
//     row's scale:
//
//     s = max(ReduceMax(Abs(x)) / 127, tiny)      (one per row, [..., 1])
//     x_q = Cast<uint8>(Round(x / s) + 128)
//     y = MatMulIntegerToFloat(x_q, W_q, s, w_scale, 128) [+ bias]
//
//     (ONNX Runtime's com.microsoft MatMulIntegerToFloat: the integer
//     product, as float32 times w_scale per column and s per row.) Every
//     row is computed from its own values alone (the integer product is
//     exact), so a sequence's result does not depend on its batch: a
//     decoder stays exact under batching. The bias is added after, not
//     given to MatMulIntegerToFloat, which (1.30) would add it before it
//     applies the scale per row. It is the fastest for decode steps.
//
//   - Activations per row and block: ONNX Runtime's com.microsoft
//     MatMulNBits, weights of 8 or 4 bits in blocks along K, each with its
//     scale, and at accuracy level 4 each row's activations quantised to
//     int8 per block at run time (blocks.go). Exact under batching too; the
//     only form of 4-bit weights, slower than per row for int8.
//
// By default, graphs with a KV cache (decoders) get activations per row,
// int4 weights or a block size activations per block, and the others
// activations per tensor.
//
// It reads and writes models through models/onnxgraph, one weight at a
// time, so quantising costs the memory of the quantised weights, not of the
// model.
package quant

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/inferhq/infer/models/onnxgraph"
)

// Activations says how the inputs of quantised products are quantised at
// run time.
type Activations int

const (
	// ActivationsAuto is ActivationsBlock for int4 weights or a block
	// size, else ActivationsRow for graphs with a KV cache (decoders), else
	// ActivationsTensor.
	ActivationsAuto Activations = iota
	// ActivationsTensor quantises each product's input with one scale from
	// the whole tensor (the batch); weights per channel or per tensor.
	ActivationsTensor
	// ActivationsRow quantises each row of a product's input on its own;
	// weights int8 per channel.
	ActivationsRow
	// ActivationsBlock quantises each row of a product's input on its own,
	// per block (MatMulNBits); weights per block.
	ActivationsBlock
)

// String returns "auto", "tensor", "row" or "block".
func (a Activations) String() string {
	switch a {
	case ActivationsTensor:
		return "tensor"
	case ActivationsRow:
		return "row"
	case ActivationsBlock:
		return "block"
	}
	return "auto"
}

// ParseActivations parses what String returns.
func ParseActivations(s string) (Activations, error) {
	for _, a := range []Activations{ActivationsAuto, ActivationsTensor, ActivationsRow, ActivationsBlock} {
		if s == a.String() {
			return a, nil
		}
	}
	return 0, fmt.Errorf("activations %q: want auto, tensor, row or block", s)
}

// Defaults and bounds of Options.
const (
	DefaultBits  = 8
	DefaultBlock = 128
)

// blockSizes are the weight blocks ONNX Runtime's MatMulNBits kernels take.
var blockSizes = []int{16, 32, 64, 128, 256}

// Options choose how a model is quantised. The zero value quantises every
// MatMul and Gemm with a constant float32 weight to int8 per channel, the
// LM head included: a decoder's with activations per row, any other
// graph's with activations per tensor; and every embedding table to int8
// per row.
type Options struct {
	// Activations chooses the graph form; see the package documentation.
	Activations Activations
	// PerTensor gives each weight one scale, with activations per tensor.
	// Default: one scale per output column (per channel), which keeps a
	// column of small weights from losing its precision to a column of
	// large ones.
	PerTensor bool
	// Bits is the width of the weights: 8 (default) or, with activations
	// per block, 4.
	Bits int
	// Block is the number of weights along K that share a scale, with
	// activations per block: 16, 32, 64, 128 (default) or 256.
	Block int
	// Exclude keeps in float32 the nodes whose name, or whose weight's
	// name, matches one of these patterns (path.Match syntax: '*' matches
	// any run of characters but '/', '?' one character, [a-z] a class).
	Exclude []string
	// KeepHead keeps the LM head in float32: the product that turns the
	// last hidden states into logits over the vocabulary. It is found as
	// the node whose weight is also an embedding table (tied), or whose
	// output reaches a graph output through shape-only operators.
	KeepHead bool
	// KeepEmbeddings keeps the embedding tables in float32: the float32
	// initializers Gather nodes read rows of. By default each becomes int8
	// with one scale per row, a quarter of its memory (a fifth of
	// bert-base's weights). A table that another node also reads in
	// float32 (an LM head kept in float32) stays float32 anyway.
	KeepEmbeddings bool
}

// Version changes whenever the same model and options would be quantised
// into a different file, so that cached files of an older quantizer are
// not reused.
const Version = "5"

// Metadata keys Rewrite sets on the quantised model.
const (
	MetaQuantization = "infer.quantization" // "int8 dynamic per-channel; 72 of 96 products"
	MetaQuantizer    = "infer.quantizer"    // "infer/quant 1"
)

var (
	// ErrNothing means the model has no product with a constant float32
	// weight left to quantise.
	ErrNothing = errors.New("nothing to quantise")
	// ErrQuantized means the model is quantised already.
	ErrQuantized = errors.New("already quantised")
)

// InputError is an error in what was asked: a file that is not ONNX, a
// model with nothing to quantise or quantised already, a bad option. The
// rest (a disk that is full) are other errors.
type InputError struct{ Err error }

func (e *InputError) Error() string { return e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

func inputErrorf(format string, args ...any) error {
	return &InputError{fmt.Errorf(format, args...)}
}

// Report says what Rewrite did.
type Report struct {
	// Form says how: "int8, weights per channel, activations per tensor at
	// run time".
	Form string
	// Products is the number of MatMul and Gemm nodes in the model.
	Products int
	// Quantized names the products quantised.
	Quantized []string
	// Tables is the number of Gather nodes that read an initializer.
	Tables int
	// Lookups names the Gather nodes that read their table in int8.
	Lookups []string
	// Skipped are the products and Gathers left in float32, with the
	// reason.
	Skipped []Skip
	// Head names the LM head found, "" when there is none.
	Head string
	// BytesBefore and BytesAfter are the bytes of the main graph's
	// initializers before and after.
	BytesBefore, BytesAfter int64
}

// Skip is a product left in float32 and why.
type Skip struct {
	Node   string `json:"node"`
	Reason string `json:"reason"`
}

// String summarises the report in one line.
func (r *Report) String() string {
	s := fmt.Sprintf("%d of %d MatMul/Gemm nodes quantised (%s)", len(r.Quantized), r.Products, r.Form)
	if r.Tables > 0 {
		s += fmt.Sprintf(", %d of %d embedding lookups int8 per row", len(r.Lookups), r.Tables)
	}
	s += fmt.Sprintf("; weights %s → %s", mb(r.BytesBefore), mb(r.BytesAfter))
	if r.BytesBefore > 0 {
		s += fmt.Sprintf(" (%.2f×)", float64(r.BytesAfter)/float64(r.BytesBefore))
	}
	return s
}

func mb(n int64) string { return strconv.FormatFloat(float64(n)/1e6, 'f', 1, 64) + " MB" }

// quantizedOps are operators only a quantised model has.
var quantizedOps = map[string]bool{
	"DynamicQuantizeLinear": true, "MatMulInteger": true, "MatMulIntegerToFloat": true,
	"DynamicQuantizeMatMul": true, "QLinearMatMul": true, "QGemm": true, "QuantizeLinear": true,
	"DequantizeLinear": true, "ConvInteger": true, "QLinearConv": true, "QAttention": true,
	"MatMulNBits": true, "DynamicQuantizeLSTM": true, "QEmbedLayerNormalization": true,
	"MatMulBnb4": true, "GatherBlockQuantized": true, "MatMulFpQ4": true,
}

// quantizedWeights returns a node of a quantised operator that reads an
// initializer: quantised weights (an int8 or int4 matrix, its scales or
// zero points). Quantised operators on activations alone are not: a graph
// may compute an int8 attention with MatMulInteger on its inputs and
// computed values, and its float32 weights are still to quantise.
func quantizedWeights(f *onnxgraph.File, scopes []*onnxgraph.Scope) (onnxgraph.Node, bool) {
	for _, s := range scopes {
		for _, n := range s.Nodes() {
			if !quantizedOps[n.Op] {
				continue
			}
			for _, in := range n.Inputs {
				if _, ok := f.Initializer(in); ok {
					return n, true
				}
			}
		}
	}
	return onnxgraph.Node{}, false
}

// shapeOnly are operators that move values without computing on them: a
// product whose output reaches a graph output through them alone makes the
// graph's output (the LM head's logits).
var shapeOnly = map[string]bool{
	"Reshape": true, "Transpose": true, "Squeeze": true, "Unsqueeze": true, "Identity": true,
	"Flatten": true, "Slice": true, "Cast": true,
}

// minOpset is the first ONNX opset with DynamicQuantizeLinear and Round.
const minOpset = 11

// Check reports whether opts are valid.
func (o Options) Check() error {
	for _, p := range o.Exclude {
		if _, err := path.Match(p, ""); err != nil {
			return inputErrorf("exclude pattern %q: %v", p, err)
		}
	}
	perBlock := o.Activations == ActivationsAuto || o.Activations == ActivationsBlock
	switch {
	case o.Bits != 0 && o.Bits != 8 && o.Bits != 4:
		return inputErrorf("bits %d: want 8 or 4", o.Bits)
	case o.Bits == 4 && !perBlock:
		return inputErrorf("int4 weights need activations per block (MatMulNBits)")
	case o.Block != 0 && !slices.Contains(blockSizes, o.Block):
		return inputErrorf("block %d: want one of %v", o.Block, blockSizes)
	case o.Block != 0 && !perBlock:
		return inputErrorf("a block size applies to activations per block, whose weights are in blocks")
	case o.PerTensor && o.Activations == ActivationsRow:
		return inputErrorf("weights per tensor apply to activations per tensor; with activations per row the weights are per channel")
	case o.PerTensor && o.Activations == ActivationsBlock:
		return inputErrorf("weights per tensor apply to activations per tensor; with activations per block the weights are in blocks")
	case o.PerTensor && (o.Bits == 4 || o.Block != 0):
		return inputErrorf("weights per tensor apply to int8 weights with activations per tensor")
	case o.Activations < ActivationsAuto || o.Activations > ActivationsBlock:
		return inputErrorf("activations %d: want auto, tensor, row or block", o.Activations)
	}
	return nil
}

// resolve returns opts with defaults applied and Activations decided for a
// graph that has a KV cache (kv) or not.
func (o Options) resolve(kv bool) Options {
	o.Bits = cmp.Or(o.Bits, DefaultBits)
	if o.Activations == ActivationsAuto {
		switch {
		case o.Bits == 4 || o.Block != 0:
			o.Activations = ActivationsBlock
		case kv:
			o.Activations = ActivationsRow
		default:
			o.Activations = ActivationsTensor
		}
	}
	if o.Activations == ActivationsBlock {
		o.Block = cmp.Or(o.Block, DefaultBlock)
	}
	return o
}

// describe says how opts (resolved) quantise, e.g. "int8, weights per
// channel, activations per tensor".
func (o Options) describe() string {
	weights, acts := "per channel", "per "+o.Activations.String()
	switch {
	case o.Activations == ActivationsBlock:
		weights, acts = "in blocks of "+strconv.Itoa(o.Block), "per row and block"
	case o.PerTensor:
		weights = "per tensor"
	}
	return fmt.Sprintf("int%d, weights %s, activations %s at run time", o.Bits, weights, acts)
}

// hasKVCache reports whether a graph takes a KV cache: an input named
// past_key_values… (optimum's and models/gpt2's) or past_… .
func hasKVCache(f *onnxgraph.File) bool {
	for _, name := range f.Scopes()[0].Inputs() {
		if strings.HasPrefix(name, "past_key_values") || strings.HasPrefix(name, "past_") || strings.HasPrefix(name, "past.") {
			return true
		}
	}
	return false
}

// excluded returns the pattern that matches one of names, or "".
func (o Options) excluded(names ...string) string {
	for _, p := range o.Exclude {
		for _, n := range names {
			if ok, _ := path.Match(p, n); ok {
				return p
			}
		}
	}
	return ""
}

// product is a MatMul or Gemm chosen for quantisation.
type product struct {
	node       onnxgraph.Node
	weight     string
	transposed bool    // Gemm with transB: the weight is [N, K]
	alpha      float32 // Gemm's, folded into the scales
}

// bias returns the value a Gemm adds to its product (C), or "".
func (p product) bias() string {
	if p.node.Op == "Gemm" && len(p.node.Inputs) > 2 {
		return p.node.Inputs[2]
	}
	return ""
}

// Rewrite quantises f in place: its nodes, and its initializers (the
// quantised weights are held in memory until f is written). An error leaves
// f in an undefined state.
func Rewrite(f *onnxgraph.File, opts Options) (*Report, error) {
	if err := opts.Check(); err != nil {
		return nil, err
	}
	scopes := f.Scopes()
	if n, ok := quantizedWeights(f, scopes); ok {
		return nil, &InputError{fmt.Errorf("%w: it has %s nodes on constant weights (%s)", ErrQuantized, n.Op, n.Name)}
	}
	kv := hasKVCache(f)
	opts = opts.resolve(kv)
	if opts.PerTensor && opts.Activations == ActivationsRow {
		return nil, inputErrorf("weights per tensor apply to activations per tensor, and this graph has a KV cache (a decoder), which gets activations per row: ask for activations per tensor too")
	}
	if v := f.Opset(""); opts.Activations != ActivationsBlock && v < minOpset {
		return nil, inputErrorf("opset %d: activations per %s need opset %d or later (DynamicQuantizeLinear, Round); export the model with a newer opset", v, opts.Activations, minOpset)
	}

	rep := &Report{Form: opts.describe()}
	for _, in := range f.Initializers() {
		rep.BytesBefore += in.Bytes()
	}
	plans, reasons := plan(f, scopes, opts, rep)
	lookups := planTables(f, scopes, opts, plans, rep, reasons)
	if len(rep.Quantized) == 0 && len(rep.Lookups) == 0 {
		return nil, &InputError{fmt.Errorf("%w: %s", ErrNothing, nothingWhy(rep.Products, rep.Tables, reasons))}
	}
	w := &writer{f: f, opts: opts, done: map[string]quantized{}, tables: map[string]quantized{}}
	replaced := map[string]bool{}
	for i, s := range scopes {
		if len(plans[i]) == 0 && len(lookups[i]) == 0 {
			continue
		}
		if err := w.rewrite(s, plans[i], lookups[i]); err != nil {
			return nil, err
		}
		for _, p := range plans[i] {
			replaced[p.weight] = true
			if c := p.bias(); c != "" {
				replaced[c] = true
			}
		}
		for _, l := range lookups[i] {
			replaced[l.table] = true
		}
	}
	dropUnused(f, scopes, replaced)
	for _, in := range f.Initializers() {
		rep.BytesAfter += in.Bytes()
	}
	f.SetMetadata(MetaQuantization, fmt.Sprintf("%s; %d of %d products; %d of %d embedding lookups",
		rep.Form, len(rep.Quantized), rep.Products, len(rep.Lookups), rep.Tables))
	f.SetMetadata(MetaQuantizer, "infer/quant "+Version)
	return rep, nil
}

// plan chooses the products of each scope to quantise, and records the
// others in rep with their reasons (also counted in reasons).
func plan(f *onnxgraph.File, scopes []*onnxgraph.Scope, opts Options, rep *Report) ([][]product, map[string]int) {
	tables := embeddingTables(scopes)
	plans := make([][]product, len(scopes))
	reasons := map[string]int{}
	for i, s := range scopes {
		locals, outputs, nodes := s.Locals(), s.Outputs(), s.Nodes()
		consumers := map[string][]onnxgraph.Node{}
		for _, n := range nodes {
			for _, in := range n.Inputs {
				consumers[in] = append(consumers[in], n)
			}
		}
		for _, n := range nodes {
			if n.Domain != "" && n.Domain != "ai.onnx" || n.Op != "MatMul" && n.Op != "Gemm" {
				continue
			}
			rep.Products++
			p, why := candidate(f, locals, n)
			if why == "" {
				if pat := opts.excluded(n.Name, p.weight); pat != "" {
					why = "excluded by " + strconv.Quote(pat)
				} else if isHead(p, consumers, outputs, tables) {
					if rep.Head == "" {
						rep.Head = n.Name
					}
					if opts.KeepHead {
						why = "LM head kept in float32"
					}
				}
			}
			if why != "" {
				rep.Skipped = append(rep.Skipped, Skip{Node: n.Name, Reason: why})
				reasons[why]++
				continue
			}
			plans[i] = append(plans[i], p)
			rep.Quantized = append(rep.Quantized, n.Name)
		}
	}
	return plans, reasons
}

// nothingWhy says why no product and no lookup was chosen.
func nothingWhy(products, tables int, reasons map[string]int) string {
	if products == 0 && tables == 0 {
		return "the model has no MatMul or Gemm node and no Gather of an embedding table"
	}
	var parts []string
	for _, why := range slices.Sorted(maps.Keys(reasons)) {
		parts = append(parts, fmt.Sprintf("%d %s", reasons[why], why))
	}
	of := fmt.Sprintf("%d MatMul/Gemm nodes", products)
	if tables > 0 {
		of += fmt.Sprintf(" and %d Gathers of a table", tables)
	}
	return fmt.Sprintf("of its %s, %s", of, strings.Join(parts, ", "))
}

// candidate returns the product n would be, or why it cannot be quantised.
func candidate(f *onnxgraph.File, locals map[string]bool, n onnxgraph.Node) (product, string) {
	if len(n.Inputs) < 2 || len(n.Outputs) < 1 {
		return product{}, "malformed"
	}
	w := n.Inputs[1]
	p := product{node: n, weight: w, alpha: 1}
	if n.Op == "Gemm" {
		if n.IntAttr("transA", 0) != 0 {
			return p, "Gemm with transA"
		}
		p.transposed = n.IntAttr("transB", 0) != 0
		p.alpha = n.FloatAttr("alpha", 1)
		if len(n.Inputs) > 2 && n.Inputs[2] != "" && n.FloatAttr("beta", 1) != 1 {
			if _, ok := f.Initializer(n.Inputs[2]); !ok {
				return p, "Gemm with beta≠1 on a computed C"
			}
		}
	}
	in, ok := f.Initializer(w)
	if !ok || locals[w] {
		return p, "no constant weight (a product of two activations)"
	}
	switch {
	case in.Type != onnxgraph.Float32:
		return p, "weight of type " + in.Type.String()
	case len(in.Dims) != 2:
		return p, "weight of rank " + strconv.Itoa(len(in.Dims))
	case in.Dims[0] < 1 || in.Dims[1] < 1:
		return p, "empty weight"
	}
	return p, ""
}

// embeddingTables returns the initializers Gather nodes read as their data:
// embedding tables.
func embeddingTables(scopes []*onnxgraph.Scope) map[string]bool {
	m := map[string]bool{}
	for _, s := range scopes {
		for _, n := range s.Nodes() {
			if n.Op == "Gather" && len(n.Inputs) > 0 {
				m[n.Inputs[0]] = true
			}
		}
	}
	return m
}

// isHead reports whether p is the LM head: its weight is an embedding
// table read by a Gather too (tied), or its output reaches one of outputs
// through shape-only operators (and bias additions). consumers are the
// nodes of the scope by the values they read.
func isHead(p product, consumers map[string][]onnxgraph.Node, outputs []string, tables map[string]bool) bool {
	if tables[p.weight] {
		return true
	}
	seen := map[string]bool{}
	var reaches func(v string) bool
	reaches = func(v string) bool {
		if seen[v] {
			return false
		}
		seen[v] = true
		if slices.Contains(outputs, v) {
			return true
		}
		for _, c := range consumers[v] {
			if (shapeOnly[c.Op] || c.Op == "Add") && len(c.Outputs) > 0 && reaches(c.Outputs[0]) {
				return true
			}
		}
		return false
	}
	return reaches(p.node.Outputs[0])
}

// dropUnused removes the initializers of replaced that no node and no graph
// output reads any more: the float32 weights replaced by int8 ones.
func dropUnused(f *onnxgraph.File, scopes []*onnxgraph.Scope, replaced map[string]bool) {
	used := map[string]bool{}
	for _, s := range scopes {
		for _, n := range s.Nodes() {
			for _, in := range n.Inputs {
				used[in] = true
			}
		}
		for _, o := range s.Outputs() {
			used[o] = true
		}
	}
	for name := range replaced {
		if !used[name] {
			f.RemoveInitializer(name)
		}
	}
}
