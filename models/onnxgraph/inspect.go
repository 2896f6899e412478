package onnxgraph

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/inferhq/infer/models/onnxgraph/internal/onnxpb"
)

// Tensor describes a graph input or output.
type Tensor struct {
	Name string
	// Type is the element type ("int64", "float32", …) of a tensor;
	// "sparse float32" for a sparse tensor; "sequence", "map" or "optional"
	// for the other ONNX value kinds; "" when the file does not say.
	Type string
	// Shape holds one entry per dimension: its size, or -1 when dynamic. It
	// is nil when the rank is unknown.
	Shape []int64
	// Dims holds the symbolic name of each dynamic dimension ("batch"), and
	// "" for fixed or unnamed ones.
	Dims []string
}

// String formats t as "input_ids int64 [batch, sequence]".
func (t Tensor) String() string {
	return t.Name + " " + t.Type + " " + t.ShapeString()
}

// ShapeString writes the dimensions as "[batch, sequence, 30522]": sizes,
// symbolic names, "?" for an unnamed dynamic axis, "[?]" for unknown rank.
func (t Tensor) ShapeString() string {
	if t.Shape == nil {
		return "[?]"
	}
	dims := make([]string, len(t.Shape))
	for i, n := range t.Shape {
		switch {
		case n >= 0:
			dims[i] = strconv.FormatInt(n, 10)
		case i < len(t.Dims) && t.Dims[i] != "":
			dims[i] = t.Dims[i]
		default:
			dims[i] = "?"
		}
	}
	return "[" + strings.Join(dims, ", ") + "]"
}

// Info is what Inspect reads from an ONNX file.
type Info struct {
	// Inputs are the graph inputs a caller feeds, in order; initializers
	// that old exporters also list as inputs are left out.
	Inputs  []Tensor
	Outputs []Tensor
	// Params is the number of elements of all floating-point initializers.
	Params int64
	// IntegerParams is the number of elements of initializers of 8 bits or
	// fewer (int8, uint8, int4, uint4): a quantised model's weights, as
	// stored (a byte that packs two 4-bit weights, as MatMulNBits's do,
	// counts once), with its zero points.
	IntegerParams int64
	// Opset is the version of the default (ai.onnx) operator set.
	Opset     int64
	IRVersion int64
	// Producer is the producer name and version, e.g. "pytorch 2.3.0".
	Producer string
	Doc      string
	Metadata map[string]string
}

// maxField bounds the fields Inspect reads into memory (names, doc strings,
// input and output descriptions); weights are skipped, never read.
const maxField = 64 << 20

// Inspect reads the description of the ONNX model in the file at path. It
// streams the file and skips the weights, so it is cheap for models of any
// size.
func Inspect(path string) (*Info, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("inspect model: %w", err)
	}
	defer f.Close()
	info, err := inspect(f)
	if err != nil {
		return nil, fmt.Errorf("inspect model %s: %w", path, err)
	}
	return info, nil
}

// InspectBytes is Inspect for a model held in memory.
func InspectBytes(b []byte) (*Info, error) {
	info, err := inspect(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("inspect model: %w", err)
	}
	return info, nil
}

// lfsPointer starts the small text file Git LFS leaves in place of a large
// file that was not fetched.
const lfsPointer = "version https://git-lfs"

