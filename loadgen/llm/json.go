package llm

import (
	"errors"
	"unicode/utf16"
	"unicode/utf8"
)

// A small validating JSON scanner, for reading the few fields of a
// streamed chunk without encoding/json's allocations: a stream of 200
// tokens is 200 chunks, and a thousand streams are a lot of chunks. It
// accepts exactly what encoding/json accepts (RFC 8259, nesting up to
// 10,000 deep) and decodes strings as encoding/json does (invalid UTF-8
// and lone surrogates become U+FFFD).

var errJSON = errors.New("invalid JSON")

// maxDepth is encoding/json's nesting limit.
const maxDepth = 10000

type scanner struct {
	b     []byte
	i     int
	depth int
	key   []byte // the current key, decoded
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek skips whitespace and returns the next byte, 0 at the end.
func (s *scanner) peek() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// object walks an object whose '{' is next; field is called with each key
// and must consume the value. The key is valid until field reads a value
// (it is decoded into a buffer all levels share).
func (s *scanner) object(field func(key []byte) error) error {
	return s.container('{', '}', func() error {
		if s.peek() != '"' {
			return errJSON
		}
		var err error
		s.key, err = s.str(s.key[:0], true)
		if err != nil {
			return err
		}
		if s.peek() != ':' {
			return errJSON
		}
		s.i++
		return field(s.key)
	})
}

// array walks an array whose '[' is next; elem must consume each element.
func (s *scanner) array(elem func() error) error {
	return s.container('[', ']', elem)
}

// container walks an object or array that opening (next) and closing delimit,
// no deeper than maxDepth; member must consume each member.
func (s *scanner) container(opening, closing byte, member func() error) error {
	if s.peek() != opening {
		return errJSON
	}
	if s.depth++; s.depth > maxDepth {
		return errJSON
	}
	s.i++
	if s.peek() == closing {
		s.i++
		s.depth--
		return nil
	}
	for {
		if err := member(); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case closing:
			s.i++
			s.depth--
			return nil
		default:
			return errJSON
		}
	}
}

// skip consumes any value.
func (s *scanner) skip() error {
	switch c := s.peek(); {
	case c == '{':
		return s.object(func([]byte) error { return s.skip() })
	case c == '[':
		return s.array(s.skip)
	case c == '"':
		_, err := s.str(nil, false)
		return err
	case c == 't':
		return s.lit("true")
	case c == 'f':
		return s.lit("false")
	case c == 'n':
		return s.lit("null")
	default:
		_, err := s.num()
		return err
	}
}

func (s *scanner) lit(word string) error {
	if len(s.b)-s.i < len(word) || string(s.b[s.i:s.i+len(word)]) != word {
		return errJSON
	}
	s.i += len(word)
	return nil
}

// num consumes a number and returns its literal.
func (s *scanner) num() ([]byte, error) {
	s.ws()
	b, start := s.b, s.i
	i := s.i
	digits := func() bool {
		j := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i > j
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case !digits():
		return nil, errJSON
	}
	if i < len(b) && b[i] == '.' {
		i++
		if !digits() {
			return nil, errJSON
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			return nil, errJSON
		}
	}
	s.i = i
	return b[start:i], nil
}

// str consumes a string whose '"' is next and, if keep, appends its
// decoded value to dst (else the string is only validated).
func (s *scanner) str(dst []byte, keep bool) ([]byte, error) {
	b := s.b
	i := s.i + 1
	for {
		// The fast path: a run of plain ASCII.
		j := i
		for j < len(b) && plain[b[j]] {
			j++
		}
		if keep {
			dst = append(dst, b[i:j]...)
		}
		i = j
		if i >= len(b) {
			return dst, errJSON
		}
		switch c := b[i]; {
		case c == '"':
			s.i = i + 1
			return dst, nil
		case c < 0x20:
			return dst, errJSON
		case c == '\\':
			if i+1 >= len(b) {
				return dst, errJSON
			}
			switch e := b[i+1]; e {
			case '"', '\\', '/':
				dst = appendIf(keep, dst, e)
			case 'b':
				dst = appendIf(keep, dst, '\b')
			case 'f':
				dst = appendIf(keep, dst, '\f')
			case 'n':
				dst = appendIf(keep, dst, '\n')
			case 'r':
				dst = appendIf(keep, dst, '\r')
			case 't':
				dst = appendIf(keep, dst, '\t')
			case 'u':
				r := hex4(b[i:])
				if r < 0 {
					return dst, errJSON
				}
				i += 6
				if utf16.IsSurrogate(r) {
					if r2 := hex4(b[i:]); r2 >= 0 {
						if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
							i += 6
							if keep {
								dst = utf8.AppendRune(dst, d)
							}
							continue
						}
					}
					r = utf8.RuneError
				}
				if keep {
					dst = utf8.AppendRune(dst, r)
				}
				continue
			default:
				return dst, errJSON
			}
			i += 2
		default: // c >= 0x80
			r, n := utf8.DecodeRune(b[i:])
			if keep {
				if r == utf8.RuneError && n == 1 {
					dst = utf8.AppendRune(dst, utf8.RuneError)
				} else {
					dst = append(dst, b[i:i+n]...)
				}
			}
			i += n
		}
	}
}

// plain[c] is whether byte c stands for itself in a JSON string: printable
// ASCII but the quote and the backslash.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func appendIf(keep bool, dst []byte, c byte) []byte {
	if keep {
		return append(dst, c)
	}
	return dst
}

// hex4 decodes the \uXXXX at the start of b, or returns -1.
func hex4(b []byte) rune {
	if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
		return -1
	}
	var r rune
	for _, c := range b[2:6] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}
