package llm

import (
	"math"
	"strconv"
)

// chunk is what one OpenAI-style JSON answer says that timing needs: a
// streamed chunk of /v1/completions ("choices": [{"text": …}]) or of
// /v1/chat/completions ("choices": [{"delta": {"role", "content", …}}]),
// the usage chunk ("choices": [], "usage": {…}), a whole non-streamed
// answer ("choices": [{"message": {…}}] or [{"text": …}]), or an error
// ({"error": {"message": …}} as OpenAI, vLLM and Ollama send it,
// {"error": "…"} as TGI does, {"object": "error", "message": …} as older
// vLLM did).
//
// Keys are matched exactly and, as in encoding/json, a repeated key's
// last value wins. A value of an unexpected type counts as absent.
type chunk struct {
	// choices: the choices array is not empty.
	choices bool
	// content: some choice carries output: a non-empty text, content,
	// reasoning_content or reasoning, or non-empty tool_calls. A chunk
	// with only a role, or empty text, is not a token.
	content bool
	role    bool // some delta or message names a role
	finish  bool // some choice has a finish_reason
	// usage: usage.completion_tokens is a whole number ≥ 0; prompt is
	// usage.prompt_tokens, or -1; cached is
	// usage.prompt_tokens_details.cached_tokens, or -1.
	usage      bool
	completion int64
	prompt     int64
	cached     int64
	err        bool
	errMsg     []byte
	// text is the output text of the choices, in order (text, then
	// content, reasoning_content and reasoning of delta, then of message).
	text []byte

	scratch []byte  // decoded strings; spans index it
	s       scanner // kept for its key buffer
}

type span struct{ from, to int }

func (sp span) empty() bool { return sp.to == sp.from }

type deltaFields struct {
	content, reasoningContent, reasoning span
	role, toolCalls                      bool
}

func (d *deltaFields) output() bool {
	return !d.content.empty() || !d.reasoningContent.empty() || !d.reasoning.empty() || d.toolCalls
}

// parse reads data into c, reusing its buffers. It fails on anything
// encoding/json would reject, and on a value that is not an object.
func (c *chunk) parse(data []byte) error {
	*c = chunk{prompt: -1, cached: -1, errMsg: c.errMsg[:0], text: c.text[:0], scratch: c.scratch[:0],
		s: scanner{b: data, key: c.s.key[:0]}}
	s := &c.s
	var (
		errSet, objectIsError bool
		errMsg, topMessage    span
	)
	err := s.object(func(key []byte) error {
		switch string(key) {
		case "choices":
			return c.parseChoices(s)
		case "usage":
			return c.parseUsage(s)
		case "error":
			errSet, errMsg = false, span{}
			switch s.peek() {
			case '"':
				sp, err := c.str(s)
				errSet, errMsg = !sp.empty(), sp
				return err
			case '{':
				errSet = true
				return s.object(func(key []byte) error {
					if string(key) == "message" {
						var err error
						errMsg, err = c.optStr(s)
						return err
					}
					return s.skip()
				})
			}
			return s.skip()
		case "object":
			sp, err := c.optStr(s)
			objectIsError = string(c.scratch[sp.from:sp.to]) == "error"
			return err
		case "message":
			var err error
			topMessage, err = c.optStr(s)
			return err
		}
		return s.skip()
	})
	if err != nil {
		return err
	}
	if s.ws(); s.i != len(s.b) {
		return errJSON
	}
	switch {
	case errSet:
		c.err = true
		c.errMsg = append(c.errMsg, c.scratch[errMsg.from:errMsg.to]...)
	case objectIsError:
		c.err = true
		c.errMsg = append(c.errMsg, c.scratch[topMessage.from:topMessage.to]...)
	}
	return nil
}

// str decodes the string that is next into the scratch buffer.
func (c *chunk) str(s *scanner) (span, error) {
	from := len(c.scratch)
	var err error
	c.scratch, err = s.str(c.scratch, true)
	return span{from, len(c.scratch)}, err
}

// optStr decodes the next value if it is a string, or skips it and
// returns an empty span.
func (c *chunk) optStr(s *scanner) (span, error) {
	if s.peek() == '"' {
		return c.str(s)
	}
	return span{}, s.skip()
}

