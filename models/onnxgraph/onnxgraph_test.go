package onnxgraph

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/inferhq/infer/models/onnxgraph/internal/onnxpb"
)

// counting returns Values 0, 1, 2, … scaled by step.
func counting(step float32) Values {
	return func() func([]float32) {
		next := float32(0)
		return func(dst []float32) {
			for i := range dst {
				dst[i] = next * step
				next++
			}
		}
	}
}

// sample returns a small model: y = x·W + b with W larger than one write
// chunk, and a constant-shaped output.
func sample() *Model {
	g := NewGraph("sample")
	x := g.Input("x", Float32, Sym("batch"), Fixed(200))
	w := g.Weight("w", []int64{200, 201}, counting(0.5))
	b := g.Weight("b", []int64{201}, Fill(1))
	y := g.Node("Add", []string{g.Node("MatMul", []string{x, w}), b})
	g.NodeOut("Identity", []string{y}, []string{"y"})
	g.NodeOut("Shape", []string{y}, []string{"shape"})
	g.Int64s(1, 2)
	g.Scalar(3)
	g.Output("y", Float32, Sym("batch"), Fixed(201))
	g.Output("shape", Int64, Fixed(2))
	return &Model{
		Graph: g, Producer: "test", ProducerVersion: "1.0", Doc: "a sample",
		Metadata: map[string]string{"b": "2", "a": "1"},
	}
}

func write(t *testing.T, m *Model) []byte {
	t.Helper()
	var buf bytes.Buffer
	n, err := m.WriteTo(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("WriteTo returned %d, wrote %d bytes", n, buf.Len())
	}
	return buf.Bytes()
}

// TestWriteToEncodesLikeProtobuf checks the streamed file byte for byte
// against protobuf's own encoding of the same model with its weights in
// memory.
func TestWriteToEncodesLikeProtobuf(t *testing.T) {
	m := sample()
	got := write(t, m)

	want := &onnxpb.ModelProto{
		IrVersion: DefaultIRVersion, ProducerName: "test", ProducerVersion: "1.0", DocString: "a sample",
		OpsetImport:   []*onnxpb.OperatorSetIdProto{{Version: DefaultOpset}},
		MetadataProps: []*onnxpb.StringStringEntryProto{{Key: "a", Value: "1"}, {Key: "b", Value: "2"}},
		Graph: &onnxpb.GraphProto{
			Name: "sample", Node: m.Graph.nodes, Input: m.Graph.inputs, Output: m.Graph.outputs,
		},
	}
	for _, w := range m.Graph.weights {
		values := make([]float32, elements(w.dims))
		w.values()(values)
		raw := make([]byte, 0, 4*len(values))
		for _, v := range values {
			raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(v))
		}
		want.Graph.Initializer = append(want.Graph.Initializer, &onnxpb.TensorProto{
			Dims: w.dims, DataType: int32(Float32), Name: w.name, RawData: raw,
		})
	}
	wantBytes, err := proto.MarshalOptions{Deterministic: true}.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, wantBytes) {
		t.Fatalf("WriteTo wrote %d bytes that differ from protobuf's %d", len(got), len(wantBytes))
	}

	// And the weights decode to the values, across chunk boundaries.
	var decoded onnxpb.ModelProto
	if err := proto.Unmarshal(got, &decoded); err != nil {
		t.Fatal(err)
	}
	raw := decoded.Graph.Initializer[0].RawData
	for _, i := range []int{0, 1, floatsPerChunk - 1, floatsPerChunk, 200*201 - 1} {
		if v := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])); v != float32(i)*0.5 {
			t.Errorf("w[%d] = %g, want %g", i, v, float32(i)*0.5)
		}
	}
	if again := write(t, sample()); !bytes.Equal(again, got) {
		t.Errorf("writing the same model twice gives different bytes")
	}
}

func TestWriteToInvalidGraph(t *testing.T) {
	tests := []struct {
		name  string
		build func(g *Graph)
		want  string
	}{
		{"undefined input", func(g *Graph) { g.Node("Relu", []string{"nope"}) }, `input "nope" is not defined`},
		{"output not produced", func(g *Graph) { g.Output("y", Float32) }, `output "y" is not produced`},
		{"defined twice", func(g *Graph) {
			g.Input("x", Float32)
			g.Weight("x", []int64{1}, Fill(0))
		}, `"x" defined twice`},
		{"used before defined", func(g *Graph) {
			g.NodeOut("Relu", []string{"later"}, []string{"y"})
			g.NodeOut("Relu", []string{"y"}, []string{"later"})
		}, `input "later" is not defined before it`},
	}
	if _, err := (&Model{}).WriteTo(io.Discard); err == nil {
		t.Errorf("WriteTo of a Model without Graph: error = nil, want one")
	}
	for _, tt := range tests {
		g := NewGraph(tt.name)
		tt.build(g)
		_, err := (&Model{Graph: g}).WriteTo(io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: WriteTo error = %v, want one containing %q", tt.name, err, tt.want)
		}
	}
}

