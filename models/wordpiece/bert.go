package wordpiece

import (
	_ "embed"
	"strings"
	"sync"
)

// vocab.txt is the WordPiece vocabulary of bert-base-uncased (30522 tokens,
// line n = id n), extracted from the tokenizer.json of all-MiniLM-L6-v2, which
// uses that vocabulary. Copyright 2018 The Google AI Language Team Authors,
// licensed under the Apache License, Version 2.0; see NOTICE.
//
//go:generate go run ./internal/genvocab -o vocab.txt
//go:embed vocab.txt
var bertBaseUncasedVocab string

var bertBaseUncased = sync.OnceValue(func() *Tokenizer {
	t, err := New(strings.Split(strings.TrimSuffix(bertBaseUncasedVocab, "\n"), "\n"),
		Options{Lowercase: true, StripAccents: true})
	if err != nil {
		panic("wordpiece: embedded bert-base-uncased vocabulary: " + err.Error())
	}
	return t
})

// BertBaseUncased returns the tokenizer of bert-base-uncased: its embedded
// vocabulary, lower-casing and accent stripping. The vocabulary is parsed on
// the first call (a few milliseconds) and the tokenizer shared afterwards.
func BertBaseUncased() *Tokenizer { return bertBaseUncased() }
