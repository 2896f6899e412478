package onnxgraph

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/inferhq/infer/models/onnxgraph/internal/onnxpb"
)

// File is an ONNX model file opened for rewriting, as a quantizer does: its
// graphs (nodes, inputs, outputs, subgraphs) are in memory and can be
// changed; the data of the main graph's initializers stays in the file (or
// in its external data files) and is read one tensor at a time, when asked
// for or while WriteTo copies it. Rewriting a model therefore costs the
// memory of the tensors a caller replaces, not of the model.
//
// A File is not safe for concurrent use. Close it when done.
type File struct {
	path   string
	src    *os.File
	model  *onnxpb.ModelProto // all but the main graph's initializers
	inits  []*initializer     // the main graph's, in order
	byName map[string]*initializer
	names  map[string]bool // every value name, built by Unique
}

// Initializer describes a tensor stored in a model: a weight, or another
// constant of the main graph.
type Initializer struct {
	Name string
	Type DataType
	Dims []int64
}

// Elements returns the number of elements of the tensor.
func (i Initializer) Elements() int64 { return elements(i.Dims) }

// Bytes returns the size of the tensor's data, or 0 for a type whose
// elements have no fixed size (strings).
func (i Initializer) Bytes() int64 {
	n, _ := byteSize(i.Type, i.Elements())
	return n
}

// initializer is an Initializer and where its data is.
type initializer struct {
	Initializer
	// off and n locate the encoded TensorProto in the model file; n is 0
	// for an initializer set in memory.
	off, n int64
	// rawOff and rawN locate its raw_data in the file; rawN is -1 when it
	// has none (typed fields, or external data).
	rawOff, rawN int64
	ext          *external
	data         []byte // raw data set in memory
}

// external is where ONNX's external data keeps a tensor: a file next to the
// model, and a byte range of it.
type external struct {
	location       string
	offset, length int64 // length -1: to the end of the file
}

// Limits of Open: what a hostile or broken file may make it allocate.
const (
	// maxStructure bounds the bytes of everything but initializer data:
	// nodes, value descriptions, subgraphs, metadata.
	maxStructure = 1 << 30
	// maxElements bounds the elements of one tensor, whatever its dims say.
	maxElements = 1 << 40
)

// Open reads the ONNX model at path for rewriting. It reads the graphs and
// the initializers' descriptions, not their data. A file that is not an
// ONNX model, or that is inconsistent (a tensor's data of the wrong size,
// external data outside the model's directory), is an error.
func Open(path string) (*File, error) {
	src, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open model: %w", err)
	}
	st, err := src.Stat()
	if err == nil && st.IsDir() {
		err = errors.New("is a directory")
	}
	if err != nil {
		src.Close()
		return nil, fmt.Errorf("open model %s: %w", path, err)
	}
	f := &File{path: path, src: src, byName: map[string]*initializer{}}
	if err := f.read(st.Size()); err != nil {
		src.Close()
		return nil, fmt.Errorf("open model %s: %w", path, err)
	}
	return f, nil
}

// Close closes the model file.
func (f *File) Close() error { return f.src.Close() }

// Path returns the path the file was opened from.
func (f *File) Path() string { return f.path }

// read reads the model's structure from its size bytes. Every length in
// the file is checked against the bytes left before anything is allocated
// for it, so a small file cannot make it allocate much.
func (f *File) read(size int64) error {
	s := &scanner{r: bufio.NewReaderSize(f.src, 64<<10), end: size}
	if head, _ := s.r.Peek(len(lfsPointer)); string(head) == lfsPointer {
		return errors.New("this is a Git LFS pointer, not the model: fetch the file with git lfs pull")
	}
	budget := int64(maxStructure)
	var head, graph []byte
	graphs := 0
	err := s.fields(func(num protowire.Number, typ protowire.Type) error {
		if num != fieldModelGraph || typ != protowire.BytesType {
			var err error
			head, err = s.appendField(head, num, typ, &budget)
			return err
		}
		if graphs++; graphs > 1 {
			return errors.New("more than one graph")
		}
		return s.message(func(num protowire.Number, typ protowire.Type) error {
			if num == fieldGraphInitializer && typ == protowire.BytesType {
				return f.readInitializer(s)
			}
			var err error
			graph, err = s.appendField(graph, num, typ, &budget)
			return err
		})
	})
	if err != nil {
		return fmt.Errorf("not an ONNX model: at byte %d: %w", s.off, err)
	}
	m, g := &onnxpb.ModelProto{}, &onnxpb.GraphProto{}
	if err := proto.Unmarshal(head, m); err != nil {
		return fmt.Errorf("not an ONNX model: %w", err)
	}
	if err := proto.Unmarshal(graph, g); err != nil {
		return fmt.Errorf("not an ONNX model: its graph: %w", err)
	}
	if graphs == 0 || m.IrVersion <= 0 || len(m.OpsetImport) == 0 {
		return errors.New("not an ONNX model: no graph, IR version or operator set")
	}
	m.Graph = g
	f.model = m
	return nil
}

