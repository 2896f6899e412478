// Package wordpiece turns text into BERT token ids: the normalizer,
// pre-tokenizer, WordPiece model and [CLS]/[SEP] template of the HuggingFace
// BERT tokenizer, written for speed. BertBaseUncased is the real
// bert-base-uncased vocabulary, embedded.
//
// The steps, as HuggingFace's tokenizers library does them:
//
//   - special tokens written literally in the text ("[MASK]", "[CLS]", "[SEP]",
//     "[PAD]", "[UNK]", case-sensitive) become their ids;
//   - clean-up: NUL, U+FFFD (and so invalid UTF-8), control, format and
//     private-use characters are removed; every kind of white space separates
//     words;
//   - each CJK ideograph is a word of its own;
//   - with Options.StripAccents the text is decomposed (NFD) and non-spacing
//     marks dropped ("Ångström" → "angstrom"); with Options.Lowercase it is
//     lower-cased;
//   - words split at white space and around every punctuation character
//     (Unicode P* and ASCII symbols such as $ + < = > ^ ` | ~);
//   - each word becomes the longest vocabulary pieces, greedily from the left,
//     continuation pieces spelled "##…"; a word that cannot be split, or is
//     longer than Options.MaxWordChars characters, becomes [UNK].
//
// Character classes are HuggingFace's to the code point, including its use of
// Unicode 8.0 categories for marks, punctuation and format characters; the
// tests compare every Unicode scalar value and a corpus of a few thousand
// items with HuggingFace's output.
package wordpiece

import (
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

// Special token ids of bert-base-uncased.
const (
	PadID  int32 = 0
	UnkID  int32 = 100
	CLSID  int32 = 101
	SEPID  int32 = 102
	MaskID int32 = 103
)

// Options says how a Tokenizer normalizes text. The zero value is the cased
// BERT tokenizer: no lower-casing, accents kept, words of up to 100
// characters.
type Options struct {
	// Lowercase lower-cases the text (uncased models). Default false.
	Lowercase bool
	// StripAccents decomposes the text (Unicode NFD) and drops non-spacing
	// marks, so "café" is looked up as "cafe". Default false.
	StripAccents bool
	// MaxWordChars is the length, in characters after normalization, above
	// which a word becomes [UNK] without being split. Default 100.
	MaxWordChars int
}

const defaultMaxWordChars = 100

// specialTokens are matched literally in the raw text, as HuggingFace matches
// the added special tokens of BERT's tokenizer.json (normalized: false).
var specialTokens = [...]string{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}

// Tokenizer encodes text into token ids. It is immutable after construction
// and safe for concurrent use.
type Tokenizer struct {
	vocab []string
	// words holds every token by its text; pieces holds the continuation
	// tokens ("##ing") by their text without the "##".
	words, pieces map[string]int32
	// maxWord and maxPiece are the longest keys of words and pieces in
	// bytes: no longer prefix of a word can match.
	maxWord, maxPiece int
	// asciiPunct is the id of each ASCII punctuation character as a word.
	asciiPunct    [utf8.RuneSelf]int32
	specials      []special
	unk, cls, sep int32
	lower, strip  bool
	maxChars      int
	// wordBufs holds *[]byte buffers for the word being read.
	wordBufs sync.Pool
}

type special struct {
	text string
	id   int32
}

// New returns a tokenizer over vocab, where vocab[i] is the token with id i.
// The vocabulary must hold [UNK], [CLS] and [SEP], each token once.
func New(vocab []string, opts Options) (*Tokenizer, error) {
	if len(vocab) > 1<<31-1 {
		return nil, fmt.Errorf("vocabulary of %d tokens: ids must fit in int32", len(vocab))
	}
	if opts.MaxWordChars < 0 {
		return nil, fmt.Errorf("max word chars %d: must not be negative", opts.MaxWordChars)
	}
	t := &Tokenizer{
		vocab:    vocab,
		words:    make(map[string]int32, len(vocab)),
		pieces:   make(map[string]int32, len(vocab)/4),
		lower:    opts.Lowercase,
		strip:    opts.StripAccents,
		maxChars: opts.MaxWordChars,
	}
	if t.maxChars == 0 {
		t.maxChars = defaultMaxWordChars
	}
	for i, tok := range vocab {
		if tok == "" {
			return nil, fmt.Errorf("token %d is empty", i)
		}
		if j, dup := t.words[tok]; dup {
			return nil, fmt.Errorf("token %q has ids %d and %d", tok, j, i)
		}
		t.words[tok] = int32(i)
		t.maxWord = max(t.maxWord, len(tok))
		if p, ok := strings.CutPrefix(tok, "##"); ok && p != "" {
			t.pieces[p] = int32(i)
			t.maxPiece = max(t.maxPiece, len(p))
		}
	}
	var missing []string
	for _, s := range specialTokens {
		if id, ok := t.words[s]; ok {
			t.specials = append(t.specials, special{s, id})
		}
	}
	for _, s := range []struct {
		text string
		id   *int32
	}{{"[UNK]", &t.unk}, {"[CLS]", &t.cls}, {"[SEP]", &t.sep}} {
		id, ok := t.words[s.text]
		if !ok {
			missing = append(missing, s.text)
		}
		*s.id = id
	}
	if missing != nil {
		return nil, fmt.Errorf("vocabulary lacks %s", strings.Join(missing, ", "))
	}
	for c := range t.asciiPunct {
		t.asciiPunct[c] = t.unk
		if id, ok := t.words[string(rune(c))]; ok {
			t.asciiPunct[c] = id
		}
	}
	return t, nil
}

// VocabSize returns the number of tokens in the vocabulary.
func (t *Tokenizer) VocabSize() int { return len(t.vocab) }

// Token returns the text of token id, or "" if id is out of range.
func (t *Tokenizer) Token(id int32) string {
	if id < 0 || int(id) >= len(t.vocab) {
		return ""
	}
	return t.vocab[id]
}

// ID returns the id of a token, spelled as in the vocabulary ("##ing" for a
// continuation piece).
func (t *Tokenizer) ID(token string) (int32, bool) {
	id, ok := t.words[token]
	return id, ok
}

// Encode returns the ids of [CLS] text [SEP]. When maxLen > 0 the result holds
// at most maxLen ids, specials included (maxLen below 2 counts as 2): a longer
// encoding keeps its first maxLen-1 ids, then [SEP], and truncated is true.
func (t *Tokenizer) Encode(text string, maxLen int) (ids []int32, truncated bool) {
	return t.AppendEncode(nil, text, maxLen)
}

// AppendEncode is Encode appending to dst. It allocates nothing when dst has
// room for the ids (it keeps a word buffer per concurrent caller).
//
// Cost: linear in the length of the text up to the point of truncation, which
// ends the work; about 0.1 µs per token of English text (BenchmarkEncode).
func (t *Tokenizer) AppendEncode(dst []int32, text string, maxLen int) ([]int32, bool) {
	limit := -1
	if maxLen > 0 {
		limit = max(maxLen, 2) - 2
	}
	dst = append(dst, t.cls)
	buf, _ := t.wordBufs.Get().(*[]byte)
	if buf == nil {
		buf = new([]byte)
	}
	e := encoder{t: t, dst: dst, base: len(dst), limit: limit, word: (*buf)[:0]}
	e.encode(text)
	*buf = e.word[:0]
	t.wordBufs.Put(buf)
	return append(e.dst, t.sep), e.truncated
}
