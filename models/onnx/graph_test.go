package onnx

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	pb "github.com/advancedclimatesystems/gonnx/onnx"
	"google.golang.org/protobuf/proto"
)

// A toy BERT-shaped graph for tests: real ONNX, run by the real runtime, small
// enough to build in a millisecond. Each token's hidden state is its
// embedding plus a token-type vector plus the mean of the embeddings of the
// item's attended tokens, so an item's outputs change if padding is attended
// to. Its heads are those of models/bert and of Hugging Face exports.
const (
	toyVocab  = 30522
	toyHidden = 8
)

// toyGraph describes which inputs and outputs the toy graph declares.
type toyGraph struct {
	noTypeIDs bool     // leave out the token_type_ids input
	outputs   []string // among logits, last_hidden_state, embedding, pooler_output, mask_positions+top_scores+top_ids, shape
}

type graphBuilder struct {
	g    *pb.GraphProto
	rng  *rand.Rand
	next int
}

func (b *graphBuilder) node(op string, ins []string, attrs ...*pb.AttributeProto) string {
	b.next++
	out := op + "_" + strconv.Itoa(b.next)
	b.g.Node = append(b.g.Node, &pb.NodeProto{OpType: op, Input: ins, Output: []string{out}, Attribute: attrs})
	return out
}

func (b *graphBuilder) named(op, out string, ins []string, attrs ...*pb.AttributeProto) {
	b.g.Node = append(b.g.Node, &pb.NodeProto{OpType: op, Input: ins, Output: []string{out}, Attribute: attrs})
}

func (b *graphBuilder) floats(name string, dims []int64, n int) string {
	raw := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(float32(b.rng.NormFloat64())))
	}
	b.g.Initializer = append(b.g.Initializer, &pb.TensorProto{Name: name, Dims: dims, DataType: int32(pb.TensorProto_FLOAT), RawData: raw})
	return name
}

func (b *graphBuilder) ints(name string, v ...int64) string {
	b.g.Initializer = append(b.g.Initializer, &pb.TensorProto{Name: name, Dims: []int64{int64(len(v))}, DataType: int32(pb.TensorProto_INT64), Int64Data: v})
	return name
}

func intAttr(name string, v int64) *pb.AttributeProto {
	return &pb.AttributeProto{Name: name, Type: pb.AttributeProto_INT, I: v}
}

func valueInfo(name string, elem pb.TensorProto_DataType, dims ...any) *pb.ValueInfoProto {
	shape := &pb.TensorShapeProto{}
	for _, d := range dims {
		switch d := d.(type) {
		case string:
			shape.Dim = append(shape.Dim, &pb.TensorShapeProto_Dimension{Value: &pb.TensorShapeProto_Dimension_DimParam{DimParam: d}})
		case int:
			shape.Dim = append(shape.Dim, &pb.TensorShapeProto_Dimension{Value: &pb.TensorShapeProto_Dimension_DimValue{DimValue: int64(d)}})
		}
	}
	return &pb.ValueInfoProto{Name: name, Type: &pb.TypeProto{Value: &pb.TypeProto_TensorType{
		TensorType: &pb.TypeProto_Tensor{ElemType: int32(elem), Shape: shape}}}}
}

// build writes the graph into dir and returns its path.
func (tg toyGraph) build(t testing.TB, dir, name string) string {
	t.Helper()
	b := &graphBuilder{g: &pb.GraphProto{Name: "toy"}, rng: rand.New(rand.NewPCG(1, 2))}
	inputs := []string{inputIDs, attentionMask}
	if !tg.noTypeIDs {
		inputs = append(inputs, tokenTypeIDs)
	}
	for _, in := range inputs {
		b.g.Input = append(b.g.Input, valueInfo(in, pb.TensorProto_INT64, "batch", "sequence"))
	}
	emb := b.floats("word_embeddings", []int64{toyVocab, toyHidden}, toyVocab*toyHidden)
	dec := b.floats("decoder", []int64{toyHidden, toyVocab}, toyVocab*toyHidden)
	axis1, axis2 := b.ints("axis1", 1), b.ints("axis2", 2)

	h := b.node("Gather", []string{emb, inputIDs}) // [b,s,H]
	if !tg.noTypeIDs {
		typeVec := b.floats("type_vector", []int64{toyHidden}, toyHidden)
		tt := b.node("Unsqueeze", []string{b.node("Cast", []string{tokenTypeIDs}, intAttr("to", int64(pb.TensorProto_FLOAT))), axis2})
		h = b.node("Add", []string{h, b.node("Mul", []string{tt, typeVec})})
	}
	m := b.node("Unsqueeze", []string{b.node("Cast", []string{attentionMask}, intAttr("to", int64(pb.TensorProto_FLOAT))), axis2}) // [b,s,1]
	sum := b.node("ReduceSum", []string{b.node("Mul", []string{h, m}), axis1}, intAttr("keepdims", 1))                             // [b,1,H]
	mean := b.node("Div", []string{sum, b.node("ReduceSum", []string{m, axis1}, intAttr("keepdims", 1))})                          // [b,1,H]
	hidden := b.node("Add", []string{h, mean})                                                                                     // [b,s,H]

	for _, out := range tg.outputs {
		switch out {
		case "logits":
			b.named("MatMul", out, []string{hidden, dec})
			b.g.Output = append(b.g.Output, valueInfo(out, pb.TensorProto_FLOAT, "batch", "sequence", toyVocab))
		case "last_hidden_state":
			b.named("Identity", out, []string{hidden})
			b.g.Output = append(b.g.Output, valueInfo(out, pb.TensorProto_FLOAT, "batch", "sequence", toyHidden))
		case "embedding", "pooler_output":
			b.named("Squeeze", out, []string{mean, axis1})
			b.g.Output = append(b.g.Output, valueInfo(out, pb.TensorProto_FLOAT, "batch", toyHidden))
		case "shape":
			b.named("Shape", out, []string{inputIDs})
			b.g.Output = append(b.g.Output, valueInfo(out, pb.TensorProto_INT64, 2))
		case "mask_positions":
			// As models/bert does it: the [MASK] positions, the head only there.
			isMask := b.node("Equal", []string{inputIDs, b.ints("mask_id", 103)})
			b.named("Transpose", "mask_positions", []string{b.node("NonZero", []string{isMask})})
			picked := b.node("GatherND", []string{hidden, "mask_positions"})
			probs := b.node("Softmax", []string{b.node("MatMul", []string{picked, dec})}, intAttr("axis", -1))
			b.g.Node = append(b.g.Node, &pb.NodeProto{OpType: "TopK", Input: []string{probs, b.ints("k", TopK)},
				Output: []string{"top_scores", "top_ids"}, Attribute: []*pb.AttributeProto{intAttr("axis", -1)}})
			b.g.Output = append(b.g.Output,
				valueInfo("mask_positions", pb.TensorProto_INT64, "masks", 2),
				valueInfo("top_scores", pb.TensorProto_FLOAT, "masks", TopK),
				valueInfo("top_ids", pb.TensorProto_INT64, "masks", TopK))
		default:
			t.Fatalf("toy graph: unknown output %q", out)
		}
	}
	model := &pb.ModelProto{IrVersion: 8, ProducerName: "infer-test", Graph: b.g,
		OpsetImport: []*pb.OperatorSetIdProto{{Domain: "", Version: 17}}}
	raw, err := proto.Marshal(model)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name+".onnx")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