func inspect(r io.Reader) (*Info, error) {
	s := &scanner{r: bufio.NewReaderSize(r, 64<<10), end: -1}
	if head, _ := s.r.Peek(len(lfsPointer)); string(head) == lfsPointer {
		return nil, errors.New("this is a Git LFS pointer, not the model: fetch the file with git lfs pull")
	}
	info := &Info{Metadata: map[string]string{}}
	var producer, version string
	var inputs []*onnxpb.ValueInfoProto
	initializers := map[string]bool{}
	graphs := 0
	err := s.fields(func(num protowire.Number, typ protowire.Type) error {
		switch {
		case num == 1 && typ == protowire.VarintType:
			v, err := s.varint()
			info.IRVersion = int64(v)
			return err
		case num == 2 && typ == protowire.BytesType:
			return s.string(&producer)
		case num == 3 && typ == protowire.BytesType:
			return s.string(&version)
		case num == 6 && typ == protowire.BytesType:
			return s.string(&info.Doc)
		case num == fieldModelGraph && typ == protowire.BytesType:
			graphs++
			return s.message(func(num protowire.Number, typ protowire.Type) error {
				switch {
				case num == fieldGraphInitializer && typ == protowire.BytesType:
					name, t, n, err := s.tensor()
					initializers[name] = true
					switch {
					case t.isFloat():
						info.Params += n
					case t.isSmallInt():
						info.IntegerParams += n
					}
					return err
				case num == 11 && typ == protowire.BytesType:
					v := &onnxpb.ValueInfoProto{}
					inputs = append(inputs, v)
					return s.proto(v)
				case num == 12 && typ == protowire.BytesType:
					v := &onnxpb.ValueInfoProto{}
					err := s.proto(v)
					info.Outputs = append(info.Outputs, tensorOf(v))
					return err
				}
				return s.skip(typ)
			})
		case num == 8 && typ == protowire.BytesType:
			op := &onnxpb.OperatorSetIdProto{}
			err := s.proto(op)
			if op.Domain == "" || op.Domain == "ai.onnx" {
				info.Opset = op.Version
			}
			return err
		case num == 14 && typ == protowire.BytesType:
			kv := &onnxpb.StringStringEntryProto{}
			err := s.proto(kv)
			info.Metadata[kv.Key] = kv.Value
			return err
		}
		return s.skip(typ)
	})
	if err != nil {
		return nil, fmt.Errorf("not an ONNX model: at byte %d: %w", s.off, err)
	}
	if graphs == 0 {
		return nil, errors.New("no graph: not an ONNX model")
	}
	for _, v := range inputs {
		if !initializers[v.Name] {
			info.Inputs = append(info.Inputs, tensorOf(v))
		}
	}
	info.Producer = strings.TrimSpace(producer + " " + version)
	return info, nil
}

// tensorOf describes a graph input or output.
func tensorOf(v *onnxpb.ValueInfoProto) Tensor {
	t := Tensor{Name: v.Name}
	var shape *onnxpb.TensorShapeProto
	switch x := v.GetType().GetValue().(type) {
	case *onnxpb.TypeProto_TensorType:
		t.Type = DataType(x.TensorType.GetElemType()).String()
		shape = x.TensorType.GetShape()
	case *onnxpb.TypeProto_SparseTensorType:
		t.Type = "sparse " + DataType(x.SparseTensorType.GetElemType()).String()
		shape = x.SparseTensorType.GetShape()
	case *onnxpb.TypeProto_SequenceType:
		t.Type = "sequence"
	case *onnxpb.TypeProto_MapType:
		t.Type = "map"
	case *onnxpb.TypeProto_OptionalType:
		t.Type = "optional"
	}
	if shape == nil {
		return t
	}
	t.Shape = make([]int64, len(shape.Dim))
	t.Dims = make([]string, len(shape.Dim))
	for i, d := range shape.Dim {
		switch x := d.Value.(type) {
		case *onnxpb.TensorShapeProto_Dimension_DimValue:
			t.Shape[i] = x.DimValue
		case *onnxpb.TensorShapeProto_Dimension_DimParam:
			t.Shape[i], t.Dims[i] = -1, x.DimParam
		default:
			t.Shape[i] = -1
		}
	}
	return t
}

// scanner reads protobuf fields from a stream, so that large fields can be
// skipped without being held in memory.
type scanner struct {
	r   *bufio.Reader
	off int64 // bytes consumed
	end int64 // offset where the current message ends; -1 = end of stream
}

