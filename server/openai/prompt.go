package openai

import (
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/inferhq/infer/models"
)

// A prompt's length is checked against the context before it is tokenised
// in full, so that a hostile prompt as large as the body limit costs little
// CPU and heap (tokenising a megabyte takes a second or more and hundreds of
// megabytes):
//   - every token stands for at most maxTokenBytes bytes of text, so a text
//     of n bytes has at least n / maxTokenBytes tokens: past the context,
//     it is refused without tokenising anything;
//   - a text longer than countAbove bytes per context token is tokenised
//     a chunk at a time, and refused as soon as its chunks hold more tokens
//     than the context (with a margin for the chunk boundaries); so its
//     cost is that of a prompt the size of the context;
//   - what remains, short enough to fit, is tokenised whole.

// countAbove is the bytes per context token above which a prompt is
// counted in chunks first: ordinary text runs about 4 bytes a token.
const countAbove = 4

// countChunk is the size of a chunk counted, in bytes.
const countChunk = 4 << 10

// cutSlack bounds how many more tokens a text cut in two may count than
// the text whole: BPE merges stop at the cut, which is made at a space
// where there is one.
const cutSlack = 2

// maxTokenBytes is the most bytes one of tok's vocab tokens stands for.
func maxTokenBytes(tok models.Tokenizer, vocab int) int {
	most := 1
	for id := range vocab {
		most = max(most, len(tok.TokenBytes(int32(id))))
	}
	return most
}

// encode tokenises a prompt, or refuses it with 413
// context_length_exceeded once it is known not to fit the context with
// room for one generated token.
func (h *handler) encode(text string) ([]int32, error) {
	s := h.s
	ctx := s.dinfo.Context
	if least := len(text) / s.maxTokenBytes; least >= ctx {
		return nil, tooLong(ctx, least, true)
	}
	if len(text) > countAbove*ctx {
		n, cuts := 0, 0
		for rest := text; rest != ""; cuts++ {
			cut := chunkEnd(rest, countChunk)
			n += len(s.tok.Encode(rest[:cut]))
			rest = rest[cut:]
			if least := n - cuts*cutSlack; least >= ctx {
				return nil, tooLong(ctx, least, true)
			}
		}
	}
	ids := s.tok.Encode(text)
	if len(ids) >= ctx {
		return nil, tooLong(ctx, len(ids), false)
	}
	return ids, nil
}

// chunkEnd returns where to cut text for a chunk of at most size bytes:
// before a space in its second half if there is one (where BPE's
// pre-tokeniser splits anyway), else at a UTF-8 boundary.
func chunkEnd(text string, size int) int {
	if len(text) <= size {
		return len(text)
	}
	if i := strings.LastIndexByte(text[size/2:size], ' '); i >= 0 {
		return size/2 + i
	}
	cut := size
	for cut > 0 && !utf8.RuneStart(text[cut]) {
		cut--
	}
	if cut == 0 {
		return size
	}
	return cut
}

// tooLong is the 413 of a prompt that does not fit the context; atLeast
// says n is a lower bound.
func tooLong(ctx, n int, atLeast bool) *apiError {
	has := "has"
	if atLeast {
		has = "has at least"
	}
	return invalid(http.StatusRequestEntityTooLarge, "prompt", "context_length_exceeded",
		"this model's maximum context length is %d tokens; the prompt %s %d (and needs room for at least one generated token)", ctx, has, n)
}
