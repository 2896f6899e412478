// Package tokenizer is llama2.c's tokenizer: the SentencePiece BPE
// vocabulary of a Llama-family model as llama2.c's export writes it
// (tokenizer.bin, tok512.bin), and its rules for encoding and decoding.
//
// Encoding is llama2.c's: BOS first; a dummy-prefix " " when the text is not
// empty; each UTF-8 character looked up as a piece, else its bytes as byte
// tokens (<0xXX>, id = byte + 3); then the adjacent pair whose concatenation
// is a piece of the highest score is merged, again and again, the leftmost
// pair winning a tie. Decoding drops a piece's leading space right after BOS
// and turns byte pieces into raw bytes.
//
// The file holds an int32 max_token_length, then for each token a float32
// score, an int32 length and the piece's bytes, all little-endian; the
// number of tokens is not stored (the checkpoint's header has it), so Read
// reads to the end of the file.
package tokenizer

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
)

// Ids every llama2.c tokenizer has: SentencePiece's unknown, BOS and EOS,
// then the 256 byte tokens <0x00> … <0xFF>.
const (
	Unk int32 = 0
	BOS int32 = 1
	EOS int32 = 2
	// ByteBase is the id of <0x00>: the byte b is the token ByteBase + b.
	ByteBase int32 = 3
)

// Bounds on a tokenizer file: beyond them it is refused before anything is
// allocated for it.
const (
	// MaxVocab is the most tokens (Llama 2 has 32,000; Llama 3 128,256).
	MaxVocab = 1 << 20
	// MaxTokenLength is the longest piece, in bytes.
	MaxTokenLength = 1 << 10
	// MaxFileSize is the largest file ReadFile reads (Llama 3's 128,256
	// tokens take about 2 MiB).
	MaxFileSize = 64 << 20
)

// minVocab is the special tokens and the byte tokens, which encoding needs.
const minVocab = int(ByteBase) + 256

// Tokenizer encodes and decodes text as llama2.c does. It is a
// models.Tokenizer and safe for concurrent use.
type Tokenizer struct {
	pieces [][]byte // as in the file
	scores []float32
	ids    map[string]int32 // piece → id; the first id of a duplicate
	pairs  map[uint64]int32 // (id, id) → the id of their concatenation (see pairMerges)
	text   [][]byte         // what each id decodes to
	space  int32            // the dummy prefix: the piece " ", else the byte token of ' '
}

// ReadFile reads a tokenizer file.
func ReadFile(path string) (*Tokenizer, error) {
	b, err := readFile(path)
	if err != nil {
		return nil, err
	}
	t, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", path, err)
	}
	return t, nil
}

// Parse reads a tokenizer from the bytes of its file. The error says what is
// wrong with a file that is not one: truncated, a piece longer than the
// header allows, or too few tokens for the byte fallback.
func Parse(b []byte) (*Tokenizer, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("%d bytes: too short for a llama2.c tokenizer (an int32 max_token_length, then the tokens)", len(b))
	}
	maxLen := int32(binary.LittleEndian.Uint32(b))
	if maxLen < 1 || maxLen > MaxTokenLength {
		return nil, fmt.Errorf("max_token_length %d: want 1 to %d; is this a llama2.c tokenizer file (tokenizer.bin)?", maxLen, MaxTokenLength)
	}
	t := &Tokenizer{ids: map[string]int32{}}
	for off := 4; off < len(b); {
		id := len(t.pieces)
		if id == MaxVocab {
			return nil, fmt.Errorf("more than %d tokens", MaxVocab)
		}
		if len(b)-off < 8 {
			return nil, fmt.Errorf("token %d: the file ends inside its header (truncated?)", id)
		}
		score := math.Float32frombits(binary.LittleEndian.Uint32(b[off:]))
		n := int32(binary.LittleEndian.Uint32(b[off+4:]))
		off += 8
		switch {
		case n < 0 || n > maxLen:
			return nil, fmt.Errorf("token %d: length %d, want 0 to max_token_length %d", id, n, maxLen)
		case int(n) > len(b)-off:
			return nil, fmt.Errorf("token %d: %d bytes, but the file ends after %d (truncated?)", id, n, len(b)-off)
		}
		piece := b[off : off+int(n) : off+int(n)]
		off += int(n)
		t.pieces = append(t.pieces, piece)
		t.scores = append(t.scores, score)
		if _, dup := t.ids[string(piece)]; !dup {
			t.ids[string(piece)] = int32(id)
		}
	}
	if len(t.pieces) < minVocab {
		return nil, fmt.Errorf("%d tokens: a llama2.c tokenizer has at least %d (<unk>, <s>, </s> and the byte tokens <0x00> to <0xFF>)",
			len(t.pieces), minVocab)
	}
	t.text = slices.Clone(t.pieces)
	for c := range 256 {
		id := ByteBase + int32(c)
		if want := byteName(byte(c)); string(t.pieces[id]) != want {
			return nil, fmt.Errorf("token %d is %q, want the byte token %s: not a tokenizer with llama2.c's byte fallback", id, t.pieces[id], want)
		}
		t.text[id] = []byte{byte(c)}
	}
	t.text[BOS], t.text[EOS] = nil, nil // control tokens decode to nothing
	t.pairs = t.pairMerges()
	t.space = ByteBase + ' '
	if id, ok := t.ids[" "]; ok {
		t.space = id
	}
	return t, nil
}

