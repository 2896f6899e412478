package llm

import (
	"strings"

	"github.com/inferhq/infer/models/bpe"
	"github.com/inferhq/infer/models/simlm"
)

// KnownTokenizer returns a Counter that counts as the model's own
// tokenizer does, for the models whose tokenizer is GPT-2's byte-level BPE
// (r50k_base): gpt2 and its sizes, distilgpt2, with or without an
// organisation prefix ("openai-community/gpt2"), and infer's own
// gpt2-tiny and sim-lm. It returns nil for any other model: then a stream
// without usage is counted one token per content chunk, and flagged.
func KnownTokenizer(model string) Counter {
	name := strings.ToLower(model)
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	switch {
	case name == simlm.Name, strings.HasPrefix(name, "gpt2"), strings.HasPrefix(name, "distilgpt2"):
		return bpe.GPT2()
	}
	return nil
}
