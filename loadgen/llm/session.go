package llm

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// MultiTurn is a workload of chat sessions. Turn 1 of a session sends a
// user message of FirstTokens tokens; each later turn sends the
// conversation so far (every earlier message, and the server's actual
// answers) and a new user message of MessageTokens. ThinkTime passes
// between an answer and the next turn. Sessions run on a closed loop, one
// after another on each of its clients (RunConfig.Concurrency sessions at
// once); a session whose turn fails ends there.
type MultiTurn struct {
	Turns                      int
	ThinkTime                  time.Duration
	FirstTokens, MessageTokens Length
}

// Validate checks m's bounds.
func (m *MultiTurn) Validate() error {
	switch {
	case m.Turns < 1 || m.Turns > MaxTurns:
		return fmt.Errorf("turns %d: want 1 to %d", m.Turns, MaxTurns)
	case m.ThinkTime < 0 || m.ThinkTime > MaxThinkTime:
		return fmt.Errorf("think_time %v: want 0 to %v", m.ThinkTime, MaxThinkTime)
	case m.FirstTokens.IsZero():
		return errors.New("first_tokens: want a token count or a distribution")
	case m.MessageTokens.IsZero() && m.Turns > 1:
		return errors.New("message_tokens: want a token count or a distribution")
	}
	if err := m.FirstTokens.Validate(); err != nil {
		return fmt.Errorf("first_tokens: %w", err)
	}
	if err := m.MessageTokens.Validate(); err != nil {
		return fmt.Errorf("message_tokens: %w", err)
	}
	return nil
}

// SessionSource makes the sessions of a multi-turn workload. Run runs
// them on its closed loop; Request(i), as a Source, is session i's first
// turn.
type SessionSource interface {
	Source
	// Session returns session k (from 0): the same for the same k.
	Session(k uint64) *Session
	// ThinkTime is the pause between an answer and the next turn.
	ThinkTime() time.Duration
}

// sessions is MultiTurn's SessionSource.
type sessions struct{ cfg *PayloadConfig }

func newSessions(cfg *PayloadConfig) (*sessions, error) {
	if err := cfg.MultiTurn.Validate(); err != nil {
		return nil, fmt.Errorf("multi_turn: %w", err)
	}
	return &sessions{cfg: cfg}, nil
}

func (s *sessions) Session(k uint64) *Session { return &Session{cfg: s.cfg, k: k} }

func (s *sessions) ThinkTime() time.Duration { return s.cfg.MultiTurn.ThinkTime }

func (s *sessions) Request(i uint64) *Request { return s.Session(i).Next() }

// Session is one conversation of a multi-turn workload. It is used by one
// goroutine at a time.
type Session struct {
	cfg  *PayloadConfig
	k    uint64
	msgs []Message
	// turn is the turns sent; answered tells the last one's answer came.
	turn     int
	answered bool
	tokens   int // the client's count of the conversation's tokens
}

// Next returns the session's next turn: the conversation so far and a new
// user message. It returns nil after the last turn, and when the last
// turn has no answer (Answer was not called).
func (s *Session) Next() *Request {
	mt := s.cfg.MultiTurn
	if s.turn >= mt.Turns || (s.turn > 0 && !s.answered) {
		return nil
	}
	s.turn++
	s.answered = false
	// The turn's lengths and words are drawn from the session's and the
	// turn's own stream.
	key := uint64(s.turn) + uint64(MaxTurns+1)*s.k
	r := rand.New(rand.NewPCG(s.cfg.Seed, keySession+key))
	l := mt.MessageTokens
	if s.turn == 1 {
		l = mt.FirstTokens
	}
	n := l.Draw(r)
	out := s.cfg.outputTokens(r)
	s.msgs = append(s.msgs, Message{Role: "user", Content: string(appendWords(nil, r, n))})
	s.tokens += n
	var req *Request
	if s.cfg.API == Chat {
		req = s.cfg.request(s.msgs, out, s.tokens)
	} else {
		req = s.cfg.request(render(s.msgs), out, s.tokens)
	}
	req.Turn = s.turn
	req.Key = "session-" + strconv.FormatUint(s.k, 10) // its tenant, for a router's hash
	req.KeepText = true
	return req
}

// Answer records the server's answer to the last turn, which later turns
// carry.
func (s *Session) Answer(text string, tokens int) {
	s.msgs = append(s.msgs, Message{Role: "assistant", Content: text})
	s.tokens += tokens
	s.answered = true
}

// Turn returns the turns sent so far.
func (s *Session) Turn() int { return s.turn }

// Messages returns the conversation so far.
func (s *Session) Messages() []Message { return s.msgs }

// render writes a conversation as one completions prompt, as infer serve's
// chat template does: a "role: content" line per message, then
// "assistant:".
func render(msgs []Message) string {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString(m.Role)
		b.WriteString(": ")
		b.WriteString(m.Content)
		b.WriteByte('\n')
	}
	b.WriteString("assistant:")
	return b.String()
}