// appendField appends the field whose tag was just read, re-encoded, to
// buf, counting its bytes against budget.
func (s *scanner) appendField(buf []byte, num protowire.Number, typ protowire.Type, budget *int64) ([]byte, error) {
	buf = protowire.AppendTag(buf, num, typ)
	switch typ {
	case protowire.VarintType:
		v, err := s.varint()
		return protowire.AppendVarint(buf, v), err
	case protowire.Fixed32Type, protowire.Fixed64Type:
		b := make([]byte, 4)
		if typ == protowire.Fixed64Type {
			b = make([]byte, 8)
		}
		k, err := io.ReadFull(s.r, b)
		s.off += int64(k)
		return append(buf, b...), unexpected(err)
	case protowire.BytesType:
		n, err := s.length()
		if err != nil {
			return buf, err
		}
		if *budget -= n; *budget < 0 {
			return buf, fmt.Errorf("the graph's structure is larger than the %d bytes this reader accepts", maxStructure)
		}
		b := make([]byte, n)
		k, err := io.ReadFull(s.r, b)
		s.off += int64(k)
		return protowire.AppendBytes(buf, b), unexpected(err)
	}
	return buf, fmt.Errorf("unsupported wire type %d", typ)
}

// readInitializer reads a TensorProto of the main graph, positioned at its
// length, without its data.
func (f *File) readInitializer(s *scanner) error {
	n, err := s.length()
	if err != nil {
		return err
	}
	in := &initializer{off: s.off, n: n, rawN: -1}
	outer := s.end
	s.end = s.off + n
	location := int64(0)
	var entries []*onnxpb.StringStringEntryProto
	err = s.fields(func(num protowire.Number, typ protowire.Type) error {
		switch {
		case num == 1 && typ == protowire.VarintType:
			d, err := s.varint()
			in.Dims = append(in.Dims, int64(d))
			return err
		case num == 1 && typ == protowire.BytesType: // packed dims
			b, err := s.bytes()
			for len(b) > 0 && err == nil {
				d, k := protowire.ConsumeVarint(b)
				if k < 0 {
					return protowire.ParseError(k)
				}
				in.Dims = append(in.Dims, int64(d))
				b = b[k:]
			}
			return err
		case num == 2 && typ == protowire.VarintType:
			v, err := s.varint()
			in.Type = DataType(v)
			return err
		case num == 8 && typ == protowire.BytesType:
			return s.string(&in.Name)
		case num == fieldTensorRawData && typ == protowire.BytesType:
			if in.rawN, err = s.length(); err != nil {
				return err
			}
			in.rawOff = s.off
			k, err := s.r.Discard(int(in.rawN))
			s.off += int64(k)
			return unexpected(err)
		case num == 13 && typ == protowire.BytesType:
			e := &onnxpb.StringStringEntryProto{}
			entries = append(entries, e)
			return s.proto(e)
		case num == 14 && typ == protowire.VarintType:
			v, err := s.varint()
			location = int64(v)
			return err
		}
		return s.skip(typ)
	})
	s.end = outer
	if err != nil {
		return err
	}
	if location == 1 {
		if in.ext, err = externalOf(entries); err != nil {
			return fmt.Errorf("initializer %q: %w", in.Name, err)
		}
	}
	if err := f.check(in); err != nil {
		return err
	}
	f.inits = append(f.inits, in)
	f.byName[in.Name] = in
	return nil
}

// externalOf reads the external_data entries of a tensor.
func externalOf(entries []*onnxpb.StringStringEntryProto) (*external, error) {
	e := &external{length: -1}
	for _, kv := range entries {
		var err error
		switch kv.Key {
		case "location":
			e.location = kv.Value
		case "offset":
			e.offset, err = strconv.ParseInt(kv.Value, 10, 64)
		case "length":
			e.length, err = strconv.ParseInt(kv.Value, 10, 64)
		}
		if err != nil || e.offset < 0 || (kv.Key == "length" && e.length < 0) {
			return nil, fmt.Errorf("external data %s %q: want a byte count", kv.Key, kv.Value)
		}
	}
	// The data must stay inside the model's directory: a model must not
	// read /etc/passwd or ../../secret as a weight.
	if e.location == "" || !filepath.IsLocal(e.location) {
		return nil, fmt.Errorf("external data location %q: want a file name relative to the model's directory, inside it", e.location)
	}
	return e, nil
}

