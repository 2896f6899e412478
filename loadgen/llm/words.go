package llm

import (
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"unicode"

	"github.com/inferhq/infer/loadgen/corpus"
	"github.com/inferhq/infer/models/bpe"
)

// The synthetic text of the prefix-caching workloads (shared prefixes,
// multi-turn sessions, trace replay): words drawn from a list of English
// words that GPT-2's tokenizer makes one token each, alone and after a
// space. Such words joined by spaces tokenise to exactly one token a word,
// and a text's tokens never merge across a word boundary (GPT-2's
// pre-tokenizer splits before every " word"), so that n words are n
// tokens, and texts that share their first k words share their first k
// tokens: the block structure a workload means is the one a GPT-2-family
// server caches. Other tokenizers count differently, but equal word
// prefixes still give equal token prefixes.

var (
	wordsOnce sync.Once
	wordList  []string
)

// words returns the single-token words, from the built-in corpus.
func words() []string {
	wordsOnce.Do(func() {
		tok := bpe.GPT2()
		seen := map[string]bool{}
		for _, s := range corpus.Masked() {
			for _, w := range strings.FieldsFunc(s, func(r rune) bool { return !unicode.IsLetter(r) || r > unicode.MaxASCII }) {
				w = strings.ToLower(w)
				if seen[w] {
					continue
				}
				seen[w] = true
				if tok.Count(w) == 1 && tok.Count(" "+w) == 1 {
					wordList = append(wordList, w)
				}
			}
		}
		slices.Sort(wordList)
	})
	return wordList
}

// appendWords appends n words drawn by r to b, each after a space when b
// is not empty.
func appendWords(b []byte, r *rand.Rand, n int) []byte {
	ws := words()
	for range n {
		if len(b) > 0 {
			b = append(b, ' ')
		}
		b = append(b, ws[r.IntN(len(ws))]...)
	}
	return b
}

// wordText returns n words drawn from the stream seeded by (seed, key):
// the same text for the same seed and key.
func wordText(seed, key uint64, n int) string {
	return string(appendWords(nil, rand.New(rand.NewPCG(seed, key)), n))
}
