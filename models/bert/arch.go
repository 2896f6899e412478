// Package bert generates ONNX models with the architecture of BERT (the
// encoder of bert-base-uncased and of Google's BERT miniatures) and seeded
// random weights, with a fill-mask or an embedding head. The weights mean
// nothing, but the graph computes what the real model computes, so serving
// and benchmarking it costs what serving the real model costs.
package bert

import (
	"fmt"
	"strings"

	"github.com/inferhq/infer/models/onnxgraph"
)

// Arch is the shape of a BERT model.
type Arch struct {
	Name         string // "mini"; models are called "bert-" + Name
	Layers       int    // encoder layers (L)
	Hidden       int    // hidden size (H)
	Heads        int    // attention heads (A); must divide Hidden
	Intermediate int    // feed-forward size, 4·H in BERT
	Vocab        int    // vocabulary size
	MaxPositions int    // longest sequence, in tokens
	TypeVocab    int    // token types (segments)
}

// Vocabulary, positions and token types of bert-base-uncased, shared by the
// built-in architectures.
const (
	baseVocab     = 30522
	basePositions = 512
	baseTypes     = 2
)

func arch(name string, layers, hidden, heads int) Arch {
	return Arch{
		Name: name, Layers: layers, Hidden: hidden, Heads: heads, Intermediate: 4 * hidden,
		Vocab: baseVocab, MaxPositions: basePositions, TypeVocab: baseTypes,
	}
}

// Archs returns the built-in architectures, smallest first: the BERT
// miniatures tiny, mini, small and medium (Turc et al., 2019) and BERT-base.
func Archs() []Arch {
	return []Arch{
		arch("tiny", 2, 128, 2),
		arch("mini", 4, 256, 4),
		arch("small", 4, 512, 8),
		arch("medium", 8, 512, 8),
		arch("base", 12, 768, 12),
	}
}

// Lookup returns the built-in architecture called name: "mini" or
// "bert-mini", in any case.
func Lookup(name string) (Arch, error) {
	short := strings.TrimPrefix(strings.ToLower(name), "bert-")
	var names []string
	for _, a := range Archs() {
		if a.Name == short {
			return a, nil
		}
		names = append(names, a.String())
	}
	return Arch{}, fmt.Errorf("unknown BERT architecture %q (known: %s)", name, strings.Join(names, ", "))
}

// String returns the model name, "bert-" + Name.
func (a Arch) String() string { return "bert-" + a.Name }

// Shape returns the architecture in the notation of the BERT miniatures,
// e.g. "L4/H256/A4".
func (a Arch) Shape() string {
	return onnxgraph.LayerShape(a.Layers, a.Hidden, a.Heads)
}

// Task is what the generated model's head computes.
type Task string

// The heads Generate can put on the encoder.
const (
	// FillMask predicts the tokens behind each [MASK]: the top TopK token
	// ids and their probabilities.
	FillMask Task = "fill-mask"
	// Embed returns one vector per input: the mean of the last hidden
	// states over the attended tokens, L2-normalised.
	Embed Task = "embed"
)

// Tasks returns the tasks Generate supports.
func Tasks() []Task { return []Task{FillMask, Embed} }

// ParseTask returns the task called s.
func ParseTask(s string) (Task, error) {
	for _, t := range Tasks() {
		if string(t) == strings.ToLower(s) {
			return t, nil
		}
	}
	return "", fmt.Errorf("unknown task %q (known: %s, %s)", s, FillMask, Embed)
}

// Parameter counts of the parts of a BERT model, from its shape.

func (a Arch) embeddingParams() int64 {
	v, p, t, h := int64(a.Vocab), int64(a.MaxPositions), int64(a.TypeVocab), int64(a.Hidden)
	return (v+p+t)*h + 2*h // three tables and a LayerNorm
}

func (a Arch) layerParams() int64 {
	h, i := int64(a.Hidden), int64(a.Intermediate)
	attention := 4 * (h*h + h) // query, key, value, output
	ffn := h*i + i + i*h + h
	return attention + ffn + 2*2*h // two LayerNorms
}

func (a Arch) encoderParams() int64 {
	return a.embeddingParams() + int64(a.Layers)*a.layerParams()
}

// mlmHeadParams counts the masked-LM head: a dense layer, a LayerNorm and
// the output bias; the decoder matrix is the word embedding table.
func (a Arch) mlmHeadParams() int64 {
	h := int64(a.Hidden)
	return h*h + h + 2*h + int64(a.Vocab)
}

// Params returns the number of parameters (float32 weights) of the model
// Generate writes for task t: the encoder, plus the masked-LM head for
// FillMask.
func (a Arch) Params(t Task) int64 {
	if t == FillMask {
		return a.encoderParams() + a.mlmHeadParams()
	}
	return a.encoderParams()
}

// PretrainingParams returns the parameters of the full pre-training model
// (BertForPreTraining: encoder, pooler, masked-LM and next-sentence heads).
// This is what published model sizes count (4.4M for tiny, 110M for base);
// the generated models hold only what their task uses, so Params is a few
// percent smaller.
func (a Arch) PretrainingParams() int64 {
	h := int64(a.Hidden)
	pooler := h*h + h
	nextSentence := 2*h + 2
	return a.encoderParams() + pooler + a.mlmHeadParams() + nextSentence
}

// validate reports a shape Generate cannot build.
func (a Arch) validate() error {
	return onnxgraph.CheckArch(a.Name, a.Hidden, a.Heads, a.Layers, a.Intermediate, a.Vocab, a.MaxPositions, a.TypeVocab)
}
