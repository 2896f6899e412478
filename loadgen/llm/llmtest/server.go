// Package llmtest has test doubles for LLM load tests: an OpenAI-compatible
// fake server with exact, known timing and the wire quirks of real servers
// (vLLM, TGI, llama.cpp, Ollama), and an in-memory listener so that a test
// can run client and server inside a testing/synctest bubble, where the
// fake server's clock is the bubble's and timings come out exact.
package llmtest

import (
	"encoding/json"
	"fmt"
	"hash/maphash"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inferhq/infer/loadgen/llm"
)

// Timing is when the fake server sends what, from the moment it has read a
// request: the first content chunk after FirstToken, then one every
// Interval; every DoubleEvery-th content chunk carries two tokens (as
// servers with speculative decoding or a coalescing detokenizer do).
type Timing struct {
	FirstToken  time.Duration // default 40ms
	Interval    time.Duration // default 8ms
	DoubleEvery int           // 0: every chunk carries one token
}

// Quirks are the departures from the most common wire form ("data: {…}\n\n"
// per chunk, a usage chunk when asked, then "data: [DONE]"), all of them
// seen in real servers.
type Quirks struct {
	NoSpace   bool   // "data:{…}" (TGI)
	EOL       string // line terminator: "\n" (default), "\r\n" or "\r"
	KeepAlive bool   // a ": keep-alive" comment and an empty ":" line before every chunk
	MultiLine bool   // every chunk's JSON split over two data lines
	EventType string // an "event:" field on every event, e.g. "message"
	NoDone    bool   // no data: [DONE] at the end (older TGI, some proxies)
	NoUsage   bool   // no usage, even when stream_options.include_usage asks
	// UsageInLast puts usage into the last content chunk instead of a
	// chunk of its own with empty choices (TGI, llama.cpp).
	UsageInLast bool
	// RoleFirst (chat) sends a role-only chunk ({"role": "assistant",
	// "content": ""}) at once, before any token: the chunk a naive client
	// takes for the first token.
	RoleFirst bool
	// RoleNull makes the role chunk's content null instead of "" (llama.cpp).
	RoleNull bool
	// RoleEvery (chat) sends the role in every content chunk (Ollama), and
	// no role-only chunk.
	RoleEvery bool
	// ErrorAfter, when > 0, ends the stream after that many content
	// chunks with an error in ErrorStyle.
	ErrorAfter int
	// ErrorStyle: "openai" (data: {"error": {"message": …}} then [DONE],
	// as vLLM and Ollama), "tgi" (data: {"error": "…", "error_type": …}),
	// "event" (event: error), "llamacpp" (an "error: {…}" line, which is
	// not even an SSE data field). Default "openai".
	ErrorStyle string
	// CutAfter, when > 0, drops the connection after that many content
	// chunks, mid-stream.
	CutAfter int
	// NotStreamed answers with one JSON body even when a stream is asked.
	NotStreamed bool
	// Status, when not 0 or 200, answers every request with it and an
	// OpenAI error body.
	Status int
}

// Config configures a Server.
type Config struct {
	Timing
	Quirks
	// Tokens is the output length of every answer; 0: the request's
	// max_tokens (16 when it has none).
	Tokens int
	// PromptTokens is the usage's prompt_tokens; 0: the prompt's words.
	PromptTokens int
	// Prefix emulates a prefix cache over the prompt's words (a chat's
	// message contents in order): an answer's usage says, as
	// prompt_tokens_details.cached_tokens, how many of its prompt's
	// leading words an earlier prompt began with.
	Prefix bool
	// PerUncached delays the first token by this much for each prompt
	// word not found cached (every word without Prefix), as a prefill
	// would.
	PerUncached time.Duration
	// Vary starts each answer's words at the request's number, so that
	// answers differ from one request to the next.
	Vary bool
	// Log keeps each request's prompt words and answer (Exchanges).
	Log bool
}

// maxTokens bounds an answer's length.
const maxTokens = 100000

// Server is an OpenAI-compatible fake: POST /v1/completions and
// /v1/chat/completions, streamed or not. Its output is words that are
// each one GPT-2 token, so a GPT-2 tokenizer counts them right.
type Server struct {
	cfg      Config
	requests atomic.Int64

	mu        sync.Mutex
	ttft, itl []time.Duration // measured at the writes, bounded
	cached    map[uint64]bool // Prefix: the hashes of every prompt's word prefixes
	seed      maphash.Seed
	log       []Exchange
}

