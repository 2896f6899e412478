package llm

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/inferhq/infer/loadgen/corpus"
	"github.com/inferhq/infer/models/bpe"
)

// DefaultOutputTokens is the max_tokens of a payload that sets no output
// length and whose prompt has no reply to take it from.
const DefaultOutputTokens = 128

// Payload bounds.
const (
	// MaxPrompts bounds the prompts read from a file.
	MaxPrompts = 1 << 20
	// maxPromptLine bounds one line of a JSONL prompt file.
	maxPromptLine = 16 << 20
	// maxCachedPrompts bounds the prompts whose tokens are kept.
	maxCachedPrompts = 1 << 16
)

// Message is one chat message.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Prompt is one prompt of a prompt set: a text (completions' prompt, or
// chat's one user message), or chat messages; ReplyTokens is the length of
// a recorded reply (ShareGPT's), used as the output length when the
// payload sets none.
type Prompt struct {
	Text        string
	Messages    []Message
	ReplyTokens int
}

// PayloadConfig configures a Generator. Its fields map to scenario keys
// (payload.api, payload.prompt_tokens, payload.output_tokens,
// payload.ignore_eos, payload.prompts).
type PayloadConfig struct {
	API    API
	Model  string
	Stream bool // ask for a stream, with stream_options.include_usage
	// PromptTokens, when set, cuts (or extends with the next prompts) each
	// prompt to the drawn count of GPT-2 tokens: of the prompt text, or of
	// the last message of chat messages (the chat template and earlier
	// messages add to what the server counts). Unset: prompts as they are.
	PromptTokens Length
	// OutputTokens is sent as max_tokens. Unset: the prompt's recorded
	// reply length, else DefaultOutputTokens.
	OutputTokens Length
	// IgnoreEOS asks the server to generate exactly max_tokens (vLLM's,
	// TGI's and infer's "ignore_eos").
	IgnoreEOS bool
	// Prompts are the prompts to draw from; nil: the built-in corpus
	// (English sentences, one a prompt).
	Prompts []Prompt
	// Extra holds more body fields for every request ("temperature": 0);
	// it cannot override the ones above.
	Extra map[string]any
	// Seed makes the payloads reproducible: request i depends on Seed
	// and i only.
	Seed uint64

	// SharedPrefix, MultiTurn and Trace make a prefix-caching workload
	// (at most one; NewSource): its prompts replace Prompts and
	// PromptTokens, and Trace's lengths OutputTokens too.
	SharedPrefix *SharedPrefix
	MultiTurn    *MultiTurn
	Trace        *TraceReplay
}

// Generator makes a payload's requests. It is safe for concurrent use and
// deterministic: Request(i) is the same for the same config and i.
type Generator struct {
	cfg     PayloadConfig
	tok     *bpe.Tokenizer
	ids     []promptTokens // cached tokens per prompt
	builtin bool
}

// promptTokens are a prompt's tokens, alone and as a continuation (after
// a space: GPT-2 tokenises " word" as one token, so the joined text
// tokenises back the same).
type promptTokens struct {
	once       sync.Once
	ids, after []int32
}

// NewGenerator checks cfg and returns its generator.
func NewGenerator(cfg PayloadConfig) (*Generator, error) {
	if err := cfg.PromptTokens.Validate(); err != nil {
		return nil, fmt.Errorf("prompt_tokens: %w", err)
	}
	if err := cfg.OutputTokens.Validate(); err != nil {
		return nil, fmt.Errorf("output_tokens: %w", err)
	}
	g := &Generator{cfg: cfg, tok: bpe.GPT2()}
	if cfg.Prompts == nil {
		g.cfg.Prompts, g.builtin = builtinPrompts(), true
	}
	if len(g.cfg.Prompts) == 0 {
		return nil, errors.New("no prompts")
	}
	for k := range cfg.Extra {
		if reserved(k) {
			return nil, fmt.Errorf("extra body field %q: set by the payload itself", k)
		}
	}
	g.ids = make([]promptTokens, min(len(g.cfg.Prompts), maxCachedPrompts))
	return g, nil
}

// reserved reports whether a body field is the payload's own, which Extra
// cannot set.
func reserved(field string) bool {
	switch field {
	case "model", "prompt", "messages", "max_tokens", "stream", "stream_options", "ignore_eos":
		return true
	}
	return false
}

// builtinPrompts returns the built-in corpus's sentences, their masks
// filled with words, so that they read as plain English.
func builtinPrompts() []Prompt {
	fill := []string{"letter", "report", "garden", "river", "window", "story", "budget", "market", "song", "bridge", "meeting", "bicycle"}
	sents := corpus.Masked()
	out := make([]Prompt, len(sents))
	for i, s := range sents {
		k := i
		for strings.Contains(s, "[MASK]") {
			s = strings.Replace(s, "[MASK]", fill[k%len(fill)], 1)
			k += 5
		}
		out[i] = Prompt{Text: s}
	}
	return out
}

