// Package onnxgraph writes and inspects ONNX model files. It is the only
// package that knows the ONNX protobuf encoding.
//
// A Graph is built node by node; its float32 weights are not held in memory
// but produced by a Values function while Model.WriteTo streams the file, so
// writing a model of any size costs a few buffers of memory. Inspect reads
// the inputs, outputs, parameter count and metadata of any ONNX file without
// loading its weights.
package onnxgraph

//go:generate protoc --go_out=. --go_opt=paths=source_relative internal/onnxpb/onnx.proto

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"strconv"

	"github.com/inferhq/infer/models/onnxgraph/internal/onnxpb"
)

// DataType is an ONNX tensor element type.
type DataType int32

// The element types the builder and the quantizer use; the values are ONNX's.
const (
	Float32 DataType = DataType(onnxpb.TensorProto_FLOAT)
	Uint8   DataType = DataType(onnxpb.TensorProto_UINT8)
	Int8    DataType = DataType(onnxpb.TensorProto_INT8)
	Int32   DataType = DataType(onnxpb.TensorProto_INT32)
	Int64   DataType = DataType(onnxpb.TensorProto_INT64)
	Bool    DataType = DataType(onnxpb.TensorProto_BOOL)
)

// RowBlocks are the attributes of a QuantizeLinear (opset 21) that
// quantises each row of its input (the last axis) with the row's own scale
// and zero point, of shape [..., 1]: one block larger than any row. It is
// one node where Div, Round, Add and Cast are four, and ONNX Runtime (1.30)
// rounds the same way (x / scale, half to even), vectorised.
func RowBlocks() []Attr { return []Attr{Int("axis", -1), Int("block_size", 1<<30)} }

// typeNames names ONNX element types as Go and NumPy users know them.
var typeNames = map[DataType]string{
	1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32",
	7: "int64", 8: "string", 9: "bool", 10: "float16", 11: "float64",
	12: "uint32", 13: "uint64", 14: "complex64", 15: "complex128",
	16: "bfloat16", 17: "float8e4m3fn", 18: "float8e4m3fnuz", 19: "float8e5m2",
	20: "float8e5m2fnuz", 21: "uint4", 22: "int4", 23: "float4e2m1",
	24: "float8e8m0",
}

// String returns the element type's name, e.g. "float32", or "type(N)" for
// a type this package does not know.
func (t DataType) String() string {
	if s, ok := typeNames[t]; ok {
		return s
	}
	return "type(" + strconv.Itoa(int(t)) + ")"
}

// isFloat reports whether t holds floating-point numbers, the element types
// that count as parameters.
func (t DataType) isFloat() bool {
	switch t {
	case 1, 10, 11, 16, 17, 18, 19, 20, 23, 24:
		return true
	}
	return false
}

// isSmallInt reports whether t is an integer type of 8 bits or fewer,
// which quantised weights are stored in.
func (t DataType) isSmallInt() bool {
	switch t {
	case Uint8, Int8, 21, 22: // uint4, int4
		return true
	}
	return false
}

// Dim is one dimension of a graph input or output: a fixed size, or a
// symbolic name for a size known only at run time.
type Dim struct {
	Size  int64  // used when Param is ""
	Param string // symbolic name, e.g. "batch"
}

// Sym returns a symbolic dimension.
func Sym(name string) Dim { return Dim{Param: name} }

// Fixed returns a dimension of fixed size n.
func Fixed(n int64) Dim { return Dim{Size: n} }

// Attr is a node attribute; build one with Int, Ints, Float or String.
type Attr struct{ p *onnxpb.AttributeProto }

// Int returns an integer attribute.
func Int(name string, v int64) Attr {
	return Attr{&onnxpb.AttributeProto{Name: name, Type: onnxpb.AttributeProto_INT, I: v}}
}

// Ints returns an integer-list attribute.
func Ints(name string, v ...int64) Attr {
	return Attr{&onnxpb.AttributeProto{Name: name, Type: onnxpb.AttributeProto_INTS, Ints: v}}
}

// Float returns a float attribute.
func Float(name string, v float32) Attr {
	return Attr{&onnxpb.AttributeProto{Name: name, Type: onnxpb.AttributeProto_FLOAT, F: v}}
}

