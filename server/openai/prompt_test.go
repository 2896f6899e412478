package openai

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/bpe"
)

// countingTok counts the bytes a tokenizer was given to encode.
type countingTok struct {
	models.Tokenizer
	bytes int
}

func (c *countingTok) Encode(text string) []int32 {
	c.bytes += len(text)
	return c.Tokenizer.Encode(text)
}

func encodeWith(ctx int) (*handler, *countingTok) {
	tok := &countingTok{Tokenizer: bpe.GPT2()}
	s := &Service{tok: tok, dinfo: models.DecoderInfo{Context: ctx, Vocab: 50257}}
	s.maxTokenBytes = maxTokenBytes(tok, s.dinfo.Vocab)
	return &handler{s: s}, tok
}

// A prompt is refused as soon as it is known not to fit, having tokenised
// no more than about the context's worth of it; one that fits, however long
// in bytes, gets exactly its tokens.
func TestPromptLengthCheckedBeforeTokenising(t *testing.T) {
	const ctx = 256
	h, tok := encodeWith(ctx)
	if h.s.maxTokenBytes != 128 {
		t.Fatalf("GPT-2's longest token = %d bytes, want 128", h.s.maxTokenBytes)
	}
	if n := len(tok.Encode(" however")); n != 1 {
		t.Fatalf(`" however" is %d tokens, want 1`, n)
	}
	tooLarge := func(err error) bool {
		var e *apiError
		return errors.As(err, &e) && e.Status == 413 && e.Code == "context_length_exceeded"
	}
	for _, tc := range []struct {
		name    string
		text    string
		fits    bool
		maxSeen int // bytes tokenised at most
	}{
		{"1 MB", strings.Repeat("a", 1<<20), false, 0},
		{"past the byte bound", strings.Repeat("word ", 128*ctx/5+1), false, 0},
		{"counted in chunks", strings.Repeat("word ", 100*ctx/5), false, countChunk + 4*ctx},
		{"no spaces, counted in chunks", strings.Repeat("a", 100*ctx), false, countChunk + 8*ctx},
		{"long tokens, one short of the context", strings.Repeat(" however", ctx-1), true, 2 * 8 * ctx},
		{"long tokens, the context", strings.Repeat(" however", ctx), false, 2 * 8 * ctx},
	} {
		tok.bytes = 0
		ids, err := h.encode(tc.text)
		switch {
		case tc.fits && (err != nil || !slices.Equal(ids, bpe.GPT2().Encode(tc.text))):
			t.Errorf("%s: %d tokens, %v; want the %d tokens of the text", tc.name, len(ids), err, ctx-1)
		case !tc.fits && !tooLarge(err):
			t.Errorf("%s: %d tokens, %v; want 413 context_length_exceeded", tc.name, len(ids), err)
		}
		if tok.bytes > tc.maxSeen {
			t.Errorf("%s: tokenised %d bytes of %d, want at most %d", tc.name, tok.bytes, len(tc.text), tc.maxSeen)
		}
	}
}

func TestChunkEnd(t *testing.T) {
	for _, tc := range []struct {
		text string
		size int
		want int
	}{
		{"short", 8, 5},
		{"aaaa bbbb cccc", 8, 4},         // before the space in the second half
		{"aaaaaaaaaaaa", 8, 8},           // no space
		{"aaaaaaa\u00e9" + "aaaa", 8, 7}, // é starts at 7: not cut in two
		{"a bbbbbbbbbbbbbbbbbbb", 8, 8},  // the only space is in the first half
	} {
		if got := chunkEnd(tc.text, tc.size); got != tc.want {
			t.Errorf("chunkEnd(%q, %d) = %d, want %d", tc.text, tc.size, got, tc.want)
		}
	}
}