// Request makes request i.
func (g *Generator) Request(i uint64) *Request {
	r := rand.New(rand.NewPCG(g.cfg.Seed, i))
	pi := r.IntN(len(g.cfg.Prompts))
	p := &g.cfg.Prompts[pi]
	text, msgs := p.Text, p.Messages
	if len(msgs) > 0 {
		text = msgs[len(msgs)-1].Content
	}
	promptTokens := -1
	if !g.cfg.PromptTokens.IsZero() {
		n := g.cfg.PromptTokens.Draw(r)
		text = g.cut(pi, n)
		promptTokens = n
	}
	out := 0
	switch {
	case !g.cfg.OutputTokens.IsZero():
		out = g.cfg.OutputTokens.Draw(r)
	case p.ReplyTokens > 0:
		out = min(p.ReplyTokens, MaxLength)
	default:
		out = DefaultOutputTokens
	}

	if g.cfg.API == Chat {
		m := msgs
		if len(m) == 0 {
			m = []Message{{Role: "user", Content: text}}
		} else if promptTokens >= 0 {
			m = append(append([]Message{}, m[:len(m)-1]...), Message{Role: m[len(m)-1].Role, Content: text})
		}
		if promptTokens < 0 {
			promptTokens = 0
			for _, mm := range m {
				promptTokens += g.count(mm.Content)
			}
		}
		return g.cfg.request(m, out, promptTokens)
	}
	if len(msgs) > 0 && promptTokens < 0 {
		text = flatten(msgs)
	}
	if promptTokens < 0 {
		promptTokens = g.count(text)
	}
	return g.cfg.request(text, out, promptTokens)
}

// request makes a request of c's API with input as its prompt (a string,
// for completions) or messages (a []Message, for chat), asking for out
// tokens; promptTokens is the client's count of the prompt.
func (c *PayloadConfig) request(input any, out, promptTokens int) *Request {
	body := make(map[string]any, 8+len(c.Extra))
	for k, v := range c.Extra {
		body[k] = v
	}
	if c.Model != "" {
		body["model"] = c.Model
	}
	if c.API == Chat {
		body["messages"] = input
	} else {
		body["prompt"] = input
	}
	body["max_tokens"] = out
	if c.IgnoreEOS {
		body["ignore_eos"] = true
	}
	if c.Stream {
		body["stream"] = true
		body["stream_options"] = map[string]bool{"include_usage": true}
	}
	b, err := json.Marshal(body)
	if err != nil {
		// Only Extra can hold what JSON cannot encode; NewGenerator's
		// caller gave it.
		b, _ = json.Marshal(map[string]string{"error": err.Error()})
	}
	return &Request{API: c.API, Body: b, Stream: c.Stream, PromptTokens: promptTokens, MaxTokens: out}
}

// count counts the tokens of a text as GPT-2 does.
func (g *Generator) count(text string) int { return g.tok.Count(text) }

// tokens returns prompt i's tokens (of its text, or its last message),
// alone or as a continuation.
func (g *Generator) tokens(i int, after bool) []int32 {
	p := &g.cfg.Prompts[i]
	text := p.Text
	if len(p.Messages) > 0 {
		text = p.Messages[len(p.Messages)-1].Content
	}
	text = strings.TrimSpace(text)
	if i >= len(g.ids) {
		if after {
			return g.tok.Encode(" " + text)
		}
		return g.tok.Encode(text)
	}
	c := &g.ids[i]
	c.once.Do(func() { c.ids, c.after = g.tok.Encode(text), g.tok.Encode(" "+text) })
	if after {
		return c.after
	}
	return c.ids
}

// cut returns n tokens of text from prompt i on, extended with the next
// prompts (joined by a space) when it is shorter. Re-tokenising the cut
// text may give a token more or fewer at the edges.
func (g *Generator) cut(i, n int) string {
	ids := g.tokens(i, false)
	if len(ids) >= n {
		return validUTF8(g.tok.Decode(ids[:n]))
	}
	buf := make([]int32, 0, n)
	buf = append(buf, ids...)
	for j := i + 1; len(buf) < n; j++ {
		// " "+text is one token at least: the loop ends.
		next := g.tokens(j%len(g.cfg.Prompts), true)
		buf = append(buf, next[:min(len(next), n-len(buf))]...)
	}
	return validUTF8(g.tok.Decode(buf))
}

