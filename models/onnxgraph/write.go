package onnxgraph

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/inferhq/infer/models/onnxgraph/internal/onnxpb"
)

// Defaults of Model.
const (
	DefaultOpset     = 17 // first opset with LayerNormalization
	DefaultIRVersion = 8  // the IR version of opset 17
)

// maxMessage is protobuf's limit on one message; larger models need ONNX's
// external data, which this package does not write.
const maxMessage = math.MaxInt32

// Field numbers of the messages written by hand (see internal/onnxpb).
const (
	fieldModelGraph       protowire.Number = 7
	fieldGraphInitializer protowire.Number = 5
	fieldTensorRawData    protowire.Number = 9
)

const (
	floatsPerChunk = 16 << 10
	writeBuffer    = 256 << 10
	bytesPerFloat  = 4
)

// Model is a graph and the model-level fields of an ONNX file.
type Model struct {
	Graph *Graph
	// Opset is the version of the default (ai.onnx) operator set;
	// 0 means DefaultOpset.
	Opset int64
	// IRVersion is the ONNX IR version; 0 means DefaultIRVersion.
	IRVersion       int64
	Producer        string // producer_name, e.g. "infer"
	ProducerVersion string
	Doc             string
	// Metadata becomes the model's metadata_props, written sorted by key.
	Metadata map[string]string
}

// WriteTo writes the model as an ONNX file to w. Weights are produced chunk
// by chunk as they are written and stored as raw little-endian data, so
// memory use does not grow with the model. The same model always yields the
// same bytes.
func (m *Model) WriteTo(w io.Writer) (int64, error) {
	g := m.Graph
	if g == nil {
		return 0, errors.New("model has no graph")
	}
	if err := g.check(); err != nil {
		return 0, fmt.Errorf("graph %s: %w", g.name, err)
	}
	opset, ir := m.Opset, m.IRVersion
	if opset == 0 {
		opset = DefaultOpset
	}
	if ir == 0 {
		ir = DefaultIRVersion
	}
	// Fields are written in field-number order, as protobuf encoders do;
	// consecutive encodings of parts of one message concatenate into it.
	head := &onnxpb.ModelProto{
		IrVersion: ir, ProducerName: m.Producer, ProducerVersion: m.ProducerVersion, DocString: m.Doc,
	}
	tail := &onnxpb.ModelProto{
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Version: opset}},
	}
	for _, n := range g.nodes {
		if n.Domain != "" && !slices.ContainsFunc(tail.OpsetImport, func(o *onnxpb.OperatorSetIdProto) bool { return o.Domain == n.Domain }) {
			tail.OpsetImport = append(tail.OpsetImport, &onnxpb.OperatorSetIdProto{Domain: n.Domain, Version: 1})
		}
	}
	keys := make([]string, 0, len(m.Metadata))
	for k := range m.Metadata {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		tail.MetadataProps = append(tail.MetadataProps, &onnxpb.StringStringEntryProto{Key: k, Value: m.Metadata[k]})
	}
	graphHead := &onnxpb.GraphProto{Node: g.nodes, Name: g.name}
	graphTail := &onnxpb.GraphProto{Input: g.inputs, Output: g.outputs}

	var parts [4][]byte
	for i, msg := range []proto.Message{head, graphHead, graphTail, tail} {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
		if err != nil {
			return 0, fmt.Errorf("encode model: %w", err)
		}
		parts[i] = b
	}
	// Each weight is a TensorProto: dims, data type and name, then raw_data.
	headers := make([][]byte, len(g.weights))
	graphSize := int64(len(parts[1]) + len(parts[2]))
	for i, wt := range g.weights {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(&onnxpb.TensorProto{
			Dims: wt.dims, DataType: int32(Float32), Name: wt.name,
		})
		if err != nil {
			return 0, fmt.Errorf("encode weight %s: %w", wt.name, err)
		}
		headers[i] = b
		graphSize += sizeField(fieldGraphInitializer, tensorSize(b, wt))
	}
	total := int64(len(parts[0])+len(parts[3])) + sizeField(fieldModelGraph, graphSize)
	if total > maxMessage {
		return 0, fmt.Errorf("model of %d bytes exceeds protobuf's 2 GiB limit", total)
	}

	cw := &countWriter{w: w}
	ew := &errWriter{w: bufio.NewWriterSize(cw, writeBuffer)}
	ew.write(parts[0], lengthPrefix(fieldModelGraph, graphSize), parts[1])
	floats := make([]float32, floatsPerChunk)
	raw := make([]byte, floatsPerChunk*bytesPerFloat)
	for i, wt := range g.weights {
		n := elements(wt.dims)
		ew.write(lengthPrefix(fieldGraphInitializer, tensorSize(headers[i], wt)), headers[i],
			lengthPrefix(fieldTensorRawData, n*bytesPerFloat))
		fill := wt.values()
		for ; n > 0 && ew.err == nil; n -= floatsPerChunk {
			c := min(n, floatsPerChunk)
			fill(floats[:c])
			for j, f := range floats[:c] {
				binary.LittleEndian.PutUint32(raw[j*bytesPerFloat:], math.Float32bits(f))
			}
			ew.write(raw[:c*bytesPerFloat])
		}
	}
	ew.write(parts[2], parts[3])
	return ew.end(cw, total)
}

// tensorSize returns the encoded size of a weight's TensorProto whose fields
// other than raw_data encode to header.
func tensorSize(header []byte, w weight) int64 {
	return int64(len(header)) + sizeField(fieldTensorRawData, elements(w.dims)*bytesPerFloat)
}

// sizeField returns the encoded size of a length-delimited field holding n
// bytes.
func sizeField(num protowire.Number, n int64) int64 {
	return int64(protowire.SizeTag(num)+protowire.SizeVarint(uint64(n))) + n
}

// lengthPrefix returns the tag and length that start a length-delimited
// field of n bytes.
func lengthPrefix(num protowire.Number, n int64) []byte {
	b := protowire.AppendTag(nil, num, protowire.BytesType)
	return protowire.AppendVarint(b, uint64(n))
}

// errWriter keeps the first write error and skips writes after it.
type errWriter struct {
	w   *bufio.Writer
	err error
}

// end flushes the model written through cw and checks that its bytes are
// the total computed beforehand.
func (e *errWriter) end(cw *countWriter, total int64) (int64, error) {
	if e.err == nil {
		e.err = e.w.Flush()
	}
	n := cw.n
	if e.err != nil {
		return n, fmt.Errorf("write model: %w", e.err)
	}
	if n != total {
		return n, fmt.Errorf("wrote %d bytes, computed %d: the encoder is inconsistent", n, total)
	}
	return n, nil
}

func (e *errWriter) write(bs ...[]byte) {
	for _, b := range bs {
		if e.err == nil {
			_, e.err = e.w.Write(b)
		}
	}
}

// countWriter counts the bytes written through it.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
