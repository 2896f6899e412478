package llm

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"
)

// The prefix-caching workloads: prompts that share what a server can
// reuse, as production load does (system prompts, few-shot examples, the
// earlier turns of a chat). Their text is synthetic (words.go), so that
// token counts and shared prefixes are exact for GPT-2-family tokenizers.

// Workload bounds.
const (
	// MaxGroups bounds shared_prefix's groups.
	MaxGroups = 1 << 16
	// MaxTurns bounds a session's turns.
	MaxTurns = 100
	// MaxThinkTime bounds the think time between turns.
	MaxThinkTime = time.Hour
)

// Group picks: how a shared_prefix request picks its group.
const (
	PickRoundRobin = "round_robin" // request i goes to group i mod G
	PickRandom     = "random"      // uniformly, seeded by the request's number
)

// SharedPrefix is inference-perf's shared-prefix workload: Groups groups,
// each with a prefix of PrefixTokens tokens of its own; every request is
// its group's prefix followed by a question of QuestionTokens tokens of its
// own. With the chat API the prefix is a system message and the question
// the user's; with completions they are one prompt.
type SharedPrefix struct {
	Groups         int
	PrefixTokens   int
	QuestionTokens Length
	// Pick is PickRoundRobin (the default) or PickRandom.
	Pick string
}

// Validate checks s's bounds.
func (s *SharedPrefix) Validate() error {
	switch {
	case s.Groups < 1 || s.Groups > MaxGroups:
		return fmt.Errorf("groups %d: want 1 to %d", s.Groups, MaxGroups)
	case s.PrefixTokens < 1 || s.PrefixTokens > MaxLength:
		return fmt.Errorf("prefix_tokens %d: want 1 to %d", s.PrefixTokens, MaxLength)
	case s.QuestionTokens.IsZero():
		return errors.New("question_tokens: want a token count or a distribution")
	case s.Pick != "" && s.Pick != PickRoundRobin && s.Pick != PickRandom:
		return fmt.Errorf("pick %q: want %s or %s", s.Pick, PickRoundRobin, PickRandom)
	}
	if err := s.QuestionTokens.Validate(); err != nil {
		return fmt.Errorf("question_tokens: %w", err)
	}
	return nil
}

// Key spaces of the word streams, so that prefixes, questions, session
// messages and trace blocks never draw the same words.
const (
	keyPrefix   = 1 << 60
	keyQuestion = 2 << 60
	keySession  = 3 << 60
	keyBlock    = 4 << 60
)

// sharedPrefix is a SharedPrefix's Source.
type sharedPrefix struct {
	cfg      *PayloadConfig
	prefixes []string // by group; nil when too large to keep
}

// maxPrefixBytes bounds the prefix texts held at once; beyond it they are
// made per request.
const maxPrefixBytes = 256 << 20

func newSharedPrefix(cfg *PayloadConfig) (*sharedPrefix, error) {
	s := cfg.SharedPrefix
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("shared_prefix: %w", err)
	}
	sp := &sharedPrefix{cfg: cfg}
	// About 7 bytes a word.
	if s.Groups*s.PrefixTokens*7 <= maxPrefixBytes {
		sp.prefixes = make([]string, s.Groups)
		for g := range sp.prefixes {
			sp.prefixes[g] = wordText(cfg.Seed, keyPrefix+uint64(g), s.PrefixTokens)
		}
	}
	return sp, nil
}

// Group returns the group of request i.
func (s *SharedPrefix) Group(seed, i uint64) int {
	if s.Pick == PickRandom {
		return rand.New(rand.NewPCG(seed^0x9e3779b97f4a7c15, i)).IntN(s.Groups)
	}
	return int(i % uint64(s.Groups))
}

func (sp *sharedPrefix) prefix(g int) string {
	if sp.prefixes != nil {
		return sp.prefixes[g]
	}
	return wordText(sp.cfg.Seed, keyPrefix+uint64(g), sp.cfg.SharedPrefix.PrefixTokens)
}

// Request makes request i: its group's prefix, then a question of its own.
func (sp *sharedPrefix) Request(i uint64) *Request {
	s := sp.cfg.SharedPrefix
	r := rand.New(rand.NewPCG(sp.cfg.Seed, i))
	q := s.QuestionTokens.Draw(r)
	out := sp.cfg.outputTokens(r)
	g := s.Group(sp.cfg.Seed, i)
	prefix := sp.prefix(g)
	question := wordText(sp.cfg.Seed, keyQuestion+i, q)
	var req *Request
	if sp.cfg.API == Chat {
		req = sp.cfg.request([]Message{{Role: "system", Content: prefix}, {Role: "user", Content: question}}, out, s.PrefixTokens+q)
	} else {
		req = sp.cfg.request(prefix+" "+question, out, s.PrefixTokens+q)
	}
	req.Key = "group-" + strconv.Itoa(g) // its tenant, for a router's hash
	return req
}

// outputTokens draws a request's max_tokens: OutputTokens, else
// DefaultOutputTokens.
func (c *PayloadConfig) outputTokens(r *rand.Rand) int {
	if c.OutputTokens.IsZero() {
		return DefaultOutputTokens
	}
	return c.OutputTokens.Draw(r)
}

// NewSource returns the requests of cfg: its workload's (SharedPrefix,
// Trace, MultiTurn), else a Generator's. A MultiTurn source is also a
// SessionSource.
func NewSource(cfg PayloadConfig) (Source, error) {
	n := 0
	for _, set := range []bool{cfg.SharedPrefix != nil, cfg.MultiTurn != nil, cfg.Trace != nil} {
		if set {
			n++
		}
	}
	if n > 1 {
		return nil, errors.New("shared_prefix, multi_turn and trace: choose one workload")
	}
	if n == 0 {
		return NewGenerator(cfg)
	}
	if err := cfg.OutputTokens.Validate(); err != nil {
		return nil, fmt.Errorf("output_tokens: %w", err)
	}
	for k := range cfg.Extra {
		if reserved(k) {
			return nil, fmt.Errorf("extra body field %q: set by the payload itself", k)
		}
	}
	switch {
	case cfg.SharedPrefix != nil:
		return newSharedPrefix(&cfg)
	case cfg.MultiTurn != nil:
		return newSessions(&cfg)
	}
	return newTraceSource(&cfg)
}