// check validates an initializer's description against its data.
func (f *File) check(in *initializer) error {
	if in.Name == "" {
		return errors.New("an initializer has no name")
	}
	if f.byName[in.Name] != nil {
		return fmt.Errorf("initializer %q defined twice", in.Name)
	}
	n := int64(1)
	for _, d := range in.Dims {
		if d < 0 || (d > 0 && n > maxElements/d) {
			return fmt.Errorf("initializer %q: dims %v", in.Name, in.Dims)
		}
		n *= d
	}
	if size, ok := byteSize(in.Type, n); ok && in.rawN >= 0 && in.rawN != size {
		return fmt.Errorf("initializer %q: %d bytes of raw data for %s %v (want %d)", in.Name, in.rawN, in.Type, in.Dims, size)
	}
	if in.ext != nil && in.rawN >= 0 {
		return fmt.Errorf("initializer %q has both raw and external data", in.Name)
	}
	return nil
}

// elementBits are the sizes of the fixed-size element types.
var elementBits = map[DataType]int64{
	1: 32, 2: 8, 3: 8, 4: 16, 5: 16, 6: 32, 7: 64, 9: 8, 10: 16, 11: 64,
	12: 32, 13: 64, 14: 64, 15: 128, 16: 16, 17: 8, 18: 8, 19: 8, 20: 8,
	21: 4, 22: 4, 23: 4, 24: 8,
}

// byteSize returns the bytes of n elements of type t in raw data, or false
// for a type whose elements have no fixed size (strings) or that this
// package does not know.
func byteSize(t DataType, n int64) (int64, bool) {
	bits, ok := elementBits[t]
	if !ok {
		return 0, false
	}
	return (n*bits + 7) / 8, true
}

// -- graph structure

// IRVersion returns the model's ONNX IR version.
func (f *File) IRVersion() int64 { return f.model.IrVersion }

// Opset returns the version of the operator set of domain ("" or "ai.onnx"
// for the default one, "com.microsoft" for ONNX Runtime's), or 0 when the
// model does not import it.
func (f *File) Opset(domain string) int64 {
	for _, o := range f.model.OpsetImport {
		if sameDomain(o.Domain, domain) {
			return o.Version
		}
	}
	return 0
}

// SetOpset imports version of domain's operator set, replacing the version
// the model imported.
func (f *File) SetOpset(domain string, version int64) {
	for _, o := range f.model.OpsetImport {
		if sameDomain(o.Domain, domain) {
			o.Version = version
			return
		}
	}
	f.model.OpsetImport = append(f.model.OpsetImport, &onnxpb.OperatorSetIdProto{Domain: domain, Version: version})
}

func sameDomain(a, b string) bool {
	norm := func(d string) string {
		if d == "ai.onnx" {
			return ""
		}
		return d
	}
	return norm(a) == norm(b)
}

// Metadata returns a copy of the model's metadata_props.
func (f *File) Metadata() map[string]string {
	m := map[string]string{}
	for _, kv := range f.model.MetadataProps {
		m[kv.Key] = kv.Value
	}
	return m
}

// SetMetadata sets one metadata_props entry.
func (f *File) SetMetadata(key, value string) {
	for _, kv := range f.model.MetadataProps {
		if kv.Key == key {
			kv.Value = value
			return
		}
	}
	f.model.MetadataProps = append(f.model.MetadataProps, &onnxpb.StringStringEntryProto{Key: key, Value: value})
}

// Scope is the node list of one graph of a model: the main graph, or a
// subgraph held by a node's attribute (the branches of an If, the body of a
// Loop or Scan). A subgraph's nodes may read the main graph's initializers.
type Scope struct {
	g    *onnxpb.GraphProto
	main bool
	file *File // whose initializers the main graph's are
}

