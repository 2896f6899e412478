package wordpiece

import (
	"unicode"
	"unicode/utf8"
)

// Character classes of the BERT normalizer and pre-tokenizer.

// ASCII classes, by byte.
const (
	asciiWord    = iota // part of a word
	asciiSpace          // ends a word: \t \n \r and space
	asciiPunct          // a word of its own: 33-47, 58-64, 91-96, 123-126
	asciiControl        // removed: the other C0 controls and DEL
)

var asciiClasses = func() (c [128]uint8) {
	for b := range c {
		switch {
		case b == '\t' || b == '\n' || b == '\r' || b == ' ':
			c[b] = asciiSpace
		case b < ' ' || b == 0x7f:
			c[b] = asciiControl
		case '!' <= b && b <= '/' || ':' <= b && b <= '@' || '[' <= b && b <= '`' || '{' <= b && b <= '~':
			c[b] = asciiPunct
		}
	}
	return c
}()

// HuggingFace's tokenizers classify characters by the general categories of
// Unicode 8.0 (mn8, p8, cf8 in unicode8.go), white space and case by today's.
//
//go:generate go run ./internal/genunicode8 -o unicode8.go

// isRemoved reports whether the clean-up step drops r: U+FFFD (which also
// stands for invalid UTF-8), control (Cc), format (Cf) and private-use (Co)
// characters.
func isRemoved(r rune) bool {
	return r == unicode.ReplacementChar || unicode.In(r, unicode.Cc, cf8, unicode.Co)
}

// isPunct reports whether r is a word of its own.
func isPunct(r rune) bool {
	if r < utf8.RuneSelf {
		return asciiClasses[r] == asciiPunct
	}
	return unicode.Is(p8, r)
}

// isCJK reports whether r is in one of the CJK ideograph blocks that BERT
// makes words of their own (not Hangul, Hiragana or Katakana, which are
// written with spaces). The ranges are HuggingFace's, which leave out
// U+2B820–U+2B91F where Google's original BERT code has them.
func isCJK(r rune) bool {
	return 0x4E00 <= r && r <= 0x9FFF ||
		0x3400 <= r && r <= 0x4DBF ||
		0x20000 <= r && r <= 0x2A6DF ||
		0x2A700 <= r && r <= 0x2B73F ||
		0x2B740 <= r && r <= 0x2B81F ||
		0x2B920 <= r && r <= 0x2CEAF ||
		0xF900 <= r && r <= 0xFAFF ||
		0x2F800 <= r && r <= 0x2FA1F
}

// Hangul syllables decompose (NFD) algorithmically into conjoining jamo.
const (
	hangulBase  = 0xAC00
	hangulCount = 11172
	jamoL       = 0x1100
	jamoV       = 0x1161
	jamoT       = 0x11A7
	jamoVCount  = 21
	jamoTCount  = 28
)