// byteName returns the piece of the byte token of c, "<0x0A>" for '\n'.
func byteName(c byte) string {
	const hex = "0123456789ABCDEF"
	return "<0x" + string([]byte{hex[c>>4], hex[c&15]}) + ">"
}

// Vocab returns the number of tokens.
func (t *Tokenizer) Vocab() int { return len(t.pieces) }

// Piece returns token id's piece as the file has it ("<0x0A>" for a byte
// token), or "" for an id outside the vocabulary.
func (t *Tokenizer) Piece(id int32) string {
	if id < 0 || int(id) >= len(t.pieces) {
		return ""
	}
	return string(t.pieces[id])
}

// Encode returns the ids of text as llama2.c encodes it with BOS: BOS, then
// (for a text that is not empty) the dummy prefix and the text's pieces. It
// takes time O(n log n) in the length of text.
func (t *Tokenizer) Encode(text string) []int32 { return t.merge(t.split(text)) }

// split returns the ids of text before merges: BOS, the dummy prefix, and
// each character's piece or its bytes' tokens.
func (t *Tokenizer) split(text string) []int32 {
	ids := make([]int32, 0, len(text)+2)
	ids = append(ids, BOS)
	if text == "" {
		return ids
	}
	ids = append(ids, t.space)
	// Characters as llama2.c reads them: a byte that is not a UTF-8
	// continuation byte starts one, which takes up to 3 continuation bytes
	// after it.
	for start := 0; start < len(text); {
		end := start + 1
		for end < len(text) && text[end]&0xC0 == 0x80 && end-start < 4 {
			end++
		}
		if id, ok := t.ids[text[start:end]]; ok {
			ids = append(ids, id)
		} else {
			for i := start; i < end; i++ {
				ids = append(ids, ByteBase+int32(text[i]))
			}
		}
		start = end
	}
	return ids
}

// noMerge is llama2.c's starting best score: a pair whose piece scores no
// higher is never merged.
const noMerge = -1e10

// symbol is one token of a sequence being merged, in a linked list.
type symbol struct {
	id         int32
	prev, next int // indices; -1 at the ends
}

// candidate is an adjacent pair whose concatenation is a piece.
type candidate struct {
	score       float32
	left, right int   // symbol indices
	lid, rid    int32 // their ids when the candidate was made
	merged      int32
}

// candidates is a binary max-heap of candidate pairs by score, the
// leftmost first among equal scores: llama2.c's choice, which scans from the
// left for a strictly higher score. Symbol indices grow from left to right,
// and a merge keeps the left one.
type candidates []candidate

func (h candidates) before(i, j int) bool {
	if h[i].score != h[j].score {
		return h[i].score > h[j].score
	}
	return h[i].left < h[j].left
}

func (h *candidates) push(c candidate) {
	*h = append(*h, c)
	q := *h
	for i := len(q) - 1; i > 0; {
		parent := (i - 1) / 2
		if !q.before(i, parent) {
			break
		}
		q[i], q[parent] = q[parent], q[i]
		i = parent
	}
}

func (h *candidates) pop() candidate {
	q := *h
	top := q[0]
	last := len(q) - 1
	q[0] = q[last]
	q = q[:last]
	for i := 0; ; {
		best, l, r := i, 2*i+1, 2*i+2
		if l < len(q) && q.before(l, best) {
			best = l
		}
		if r < len(q) && q.before(r, best) {
			best = r
		}
		if best == i {
			break
		}
		q[i], q[best] = q[best], q[i]
		i = best
	}
	*h = q
	return top
}