// Scopes returns the main graph first, then its subgraphs, depth first.
func (f *File) Scopes() []*Scope {
	scopes := []*Scope{{g: f.model.Graph, main: true, file: f}}
	for i := 0; i < len(scopes); i++ {
		for _, n := range scopes[i].g.Node {
			for _, a := range n.Attribute {
				for _, g := range append([]*onnxpb.GraphProto{a.G}, a.Graphs...) {
					if g != nil {
						scopes = append(scopes, &Scope{g: g})
					}
				}
			}
		}
	}
	return scopes
}

// Main reports whether s is the model's main graph.
func (s *Scope) Main() bool { return s.main }

// Inputs returns the names of the graph's inputs, without the initializers
// that old exporters also list as inputs.
func (s *Scope) Inputs() []string {
	inits := map[string]bool{}
	for _, t := range s.g.Initializer {
		inits[t.Name] = true
	}
	var names []string
	for _, in := range s.g.Input {
		if !inits[in.Name] && (!s.main || s.file.byName[in.Name] == nil) {
			names = append(names, in.Name)
		}
	}
	return names
}

// Outputs returns the names of the graph's outputs.
func (s *Scope) Outputs() []string {
	names := make([]string, len(s.g.Output))
	for i, o := range s.g.Output {
		names[i] = o.Name
	}
	return names
}

// Locals returns the names a subgraph defines for itself, its inputs and
// initializers, which hide values of the same name in the graphs around it.
// It is empty for the main graph.
func (s *Scope) Locals() map[string]bool {
	m := map[string]bool{}
	if s.main {
		return m
	}
	for _, in := range s.g.Input {
		m[in.Name] = true
	}
	for _, t := range s.g.Initializer {
		m[t.Name] = true
	}
	return m
}

// Node is one node of a graph, as Scope.Nodes returns it and SetNodes takes
// it. Build new ones with NewNode.
type Node struct {
	Name, Op, Domain string
	Inputs, Outputs  []string
	Attrs            []Attr
	p                *onnxpb.NodeProto // the node read, keeping its other fields
}

// NewNode returns a node of op in domain ("" for ONNX's own operators).
func NewNode(name, op, domain string, inputs, outputs []string, attrs ...Attr) Node {
	return Node{Name: name, Op: op, Domain: domain, Inputs: inputs, Outputs: outputs, Attrs: attrs}
}

// Attr returns the node's attribute called name.
func (n Node) Attr(name string) (Attr, bool) {
	for _, a := range n.Attrs {
		if a.p.Name == name {
			return a, true
		}
	}
	return Attr{}, false
}

// IntAttr returns the integer attribute called name, or def when the node
// has none.
func (n Node) IntAttr(name string, def int64) int64 {
	if a, ok := n.Attr(name); ok && a.p.Type == onnxpb.AttributeProto_INT {
		return a.p.I
	}
	return def
}

// FloatAttr returns the float attribute called name, or def when the node
// has none.
func (n Node) FloatAttr(name string, def float32) float32 {
	if a, ok := n.Attr(name); ok && a.p.Type == onnxpb.AttributeProto_FLOAT {
		return a.p.F
	}
	return def
}

// Nodes returns the graph's nodes in order.
func (s *Scope) Nodes() []Node {
	nodes := make([]Node, len(s.g.Node))
	for i, p := range s.g.Node {
		n := Node{Name: p.Name, Op: p.OpType, Domain: p.Domain, Inputs: slices.Clone(p.Input), Outputs: slices.Clone(p.Output), p: p}
		for _, a := range p.Attribute {
			n.Attrs = append(n.Attrs, Attr{a})
		}
		nodes[i] = n
	}
	return nodes
}

// SetNodes replaces the graph's nodes. Nodes from Nodes keep the fields
// Node does not show (doc strings, subgraphs); each may appear once.
func (s *Scope) SetNodes(nodes []Node) {
	ps := make([]*onnxpb.NodeProto, len(nodes))
	for i, n := range nodes {
		p := n.p
		if p == nil {
			p = &onnxpb.NodeProto{}
		}
		p.Name, p.OpType, p.Domain = n.Name, n.Op, n.Domain
		p.Input, p.Output = slices.Clone(n.Inputs), slices.Clone(n.Outputs)
		p.Attribute = p.Attribute[:0]
		for _, a := range n.Attrs {
			p.Attribute = append(p.Attribute, a.p)
		}
		ps[i] = p
	}
	s.g.Node = ps
}