// fields calls f for each field of the current message, positioned after
// the field's tag; f must consume the field's value.
func (s *scanner) fields(f func(protowire.Number, protowire.Type) error) error {
	for s.end < 0 || s.off < s.end {
		if s.end < 0 {
			if _, err := s.r.Peek(1); err == io.EOF {
				return nil
			}
		}
		tag, err := s.varint()
		if err != nil {
			return err
		}
		num, typ := protowire.DecodeTag(tag)
		if !num.IsValid() {
			return fmt.Errorf("invalid field number %d", num)
		}
		if err := f(num, typ); err != nil {
			return err
		}
	}
	if s.off != s.end {
		return errors.New("field runs past the end of its message")
	}
	return nil
}

// message reads a length-delimited embedded message with f as fields does.
func (s *scanner) message(f func(protowire.Number, protowire.Type) error) error {
	n, err := s.length()
	if err != nil {
		return err
	}
	outer := s.end
	s.end = s.off + n
	if err := s.fields(f); err != nil {
		return err
	}
	s.end = outer
	return nil
}

// tensor reads a TensorProto's name, element type and element count,
// skipping its data.
func (s *scanner) tensor() (name string, t DataType, n int64, err error) {
	n = 1
	err = s.message(func(num protowire.Number, typ protowire.Type) error {
		switch {
		case num == 1 && typ == protowire.VarintType:
			d, err := s.varint()
			n *= int64(d)
			return err
		case num == 1 && typ == protowire.BytesType: // packed dims
			b, err := s.bytes()
			for len(b) > 0 && err == nil {
				d, k := protowire.ConsumeVarint(b)
				if k < 0 {
					return protowire.ParseError(k)
				}
				n *= int64(d)
				b = b[k:]
			}
			return err
		case num == 2 && typ == protowire.VarintType:
			v, err := s.varint()
			t = DataType(v)
			return err
		case num == 8 && typ == protowire.BytesType:
			return s.string(&name)
		}
		return s.skip(typ)
	})
	return name, t, n, err
}

// varint reads a base-128 varint.
func (s *scanner) varint() (uint64, error) {
	var v uint64
	for shift := 0; shift < 64; shift += 7 {
		b, err := s.r.ReadByte()
		if err != nil {
			return 0, unexpected(err)
		}
		s.off++
		v |= uint64(b&0x7f) << shift
		if b < 0x80 {
			return v, nil
		}
	}
	return 0, errors.New("varint longer than 64 bits")
}

// length reads the length of a length-delimited field and checks that the
// field fits in its message.
func (s *scanner) length() (int64, error) {
	v, err := s.varint()
	if err != nil {
		return 0, err
	}
	n := int64(v)
	if n < 0 || (s.end >= 0 && n > s.end-s.off) {
		return 0, fmt.Errorf("field of %d bytes runs past the end of its message", v)
	}
	return n, nil
}

// bytes reads a length-delimited field of at most maxField bytes.
func (s *scanner) bytes() ([]byte, error) {
	n, err := s.length()
	if err != nil {
		return nil, err
	}
	if n > maxField {
		return nil, fmt.Errorf("field of %d bytes is larger than the %d this reader accepts", n, maxField)
	}
	b := make([]byte, n)
	k, err := io.ReadFull(s.r, b)
	s.off += int64(k)
	return b, unexpected(err)
}

func (s *scanner) string(dst *string) error {
	b, err := s.bytes()
	*dst = string(b)
	return err
}

// proto reads a length-delimited field into m.
func (s *scanner) proto(m proto.Message) error {
	b, err := s.bytes()
	if err != nil {
		return err
	}
	return proto.Unmarshal(b, m)
}

// skip consumes a field value of wire type typ.
func (s *scanner) skip(typ protowire.Type) error {
	var n int64
	switch typ {
	case protowire.VarintType:
		_, err := s.varint()
		return err
	case protowire.Fixed32Type:
		n = 4
	case protowire.Fixed64Type:
		n = 8
	case protowire.BytesType:
		var err error
		if n, err = s.length(); err != nil {
			return err
		}
	default:
		return fmt.Errorf("unsupported wire type %d", typ)
	}
	k, err := s.r.Discard(int(n))
	s.off += int64(k)
	return unexpected(err)
}

// unexpected turns the end of the stream inside a message into an error.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