// String returns a string attribute.
func String(name, v string) Attr {
	return Attr{&onnxpb.AttributeProto{Name: name, Type: onnxpb.AttributeProto_STRING, S: []byte(v)}}
}

// Values produces the contents of a float32 weight while a model is written.
// Each write calls it once; the function it returns is then called with
// successive chunks of the tensor, in row-major order, and fills each one.
// Values must return the same numbers on every call for writes to be
// reproducible.
type Values func() func(dst []float32)

// Fill returns Values that set every element to v.
func Fill(v float32) Values {
	return func() func([]float32) {
		return func(dst []float32) {
			for i := range dst {
				dst[i] = v
			}
		}
	}
}

// Floats returns Values that copy v, which must have the weight's size
// and not change while the model is written.
func Floats(v []float32) Values {
	return func() func([]float32) {
		rest := v
		return func(dst []float32) { rest = rest[copy(dst, rest):] }
	}
}

// Normal returns Values drawn from N(0, std²) by a PCG stream keyed by seed
// and name, so that each weight of a generated model is reproducible and
// independent of the others.
func Normal(seed uint64, name string, std float64) Values {
	h := fnv.New64a()
	h.Write([]byte(name))
	stream := h.Sum64()
	return func() func([]float32) {
		r := rand.New(rand.NewPCG(seed, stream))
		return func(dst []float32) {
			for i := range dst {
				dst[i] = float32(r.NormFloat64() * std)
			}
		}
	}
}

// weight is a float32 initializer whose data is produced at write time.
type weight struct {
	name   string
	dims   []int64
	values Values
}

// elements returns the number of elements of a tensor with these dims.
func elements(dims []int64) int64 {
	n := int64(1)
	for _, d := range dims {
		n *= d
	}
	return n
}

// Graph is an ONNX graph under construction. Node outputs that are not named
// by the caller are named after their op and a counter ("MatMul_12"). A Graph
// is not safe for concurrent use.
type Graph struct {
	name     string
	nodes    []*onnxpb.NodeProto
	inputs   []*onnxpb.ValueInfoProto
	outputs  []*onnxpb.ValueInfoProto
	weights  []weight
	counters map[string]int
}

// NewGraph returns an empty graph called name.
func NewGraph(name string) *Graph {
	return &Graph{name: name, counters: map[string]int{}}
}

func valueInfo(name string, t DataType, dims []Dim) *onnxpb.ValueInfoProto {
	shape := &onnxpb.TensorShapeProto{}
	for _, d := range dims {
		dim := &onnxpb.TensorShapeProto_Dimension{}
		if d.Param != "" {
			dim.Value = &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: d.Param}
		} else {
			dim.Value = &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d.Size}
		}
		shape.Dim = append(shape.Dim, dim)
	}
	return &onnxpb.ValueInfoProto{
		Name: name,
		Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
			TensorType: &onnxpb.TypeProto_Tensor{ElemType: int32(t), Shape: shape},
		}},
	}
}

// Input declares a graph input and returns its name.
func (g *Graph) Input(name string, t DataType, dims ...Dim) string {
	g.inputs = append(g.inputs, valueInfo(name, t, dims))
	return name
}

// Output declares the value called name, produced by a node, as a graph
// output.
func (g *Graph) Output(name string, t DataType, dims ...Dim) {
	g.outputs = append(g.outputs, valueInfo(name, t, dims))
}

// Weight declares a float32 initializer (a learned parameter) and returns
// its name. Its data comes from values when the model is written.
func (g *Graph) Weight(name string, dims []int64, values Values) string {
	g.weights = append(g.weights, weight{name: name, dims: append([]int64(nil), dims...), values: values})
	return name
}

// Params returns the number of float32 weight elements declared so far.
func (g *Graph) Params() int64 {
	var n int64
	for _, w := range g.weights {
		n += elements(w.dims)
	}
	return n
}

// Node appends a node with one output and returns the output's name.
func (g *Graph) Node(op string, inputs []string, attrs ...Attr) string {
	g.counters[op]++
	out := op + "_" + strconv.Itoa(g.counters[op])
	g.NodeOut(op, inputs, []string{out}, attrs...)
	return out
}

