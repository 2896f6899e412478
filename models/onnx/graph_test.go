package onnx

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	og "github.com/inferhq/infer/models/onnxgraph"
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
	outputs   []string // among logits, last_hidden_state, embedding, pooler_output, mask_positions (+top_scores, top_ids), shape
}

// random returns seeded normal values, the same on every write.
func random(seed uint64) og.Values {
	return func() func([]float32) {
		rng := rand.New(rand.NewPCG(seed, 0))
		return func(dst []float32) {
			for i := range dst {
				dst[i] = float32(rng.NormFloat64())
			}
		}
	}
}

// build writes the graph into dir and returns its path.
func (tg toyGraph) build(t testing.TB, dir, name string) string {
	t.Helper()
	g := og.NewGraph("toy")
	batchSeq := []og.Dim{og.Sym("batch"), og.Sym("sequence")}
	g.Input(inputIDs, og.Int64, batchSeq...)
	g.Input(attentionMask, og.Int64, batchSeq...)
	emb := g.Weight("word_embeddings", []int64{toyVocab, toyHidden}, random(1))
	dec := g.Weight("decoder", []int64{toyHidden, toyVocab}, random(2))
	axis1, axis2 := g.Int64s(1), g.Int64s(2)
	float := og.Int("to", int64(og.Float32))

	h := g.Node("Gather", []string{emb, inputIDs}) // [b,s,H]
	if !tg.noTypeIDs {
		g.Input(tokenTypeIDs, og.Int64, batchSeq...)
		typeVec := g.Weight("type_vector", []int64{toyHidden}, random(3))
		tt := g.Node("Unsqueeze", []string{g.Node("Cast", []string{tokenTypeIDs}, float), axis2})
		h = g.Node("Add", []string{h, g.Node("Mul", []string{tt, typeVec})})
	}
	m := g.Node("Unsqueeze", []string{g.Node("Cast", []string{attentionMask}, float), axis2})         // [b,s,1]
	sum := g.Node("ReduceSum", []string{g.Node("Mul", []string{h, m}), axis1}, og.Int("keepdims", 1)) // [b,1,H]
	mean := g.Node("Div", []string{sum, g.Node("ReduceSum", []string{m, axis1}, og.Int("keepdims", 1))})
	hidden := g.Node("Add", []string{h, mean}) // [b,s,H]

	for _, out := range tg.outputs {
		switch out {
		case "logits":
			g.NodeOut("MatMul", []string{hidden, dec}, []string{out})
			g.Output(out, og.Float32, og.Sym("batch"), og.Sym("sequence"), og.Fixed(toyVocab))
		case "last_hidden_state":
			g.NodeOut("Identity", []string{hidden}, []string{out})
			g.Output(out, og.Float32, og.Sym("batch"), og.Sym("sequence"), og.Fixed(toyHidden))
		case "embedding", "pooler_output":
			g.NodeOut("Squeeze", []string{mean, axis1}, []string{out})
			g.Output(out, og.Float32, og.Sym("batch"), og.Fixed(toyHidden))
		case "shape":
			g.NodeOut("Shape", []string{inputIDs}, []string{out})
			g.Output(out, og.Int64, og.Fixed(2))
		case "mask_positions":
			// As models/bert does it: find the [MASK]s, run the head only there.
			isMask := g.Node("Equal", []string{inputIDs, g.Int64(103)})
			g.NodeOut("Transpose", []string{g.Node("NonZero", []string{isMask})}, []string{"mask_positions"})
			picked := g.Node("GatherND", []string{hidden, "mask_positions"})
			probs := g.Node("Softmax", []string{g.Node("MatMul", []string{picked, dec})}, og.Int("axis", -1))
			g.NodeOut("TopK", []string{probs, g.Int64s(TopK)}, []string{"top_scores", "top_ids"}, og.Int("axis", -1))
			g.Output("mask_positions", og.Int64, og.Sym("masks"), og.Fixed(2))
			g.Output("top_scores", og.Float32, og.Sym("masks"), og.Fixed(TopK))
			g.Output("top_ids", og.Int64, og.Sym("masks"), og.Fixed(TopK))
		default:
			t.Fatalf("toy graph: unknown output %q", out)
		}
	}
	path := filepath.Join(dir, name+".onnx")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := (&og.Model{Graph: g, Producer: "infer-test"}).WriteTo(f); err != nil {
		t.Fatal(err)
	}
	return path
}
