// Package sentencepiece turns text into token ids with a SentencePiece
// unigram vocabulary: each piece has a score (a log probability), and a text
// is cut into the pieces whose scores sum highest (a Viterbi search over
// every way to cut it). It is written to give the ids of the JavaScript
// tokenizer of TensorFlow.js's Universal Sentence Encoder (also shipped in
// @energetic-ai/embeddings), the reference of the use-lite model, to the id:
//
//   - the text is normalised to NFKC, and when it is not empty "▁" (U+2581)
//     is put in front of it and in place of every ASCII space, so repeated
//     spaces stay repeated "▁" and other white space (tabs, newlines) stays as
//     it is;
//   - the search runs over code points; a code point that starts no piece
//     becomes the unknown piece (id 0, of score 0), and a run of unknown
//     pieces is reported once;
//   - the first reserved pieces (6 in the reference: unknown, <s>, </s> and
//     three extra ids) are never matched in text;
//   - where two ways to cut tie, the one whose last piece starts later wins;
//     a vocabulary entry whose score is null counts as 0, and when one text
//     of a vocabulary appears twice, its later entry is the one matched.
//
// The reference's search also takes a best score of exactly 0 to mean "none
// yet", so that a cut through an unknown piece (score 0) or a null-scored
// piece can replace a better one, and it counts a position that no piece
// ends at as reached with score 0, so that a cut from there (an unknown
// code point inside a longer piece) beats every real one. Encode does the
// same, so that the ids are the reference's on every input, not only on the
// common ones. (With the real vocabulary, which has every character of its
// pieces as a piece too, the second never happens.)
package sentencepiece

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Space is the piece character that stands for a space and starts a word.
const Space = string(spaceRune)

const spaceRune = '\u2581'

// Reserved is the number of leading vocabulary entries of the reference
// vocabulary that are never matched in text.
const Reserved = 6

// UnknownID is the id of a code point that starts no piece.
const UnknownID int32 = 0

// Limits of a vocabulary New accepts.
const (
	// MaxPieces is the most vocabulary entries.
	MaxPieces = 1 << 20
	// MaxPieceRunes is the longest piece, in code points.
	MaxPieceRunes = 256
)

// Piece is one vocabulary entry.
type Piece struct {
	Text  string
	Score float64
}

// Tokenizer encodes text into token ids. It is immutable after construction
// and safe for concurrent use.
type Tokenizer struct {
	pieces []Piece
	// back is the length of each piece in UTF-16 code units, by which the
	// reference steps back along the best cut (its JavaScript strings
	// count so); for pieces of the Basic Multilingual Plane it is their
	// length in code points.
	back []int
	ids  map[string]int32
	trie []node
	// inner holds the code points that some matchable piece holds after
	// its first; a code point outside it starts a piece of every cut.
	inner map[rune]bool
	// cuts: the walk back steps over each piece by its length in code
	// points (no piece is longer in UTF-16), so that a text can be cut
	// before any code point outside inner (see AppendEncode).
	cuts bool
}

// node is a node of the trie of matchable pieces; node 0 is the root.
type node struct {
	next  map[rune]int32
	id    int32 // the piece that ends here, or -1
	score float64
}