// Exchange is a request the server read (Config.Log): its messages as
// "role: content" (a completion's prompt as one), and its answer's text.
type Exchange struct {
	Messages []string
	Answer   string
	At       time.Time // when the request was read
}

// Exchanges returns the requests logged so far (Config.Log), in the order
// they were read.
func (s *Server) Exchanges() []Exchange {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.log)
}

// maxPrefixWords bounds the words the emulated prefix cache holds.
const maxPrefixWords = 1 << 20

// lookup returns how many leading words of words an earlier prompt began
// with, and caches words' prefixes.
func (s *Server) lookup(words []string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cached == nil {
		s.cached, s.seed = make(map[uint64]bool), maphash.MakeSeed()
	}
	var h maphash.Hash
	h.SetSeed(s.seed)
	hit, missed := 0, false
	for _, w := range words {
		h.WriteString(w)
		h.WriteByte(0)
		k := h.Sum64()
		if !missed && s.cached[k] {
			hit++
		} else {
			missed = true
		}
		if len(s.cached) < maxPrefixWords {
			s.cached[k] = true
		}
	}
	return hit
}

// maxMeasured bounds the timings a Server keeps.
const maxMeasured = 1 << 18

// New returns a server of cfg.
func New(cfg Config) *Server {
	if cfg.FirstToken == 0 {
		cfg.FirstToken = 40 * time.Millisecond
	}
	if cfg.Interval == 0 {
		cfg.Interval = 8 * time.Millisecond
	}
	if cfg.EOL == "" {
		cfg.EOL = "\n"
	}
	if cfg.ErrorStyle == "" {
		cfg.ErrorStyle = "openai"
	}
	return &Server{cfg: cfg}
}

// Requests returns how many requests the server has read.
func (s *Server) Requests() int64 { return s.requests.Load() }

// Truth is what a client should measure for one answer.
type Truth struct {
	Tokens, Chunks  int
	TTFT, ITL, E2EL time.Duration
	TPOT            time.Duration // (E2EL − TTFT) / (Tokens − 1)
}

// Truth returns the timing of an answer of n tokens (after the server has
// read the request; the client's figures add the transfer).
func (c Config) Truth(n int) Truth {
	s := New(c) // for the defaults
	t := Truth{Tokens: n, Chunks: len(s.cfg.split(n)), TTFT: s.cfg.FirstToken, ITL: s.cfg.Interval}
	t.E2EL = t.TTFT + time.Duration(t.Chunks-1)*t.ITL
	if n > 1 {
		t.TPOT = (t.E2EL - t.TTFT) / time.Duration(n-1)
	}
	if c.NotStreamed {
		t.TTFT, t.ITL = t.E2EL, 0
	}
	return t
}

// split returns the tokens carried by each content chunk of an answer of
// n tokens.
func (c Config) split(n int) []int {
	var out []int
	for i := 0; n > 0; i++ {
		k := 1
		if c.DoubleEvery > 0 && (i+1)%c.DoubleEvery == 0 && n >= 2 {
			k = 2
		}
		out = append(out, k)
		n -= k
	}
	return out
}

// words are single GPT-2 tokens each (with their leading space).
var words = []string{" the", " of", " and", " to", " in", " is", " that", " for", " it", " was"}

