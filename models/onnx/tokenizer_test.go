package onnx

import (
	"hash/fnv"
	"strings"
	"testing"
)

// toyTokenizer stands in for the WordPiece tokenizer: words get ids from a
// hash, [MASK] gets 103, and the ids are framed by [CLS] 101 and [SEP] 102.
type toyTokenizer struct{}

func testTokenizer(testing.TB) Tokenizer { return toyTokenizer{} }

func (toyTokenizer) AppendEncode(dst []int32, text string, maxLen int) ([]int32, bool) {
	ids := []int32{101}
	for _, field := range strings.Fields(strings.ToLower(text)) {
		for i, part := range strings.Split(field, "[mask]") {
			if i > 0 {
				ids = append(ids, 103)
			}
			if part != "" {
				h := fnv.New32a()
				h.Write([]byte(part))
				ids = append(ids, 1000+int32(h.Sum32()%29000))
			}
		}
	}
	ids = append(ids, 102)
	truncated := maxLen > 0 && len(ids) > maxLen
	if truncated {
		ids = append(ids[:maxLen-1], 102)
	}
	return append(dst, ids...), truncated
}

func (toyTokenizer) Token(id int32) string {
	if id == 103 {
		return "[MASK]"
	}
	return "t" + strings.Repeat("x", int(id%3))
}

func (toyTokenizer) ID(token string) (int32, bool) {
	if token == "[MASK]" {
		return 103, true
	}
	return 0, false
}
