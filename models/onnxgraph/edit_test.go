package onnxgraph

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/inferhq/infer/models/onnxgraph/internal/onnxpb"
)

// writeFile writes b to a file in a new temporary directory and returns its
// path.
func writeFile(t *testing.T, name string, b []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func open(t *testing.T, path string) *File {
	t.Helper()
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func writeTo(t *testing.T, f *File) []byte {
	t.Helper()
	var buf bytes.Buffer
	n, err := f.WriteTo(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("WriteTo returned %d, wrote %d bytes", n, buf.Len())
	}
	return buf.Bytes()
}

func decode(t *testing.T, b []byte) *onnxpb.ModelProto {
	t.Helper()
	m := &onnxpb.ModelProto{}
	if err := proto.Unmarshal(b, m); err != nil {
		t.Fatal(err)
	}
	return m
}

func floatBytes(v ...float32) []byte {
	b := make([]byte, 0, 4*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

// TestOpenWriteUnchanged reads a model and writes it back unchanged: the
// same model, byte for byte in every field.
func TestOpenWriteUnchanged(t *testing.T) {
	orig := write(t, sample())
	f := open(t, writeFile(t, "m.onnx", orig))
	got := writeTo(t, f)
	if want := decode(t, orig); !proto.Equal(decode(t, got), want) {
		t.Errorf("model written back differs from the one read")
	}
	if len(got) != len(orig) {
		t.Errorf("wrote %d bytes, read %d", len(got), len(orig))
	}
	if f.IRVersion() != DefaultIRVersion || f.Opset("") != DefaultOpset || f.Opset("ai.onnx") != DefaultOpset || f.Opset("com.microsoft") != 0 {
		t.Errorf("IR %d, opsets %d/%d/%d; want %d, %d, %d, 0", f.IRVersion(), f.Opset(""), f.Opset("ai.onnx"),
			f.Opset("com.microsoft"), DefaultIRVersion, DefaultOpset, DefaultOpset)
	}
	ins := f.Initializers()
	if len(ins) != 2 || ins[0].Name != "w" || !slices.Equal(ins[0].Dims, []int64{200, 201}) || ins[0].Type != Float32 ||
		ins[0].Bytes() != 200*201*4 || ins[1].Name != "b" {
		t.Errorf("Initializers() = %+v, want w [200 201] float32 and b", ins)
	}
	w, err := f.Float32s("w")
	if err != nil {
		t.Fatal(err)
	}
	if len(w) != 200*201 || w[0] != 0 || w[1] != 0.5 || w[40199] != 40199*0.5 {
		t.Errorf("Float32s(w) = %v … (%d values), want 0, 0.5, … 20099.5", w[:3], len(w))
	}
	if _, err := f.Float32s("nope"); err == nil {
		t.Error("Float32s of an unknown name: no error")
	}
}

// TestEdit changes nodes, initializers, metadata and opsets and checks the
// model written.
func TestEdit(t *testing.T) {
	f := open(t, writeFile(t, "m.onnx", write(t, sample())))
	s := f.Scopes()
	if len(s) != 1 || !s[0].Main() || !slices.Equal(s[0].Outputs(), []string{"y", "shape"}) || len(s[0].Locals()) != 0 {
		t.Fatalf("Scopes() = %d scopes, outputs %v; want the main graph with outputs y, shape", len(s), s[0].Outputs())
	}
	nodes := s[0].Nodes()
	mm := slices.IndexFunc(nodes, func(n Node) bool { return n.Op == "MatMul" })
	if mm < 0 {
		t.Fatal("no MatMul node")
	}
	// MatMul(x, w) → Gemm(x, w2, transB=1) with a new weight, w removed.
	if got := f.Unique("w"); got != "w_2" {
		t.Errorf("Unique(w) = %q, want w_2", got)
	}
	if got := f.Unique("w"); got != "w_3" {
		t.Errorf("Unique(w) again = %q, want w_3", got)
	}
	if got := f.Unique("fresh"); got != "fresh" {
		t.Errorf("Unique(fresh) = %q, want fresh", got)
	}
	w2 := floatBytes(make([]float32, 201*200)...)
	if err := f.SetInitializer("w_2", Float32, []int64{201, 200}, w2); err != nil {
		t.Fatal(err)
	}
	if err := f.SetInitializer("bad", Float32, []int64{3}, []byte{1, 2}); err == nil {
		t.Error("SetInitializer with 2 bytes for 3 floats: no error")
	}
	nodes[mm] = NewNode("gemm", "Gemm", "", []string{nodes[mm].Inputs[0], "w_2"}, nodes[mm].Outputs, Int("transB", 1), Float("alpha", 2))
	s[0].SetNodes(nodes)
	f.RemoveInitializer("w")
	if err := f.SetInitializer("b", Float32, []int64{201}, floatBytes(make([]float32, 201)...)); err != nil {
		t.Fatal(err) // replaces b
	}
	f.SetMetadata("a", "changed")
	f.SetMetadata("new", "x")
	f.SetOpset("com.microsoft", 1)
	f.SetOpset("", 18)

	m := decode(t, writeTo(t, f))
	var names []string
	for _, in := range m.Graph.Initializer {
		names = append(names, in.Name)
	}
	if !slices.Equal(names, []string{"b", "w_2"}) {
		t.Errorf("initializers %v, want b, w_2", names)
	}
	if b := m.Graph.Initializer[0]; !bytes.Equal(b.RawData, floatBytes(make([]float32, 201)...)) {
		t.Errorf("b was not replaced")
	}
	g := m.Graph.Node[mm]
	if g.OpType != "Gemm" || g.Name != "gemm" || !slices.Equal(g.Input, []string{"x", "w_2"}) || len(g.Attribute) != 2 {
		t.Errorf("node %d = %v, want the Gemm", mm, g)
	}
	n := Node{Attrs: []Attr{{g.Attribute[0]}, {g.Attribute[1]}}}
	if n.IntAttr("transB", 0) != 1 || n.FloatAttr("alpha", 1) != 2 || n.IntAttr("alpha", 7) != 7 || n.FloatAttr("beta", 1) != 1 {
		t.Errorf("attributes read back wrong: %v", g.Attribute)
	}
	meta := map[string]string{}
	for _, kv := range m.MetadataProps {
		meta[kv.Key] = kv.Value
	}
	if meta["a"] != "changed" || meta["b"] != "2" || meta["new"] != "x" || f.Metadata()["new"] != "x" {
		t.Errorf("metadata %v", meta)
	}
	opsets := map[string]int64{}
	for _, o := range m.OpsetImport {
		opsets[o.Domain] = o.Version
	}
	if opsets[""] != 18 || opsets["com.microsoft"] != 1 || len(opsets) != 2 {
		t.Errorf("opsets %v, want ai.onnx 18 and com.microsoft 1", opsets)
	}
}

// TestOldIRInputs removes an initializer that an old exporter also listed
// among the graph inputs: the input goes too.
func TestOldIRInputs(t *testing.T) {
	m := decode(t, write(t, sample()))
	m.Graph.Input = append(m.Graph.Input, &onnxpb.ValueInfoProto{Name: "w"})
	m.Graph.ValueInfo = append(m.Graph.ValueInfo, &onnxpb.ValueInfoProto{Name: "w"})
	b, _ := proto.Marshal(m)
	f := open(t, writeFile(t, "m.onnx", b))
	f.RemoveInitializer("w")
	got := decode(t, writeTo(t, f))
	if len(got.Graph.Input) != 1 || got.Graph.Input[0].Name != "x" || len(got.Graph.ValueInfo) != 0 {
		t.Errorf("inputs %v, value_info %v: want x alone and none", got.Graph.Input, got.Graph.ValueInfo)
	}
}

// TestSubgraphs finds the branches of an If as scopes, and edits one.
func TestSubgraphs(t *testing.T) {
	m := decode(t, write(t, sample()))
	branch := func(name string) *onnxpb.GraphProto {
		return &onnxpb.GraphProto{
			Name:   name,
			Node:   []*onnxpb.NodeProto{{OpType: "MatMul", Input: []string{"x", "w"}, Output: []string{name + "_y"}}},
			Output: []*onnxpb.ValueInfoProto{{Name: name + "_y"}},
			Input:  []*onnxpb.ValueInfoProto{{Name: "local_in"}},
		}
	}
	m.Graph.Node = append(m.Graph.Node, &onnxpb.NodeProto{
		OpType: "If", Input: []string{"cond"}, Output: []string{"z"}, Attribute: []*onnxpb.AttributeProto{
			{Name: "then_branch", Type: onnxpb.AttributeProto_GRAPH, G: branch("then")},
			{Name: "else_branch", Type: onnxpb.AttributeProto_GRAPH, G: branch("else")},
		},
	})
	b, _ := proto.Marshal(m)
	f := open(t, writeFile(t, "m.onnx", b))
	scopes := f.Scopes()
	if len(scopes) != 3 || scopes[1].Main() || !slices.Equal(scopes[1].Outputs(), []string{"then_y"}) || !scopes[2].Locals()["local_in"] {
		t.Fatalf("%d scopes; want the main graph and two branches with their outputs and locals", len(scopes))
	}
	if got := f.Unique("then_y"); got != "then_y_2" {
		t.Errorf("Unique(then_y) = %q: names inside subgraphs are taken too", got)
	}
	nodes := scopes[2].Nodes()
	nodes[0].Op = "Gemm"
	scopes[2].SetNodes(nodes)
	got := decode(t, writeTo(t, f))
	ifNode := got.Graph.Node[len(got.Graph.Node)-1]
	if op := ifNode.Attribute[1].G.Node[0].OpType; op != "Gemm" || ifNode.Attribute[0].G.Node[0].OpType != "MatMul" {
		t.Errorf("else branch op %s: the edit did not reach the subgraph", op)
	}
}

// externalModel returns a model whose initializer w keeps its data in an
// external file: location, offset and length as given.
func externalModel(location string, offset, length int64) []byte {
	m := &onnxpb.ModelProto{
		IrVersion: 8, OpsetImport: []*onnxpb.OperatorSetIdProto{{Version: 17}},
		Graph: &onnxpb.GraphProto{
			Name: "ext",
			Node: []*onnxpb.NodeProto{{OpType: "MatMul", Input: []string{"x", "w"}, Output: []string{"y"}}},
			Initializer: []*onnxpb.TensorProto{{
				Name: "w", Dims: []int64{2, 2}, DataType: int32(Float32), DataLocation: 1,
				ExternalData: []*onnxpb.StringStringEntryProto{
					{Key: "location", Value: location},
					{Key: "offset", Value: strconv.FormatInt(offset, 10)},
					{Key: "length", Value: strconv.FormatInt(length, 10)},
				},
			}},
		},
	}
	b, _ := proto.Marshal(m)
	return b
}

func TestExternalData(t *testing.T) {
	dir := t.TempDir()
	data := append([]byte("header.."), floatBytes(1, 2, 3, 4)...)
	if err := os.WriteFile(filepath.Join(dir, "weights.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "m.onnx")
	if err := os.WriteFile(path, externalModel("weights.bin", 8, 16), 0o644); err != nil {
		t.Fatal(err)
	}
	f := open(t, path)
	w, err := f.Float32s("w")
	if err != nil || !slices.Equal(w, []float32{1, 2, 3, 4}) {
		t.Fatalf("Float32s(w) = %v, %v; want 1 2 3 4", w, err)
	}
	// Written as one file: the data inline.
	got := decode(t, writeTo(t, f))
	in := got.Graph.Initializer[0]
	if in.DataLocation != 0 || len(in.ExternalData) != 0 || !bytes.Equal(in.RawData, floatBytes(1, 2, 3, 4)) {
		t.Errorf("initializer written %v, want its data inline", in)
	}

	// Hostile or broken references: refused at Open, or when read.
	outside := filepath.Join(t.TempDir(), "secret.bin")
	os.WriteFile(outside, floatBytes(9, 9, 9, 9), 0o644)
	if err := os.Symlink(outside, filepath.Join(dir, "link.bin")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, location string
		offset, length int64
		atOpen         bool
	}{
		{"parent", "../secret.bin", 0, 16, true},
		{"absolute", outside, 0, 16, true},
		{"empty", "", 0, 16, true},
		{"negative offset", "weights.bin", -1, 16, true},
		{"wrong length", "weights.bin", 8, 12, false},
		{"past the end", "weights.bin", 16, 16, false},
		{"huge offset", "weights.bin", math.MaxInt64, 16, false},
		{"missing", "nothing.bin", 0, 16, false},
		{"symlink out", "link.bin", 0, 16, false},
	} {
		p := filepath.Join(dir, "bad.onnx")
		if err := os.WriteFile(p, externalModel(c.location, c.offset, c.length), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := Open(p)
		if c.atOpen {
			if err == nil {
				f.Close()
				t.Errorf("%s: Open succeeded, want an error", c.name)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: Open: %v", c.name, err)
			continue
		}
		if w, err := f.Float32s("w"); err == nil {
			t.Errorf("%s: Float32s = %v, want an error", c.name, w)
		}
		if _, err := f.WriteTo(&bytes.Buffer{}); err == nil {
			t.Errorf("%s: WriteTo succeeded, want an error", c.name)
		}
		f.Close()
	}
}

// TestOpenNotAModel feeds Open what is not a model, or a broken one.
func TestOpenNotAModel(t *testing.T) {
	good := decode(t, write(t, sample()))
	mutate := func(f func(m *onnxpb.ModelProto)) []byte {
		m := proto.Clone(good).(*onnxpb.ModelProto)
		f(m)
		b, _ := proto.Marshal(m)
		return b
	}
	for _, c := range []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "not an ONNX model"},
		{"text", []byte("hello, world\n"), "not an ONNX model"},
		{"lfs", []byte("version https://git-lfs.github.com/spec/v1\noid sha256:abc\n"), "git lfs pull"},
		{"truncated", write(t, sample())[:1000], "not an ONNX model"},
		{"no opset", mutate(func(m *onnxpb.ModelProto) { m.OpsetImport = nil }), "not an ONNX model"},
		{"raw size", mutate(func(m *onnxpb.ModelProto) { m.Graph.Initializer[1].RawData = []byte{1} }), "bytes of raw data"},
		{"negative dim", mutate(func(m *onnxpb.ModelProto) { m.Graph.Initializer[1].Dims = []int64{-1} }), "dims"},
		{"huge dims", mutate(func(m *onnxpb.ModelProto) { m.Graph.Initializer[1].Dims = []int64{1 << 30, 1 << 30, 1 << 30} }), "dims"},
		{"twice", mutate(func(m *onnxpb.ModelProto) { m.Graph.Initializer[1].Name = "w" }), "defined twice"},
		{"no name", mutate(func(m *onnxpb.ModelProto) { m.Graph.Initializer[1].Name = "" }), "no name"},
	} {
		f, err := Open(writeFile(t, "m.onnx", c.b))
		if err == nil {
			f.Close()
			t.Errorf("%s: Open succeeded", c.name)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Open error %q, want it to say %q", c.name, err, c.want)
		}
	}
	if _, err := Open(t.TempDir()); err == nil || !strings.Contains(err.Error(), "directory") {
		t.Errorf("Open(a directory) = %v, want an error naming it", err)
	}
	if _, err := Open(filepath.Join(t.TempDir(), "none.onnx")); err == nil {
		t.Error("Open(a missing file): no error")
	}
}

// TestTypedData reads a weight stored in float_data rather than raw_data.
func TestTypedData(t *testing.T) {
	b := mutateSample(t, func(m *onnxpb.ModelProto) {
		m.Graph.Initializer[1].RawData = nil
		m.Graph.Initializer[1].FloatData = make([]float32, 201)
		m.Graph.Initializer[1].FloatData[200] = 7
	})
	f := open(t, writeFile(t, "m.onnx", b))
	v, err := f.Float32s("b")
	if err != nil || len(v) != 201 || v[200] != 7 {
		t.Errorf("Float32s(b) = …%v, %v; want 201 values ending in 7", v[len(v)-1:], err)
	}
}

func mutateSample(t *testing.T, f func(m *onnxpb.ModelProto)) []byte {
	m := decode(t, write(t, sample()))
	f(m)
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func FuzzOpen(f *testing.F) {
	var buf bytes.Buffer
	if _, err := sample().WriteTo(&buf); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes()[:2000])
	f.Add([]byte{})
	f.Add(externalModel("w.bin", 0, 16))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(dir, "m.onnx")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		file, err := Open(path)
		if err != nil {
			return
		}
		defer file.Close()
		for _, in := range file.Initializers() {
			file.Float32s(in.Name)
		}
		file.Scopes()
		file.WriteTo(&bytes.Buffer{})
	})
}