// New returns a tokenizer of pieces, the first reserved of which are never
// matched in text. Entry 0 is the unknown piece.
func New(pieces []Piece, reserved int) (*Tokenizer, error) {
	switch {
	case len(pieces) == 0:
		return nil, errors.New("sentencepiece: empty vocabulary")
	case len(pieces) > MaxPieces:
		return nil, fmt.Errorf("sentencepiece: %d pieces: at most %d", len(pieces), MaxPieces)
	case reserved < 0 || reserved > len(pieces):
		return nil, fmt.Errorf("sentencepiece: %d reserved pieces of %d", reserved, len(pieces))
	}
	t := &Tokenizer{
		pieces: append([]Piece(nil), pieces...),
		back:   make([]int, len(pieces)),
		ids:    make(map[string]int32, len(pieces)),
		trie:   []node{{id: -1}},
		inner:  map[rune]bool{},
		cuts:   true,
	}
	for i, p := range pieces {
		if !utf8.ValidString(p.Text) {
			return nil, fmt.Errorf("sentencepiece: piece %d is not valid UTF-8", i)
		}
		n := utf8.RuneCountInString(p.Text)
		if n > MaxPieceRunes {
			return nil, fmt.Errorf("sentencepiece: piece %d is %d code points long: at most %d", i, n, MaxPieceRunes)
		}
		for _, r := range p.Text {
			t.back[i] += utf16.RuneLen(r)
		}
		t.ids[p.Text] = int32(i) // a later duplicate wins, as in the trie
		if i >= reserved && p.Text != "" {
			t.insert(p.Text, int32(i), p.Score)
			_, size := utf8.DecodeRuneInString(p.Text)
			for _, r := range p.Text[size:] {
				t.inner[r] = true
			}
			t.cuts = t.cuts && t.back[i] == n
		}
	}
	if t.back[UnknownID] < 1 {
		return nil, errors.New("sentencepiece: the unknown piece (entry 0) is empty")
	}
	t.cuts = t.cuts && t.back[UnknownID] == 1 // the walk back steps over an unknown code point by this length
	return t, nil
}

func (t *Tokenizer) insert(text string, id int32, score float64) {
	at := int32(0)
	for _, r := range text {
		next, ok := t.trie[at].next[r]
		if !ok {
			next = int32(len(t.trie))
			t.trie = append(t.trie, node{id: -1})
			if t.trie[at].next == nil {
				t.trie[at].next = map[rune]int32{}
			}
			t.trie[at].next[r] = next
		}
		at = next
	}
	t.trie[at].id, t.trie[at].score = id, score
}

// ParseJSON reads a vocabulary in the JSON of TensorFlow.js's Universal
// Sentence Encoder (vocab.json): an array of [piece, score] pairs, the
// score a number or null (read as 0, as JavaScript adds it).
func ParseJSON(data []byte) ([]Piece, error) {
	var raw []json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("sentencepiece: vocabulary: %w", err)
	}
	if len(raw) > MaxPieces {
		return nil, fmt.Errorf("sentencepiece: vocabulary of %d pieces: at most %d", len(raw), MaxPieces)
	}
	pieces := make([]Piece, len(raw))
	for i, r := range raw {
		var pair []json.RawMessage
		if err := json.Unmarshal(r, &pair); err != nil || len(pair) != 2 {
			return nil, fmt.Errorf("sentencepiece: vocabulary entry %d: want [piece, score], got %.40s", i, r)
		}
		var score *float64
		if err := json.Unmarshal(pair[0], &pieces[i].Text); err != nil {
			return nil, fmt.Errorf("sentencepiece: vocabulary entry %d: piece: %w", i, err)
		}
		if err := json.Unmarshal(pair[1], &score); err != nil {
			return nil, fmt.Errorf("sentencepiece: vocabulary entry %d: score: %w", i, err)
		}
		if score != nil {
			pieces[i].Score = *score
		}
	}
	return pieces, nil
}

// Len returns the number of pieces; ids are below it.
func (t *Tokenizer) Len() int { return len(t.pieces) }

// Token returns the text of id, "" if there is none.
func (t *Tokenizer) Token(id int32) string {
	if id < 0 || int(id) >= len(t.pieces) {
		return ""
	}
	return t.pieces[id].Text
}

// ID returns the id of token (its later entry if the vocabulary has two).
func (t *Tokenizer) ID(token string) (int32, bool) {
	id, ok := t.ids[token]
	return id, ok
}

// Encode returns the ids of text; an empty text has none.
func (t *Tokenizer) Encode(text string) []int32 {
	ids, _ := t.AppendEncode(nil, text, 0)
	return ids
}

