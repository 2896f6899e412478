package generate

import (
	"bytes"
	"unicode/utf8"
)

// text turns a sequence's token bytes into released text: it finds stop
// strings across token boundaries and holds back what may still become one,
// and never releases half of a UTF-8 character while the next token may
// complete it.
type text struct {
	stops [][]byte
	held  []byte // bytes not yet released
}

// add appends a token's bytes. It returns the text to release now, and
// whether a stop string was found (then the text ends before it and the
// sequence must stop). With check false, stop strings are not looked for
// (before min_tokens).
func (t *text) add(b []byte, check bool) (string, bool) {
	t.held = append(t.held, b...)
	if !check || len(t.stops) == 0 {
		return t.release(len(t.held)), false
	}
	cut := -1
	for _, s := range t.stops {
		if i := bytes.Index(t.held, s); i >= 0 && (cut < 0 || i < cut) {
			cut = i
		}
	}
	if cut >= 0 {
		out := string(t.held[:cut])
		t.held = t.held[:0]
		return out, true
	}
	// Hold back the longest tail that begins a stop string.
	keep := 0
	for _, s := range t.stops {
		for k := min(len(s)-1, len(t.held)); k > keep; k-- {
			if bytes.HasSuffix(t.held, s[:k]) {
				keep = k
				break
			}
		}
	}
	return t.release(len(t.held) - keep), false
}

// release releases up to n held bytes, less an incomplete UTF-8 character
// at their end.
func (t *text) release(n int) string {
	n -= incompleteTail(t.held[:n])
	if n == 0 {
		return ""
	}
	out := string(t.held[:n])
	t.held = t.held[:copy(t.held, t.held[n:])]
	return out
}

// flush releases everything held: the sequence ended without a stop string.
func (t *text) flush() string {
	out := string(t.held)
	t.held = t.held[:0]
	return out
}

// incompleteTail returns the length of an incomplete UTF-8 sequence at the
// end of b (0 when b ends on a whole character or on invalid bytes, which
// no later byte can complete).
func incompleteTail(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		c := b[i]
		if c&0xC0 == 0x80 { // continuation byte
			continue
		}
		var need int
		switch {
		case c < 0x80:
			return 0
		case c&0xE0 == 0xC0:
			need = 2
		case c&0xF0 == 0xE0:
			need = 3
		case c&0xF8 == 0xF0:
			need = 4
		default:
			return 0
		}
		if have := len(b) - i; have < need {
			return have
		}
		return 0
	}
	return 0
}