// failAfter accepts n bytes, then fails.
type failAfter struct{ n int }

var errDiskFull = errors.New("disk full")

func (f *failAfter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		k := f.n
		f.n = 0
		return k, errDiskFull
	}
	f.n -= len(p)
	return len(p), nil
}

func TestWriteToWriterError(t *testing.T) {
	for _, after := range []int{0, 1000, 100_000} {
		n, err := sample().WriteTo(&failAfter{n: after})
		if !errors.Is(err, errDiskFull) || n != int64(after) {
			t.Errorf("WriteTo to a writer failing after %d bytes = %d, %v; want %d, %v", after, n, err, after, errDiskFull)
		}
	}
}

func TestInspect(t *testing.T) {
	b := write(t, sample())
	got, err := InspectBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	want := &Info{
		Inputs: []Tensor{{Name: "x", Type: "float32", Shape: []int64{-1, 200}, Dims: []string{"batch", ""}}},
		Outputs: []Tensor{
			{Name: "y", Type: "float32", Shape: []int64{-1, 201}, Dims: []string{"batch", ""}},
			{Name: "shape", Type: "int64", Shape: []int64{2}, Dims: []string{""}},
		},
		Params: 200*201 + 201, Opset: DefaultOpset, IRVersion: DefaultIRVersion,
		Producer: "test 1.0", Doc: "a sample", Metadata: map[string]string{"a": "1", "b": "2"},
	}
	checkInfo(t, "sample", got, want)

	path := filepath.Join(t.TempDir(), "sample.onnx")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	fromFile, err := Inspect(path)
	if err != nil {
		t.Fatal(err)
	}
	checkInfo(t, "sample from file", fromFile, want)
}

func checkInfo(t *testing.T, name string, got, want *Info) {
	t.Helper()
	eq := func(a, b Tensor) bool {
		return a.Name == b.Name && a.Type == b.Type && slices.Equal(a.Shape, b.Shape) && slices.Equal(a.Dims, b.Dims)
	}
	if !slices.EqualFunc(got.Inputs, want.Inputs, eq) || !slices.EqualFunc(got.Outputs, want.Outputs, eq) {
		t.Errorf("%s: inputs %v outputs %v, want %v %v", name, got.Inputs, got.Outputs, want.Inputs, want.Outputs)
	}
	if got.Params != want.Params || got.IntegerParams != want.IntegerParams || got.Opset != want.Opset || got.IRVersion != want.IRVersion ||
		got.Producer != want.Producer || got.Doc != want.Doc || !equalMaps(got.Metadata, want.Metadata) {
		t.Errorf("%s: Inspect = %+v, want %+v", name, got, want)
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestInspectOtherEncodings reads what other exporters write: initializers
// also listed as inputs (IR < 4), unpacked dims, float16, int64 and 8-bit
// integer initializers, inputs without shape, non-tensor outputs, opsets of several
// domains.
func TestInspectOtherEncodings(t *testing.T) {
	dims := protowire.AppendTag(nil, 1, protowire.VarintType)
	dims = protowire.AppendVarint(dims, 3)
	dims = protowire.AppendTag(dims, 1, protowire.VarintType)
	dims = protowire.AppendVarint(dims, 4)
	half := &onnxpb.TensorProto{DataType: 10, Name: "half"}
	half.ProtoReflect().SetUnknown(dims) // dims 3, 4, unpacked
	m := &onnxpb.ModelProto{
		IrVersion:    3,
		ProducerName: "old",
		OpsetImport:  []*onnxpb.OperatorSetIdProto{{Domain: "ai.onnx.ml", Version: 2}, {Domain: "ai.onnx", Version: 9}},
		Graph: &onnxpb.GraphProto{
			Initializer: []*onnxpb.TensorProto{
				half,
				{Dims: []int64{5}, DataType: int32(Int64), Name: "index"},
				{Dims: []int64{2, 2}, DataType: int32(Float32), Name: "w", FloatData: []float32{1, 2, 3, 4}},
				{Dims: []int64{3, 2}, DataType: int32(Int8), Name: "q", RawData: make([]byte, 6)},
				{DataType: int32(Uint8), Name: "zero_point", RawData: []byte{128}},
			},
			Input: []*onnxpb.ValueInfoProto{
				valueInfo("w", Float32, []Dim{Fixed(2), Fixed(2)}),
				{Name: "anything"},
				{Name: "unranked", Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
					TensorType: &onnxpb.TypeProto_Tensor{ElemType: int32(Bool)},
				}}},
			},
			Output: []*onnxpb.ValueInfoProto{
				{Name: "seq", Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_SequenceType{}}},
				{Name: "odd", Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
					TensorType: &onnxpb.TypeProto_Tensor{ElemType: 99, Shape: &onnxpb.TensorShapeProto{
						Dim: []*onnxpb.TensorShapeProto_Dimension{{}},
					}},
				}}},
			},
		},
	}
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := InspectBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	want := &Info{
		Inputs: []Tensor{{Name: "anything"}, {Name: "unranked", Type: "bool"}},
		Outputs: []Tensor{
			{Name: "seq", Type: "sequence"},
			{Name: "odd", Type: "type(99)", Shape: []int64{-1}, Dims: []string{""}},
		},
		Params: 3*4 + 2*2, IntegerParams: 3*2 + 1, Opset: 9, IRVersion: 3, Producer: "old", Metadata: map[string]string{},
	}
	checkInfo(t, "old model", got, want)
}