// AppendEncode appends the ids of text to dst, at most maxLen of them (the
// first; maxLen <= 0: no limit), and reports whether it truncated.
//
// The ids of a text's start can depend on what follows it, so Encode
// searches the whole text. With a maxLen, AppendEncode searches a prefix,
// doubled until it holds more than maxLen ids: a prefix that ends before a
// code point no piece holds after its first (a space, with the reference
// vocabulary, or a character no piece holds) has the first ids of the
// whole text, so the ids are exact and the cost of a long text is that of
// its first tokens. Where no such code point comes (a long run without
// spaces, or of unknown characters, which is one id however long), the
// search stops after SearchBytes (or 64 bytes per id of maxLen, if more)
// of the normalised text: the text is then truncated there, and its ids
// could, in principle, differ from the reference's in the last ids kept.
func (t *Tokenizer) AppendEncode(dst []int32, text string, maxLen int) ([]int32, bool) {
	s := norm.NFKC.String(text)
	base := len(dst)
	if maxLen <= 0 {
		return t.appendCut(dst, s), false
	}
	limit := max(SearchBytes, 64*maxLen)
	for size := 4 * maxLen; ; size *= 2 {
		end, capped := t.cut(s, size, limit)
		dst = t.appendCut(dst[:base], s[:end])
		if n := len(dst) - base; n > maxLen || end == len(s) || capped {
			return dst[:base+min(n, maxLen)], n > maxLen || end < len(s)
		}
	}
}

// SearchBytes is the least AppendEncode searches of a text without a place
// to cut it exactly.
const SearchBytes = 64 << 10

// cut returns where a search of at least the first size bytes of s ends:
// before the first code point from there that no piece holds after its
// first, so that no piece spans the cut; or, if there is none before limit
// bytes, at limit, capped.
func (t *Tokenizer) cut(s string, size, limit int) (end int, capped bool) {
	if size >= len(s) {
		return len(s), false
	}
	for size > 0 && !utf8.RuneStart(s[size]) {
		size--
	}
	for i, r := range s[size:] {
		at := size + i
		if at >= limit {
			return at, true
		}
		if r == ' ' {
			r = spaceRune
		}
		if t.cuts && !t.inner[r] {
			return at, false
		}
	}
	return len(s), false
}

// appendCut appends the ids of the best cut of s, already in NFKC.
func (t *Tokenizer) appendCut(dst []int32, s string) []int32 {
	if s == "" {
		return dst
	}
	symbols := []rune(Space + strings.ReplaceAll(s, " ", Space))
	n := len(symbols)
	// best[e] is the score of the best cut of symbols[:e] found so far, 0
	// meaning none (as in the reference), and words[e] the id of its last
	// piece. Pieces are visited by start, so that for each end they come
	// by ascending start, the reference's order, and best[s] is final when
	// read.
	best := make([]float64, n+1)
	words := make([]int32, n+1)
	for s := range n {
		at, matched := int32(0), false
		for e := s; e < n; e++ {
			next, ok := t.trie[at].next[symbols[e]]
			if !ok {
				break
			}
			at = next
			if nd := &t.trie[at]; nd.id >= 0 {
				matched = true
				relax(best, words, s, e+1, nd.id, nd.score)
			}
		}
		if !matched {
			relax(best, words, s, s+1, UnknownID, 0)
		}
	}
	// Walk back from the end; a run of unknown pieces is reported once.
	start := len(dst)
	prevUnknown := false
	for at := n; at > 0; at -= t.back[words[at]] {
		id := words[at]
		if !(prevUnknown && id == UnknownID) {
			dst = append(dst, id)
		}
		prevUnknown = id == UnknownID
	}
	slices.Reverse(dst[start:])
	return dst
}

// relax offers the piece id of score from s to e as the last piece of the
// best cut of symbols[:e], by the reference's rule: it replaces what is
// there if nothing is (a best score of 0) or if it scores at least as well.
func relax(best []float64, words []int32, s, e int, id int32, score float64) {
	if v := score + best[s]; best[e] == 0 || v >= best[e] {
		best[e], words[e] = v, id
	}
}
