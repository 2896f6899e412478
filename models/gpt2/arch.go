// Package gpt2 generates ONNX models with the architecture of GPT-2 (the
// decoder of OpenAI's gpt2, 124M, and two smaller shapes) and seeded random
// weights. The weights mean nothing, but the graph computes what the real
// model computes, with a KV cache, so serving and benchmarking it costs what
// serving the real model costs.
//
// The graph's inputs and outputs are named as in Hugging Face optimum's
// decoder-with-past export (optimum-cli export onnx --model gpt2), so that
// whatever serves these models serves a real export too; a graph with
// Spec.InPlaceKV (infer's built-in models) outputs the new tokens' keys and
// values instead of present's, for a caller that keeps its cache in place.
package gpt2

import (
	"fmt"
	"strings"

	"github.com/inferhq/infer/models/onnxgraph"
)

// Arch is the shape of a GPT-2 model.
type Arch struct {
	Name    string // "tiny"; models are called "gpt2-" + Name
	Layers  int    // decoder blocks (n_layer)
	Hidden  int    // hidden size (n_embd)
	Heads   int    // attention heads (n_head); must divide Hidden
	Vocab   int    // vocabulary size
	Context int    // most positions, prompt and output together (n_positions)
}

// GPT-2's vocabulary (r50k_base) and context, shared by the built-in
// architectures.
const (
	gpt2Vocab   = 50257
	gpt2Context = 1024
)

func arch(name string, layers, hidden, heads int) Arch {
	return Arch{Name: name, Layers: layers, Hidden: hidden, Heads: heads, Vocab: gpt2Vocab, Context: gpt2Context}
}

// Archs returns the built-in architectures, smallest first: tiny and mini
// (the depths and widths of the BERT miniatures of the same names) and
// small, the shape of OpenAI's gpt2 (124M parameters).
func Archs() []Arch {
	return []Arch{
		arch("tiny", 2, 128, 2),
		arch("mini", 4, 256, 4),
		arch("small", 12, 768, 12),
	}
}

// Lookup returns the built-in architecture called name: "gpt2-tiny", in any
// case. The bare names ("tiny") are BERT's, so the prefix is required.
func Lookup(name string) (Arch, error) {
	lower := strings.ToLower(name)
	var names []string
	for _, a := range Archs() {
		if a.String() == lower {
			return a, nil
		}
		names = append(names, a.String())
	}
	return Arch{}, fmt.Errorf("unknown GPT-2 architecture %q (known: %s)", name, strings.Join(names, ", "))
}

// IsBuiltin reports whether name is one of Archs, as Lookup accepts it.
func IsBuiltin(name string) bool {
	_, err := Lookup(name)
	return err == nil
}

// String returns the model name, "gpt2-" + Name.
func (a Arch) String() string { return "gpt2-" + a.Name }

// Shape returns the architecture as "L2/H128/A2".
func (a Arch) Shape() string {
	return onnxgraph.LayerShape(a.Layers, a.Hidden, a.Heads)
}

// EOS is the id of the end-of-text token: the last of the vocabulary, as
// GPT-2's <|endoftext|> (50256) is.
func (a Arch) EOS() int32 { return int32(a.Vocab - 1) }

// HeadDim is the size of one attention head.
func (a Arch) HeadDim() int { return a.Hidden / a.Heads }

// KVBytesPerToken is the size of the KV cache of one token: a key and a
// value vector per layer, in float32.
func (a Arch) KVBytesPerToken() int64 { return int64(2 * a.Layers * a.Hidden * 4) }

// Params returns the number of parameters (float32 weights) of the model:
// token and position embeddings, the blocks and the final LayerNorm; the LM
// head is the token embedding table (tied), so it adds none. For small this
// is GPT-2's 124,439,808.
func (a Arch) Params() int64 {
	h, v, p := int64(a.Hidden), int64(a.Vocab), int64(a.Context)
	block := 2*h + // ln_1
		h*3*h + 3*h + // attn.c_attn, the fused query, key and value projection
		h*h + h + // attn.c_proj
		2*h + // ln_2
		h*4*h + 4*h + // mlp.c_fc
		4*h*h + h // mlp.c_proj
	return v*h + p*h + int64(a.Layers)*block + 2*h
}

// validate reports a shape Generate cannot build.
func (a Arch) validate() error {
	return onnxgraph.CheckArch(a.Name, a.Hidden, a.Heads, a.Layers, a.Vocab, a.Context)
}