// NodeOut appends a node whose outputs have the given names: graph outputs
// and the outputs of multi-output ops.
func (g *Graph) NodeOut(op string, inputs, outputs []string, attrs ...Attr) {
	g.DomainNodeOut("", op, inputs, outputs, attrs...)
}

// MicrosoftDomain is the domain of ONNX Runtime's own operators
// (GroupQueryAttention, MatMulNBits), version 1.
const MicrosoftDomain = "com.microsoft"

// DomainNodeOut is NodeOut for an operator of domain ("" for ONNX's own);
// Model.WriteTo imports version 1 of every other domain its nodes use
// (MicrosoftDomain has no other).
func (g *Graph) DomainNodeOut(domain, op string, inputs, outputs []string, attrs ...Attr) {
	n := &onnxpb.NodeProto{
		Name:   outputs[0],
		OpType: op,
		Domain: domain,
		Input:  append([]string(nil), inputs...),
		Output: append([]string(nil), outputs...),
	}
	for _, a := range attrs {
		n.Attribute = append(n.Attribute, a.p)
	}
	g.nodes = append(g.nodes, n)
}

// Int64s appends a Constant node holding a 1-D int64 tensor and returns its
// output. Constants are nodes, not initializers, so they do not count as
// parameters.
func (g *Graph) Int64s(v ...int64) string {
	return g.constant(&onnxpb.TensorProto{
		Dims: []int64{int64(len(v))}, DataType: int32(Int64), Int64Data: append([]int64(nil), v...),
	})
}

// Int64 appends a Constant node holding an int64 scalar and returns its
// output.
func (g *Graph) Int64(v int64) string {
	return g.constant(&onnxpb.TensorProto{DataType: int32(Int64), Int64Data: []int64{v}})
}

// Scalar appends a Constant node holding a float32 scalar and returns its
// output.
func (g *Graph) Scalar(v float32) string {
	return g.constant(&onnxpb.TensorProto{DataType: int32(Float32), FloatData: []float32{v}})
}

func (g *Graph) constant(t *onnxpb.TensorProto) string {
	return g.Node("Constant", nil, Attr{&onnxpb.AttributeProto{
		Name: "value", Type: onnxpb.AttributeProto_TENSOR, T: t,
	}})
}

// check reports the first value used before it is defined, defined twice,
// or declared as an output but never produced; ONNX Runtime would refuse
// the file with a less direct message.
func (g *Graph) check() error {
	defined := map[string]bool{}
	define := func(name string) error {
		if defined[name] {
			return fmt.Errorf("value %q defined twice", name)
		}
		defined[name] = true
		return nil
	}
	for _, in := range g.inputs {
		if err := define(in.Name); err != nil {
			return err
		}
	}
	for _, w := range g.weights {
		if err := define(w.name); err != nil {
			return err
		}
	}
	for _, n := range g.nodes {
		for _, in := range n.Input {
			if in != "" && !defined[in] {
				return fmt.Errorf("node %s (%s): input %q is not defined before it", n.Name, n.OpType, in)
			}
		}
		for _, out := range n.Output {
			if err := define(out); err != nil {
				return err
			}
		}
	}
	for _, out := range g.outputs {
		if !defined[out.Name] {
			return fmt.Errorf("output %q is not produced by any node", out.Name)
		}
	}
	return nil
}

// Subgraph returns an attribute holding g as a subgraph: a branch of an
// If, the body of a Loop. Its nodes may read values of the graphs around
// it (their inputs, weights and node outputs) by name. Its own weights, if
// any, are computed and held in memory.
func Subgraph(name string, g *Graph) Attr {
	sub := &onnxpb.GraphProto{Name: g.name, Node: g.nodes, Input: g.inputs, Output: g.outputs}
	for _, w := range g.weights {
		floats := make([]float32, elements(w.dims))
		w.values()(floats)
		raw := make([]byte, 0, len(floats)*bytesPerFloat)
		for _, f := range floats {
			raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(f))
		}
		sub.Initializer = append(sub.Initializer, &onnxpb.TensorProto{Dims: w.dims, DataType: int32(Float32), Name: w.name, RawData: raw})
	}
	return Attr{&onnxpb.AttributeProto{Name: name, Type: onnxpb.AttributeProto_GRAPH, G: sub}}
}