func TestInspectNotAModel(t *testing.T) {
	model := write(t, sample())
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "no graph"},
		{"text", []byte("hello, world\n"), "not an ONNX model"},
		{"git lfs pointer", []byte("version https://git-lfs.github.com/spec/v1\noid sha256:ab\nsize 9\n"), "git lfs pull"},
		{"cut in the weights", model[:len(model)/2], "unexpected EOF"},
		{"cut in a tag", model[:len(model)-1], "not an ONNX model"},
	}
	for _, tt := range tests {
		_, err := InspectBytes(tt.data)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: InspectBytes error = %v, want one containing %q", tt.name, err, tt.want)
		}
	}
	if _, err := Inspect(filepath.Join(t.TempDir(), "missing.onnx")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Inspect(missing file) error = %v, want fs.ErrNotExist", err)
	}
}

func FuzzInspectBytes(f *testing.F) {
	var buf bytes.Buffer
	if _, err := sample().WriteTo(&buf); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add(buf.Bytes()[:100])
	f.Fuzz(func(t *testing.T, b []byte) {
		info, err := InspectBytes(b) // must not panic
		if err == nil && info == nil {
			t.Fatal("InspectBytes returned neither Info nor error")
		}
	})
}

func TestTensorString(t *testing.T) {
	tests := []struct {
		in   Tensor
		want string
	}{
		{Tensor{Name: "input_ids", Type: "int64", Shape: []int64{-1, -1}, Dims: []string{"batch", "sequence"}},
			"input_ids int64 [batch, sequence]"},
		{Tensor{Name: "embedding", Type: "float32", Shape: []int64{-1, 256}, Dims: []string{"", ""}},
			"embedding float32 [?, 256]"},
		{Tensor{Name: "scalar", Type: "float32", Shape: []int64{}, Dims: []string{}}, "scalar float32 []"},
		{Tensor{Name: "seq", Type: "sequence"}, "seq sequence [?]"},
	}
	for _, tt := range tests {
		if got := tt.in.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
}

// TestWriteDomainNodes checks nodes of ONNX Runtime's own operators: each
// keeps its domain, the domain is imported once (version 1) after the
// default opset, and a Floats weight holds its values.
func TestWriteDomainNodes(t *testing.T) {
	g := NewGraph("contrib")
	x := g.Input("x", Float32, Fixed(3))
	bias := g.Weight("bias", []int64{3}, Floats([]float32{1, 2.5, -3}))
	g.DomainNodeOut(MicrosoftDomain, "FastGelu", []string{x, bias}, []string{"gelu"})
	g.DomainNodeOut(MicrosoftDomain, "FastGelu", []string{"gelu"}, []string{"gelu2"})
	g.NodeOut("Identity", []string{"gelu2"}, []string{"y"})
	g.Output("y", Float32, Fixed(3))
	var m onnxpb.ModelProto
	if err := proto.Unmarshal(write(t, &Model{Graph: g}), &m); err != nil {
		t.Fatal(err)
	}
	var opsets []string
	for _, o := range m.OpsetImport {
		opsets = append(opsets, fmt.Sprintf("%q:%d", o.Domain, o.Version))
	}
	if want := []string{`"":17`, `"com.microsoft":1`}; !slices.Equal(opsets, want) {
		t.Errorf("opset imports %v, want %v", opsets, want)
	}
	for i, want := range []string{MicrosoftDomain, MicrosoftDomain, ""} {
		if n := m.Graph.Node[i]; n.Domain != want {
			t.Errorf("node %d (%s): domain %q, want %q", i, n.OpType, n.Domain, want)
		}
	}
	want := binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(
		binary.LittleEndian.AppendUint32(nil, math.Float32bits(1)), math.Float32bits(2.5)), math.Float32bits(-3))
	if raw := m.Graph.Initializer[0].RawData; !bytes.Equal(raw, want) {
		t.Errorf("Floats' weight holds %v, want %v", raw, want)
	}
}