// merge applies llama2.c's merges to ids in place and returns the result.
// It gives what llama2.c's loop gives (merge the best pair, rescan, until
// no pair is a piece) with a heap of candidate pairs, checked for staleness
// when taken.
func (t *Tokenizer) merge(ids []int32) []int32 {
	syms := make([]symbol, len(ids))
	for i, id := range ids {
		syms[i] = symbol{id: id, prev: i - 1, next: i + 1}
	}
	syms[len(syms)-1].next = -1
	h := make(candidates, 0, len(ids))
	consider := func(left int) {
		right := syms[left].next
		if right < 0 {
			return
		}
		a, b := syms[left].id, syms[right].id
		if id, ok := t.pairs[pairKey(a, b)]; ok {
			h.push(candidate{score: t.scores[id], left: left, right: right, lid: a, rid: b, merged: id})
		}
	}
	for i := range syms[:len(syms)-1] {
		consider(i)
	}
	for len(h) > 0 {
		c := h.pop()
		l, r := &syms[c.left], &syms[c.right]
		if l.next != c.right || l.id != c.lid || r.id != c.rid {
			continue // one of them merged since
		}
		l.id = c.merged
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = c.left
		}
		r.id = -1
		if l.prev >= 0 {
			consider(l.prev)
		}
		consider(c.left)
	}
	ids = ids[:0]
	for i := 0; i >= 0; i = syms[i].next {
		ids = append(ids, syms[i].id)
	}
	return ids
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// pairMerges returns, for each pair of ids whose pieces concatenate to a
// piece that may be merged (one scoring above noMerge), the id of that
// piece: the merges of llama2.c's loop, which looks the concatenation up by
// its text.
func (t *Tokenizer) pairMerges() map[uint64]int32 {
	byPiece := make(map[string][]int32, len(t.pieces))
	for id, p := range t.pieces {
		byPiece[string(p)] = append(byPiece[string(p)], int32(id))
	}
	pairs := map[uint64]int32{}
	for _, p := range t.pieces {
		merged := t.ids[string(p)]
		if !(t.scores[merged] > noMerge) {
			continue
		}
		// Every split of the piece, empty halves too: a piece "" (which no
		// real vocabulary has) concatenates to its neighbour.
		for k := 0; k <= len(p); k++ {
			for _, a := range byPiece[string(p[:k])] {
				for _, b := range byPiece[string(p[k:])] {
					pairs[pairKey(a, b)] = merged
				}
			}
		}
	}
	return pairs
}

// TokenBytes returns the bytes token id stands for: a byte token's byte,
// nothing for BOS and EOS (and for ids outside the vocabulary), else its
// piece. A character outside the vocabulary comes as several byte tokens,
// each part of its UTF-8 encoding. The slice must not be modified.
func (t *Tokenizer) TokenBytes(id int32) []byte {
	if id < 0 || int(id) >= len(t.text) {
		return nil
	}
	return t.text[id]
}

// TokenBytesAfter returns the bytes of id when it follows prev: as
// TokenBytes, less a leading space right after BOS (SentencePiece's
// decoder drops the dummy prefix it added).
func (t *Tokenizer) TokenBytesAfter(prev, id int32) []byte {
	b := t.TokenBytes(id)
	if prev == BOS && len(b) > 0 && b[0] == ' ' {
		return b[1:]
	}
	return b
}

// Decode returns the text of ids as llama2.c prints it: each token's bytes
// after the one before it (TokenBytesAfter). Ids outside the vocabulary are
// left out. The text may hold invalid UTF-8 where byte tokens do not make
// whole characters.
func (t *Tokenizer) Decode(ids []int32) string {
	var b []byte
	prev := int32(-1)
	for _, id := range ids {
		b = append(b, t.TokenBytesAfter(prev, id)...)
		prev = id
	}
	return string(b)
}

// SizeError says that a tokenizer's vocabulary is not its checkpoint's.
type SizeError struct {
	Tokenizer, Checkpoint int
}

func (e *SizeError) Error() string {
	return "the tokenizer has " + strconv.Itoa(e.Tokenizer) + " tokens and the checkpoint's vocabulary " +
		strconv.Itoa(e.Checkpoint) + ": use the tokenizer the checkpoint was trained with"
}

// CheckVocab returns a *SizeError unless the tokenizer has vocab tokens.
func (t *Tokenizer) CheckVocab(vocab int) error {
	if len(t.pieces) != vocab {
		return &SizeError{Tokenizer: len(t.pieces), Checkpoint: vocab}
	}
	return nil
}

// readFile reads a tokenizer file of at most MaxFileSize bytes.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if len(b) > MaxFileSize {
		return nil, fmt.Errorf("tokenizer %s: larger than %d MiB, more than any llama2.c tokenizer; is it the checkpoint?", path, MaxFileSize>>20)
	}
	return b, nil
}
