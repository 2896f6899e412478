package gpt2

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
)

// CalibrationText is English prose, written for infer (about 900 words
// on unrelated topics, so about 1,100 GPT-2 tokens: every position of a
// 1,024-token context), over which the scales of an int8 KV cache are
// measured (KVScales). It shares nothing with the corpus infer models
// compare prompts with.
//
//go:embed calibration.txt
var CalibrationText string

// CalibrationID names CalibrationText, for KVScales.ID: its hash.
func CalibrationID() string {
	sum := sha256.Sum256([]byte(CalibrationText))
	return "text-" + hex.EncodeToString(sum[:6])
}