// Unique returns a value name based on base that names nothing in the model
// yet, and reserves it.
func (f *File) Unique(base string) string {
	if f.names == nil {
		f.names = map[string]bool{}
		for _, in := range f.inits {
			f.names[in.Name] = true
		}
		for _, s := range f.Scopes() {
			for _, vs := range [][]*onnxpb.ValueInfoProto{s.g.Input, s.g.Output, s.g.ValueInfo} {
				for _, v := range vs {
					f.names[v.Name] = true
				}
			}
			for _, t := range s.g.Initializer {
				f.names[t.Name] = true
			}
			for _, n := range s.g.Node {
				for _, name := range append(slices.Clone(n.Input), n.Output...) {
					f.names[name] = true
				}
			}
		}
	}
	name := base
	for i := 2; f.names[name]; i++ {
		name = base + "_" + strconv.Itoa(i)
	}
	f.names[name] = true
	return name
}

// -- initializers

// Initializers returns the main graph's initializers, in order.
func (f *File) Initializers() []Initializer {
	out := make([]Initializer, len(f.inits))
	for i, in := range f.inits {
		out[i] = in.Initializer
	}
	return out
}

// Initializer returns the main graph's initializer called name.
func (f *File) Initializer(name string) (Initializer, bool) {
	in := f.byName[name]
	if in == nil {
		return Initializer{}, false
	}
	return in.Initializer, true
}

// Float32s reads the data of a float32 initializer.
func (f *File) Float32s(name string) ([]float32, error) {
	in := f.byName[name]
	if in == nil {
		return nil, fmt.Errorf("no initializer %q", name)
	}
	if in.Type != Float32 {
		return nil, fmt.Errorf("initializer %q is %s, not float32", name, in.Type)
	}
	raw, err := f.raw(in)
	if err != nil {
		return nil, err
	}
	out := make([]float32, len(raw)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out, nil
}

// raw returns the data of an initializer as little-endian raw bytes.
func (f *File) raw(in *initializer) ([]byte, error) {
	size, ok := byteSize(in.Type, in.Elements())
	if !ok {
		return nil, fmt.Errorf("initializer %q: %s data cannot be read as raw bytes", in.Name, in.Type)
	}
	switch {
	case in.data != nil:
		return in.data, nil
	case in.rawN >= 0:
		b := make([]byte, in.rawN)
		if _, err := f.src.ReadAt(b, in.rawOff); err != nil {
			return nil, fmt.Errorf("initializer %q: %w", in.Name, unexpected(err))
		}
		return b, nil
	case in.ext != nil:
		r, closer, err := f.openExternal(in, size)
		if err != nil {
			return nil, err
		}
		defer closer.Close()
		b := make([]byte, size)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, fmt.Errorf("initializer %q: external data: %w", in.Name, err)
		}
		return b, nil
	}
	// The data is in typed fields: read the whole tensor.
	b := make([]byte, in.n)
	if _, err := f.src.ReadAt(b, in.off); err != nil {
		return nil, fmt.Errorf("initializer %q: %w", in.Name, unexpected(err))
	}
	t := &onnxpb.TensorProto{}
	if err := proto.Unmarshal(b, t); err != nil {
		return nil, fmt.Errorf("initializer %q: %w", in.Name, err)
	}
	if in.Type != Float32 || int64(len(t.FloatData)) != in.Elements() {
		return nil, fmt.Errorf("initializer %q: %s data of %d elements in typed fields: not supported", in.Name, in.Type, in.Elements())
	}
	out := make([]byte, 0, size)
	for _, v := range t.FloatData {
		out = binary.LittleEndian.AppendUint32(out, math.Float32bits(v))
	}
	return out, nil
}

// openExternal returns a reader of the size bytes of an initializer's
// external data. The file is opened inside the model's directory: a
// symbolic link cannot lead out of it either.
func (f *File) openExternal(in *initializer, size int64) (io.Reader, io.Closer, error) {
	e := in.ext
	file, err := os.OpenInRoot(filepath.Dir(f.path), e.location)
	if err != nil {
		return nil, nil, fmt.Errorf("initializer %q: external data: %w", in.Name, err)
	}
	st, err := file.Stat()
	if err == nil && (e.length >= 0 && e.length != size || e.offset > st.Size()-size) {
		err = fmt.Errorf("%s holds %d bytes; want %d at offset %d (length %d)", e.location, st.Size(), size, e.offset, e.length)
	}
	if err != nil {
		file.Close()
		return nil, nil, fmt.Errorf("initializer %q: external data: %w", in.Name, err)
	}
	return io.NewSectionReader(file, e.offset, size), file, nil
}

