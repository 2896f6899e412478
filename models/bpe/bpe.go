// Package bpe is GPT-2's byte-level BPE tokenizer (r50k_base), over
// github.com/tiktoken-go/tokenizer, which embeds the vocabulary: no network,
// no files. It is the only importer of that module.
package bpe

import (
	"sync"

	"github.com/tiktoken-go/tokenizer/codec"

	"github.com/inferhq/infer/models"
)

// EOS is GPT-2's <|endoftext|> token.
const EOS int32 = 50256

// Vocab is the size of GPT-2's vocabulary, <|endoftext|> included.
const Vocab = 50257

// Tokenizer is GPT-2's tokenizer. It is safe for concurrent use.
type Tokenizer struct {
	codec *codec.Codec
	// bytes[id] is what token id stands for; empty for EOS.
	bytes [][]byte
}

var _ models.Tokenizer = (*Tokenizer)(nil)

var (
	gpt2     *Tokenizer
	gpt2Once sync.Once
)

// GPT2 returns the shared GPT-2 tokenizer, built on first use (about 50 ms:
// the vocabulary and the id → bytes table).
func GPT2() *Tokenizer {
	gpt2Once.Do(func() {
		c := codec.NewR50kBase()
		t := &Tokenizer{codec: c, bytes: make([][]byte, Vocab)}
		for id := range Vocab - 1 {
			s, err := c.Decode([]uint{uint(id)})
			if err == nil {
				t.bytes[id] = []byte(s)
			}
		}
		gpt2 = t
	})
	return gpt2
}

// Encode returns the token ids of text. The text "<|endoftext|>" is encoded
// as plain text, never as EOS. Invalid UTF-8 is encoded as U+FFFD.
func (t *Tokenizer) Encode(text string) []int32 {
	// The codec fails only on a regexp time-out, which r50k's pattern has not.
	u, _, _ := t.codec.Encode(text)
	ids := make([]int32, len(u))
	for i, id := range u {
		ids[i] = int32(id)
	}
	return ids
}

// Count returns the number of tokens of text without keeping them.
func (t *Tokenizer) Count(text string) int {
	n, _ := t.codec.Count(text)
	return n
}

// TokenBytes returns the bytes token id stands for: empty for EOS and for ids
// outside the vocabulary. The slice must not be modified.
func (t *Tokenizer) TokenBytes(id int32) []byte {
	if id < 0 || int(id) >= len(t.bytes) {
		return nil
	}
	return t.bytes[id]
}

// Decode returns the text of ids, EOS and unknown ids left out. The result may
// end in an incomplete UTF-8 sequence when ids end inside a character.
func (t *Tokenizer) Decode(ids []int32) string {
	n := 0
	for _, id := range ids {
		n += len(t.TokenBytes(id))
	}
	b := make([]byte, 0, n)
	for _, id := range ids {
		b = append(b, t.TokenBytes(id)...)
	}
	return string(b)
}
