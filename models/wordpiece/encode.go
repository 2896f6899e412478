package wordpiece

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// encoder is the state of one encoding: it normalizes and splits the text
// into words as it reads it, and turns each finished word into ids at once.
type encoder struct {
	t   *Tokenizer
	dst []int32
	// base is where the text's ids start in dst; limit is how many there may
	// be (-1: no limit).
	base, limit int
	truncated   bool
	// word is the normalized word being read, chars its length in runes. Past
	// t.maxChars runes the word is [UNK] and its bytes are no longer kept.
	word  []byte
	chars int
}

func (e *encoder) encode(text string) {
	t := e.t
	for i := 0; i < len(text) && !e.truncated; {
		c := text[i]
		if c >= utf8.RuneSelf {
			r, n := utf8.DecodeRuneInString(text[i:])
			e.rune(r, text[i:i+n])
			i += n
			continue
		}
		switch asciiClasses[c] {
		case asciiWord:
			if t.lower && 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			e.appendBytes(c)
		case asciiSpace:
			e.flush()
		case asciiPunct:
			e.flush()
			if c == '[' {
				if s, ok := t.specialAt(text[i:]); ok {
					e.emit(s.id)
					i += len(s.text)
					continue
				}
			}
			e.emit(t.asciiPunct[c])
		}
		// asciiControl: removed.
		i++
	}
	e.flush()
}

// rune handles one non-ASCII rune r, s being its UTF-8 encoding (or, for
// utf8.RuneError, one invalid byte).
func (e *encoder) rune(r rune, s string) {
	switch {
	case isRemoved(r):
	case unicode.Is(unicode.White_Space, r):
		e.flush()
	case isCJK(r):
		e.flush()
		e.normalize(r, s)
		e.flush()
	default:
		e.normalize(r, s)
	}
}

// normalize adds r to the word after accent stripping and lower-casing.
func (e *encoder) normalize(r rune, s string) {
	t := e.t
	if !t.strip {
		switch {
		case !t.lower:
		case r == 'İ': // the one character whose full lower case is two
			e.add('i')
			r = '\u0307'
		default:
			r = unicode.ToLower(r)
		}
		e.add(r)
		return
	}
	if hangulBase <= r && r < hangulBase+hangulCount {
		s := r - hangulBase
		e.add(jamoL + s/(jamoVCount*jamoTCount))
		e.add(jamoV + s%(jamoVCount*jamoTCount)/jamoTCount)
		if s%jamoTCount != 0 {
			e.add(jamoT + s%jamoTCount)
		}
		return
	}
	var d []byte
	p := norm.NFD.PropertiesString(s)
	if d = p.Decomposition(); d == nil {
		d = []byte(s)
	}
	for len(d) > 0 {
		r, n := utf8.DecodeRune(d)
		if unicode.Is(mn8, r) {
			d = d[n:]
			continue
		}
		if t.lower {
			r = unicode.ToLower(r)
		}
		if ccc := norm.NFD.Properties(d).CCC(); ccc != 0 {
			e.addMark(r, ccc)
		} else {
			e.add(r)
		}
		d = d[n:]
	}
}

// add adds a normalized rune: punctuation is a word of its own, white space
// ends the word, anything else extends it.
func (e *encoder) add(r rune) {
	switch {
	case isPunct(r):
		e.flush()
		e.appendRune(r)
		e.flush()
	case unicode.Is(unicode.White_Space, r):
		e.flush()
	default:
		e.appendRune(r)
	}
}

// addMark adds a combining mark that survives accent stripping (canonical
// class ccc > 0) where canonical ordering puts it: before the marks of higher
// class that directly precede it.
func (e *encoder) addMark(r rune, ccc uint8) {
	at := len(e.word)
	for at > 0 && e.chars <= e.t.maxChars {
		_, n := utf8.DecodeLastRune(e.word[:at])
		if norm.NFD.Properties(e.word[at-n:]).CCC() <= ccc {
			break
		}
		at -= n
	}
	tail := len(e.word) - at
	e.appendRune(r)
	if e.chars > e.t.maxChars || tail == 0 {
		return
	}
	n := utf8.RuneLen(r)
	// Rotate r's bytes, now at the end, to position at.
	w := e.word[at:]
	for range n {
		b := w[len(w)-1]
		copy(w[1:], w[:len(w)-1])
		w[0] = b
	}
}

func (e *encoder) appendBytes(c byte) {
	e.chars++
	if e.chars <= e.t.maxChars {
		e.word = append(e.word, c)
	}
}

func (e *encoder) appendRune(r rune) {
	e.chars++
	if e.chars <= e.t.maxChars {
		e.word = utf8.AppendRune(e.word, r)
	}
}

// flush turns the word read so far into ids.
func (e *encoder) flush() {
	if e.chars == 0 || e.truncated {
		return
	}
	w, chars := e.word, e.chars
	e.word, e.chars = e.word[:0], 0
	if chars > e.t.maxChars {
		e.emit(e.t.unk)
		return
	}
	e.wordPiece(w)
}

// wordPiece appends the pieces of w: greedily the longest vocabulary entry
// from the left, continuation pieces from the "##" entries; [UNK] alone when
// some part of w matches no entry.
func (e *encoder) wordPiece(w []byte) {
	t := e.t
	mark := len(e.dst)
	for start := 0; start < len(w); {
		table, longest := t.words, t.maxWord
		if start > 0 {
			table, longest = t.pieces, t.maxPiece
		}
		end := min(len(w), start+longest)
		for ; end > start; end-- {
			if end < len(w) && !utf8.RuneStart(w[end]) {
				continue
			}
			if id, ok := table[string(w[start:end])]; ok {
				e.dst = append(e.dst, id)
				break
			}
		}
		if end == start {
			e.dst = e.dst[:mark]
			e.emit(t.unk)
			return
		}
		start = end
	}
	if e.limit >= 0 && len(e.dst)-e.base > e.limit {
		e.dst = e.dst[:e.base+e.limit]
		e.truncated = true
	}
}

// emit appends one id, or marks the encoding truncated when there is no room.
func (e *encoder) emit(id int32) {
	if e.limit >= 0 && len(e.dst)-e.base >= e.limit {
		e.truncated = true
		return
	}
	e.dst = append(e.dst, id)
}

// specialAt returns the special token s starts with, if any.
func (t *Tokenizer) specialAt(s string) (special, bool) {
	for _, sp := range t.specials {
		if strings.HasPrefix(s, sp.text) {
			return sp, true
		}
	}
	return special{}, false
}
