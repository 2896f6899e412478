package onnx

import (
	"fmt"
	"slices"
	"strings"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/inferhq/infer/models"
)

// Graph input names, as in Hugging Face BERT exports and models/bert.
const (
	inputIDs      = "input_ids"
	attentionMask = "attention_mask"
	tokenTypeIDs  = "token_type_ids"
)

// head says how a graph's outputs become results.
type head int

const (
	headTopK      head = iota // mask_positions [m,2], top_scores [m,k], top_ids [m,k]: fill-mask inside the graph
	headLogits                // logits [b,s,V]: fill-mask computed here
	headEmbedding             // embedding [b,H]: the vector as is
	headHidden                // last_hidden_state [b,s,H]: mean-pooled over the tokens, L2-normalised here
	headVector                // any other float [b,H] output: the vector as is
)

// Tasks, as models.Info.Task reports them.
const (
	TaskFillMask = "fill-mask"
	TaskEmbed    = models.TaskEmbed
)

func (h head) task() string {
	if h == headTopK || h == headLogits {
		return TaskFillMask
	}
	return TaskEmbed
}

// signature is what a graph takes and what of its outputs is used.
type signature struct {
	inputs  []string // input_ids, attention_mask and, if the graph has it, token_type_ids
	head    head
	outputs []string // the outputs fetched, in decoding order
	// width is the static last dimension of a float output (H or V), or -1
	// when it is dynamic or the head has none; it lets the output buffer be
	// allocated here and reused.
	width int64
}

func (s signature) typeIDs() bool { return len(s.inputs) == 3 }

// readSignature matches a graph's inputs and outputs against what the server
// can feed and decode. The error lists the graph's inputs or outputs.
func readSignature(ins, outs []ort.InputOutputInfo) (signature, error) {
	var sig signature
	have := map[string]bool{}
	for _, in := range ins {
		switch in.Name {
		case inputIDs, attentionMask, tokenTypeIDs:
		default:
			return sig, fmt.Errorf("unsupported graph input %s; want %s, %s and optionally %s", describeIO(in), inputIDs, attentionMask, tokenTypeIDs)
		}
		if in.OrtValueType != ort.ONNXTypeTensor || in.DataType != ort.TensorElementDataTypeInt64 || len(in.Dimensions) != 2 {
			return sig, fmt.Errorf("graph input %s: want an int64 tensor [batch, sequence]", describeIO(in))
		}
		have[in.Name] = true
	}
	for _, name := range []string{inputIDs, attentionMask} {
		if !have[name] {
			return sig, fmt.Errorf("graph has no %s input; its inputs: %s", name, listIO(ins))
		}
	}
	sig.inputs = []string{inputIDs, attentionMask}
	if have[tokenTypeIDs] {
		sig.inputs = append(sig.inputs, tokenTypeIDs)
	}

	byName := map[string]ort.InputOutputInfo{}
	for _, o := range outs {
		byName[o.Name] = o
	}
	float := func(name string, rank int) bool {
		o, ok := byName[name]
		return ok && isFloat(o, rank)
	}
	sig.width = -1
	switch {
	case has(byName, "mask_positions", "top_scores", "top_ids"):
		sig.head, sig.outputs = headTopK, []string{"mask_positions", "top_scores", "top_ids"}
	case float("embedding", 2):
		sig.head, sig.outputs = headEmbedding, []string{"embedding"}
	case float("logits", 3):
		sig.head, sig.outputs = headLogits, []string{"logits"}
	case float("last_hidden_state", 3):
		sig.head, sig.outputs = headHidden, []string{"last_hidden_state"}
	default:
		i := slices.IndexFunc(outs, func(o ort.InputOutputInfo) bool { return isFloat(o, 2) })
		if i < 0 {
			return sig, fmt.Errorf("no graph output this server can decode; its outputs: %s; want mask_positions/top_scores/top_ids, "+
				"embedding [batch, hidden], logits [batch, sequence, vocab], last_hidden_state [batch, sequence, hidden] "+
				"or any float32 [batch, n]", listIO(outs))
		}
		sig.head, sig.outputs = headVector, []string{outs[i].Name}
	}
	if sig.head != headTopK {
		dims := byName[sig.outputs[0]].Dimensions
		sig.width = dims[len(dims)-1]
		if sig.width == 0 {
			return sig, fmt.Errorf("graph output %s is empty", describeIO(byName[sig.outputs[0]]))
		}
	}
	return sig, nil
}

func has(m map[string]ort.InputOutputInfo, names ...string) bool {
	for _, n := range names {
		if _, ok := m[n]; !ok {
			return false
		}
	}
	return true
}

func isFloat(o ort.InputOutputInfo, rank int) bool {
	return o.OrtValueType == ort.ONNXTypeTensor && o.DataType == ort.TensorElementDataTypeFloat && len(o.Dimensions) == rank
}

func describeIO(o ort.InputOutputInfo) string {
	if o.OrtValueType != ort.ONNXTypeTensor {
		return fmt.Sprintf("%s (%v)", o.Name, o.OrtValueType)
	}
	return fmt.Sprintf("%s %s %v", o.Name, strings.ToLower(strings.TrimPrefix(o.DataType.String(), "ONNX_TENSOR_ELEMENT_DATA_TYPE_")), o.Dimensions)
}

func listIO(ios []ort.InputOutputInfo) string {
	s := make([]string, len(ios))
	for i, o := range ios {
		s[i] = describeIO(o)
	}
	return strings.Join(s, ", ")
}
