package generate

import (
	"context"
	"io"
	"sync"
	"time"
)

// FinishReason says why a sequence ended, in OpenAI's words.
type FinishReason string

const (
	// Stop: EOS, or one of the request's stop strings.
	Stop FinishReason = "stop"
	// Length: max tokens, or the model's context.
	Length FinishReason = "length"
)

// Token is one generated token as a stream delivers it.
type Token struct {
	ID int32
	// Text is the text this token releases: usually its own bytes, but
	// bytes that may still turn out to be part of a stop string or of a
	// UTF-8 character are held back and released with a later token, so
	// Text may be empty. A stop string and what follows it are never
	// released.
	Text string
	// Finish is set on the last token of the sequence, and only there.
	Finish FinishReason
}

// Timing describes how a sequence started. It is known once the first
// token is delivered.
type Timing struct {
	// Queue is the time from Generate to the start of the step that began
	// the sequence.
	Queue time.Duration
	// Batch is the number of sequences in the step that produced the first
	// token.
	Batch int
	// FirstToken is the time from Generate to the end of that step (time
	// to first token, as the engine sees it).
	FirstToken time.Duration
	// CachedTokens is the prompt tokens found in the prefix cache when the
	// sequence started (OpenAI's usage.prompt_tokens_details.cached_tokens):
	// their KV was reused, not computed.
	CachedTokens int
}

// Result is the outcome of a sequence that finished.
type Result struct {
	Finish           FinishReason
	PromptTokens     int
	CompletionTokens int
	Timing
	// Preemptions counts how often the sequence was preempted and
	// recomputed.
	Preemptions int
}

// Stream delivers the tokens of one sequence. The engine never waits for its
// reader: it holds at most Config.StreamBuffer tokens the reader has not
// taken, and cuts the sequence (ErrSlowReader) when the reader falls further
// behind. A Stream is read by one goroutine.
type Stream struct {
	notify chan struct{} // capacity 1: something was added
	limit  int

	mu      sync.Mutex
	pending []Token
	timing  Timing
	ended   bool
	res     Result
	err     error
}

func newStream(limit int) *Stream {
	return &Stream{notify: make(chan struct{}, 1), limit: limit}
}

// Next blocks until the stream has tokens the caller has not taken, or has
// ended, or ctx is done. It appends the new tokens to buf and returns it.
// Once the sequence has ended and every token was taken it returns io.EOF
// when the sequence finished (see Result), or the error that ended it:
// ErrSlowReader, the request context's error, or a decoder failure.
func (s *Stream) Next(ctx context.Context, buf []Token) ([]Token, error) {
	for {
		s.mu.Lock()
		if len(s.pending) > 0 {
			buf = append(buf, s.pending...)
			clear(s.pending) // drop the strings
			s.pending = s.pending[:0]
			s.mu.Unlock()
			return buf, nil
		}
		if s.ended {
			err := s.err
			s.mu.Unlock()
			if err == nil {
				err = io.EOF
			}
			return buf, err
		}
		s.mu.Unlock()
		select {
		case <-s.notify:
		case <-ctx.Done():
			return buf, ctx.Err()
		}
	}
}

// Timing returns how the sequence started; zero until its first token was
// produced.
func (s *Stream) Timing() Timing {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.timing
}

// Result returns the outcome once Next has returned io.EOF.
func (s *Stream) Result() Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.res
}

// push adds a token; false when the reader is too far behind.
func (s *Stream) push(t Token, first *Timing) bool {
	s.mu.Lock()
	if len(s.pending) >= s.limit {
		s.mu.Unlock()
		return false
	}
	if first != nil {
		s.timing = *first
	}
	s.pending = append(s.pending, t)
	s.mu.Unlock()
	s.signal()
	return true
}

// end closes the stream with a result or an error.
func (s *Stream) end(res Result, err error) {
	s.mu.Lock()
	s.ended, s.res, s.err = true, res, err
	s.mu.Unlock()
	s.signal()
}

func (s *Stream) signal() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// Collect reads s to its end and returns the whole text, the result, and the
// error that ended it (nil when it finished).
func Collect(ctx context.Context, s *Stream) (string, Result, error) {
	var text []byte
	var buf []Token
	for {
		var err error
		buf, err = s.Next(ctx, buf[:0])
		for _, t := range buf {
			text = append(text, t.Text...)
		}
		if err == io.EOF {
			return string(text), s.Result(), nil
		}
		if err != nil {
			return string(text), Result{}, err
		}
	}
}