func (c *chunk) parseChoices(s *scanner) error {
	c.choices, c.content, c.role, c.finish = false, false, false, false
	c.text = c.text[:0]
	if s.peek() != '[' {
		return s.skip()
	}
	return s.array(func() error {
		c.choices = true
		if s.peek() != '{' {
			return s.skip()
		}
		var (
			text           span
			delta, message deltaFields
			finish         bool
		)
		err := s.object(func(key []byte) error {
			switch string(key) {
			case "text":
				var err error
				text, err = c.optStr(s)
				return err
			case "delta":
				return c.parseDelta(s, &delta)
			case "message":
				return c.parseDelta(s, &message)
			case "finish_reason":
				sp, err := c.optStr(s)
				finish = !sp.empty()
				return err
			}
			return s.skip()
		})
		if err != nil {
			return err
		}
		if !text.empty() || delta.output() || message.output() {
			c.content = true
		}
		c.role = c.role || delta.role || message.role
		c.finish = c.finish || finish
		for _, sp := range [...]span{text, delta.content, delta.reasoningContent, delta.reasoning,
			message.content, message.reasoningContent, message.reasoning} {
			c.text = append(c.text, c.scratch[sp.from:sp.to]...)
		}
		return nil
	})
}

func (c *chunk) parseDelta(s *scanner, d *deltaFields) error {
	*d = deltaFields{}
	if s.peek() != '{' {
		return s.skip()
	}
	return s.object(func(key []byte) error {
		var err error
		switch string(key) {
		case "content":
			d.content, err = c.optStr(s)
		case "reasoning_content":
			d.reasoningContent, err = c.optStr(s)
		case "reasoning":
			d.reasoning, err = c.optStr(s)
		case "role":
			var sp span
			sp, err = c.optStr(s)
			d.role = !sp.empty()
		case "tool_calls":
			d.toolCalls = false
			if s.peek() != '[' {
				return s.skip()
			}
			err = s.array(func() error {
				d.toolCalls = true
				return s.skip()
			})
		default:
			err = s.skip()
		}
		return err
	})
}

func (c *chunk) parseUsage(s *scanner) error {
	c.usage, c.completion, c.prompt, c.cached = false, 0, -1, -1
	if s.peek() != '{' {
		return s.skip()
	}
	return s.object(func(key []byte) error {
		switch string(key) {
		case "completion_tokens":
			n, ok, err := count(s)
			c.usage, c.completion = ok, n
			return err
		case "prompt_tokens":
			n, ok, err := count(s)
			c.prompt = -1
			if ok {
				c.prompt = n
			}
			return err
		case "prompt_tokens_details":
			c.cached = -1
			if s.peek() != '{' {
				return s.skip()
			}
			return s.object(func(key []byte) error {
				if string(key) != "cached_tokens" {
					return s.skip()
				}
				n, ok, err := count(s)
				c.cached = -1
				if ok {
					c.cached = n
				}
				return err
			})
		}
		return s.skip()
	})
}

// maxCount bounds a token count: beyond it a float64 is no longer exact.
const maxCount = 1 << 53

// count reads a token count: a number that is a whole value from 0 to
// 2^53 (ok false otherwise, or for a value that is not a number).
func count(s *scanner) (n int64, ok bool, err error) {
	switch c := s.peek(); {
	case c == '-' || (c >= '0' && c <= '9'):
	default:
		return 0, false, s.skip()
	}
	lit, err := s.num()
	if err != nil {
		return 0, false, err
	}
	if len(lit) <= 15 && lit[0] != '-' && (len(lit) == 1 || lit[0] != '0') {
		plain := true
		for _, d := range lit {
			if d < '0' || d > '9' {
				plain = false
				break
			}
			n = n*10 + int64(d-'0')
		}
		if plain { // the usual case, without strconv's allocation
			return n, true, nil
		}
	}
	f, perr := strconv.ParseFloat(string(lit), 64)
	if perr != nil || f < 0 || f > maxCount || f != math.Trunc(f) {
		return 0, false, nil
	}
	return int64(f), true, nil
}