// request is what the server reads of a request body.
type request struct {
	Model               string          `json:"model"`
	Prompt              json.RawMessage `json:"prompt"`
	Messages            []message       `json:"messages"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Stream              bool            `json:"stream"`
	StreamOptions       struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

type message struct {
	Role    string `json:"role"`
	Content any    `json:"content"`
}

// Measured is the timing the server achieved, taken when each content
// chunk had been written and flushed: the medians of the time to the
// first one and of the gaps between them. A loaded machine makes them
// later than Timing; a client's figures add the transfer to these.
type Measured struct {
	TTFTP50, ITLP50 time.Duration
	Answers, Gaps   int
}

// Measured returns the timing achieved so far.
func (s *Server) Measured() Measured {
	s.mu.Lock()
	defer s.mu.Unlock()
	med := func(v []time.Duration) time.Duration {
		if len(v) == 0 {
			return 0
		}
		c := slices.Clone(v)
		slices.Sort(c)
		if len(c)%2 == 1 {
			return c[len(c)/2]
		}
		return (c[len(c)/2-1] + c[len(c)/2]) / 2
	}
	return Measured{TTFTP50: med(s.ttft), ITLP50: med(s.itl), Answers: len(s.ttft), Gaps: len(s.itl)}
}

func (s *Server) measured(first bool, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if first && len(s.ttft) < maxMeasured {
		s.ttft = append(s.ttft, d)
	} else if !first && len(s.itl) < maxMeasured {
		s.itl = append(s.itl, d)
	}
}

// MeasuredPath serves Measured as JSON (GET), for a server in another
// process.
const MeasuredPath = "/fake/measured"

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	if r.URL.Path == MeasuredPath {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.Measured())
		return
	}
	var chat bool
	switch {
	case strings.HasSuffix(r.URL.Path, "/v1/chat/completions"):
		chat = true
	case strings.HasSuffix(r.URL.Path, "/v1/completions"):
	default:
		writeError(w, http.StatusNotFound, "no such endpoint: "+r.URL.Path)
		return
	}
	if r.Method != http.MethodPost {
		writeError(w, http.StatusMethodNotAllowed, "POST only")
		return
	}
	var req request
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "bad JSON: "+err.Error())
		return
	}
	s.requests.Add(1)
	if s.cfg.Status != 0 && s.cfg.Status != http.StatusOK {
		writeError(w, s.cfg.Status, "fake failure")
		return
	}
	prompt := ""
	switch {
	case chat && len(req.Messages) == 0:
		writeError(w, http.StatusBadRequest, "messages missing")
		return
	case chat:
		for _, m := range req.Messages {
			prompt += fmt.Sprint(m.Content) + " "
		}
	case len(req.Prompt) == 0:
		writeError(w, http.StatusBadRequest, "prompt missing")
		return
	default:
		prompt = string(req.Prompt)
	}
	n := s.cfg.Tokens
	if n == 0 {
		n = 16
		for _, v := range []*int{req.MaxTokens, req.MaxCompletionTokens} {
			if v != nil {
				n = *v
			}
		}
	}
	if n < 1 || n > maxTokens {
		writeError(w, http.StatusBadRequest, "max_tokens "+strconv.Itoa(n)+" out of [1, 100000]")
		return
	}
	seq := s.requests.Load()
	a := answer{s: s, w: w, r: r, start: start, chat: chat, model: req.Model,
		prompt: s.cfg.PromptTokens, split: s.cfg.split(n), tokens: n, cached: -1}
	words := strings.Fields(prompt)
	if a.prompt == 0 {
		a.prompt = len(words)
	}
	uncached := len(words)
	if s.cfg.Prefix {
		a.cached = s.lookup(words)
		uncached -= a.cached
	}
	a.delay = time.Duration(uncached) * s.cfg.PerUncached
	if s.cfg.Vary {
		a.offset = int(seq)
	}
	if s.cfg.Log {
		e := Exchange{Answer: a.answerText(), At: time.Now()}
		if chat {
			for _, m := range req.Messages {
				e.Messages = append(e.Messages, m.Role+": "+fmt.Sprint(m.Content))
			}
		} else {
			var p string
			_ = json.Unmarshal(req.Prompt, &p)
			e.Messages = []string{p}
		}
		s.mu.Lock()
		if len(s.log) < maxMeasured {
			s.log = append(s.log, e)
		}
		s.mu.Unlock()
	}
	a.modelJSON, _ = json.Marshal(req.Model)
	if !req.Stream || s.cfg.NotStreamed {
		a.whole()
		return
	}
	a.stream(req.StreamOptions.IncludeUsage && !s.cfg.NoUsage)
}

// answer is one answer being written.
type answer struct {
	s     *Server
	w     http.ResponseWriter
	r     *http.Request
	start time.Time
	chat  bool
	model string
	// modelJSON is model as a JSON string.
	modelJSON []byte
	prompt    int
	cached    int           // cached prompt words (Prefix), else -1
	delay     time.Duration // the first token's delay for uncached words
	offset    int           // Vary: the request's number
	split     []int
	tokens    int
	timer     *time.Timer
	rc        *http.ResponseController
	last      time.Duration // when the last content chunk was out
	buf       []byte
	data      []byte
}

// sleepUntil waits until at from the request's start; false if the client
// went away.
func (a *answer) sleepUntil(at time.Duration) bool {
	d := time.Until(a.start.Add(at))
	if d <= 0 {
		return a.r.Context().Err() == nil
	}
	if a.timer == nil {
		a.timer = time.NewTimer(d)
	} else {
		a.timer.Reset(d)
	}
	select {
	case <-a.timer.C:
		return true
	case <-a.r.Context().Done():
		return false
	}
}

func (a *answer) text(chunk, k int) string {
	var b strings.Builder
	for j := range k {
		b.WriteString(words[(a.offset+chunk+j)%len(words)])
	}
	return b.String()
}

// answerText is the whole answer's text.
func (a *answer) answerText() string {
	var b strings.Builder
	for i, k := range a.split {
		b.WriteString(a.text(i, k))
	}
	return b.String()
}

func (a *answer) usage() map[string]any {
	u := map[string]any{"prompt_tokens": a.prompt, "completion_tokens": a.tokens, "total_tokens": a.prompt + a.tokens}
	if a.cached >= 0 {
		u["prompt_tokens_details"] = map[string]int{"cached_tokens": a.cached}
	}
	return u
}

// whole writes a non-streamed answer once the whole generation is done.
func (a *answer) whole() {
	cfg := &a.s.cfg
	if !a.sleepUntil(a.delay + cfg.FirstToken + time.Duration(len(a.split)-1)*cfg.Interval) {
		return
	}
	var text strings.Builder
	text.WriteString(a.answerText())
	choice := map[string]any{"index": 0, "finish_reason": "length"}
	object := "text_completion"
	if a.chat {
		choice["message"] = map[string]any{"role": "assistant", "content": text.String()}
		object = "chat.completion"
	} else {
		choice["text"] = text.String()
	}
	body, _ := json.Marshal(map[string]any{"id": "fake-1", "object": object, "model": a.model,
		"choices": []any{choice}, "usage": a.usage()})
	a.w.Header().Set("Content-Type", "application/json")
	_, _ = a.w.Write(body)
}

// stream writes an event stream.
func (a *answer) stream(includeUsage bool) {
	cfg := &a.s.cfg
	enc := llm.Encoding{NoSpace: cfg.NoSpace, EOL: cfg.EOL}
	h := a.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	a.w.WriteHeader(http.StatusOK)
	a.rc = http.NewResponseController(a.w)
	_ = a.rc.Flush()
	object := "text_completion"
	if a.chat {
		object = "chat.completion.chunk"
	}
	send := func(v any) bool {
		data, _ := json.Marshal(v)
		return a.send(enc, data)
	}
	chunk := func(choices []any, usage map[string]any) map[string]any {
		m := map[string]any{"id": "fake-1", "object": object, "created": 1, "model": a.model, "choices": choices}
		if usage != nil {
			m["usage"] = usage
		}
		return m
	}
	if a.chat && cfg.RoleFirst && !cfg.RoleEvery {
		var content any = ""
		if cfg.RoleNull {
			content = nil
		}
		if !send(chunk([]any{map[string]any{"index": 0, "delta": map[string]any{"role": "assistant", "content": content}, "finish_reason": nil}}, nil)) {
			return
		}
	}
	for i, k := range a.split {
		if !a.sleepUntil(a.delay + cfg.FirstToken + time.Duration(i)*cfg.Interval) {
			return
		}
		if cfg.ErrorAfter > 0 && i == cfg.ErrorAfter {
			a.fail(enc)
			return
		}
		if cfg.CutAfter > 0 && i == cfg.CutAfter {
			panic(http.ErrAbortHandler) // drops the connection mid-stream
		}
		last := i == len(a.split)-1
		if !last || !cfg.UsageInLast {
			if !a.send(enc, a.contentChunk(object, i, k, cfg.RoleEvery || (i == 0 && !cfg.RoleFirst))) {
				return
			}
			a.wrote(i)
			continue
		}
		choice := map[string]any{"index": 0, "finish_reason": nil}
		if a.chat {
			delta := map[string]any{"content": a.text(i, k)}
			if cfg.RoleEvery || (i == 0 && !cfg.RoleFirst) {
				delta["role"] = "assistant"
			}
			choice["delta"] = delta
		} else {
			choice["text"] = a.text(i, k)
		}
		var usage map[string]any
		if last && cfg.UsageInLast {
			choice["finish_reason"] = "length"
			if includeUsage {
				usage = a.usage()
			}
		}
		if !send(chunk([]any{choice}, usage)) {
			return
		}
		a.wrote(i)
	}
	if !cfg.UsageInLast {
		finish := map[string]any{"index": 0, "finish_reason": "length"}
		if a.chat {
			finish["delta"] = map[string]any{}
		} else {
			finish["text"] = ""
		}
		if !send(chunk([]any{finish}, nil)) {
			return
		}
		if includeUsage && !send(chunk([]any{}, a.usage())) {
			return
		}
	}
	if !cfg.NoDone {
		a.send(enc, []byte("[DONE]"))
	}
}

// wrote notes that content chunk i is out.
func (a *answer) wrote(i int) {
	now := time.Since(a.start)
	if i == 0 {
		a.s.measured(true, now)
	} else {
		a.s.measured(false, now-a.last)
	}
	a.last = now
}

// fail ends a stream with an error in the configured style.
func (a *answer) fail(enc llm.Encoding) {
	const msg = "fake failure mid-stream"
	switch a.s.cfg.ErrorStyle {
	case "tgi":
		a.send(enc, []byte(`{"error":"`+msg+`","error_type":"generation"}`))
	case "event":
		a.buf = enc.AppendEvent(a.buf[:0], llm.Event{Type: []byte("error"), Data: []byte(`{"message":"` + msg + `"}`)})
		a.write()
	case "llamacpp":
		a.buf = append(a.buf[:0], `error: {"code":500,"message":"`+msg+`","type":"server_error"}`+a.s.cfg.EOL+a.s.cfg.EOL...)
		a.write()
	default:
		a.send(enc, []byte(`{"error":{"message":"`+msg+`","type":"InternalServerError","param":null,"code":500}}`))
		a.send(enc, []byte("[DONE]"))
	}
}

// send writes one data event, with the configured quirks, and flushes.
func (a *answer) send(enc llm.Encoding, data []byte) bool {
	cfg := &a.s.cfg
	a.buf = a.buf[:0]
	if cfg.KeepAlive {
		a.buf = enc.AppendComment(a.buf, "keep-alive")
		a.buf = enc.AppendComment(a.buf, "")
	}
	if cfg.MultiLine && len(data) > 2 && data[0] == '{' {
		// JSON allows a line break between tokens: after the first '{'.
		data = append([]byte("{\n"), data[1:]...)
	}
	ev := llm.Event{Data: data}
	if cfg.EventType != "" {
		ev.Type = []byte(cfg.EventType)
	}
	a.buf = enc.AppendEvent(a.buf, ev)
	return a.write()
}

func (a *answer) write() bool {
	if _, err := a.w.Write(a.buf); err != nil {
		return false
	}
	return a.rc.Flush() == nil
}

// contentChunk is the JSON of content chunk i (of k tokens), written
// without encoding/json: the fake must stay cheap at thousands of streams.
func (a *answer) contentChunk(object string, i, k int, role bool) []byte {
	b := append(a.data[:0], `{"id":"fake-1","object":"`...)
	b = append(b, object...)
	b = append(b, `","created":1,"model":`...)
	b = append(b, a.modelJSON...)
	b = append(b, `,"choices":[{"index":0,`...)
	if a.chat {
		b = append(b, `"delta":{`...)
		if role {
			b = append(b, `"role":"assistant",`...)
		}
		b = append(b, `"content":"`...)
	} else {
		b = append(b, `"text":"`...)
	}
	for j := range k {
		b = append(b, words[(a.offset+i+j)%len(words)]...)
	}
	b = append(b, '"')
	if a.chat {
		b = append(b, '}')
	}
	b = append(b, `,"logprobs":null,"finish_reason":null}]}`...)
	a.data = b
	return b
}

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": http.StatusText(code), "code": code}})
	_, _ = w.Write(b)
}
