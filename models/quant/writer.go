package quant

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/inferhq/infer/models/onnxgraph"
)

// writer rewrites the chosen products of a model into the form its options
// say.
type writer struct {
	f      *onnxgraph.File
	opts   Options // resolved
	done   map[string]quantized
	tables map[string]quantized // embedding tables, by name
	rc     rowConsts            // constants of activations per row, once written
}

// quantized is a weight written quantised, with its scales.
type quantized struct {
	weight, scale string
	k, n          int64
}

// rewrite replaces the products and the lookups of one graph by their
// quantised form.
func (w *writer) rewrite(s *onnxgraph.Scope, plan []product, lookups []lookup) error {
	byOutput := map[string]product{}
	for _, p := range plan {
		byOutput[p.node.Outputs[0]] = p
	}
	gathers := map[string]lookup{}
	for _, l := range lookups {
		gathers[l.node.Outputs[0]] = l
	}
	// The run-time quantisation of each activation, shared by its products
	// (activations per tensor or per row).
	activations := map[string][3]string{}
	var out []onnxgraph.Node
	for _, n := range s.Nodes() {
		if len(n.Outputs) == 0 {
			out = append(out, n)
			continue
		}
		var nodes []onnxgraph.Node
		var err error
		p, ok := byOutput[n.Outputs[0]]
		l, isLookup := gathers[n.Outputs[0]]
		switch {
		case isLookup:
			nodes, err = w.lookup(l)
		case !ok:
			out = append(out, n)
			continue
		case w.opts.Activations == ActivationsBlock:
			nodes, err = w.blocks(p)
		default:
			nodes, err = w.tensor(p, activations)
		}
		if err != nil {
			return err
		}
		out = append(out, nodes...)
	}
	s.SetNodes(out)
	return nil
}

// encoded is a weight as a form stores it: its values (of type dtype, shape
// dims) and its scales (shape scaleDims, nil for a scalar).
type encoded struct {
	dtype           onnxgraph.DataType
	dims, scaleDims []int64
	raw             []byte
	scales          []float32
}

// weight returns p's weight quantised, encoding it with encode on first
// use and writing it and its scales (times p's alpha) as initializers: a
// weight read by several products (alike) is quantised once.
func (w *writer) weight(p product, encode func(v []float32, rows, cols int) (encoded, error)) (quantized, error) {
	key := fmt.Sprintf("%s|%v|%g", p.weight, p.transposed, p.alpha)
	if q, ok := w.done[key]; ok {
		return q, nil
	}
	f := w.f
	in, _ := f.Initializer(p.weight)
	v, err := f.Float32s(p.weight)
	if err != nil {
		return quantized{}, &InputError{err}
	}
	rows, cols := int(in.Dims[0]), int(in.Dims[1])
	e, err := encode(v, rows, cols)
	if err != nil {
		return quantized{}, inputErrorf("weight %q: %v", p.weight, err)
	}
	for i := range e.scales {
		e.scales[i] *= p.alpha
	}
	k, n, _ := matrix(v, rows, cols, p.transposed)
	q := quantized{weight: f.Unique(p.weight + "_quantized"), scale: f.Unique(p.weight + "_scale"), k: int64(k), n: int64(n)}
	if err := f.SetInitializer(q.weight, e.dtype, e.dims, e.raw); err != nil {
		return quantized{}, err
	}
	if err := f.SetInitializer(q.scale, onnxgraph.Float32, e.scaleDims, float32Bytes(e.scales)); err != nil {
		return quantized{}, err
	}
	w.done[key] = q
	return q, nil
}

// gemmBias returns the value to add to a Gemm's product: its C, or beta·C
// as a new initializer when beta is not 1 (C is then an initializer; plan
// checked it). It returns "" for a Gemm without C, and for a MatMul.
func (w *writer) gemmBias(p product) (string, error) {
	c := p.bias()
	beta := p.node.FloatAttr("beta", 1)
	if c == "" || beta == 1 {
		return c, nil
	}
	in, _ := w.f.Initializer(c)
	v, err := w.f.Float32s(c)
	if err != nil {
		return "", &InputError{err}
	}
	for i := range v {
		v[i] *= beta
	}
	name := w.f.Unique(c + "_scaled")
	return name, w.f.SetInitializer(name, onnxgraph.Float32, in.Dims, float32Bytes(v))
}

// names returns the base of the names of what replaces p's node.
func (p product) names() string {
	if p.node.Name != "" {
		return p.node.Name
	}
	return p.node.Outputs[0]
}

// matrix reads a rows×cols row-major weight as the [K, N] right operand of
// a product: itself, or with transposed (Gemm's transB) its transpose.
func matrix(w []float32, rows, cols int, transposed bool) (k, n int, at func(kk, nn int) float32) {
	if transposed {
		return cols, rows, func(kk, nn int) float32 { return w[nn*cols+kk] }
	}
	return rows, cols, func(kk, nn int) float32 { return w[kk*cols+nn] }
}

// finite checks that every weight is a finite number.
func finite(w []float32) error {
	for i, v := range w {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return fmt.Errorf("value %d is %v: not a finite number", i, v)
		}
	}
	return nil
}

// symmetricScale is the scale of symmetric int8 for values of at most m in
// magnitude: m/127, or 1 for all zeros.
func symmetricScale(m float64) float32 {
	if m > 0 {
		return float32(m / 127)
	}
	return 1
}

// toInt8 is v in steps of s, rounded to even and kept within [-127, 127].
func toInt8(v float32, s float32) int8 {
	return int8(max(-127, min(127, math.RoundToEven(float64(v)/float64(s)))))
}

// int8Bytes is q as an ONNX int8 tensor's raw data.
func int8Bytes(q []int8) []byte {
	b := make([]byte, len(q))
	for i, x := range q {
		b[i] = byte(x)
	}
	return b
}

func float32Bytes(v []float32) []byte {
	b := make([]byte, 0, 4*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}