// SetInitializer adds a main-graph initializer, or replaces the one called
// name, with data held in memory: raw little-endian bytes of t's elements.
func (f *File) SetInitializer(name string, t DataType, dims []int64, raw []byte) error {
	in := &initializer{Initializer: Initializer{Name: name, Type: t, Dims: slices.Clone(dims)}, rawN: -1, data: raw}
	size, ok := byteSize(t, in.Elements())
	if !ok || size != int64(len(raw)) {
		return fmt.Errorf("initializer %q: %d bytes for %s %v", name, len(raw), t, dims)
	}
	if f.names != nil {
		f.names[name] = true
	}
	if old := f.byName[name]; old != nil {
		*old = *in
		return nil
	}
	f.inits = append(f.inits, in)
	f.byName[name] = in
	return nil
}

// RemoveInitializer removes the main-graph initializer called name, and
// the graph input and value description of the same name (exporters of old
// IR versions list initializers among the inputs).
func (f *File) RemoveInitializer(name string) {
	if f.byName[name] == nil {
		return
	}
	delete(f.byName, name)
	f.inits = slices.DeleteFunc(f.inits, func(in *initializer) bool { return in.Name == name })
	g := f.model.Graph
	named := func(v *onnxpb.ValueInfoProto) bool { return v.Name == name }
	g.Input = slices.DeleteFunc(g.Input, named)
	g.ValueInfo = slices.DeleteFunc(g.ValueInfo, named)
}

// -- writing

// WriteTo writes the model, as changed, as one ONNX file: the data of
// external initializers is stored in it. Initializers not changed are
// copied from the model file as they are; memory use stays small whatever
// the model's size. The file must be under protobuf's 2 GiB limit.
func (f *File) WriteTo(w io.Writer) (int64, error) {
	g := f.model.Graph
	f.model.Graph = nil
	head, err := proto.MarshalOptions{Deterministic: true}.Marshal(f.model)
	f.model.Graph = g
	if err != nil {
		return 0, fmt.Errorf("encode model: %w", err)
	}
	graph, err := proto.MarshalOptions{Deterministic: true}.Marshal(g)
	if err != nil {
		return 0, fmt.Errorf("encode graph: %w", err)
	}
	headers := make([][]byte, len(f.inits))
	sizes := make([]int64, len(f.inits))
	graphSize := int64(len(graph))
	for i, in := range f.inits {
		if in.n > 0 && in.ext == nil {
			sizes[i] = in.n // copied as it is
		} else {
			size, _ := byteSize(in.Type, in.Elements())
			headers[i], err = proto.MarshalOptions{Deterministic: true}.Marshal(&onnxpb.TensorProto{
				Dims: in.Dims, DataType: int32(in.Type), Name: in.Name,
			})
			if err != nil {
				return 0, fmt.Errorf("encode initializer %s: %w", in.Name, err)
			}
			sizes[i] = int64(len(headers[i])) + sizeField(fieldTensorRawData, size)
		}
		graphSize += sizeField(fieldGraphInitializer, sizes[i])
	}
	total := int64(len(head)) + sizeField(fieldModelGraph, graphSize)
	if total > maxMessage {
		return 0, fmt.Errorf("model of %d bytes exceeds protobuf's 2 GiB limit", total)
	}

	cw := &countWriter{w: w}
	ew := &errWriter{w: bufio.NewWriterSize(cw, writeBuffer)}
	ew.write(head, lengthPrefix(fieldModelGraph, graphSize), graph)
	for i, in := range f.inits {
		ew.write(lengthPrefix(fieldGraphInitializer, sizes[i]))
		if ew.err != nil {
			break
		}
		switch {
		case headers[i] == nil:
			ew.copy(io.NewSectionReader(f.src, in.off, in.n), in.n)
		case in.data != nil:
			ew.write(headers[i], lengthPrefix(fieldTensorRawData, int64(len(in.data))), in.data)
		default:
			size, _ := byteSize(in.Type, in.Elements())
			r, closer, err := f.openExternal(in, size)
			if err != nil {
				return cw.n, err
			}
			ew.write(headers[i], lengthPrefix(fieldTensorRawData, size))
			ew.copy(r, size)
			closer.Close()
		}
	}
	return ew.end(cw, total)
}

// copy copies n bytes of r; fewer is an error.
func (e *errWriter) copy(r io.Reader, n int64) {
	if e.err != nil {
		return
	}
	k, err := io.Copy(e.w, io.LimitReader(r, n))
	if err == nil && k != n {
		err = io.ErrUnexpectedEOF
	}
	e.err = err
}