// validUTF8 drops an incomplete UTF-8 sequence a token cut left at the end.
func validUTF8(s string) string {
	for len(s) > 0 {
		r, size := utf8.DecodeLastRuneInString(s)
		if r != utf8.RuneError || size != 1 {
			break
		}
		s = s[:len(s)-1]
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// flatten writes chat messages as one completions prompt.
func flatten(msgs []Message) string {
	var b strings.Builder
	for i, m := range msgs {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(m.Role)
		b.WriteString(": ")
		b.WriteString(m.Content)
	}
	return b.String()
}

// PromptFileError is a bad record of a prompt file.
type PromptFileError struct {
	Line int // 1-based; for a JSON array, the record's index from 1
	Err  error
}

func (e *PromptFileError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }
func (e *PromptFileError) Unwrap() error { return e.Err }

// promptRecord is one record of a prompt file.
type promptRecord struct {
	Prompt        *string   `json:"prompt"`
	Messages      []Message `json:"messages"`
	Conversations []struct {
		From  string `json:"from"`
		Value string `json:"value"`
	} `json:"conversations"`
}

// ReadPromptsFile reads a prompt file; see ReadPrompts.
func ReadPromptsFile(path string) (prompts []Prompt, skipped int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	prompts, skipped, err = ReadPrompts(f)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", path, err)
	}
	return prompts, skipped, nil
}

// ReadPrompts reads prompts: JSON lines, each {"prompt": "…"},
// {"messages": [{"role", "content"}, …]} or ShareGPT's {"conversations":
// [{"from": "human", "value": …}, {"from": "gpt", …}, …]}, or a JSON
// array of such records (ShareGPT's own files). A ShareGPT record's
// prompt is its first human turn, and the reply after it gives
// ReplyTokens; records without a human turn are skipped and counted (the
// published sets have some), as are empty lines. Any other bad record is
// an error naming its line.
func ReadPrompts(r io.Reader) (prompts []Prompt, skipped int, err error) {
	br := bufio.NewReaderSize(r, 64<<10)
	first, err := firstByte(br)
	if err == io.EOF {
		return nil, 0, errors.New("no prompts")
	}
	if err != nil {
		return nil, 0, err
	}
	add := func(line int, rec *promptRecord) error {
		p, ok, err := promptOf(rec)
		switch {
		case err != nil:
			return &PromptFileError{Line: line, Err: err}
		case !ok:
			skipped++
		case len(prompts) >= MaxPrompts:
			return &PromptFileError{Line: line, Err: fmt.Errorf("more than %d prompts", MaxPrompts)}
		default:
			prompts = append(prompts, p)
		}
		return nil
	}
	if first == '[' {
		dec := json.NewDecoder(br)
		if _, err := dec.Token(); err != nil {
			return nil, 0, err
		}
		for i := 1; dec.More(); i++ {
			var rec promptRecord
			if err := dec.Decode(&rec); err != nil {
				return nil, 0, &PromptFileError{Line: i, Err: err}
			}
			if err := add(i, &rec); err != nil {
				return nil, 0, err
			}
		}
	} else {
		for line := 1; ; line++ {
			b, rerr := readBounded(br, maxPromptLine)
			if rerr != nil && rerr != io.EOF {
				return nil, 0, &PromptFileError{Line: line, Err: rerr}
			}
			if len(bytes.TrimSpace(b)) > 0 {
				var rec promptRecord
				if err := json.Unmarshal(b, &rec); err != nil {
					return nil, 0, &PromptFileError{Line: line, Err: err}
				}
				if err := add(line, &rec); err != nil {
					return nil, 0, err
				}
			}
			if rerr == io.EOF {
				break
			}
		}
	}
	if len(prompts) == 0 {
		return nil, skipped, fmt.Errorf("no prompts (%d records skipped)", skipped)
	}
	return prompts, skipped, nil
}

// promptOf turns a record into a prompt; ok is false for a ShareGPT record
// without a human turn.
func promptOf(rec *promptRecord) (p Prompt, ok bool, err error) {
	n := 0
	if rec.Prompt != nil {
		n++
	}
	if rec.Messages != nil {
		n++
	}
	if rec.Conversations != nil {
		n++
	}
	if n != 1 {
		return p, false, errors.New(`want exactly one of "prompt", "messages" and "conversations"`)
	}
	switch {
	case rec.Prompt != nil:
		return Prompt{Text: *rec.Prompt}, true, nil
	case rec.Messages != nil:
		if len(rec.Messages) == 0 {
			return p, false, errors.New("empty messages")
		}
		for i, m := range rec.Messages {
			if m.Role == "" {
				return p, false, fmt.Errorf("message %d has no role", i)
			}
		}
		return Prompt{Messages: rec.Messages}, true, nil
	}
	for i, turn := range rec.Conversations {
		if turn.From != "human" && turn.From != "user" {
			continue
		}
		p.Text = turn.Value
		if i+1 < len(rec.Conversations) {
			p.ReplyTokens = bpe.GPT2().Count(rec.Conversations[i+1].Value)
		}
		return p, p.Text != "", nil
	}
	return p, false, nil
}

// firstByte skips spaces and a byte-order mark and returns the next byte,
// without consuming it.
func firstByte(br *bufio.Reader) (byte, error) {
	for {
		b, err := br.Peek(1)
		if err != nil {
			return 0, err
		}
		switch b[0] {
		case ' ', '\t', '\r', '\n':
			_, _ = br.Discard(1)
			continue
		case 0xEF:
			if bom, err := br.Peek(3); err == nil && bom[1] == 0xBB && bom[2] == 0xBF {
				_, _ = br.Discard(3)
				continue
			}
		}
		return b[0], nil
	}
}
