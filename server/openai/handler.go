package openai

import (
	"context"
	"encoding/hex"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/inferhq/infer/server"
	"github.com/inferhq/infer/server/generate"
)

// handler serves one route prefix.
type handler struct {
	s  *Service
	ep *endpoint
}

// only answers 405 with Allow for any method but m (and HEAD for GET).
func (h *handler) only(m string, next http.Handler) http.Handler {
	return server.Methods(map[string]http.Handler{m: next}, refuseMethod)
}

func refuseMethod(w http.ResponseWriter, msg string) {
	writeError(w, invalid(http.StatusMethodNotAllowed, "", "method_not_allowed", "%s", msg))
}

type modelCard struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	MaxLen  int    `json:"max_model_len"`
}

func (h *handler) card() modelCard {
	return modelCard{ID: h.s.info.Name, Object: "model", Created: started.Unix(), OwnedBy: "infer", MaxLen: h.s.dinfo.Context}
}

var started = time.Now()

func (h *handler) models(w http.ResponseWriter, r *http.Request) {
	server.WriteJSON(w, http.StatusOK, struct {
		Object string      `json:"object"`
		Data   []modelCard `json:"data"`
	}{"list", []modelCard{h.card()}})
}

func (h *handler) model(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, h.ep.prefix+"/v1/models/")
	if name != h.s.info.Name {
		writeError(w, invalid(http.StatusNotFound, "model", "model_not_found", "model %q does not exist; this server serves %q", name, h.s.info.Name))
		return
	}
	server.WriteJSON(w, http.StatusOK, h.card())
}

func (h *handler) completions(chat bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived := time.Now()
		h.ep.m.inFlight.Inc()
		defer h.ep.m.inFlight.Dec()
		code := h.serve(w, r, chat, arrived)
		h.ep.m.request(code)
	})
}

// serve answers one request and returns its status for the metrics (499:
// the client went away; for a stream cut after it started, the status of
// the error event).
func (h *handler) serve(w http.ResponseWriter, r *http.Request, chat bool, arrived time.Time) int {
	fail := func(err error) int {
		e := h.errorOf(r.Context(), err)
		writeError(w, e)
		h.ep.m.failed(e)
		return e.Status
	}
	if h.s.draining.Load() {
		return fail(errDraining())
	}
	if !h.s.ready.Load() {
		return fail(errNotReady())
	}
	timeout, err := h.s.limits.RequestTimeout(r)
	if err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithDeadline(r.Context(), arrived.Add(timeout))
	defer cancel()
	body, err := h.s.limits.ReadBody(r)
	if err != nil {
		return fail(err)
	}
	p, err := h.parse(body.Bytes(), chat, timeout)
	body.Release()
	if err != nil {
		return fail(err)
	}
	stream, err := h.ep.engine.Generate(ctx, p.gen)
	if err != nil {
		return fail(err)
	}
	h.ep.m.promptTokens.Add(float64(len(p.gen.Prompt)))
	ans := &answer{h: h, p: p, id: newID(chat), created: arrived.Unix(), arrived: arrived}
	if p.stream {
		return ans.stream(ctx, w, stream)
	}
	text, res, err := generate.Collect(ctx, stream)
	if err != nil {
		return fail(err)
	}
	w.Header().Set("Server-Timing", serverTiming(res.Timing))
	server.WriteJSON(w, http.StatusOK, ans.whole(text, res))
	h.ep.m.finished(res, res.FirstToken, time.Since(arrived))
	return http.StatusOK
}

// newID is a response id: cmpl- or chatcmpl- and 24 random hex digits.
func newID(chat bool) string {
	var b [12]byte
	for i := range b {
		b[i] = byte(rand.Uint32())
	}
	if chat {
		return "chatcmpl-" + hex.EncodeToString(b[:])
	}
	return "cmpl-" + hex.EncodeToString(b[:])
}

// serverTiming is the Server-Timing header: queue time, time to first
// token, the step batch size at the first token, and the prompt tokens
// found in the prefix cache.
func serverTiming(t generate.Timing) string {
	b := server.AppendTiming(make([]byte, 0, 80), "queue", t.Queue, "ttft", t.FirstToken, t.Batch)
	b = append(b, ", cached;desc="...)
	return string(strconv.AppendInt(b, int64(t.CachedTokens), 10))
}

// answer is one response being written.
type answer struct {
	h       *handler
	p       *parsed
	id      string
	created int64
	arrived time.Time
}

type usage struct {
	PromptTokens        int           `json:"prompt_tokens"`
	CompletionTokens    int           `json:"completion_tokens"`
	TotalTokens         int           `json:"total_tokens"`
	PromptTokensDetails promptDetails `json:"prompt_tokens_details"`
}

// promptDetails is OpenAI's usage.prompt_tokens_details: the prompt tokens
// whose KV came from the prefix cache.
type promptDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

func usageOf(res generate.Result) usage {
	return usage{res.PromptTokens, res.CompletionTokens, res.PromptTokens + res.CompletionTokens, promptDetails{res.CachedTokens}}
}

type choice struct {
	Index        int      `json:"index"`
	Text         *string  `json:"text,omitempty"`
	Message      *chatMsg `json:"message,omitempty"`
	Logprobs     *int     `json:"logprobs"`
	FinishReason string   `json:"finish_reason"`
}

type chatMsg struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type whole struct {
	ID      string   `json:"id"`
	Object  string   `json:"object"`
	Created int64    `json:"created"`
	Model   string   `json:"model"`
	Choices []choice `json:"choices"`
	Usage   usage    `json:"usage"`
}

// whole is the non-streaming answer.
func (a *answer) whole(text string, res generate.Result) whole {
	c := choice{FinishReason: string(res.Finish)}
	obj := "text_completion"
	if a.p.chat {
		obj = "chat.completion"
		c.Message = &chatMsg{Role: "assistant", Content: text}
	} else {
		c.Text = &text
	}
	return whole{ID: a.id, Object: obj, Created: a.created, Model: a.h.s.info.Name, Choices: []choice{c}, Usage: usageOf(res)}
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// stream writes the answer as Server-Sent Events: the headers and the first
// event go out with the first token, each token's event is flushed at once
// (tokens that arrived while the client was being written to go out
// together), then the usage chunk if asked for and [DONE]. An error before
// the first token is an ordinary HTTP error; after it, an error event.
func (a *answer) stream(ctx context.Context, w http.ResponseWriter, s *generate.Stream) int {
	m := a.h.ep.m
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{}) // the body is read; a long stream must not hit the read timeout
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	enc := chunkEncoder{a: a}
	var toks []generate.Token
	started, wroteRole := false, false
	var ttft time.Duration
	var deadlineSet time.Time
	var err error
	for {
		toks, err = s.Next(ctx, toks[:0])
		// After the first write, gather StreamInterval tokens a write.
		for ttft != 0 && err == nil && len(toks) < a.h.s.cfg.StreamInterval {
			toks, err = s.Next(ctx, toks)
		}
		if !started && len(toks) == 0 && err != nil {
			e := a.h.errorOf(ctx, err)
			writeError(w, e)
			m.failed(e)
			return e.Status
		}
		buf := (*bp)[:0]
		for _, t := range toks {
			if t.Text == "" && t.Finish == "" {
				continue // held back: its text goes with a later token
			}
			if a.p.chat && !wroteRole {
				buf = enc.role(buf)
				wroteRole = true
			}
			buf = enc.token(buf, t)
		}
		status := http.StatusOK
		switch {
		case err == io.EOF:
			res := s.Result()
			if a.p.includeUsage {
				buf = enc.usage(buf, res)
			}
			buf = append(buf, "data: [DONE]\n\n"...)
			m.finished(res, ttft, time.Since(a.arrived))
		case err != nil:
			e := a.h.errorOf(ctx, err)
			m.failed(e)
			status = e.Status
			if status == server.StatusClientClosed {
				return status // nobody to tell
			}
			buf = enc.error(buf, e)
			buf = append(buf, "data: [DONE]\n\n"...)
		}
		*bp = buf
		if !started {
			h := w.Header()
			h.Set("Content-Type", "text/event-stream")
			h.Set("Cache-Control", "no-cache")
			h.Set("X-Accel-Buffering", "no")
			h.Set("Server-Timing", serverTiming(s.Timing()))
			w.WriteHeader(http.StatusOK)
			started = true
		}
		if len(buf) > 0 {
			// Extend the write deadline now and then, not on every token.
			if now := time.Now(); now.Sub(deadlineSet) > a.h.s.cfg.WriteTimeout/8 {
				_ = rc.SetWriteDeadline(now.Add(a.h.s.cfg.WriteTimeout))
				deadlineSet = now
			}
			_, werr := w.Write(buf)
			if werr == nil {
				werr = rc.Flush()
			}
			if werr != nil {
				m.aborted("write_failed")
				return server.StatusClientClosed
			}
			if ttft == 0 {
				ttft = time.Since(a.arrived)
			}
		}
		if err != nil {
			return status
		}
	}
}

// chunkEncoder writes OpenAI's stream chunks by hand: one per token is the
// hot path, and its only variable parts are the text and the finish reason.
type chunkEncoder struct {
	a      *answer
	prefix []byte // `data: {"id":…,"model":…,"choices":[`
}

func (c *chunkEncoder) head(buf []byte) []byte {
	if c.prefix == nil {
		obj := "text_completion"
		if c.a.p.chat {
			obj = "chat.completion.chunk"
		}
		p := append([]byte(nil), `data: {"id":"`...)
		p = append(p, c.a.id...)
		p = append(p, `","object":"`...)
		p = append(p, obj...)
		p = append(p, `","created":`...)
		p = strconv.AppendInt(p, c.a.created, 10)
		p = append(p, `,"model":`...)
		p = appendJSONString(p, c.a.h.s.info.Name)
		p = append(p, `,"choices":[`...)
		c.prefix = p
	}
	return append(buf, c.prefix...)
}

func (c *chunkEncoder) tail(buf []byte, finish generate.FinishReason) []byte {
	buf = append(buf, `,"logprobs":null,"finish_reason":`...)
	if finish == "" {
		buf = append(buf, "null"...)
	} else {
		buf = appendJSONString(buf, string(finish))
	}
	buf = append(buf, "}]"...)
	if c.a.p.includeUsage {
		buf = append(buf, `,"usage":null`...)
	}
	return append(buf, "}\n\n"...)
}

// role is chat's first chunk: the assistant's role, no content yet.
func (c *chunkEncoder) role(buf []byte) []byte {
	buf = c.head(buf)
	buf = append(buf, `{"index":0,"delta":{"role":"assistant","content":""}`...)
	return c.tail(buf, "")
}

func (c *chunkEncoder) token(buf []byte, t generate.Token) []byte {
	buf = c.head(buf)
	if c.a.p.chat {
		buf = append(buf, `{"index":0,"delta":{`...)
		if t.Text != "" {
			buf = append(buf, `"content":`...)
			buf = appendJSONString(buf, t.Text)
		}
		buf = append(buf, '}')
	} else {
		buf = append(buf, `{"index":0,"text":`...)
		buf = appendJSONString(buf, t.Text)
	}
	return c.tail(buf, t.Finish)
}

func (c *chunkEncoder) usage(buf []byte, res generate.Result) []byte {
	buf = c.head(buf)
	u := usageOf(res)
	buf = append(buf, `],"usage":{"prompt_tokens":`...)
	buf = strconv.AppendInt(buf, int64(u.PromptTokens), 10)
	buf = append(buf, `,"completion_tokens":`...)
	buf = strconv.AppendInt(buf, int64(u.CompletionTokens), 10)
	buf = append(buf, `,"total_tokens":`...)
	buf = strconv.AppendInt(buf, int64(u.TotalTokens), 10)
	buf = append(buf, `,"prompt_tokens_details":{"cached_tokens":`...)
	buf = strconv.AppendInt(buf, int64(u.PromptTokensDetails.CachedTokens), 10)
	return append(buf, "}}}\n\n"...)
}

func (c *chunkEncoder) error(buf []byte, e *apiError) []byte {
	buf = append(buf, `data: {"error":{"message":`...)
	buf = appendJSONString(buf, e.Message)
	buf = append(buf, `,"type":`...)
	buf = appendJSONString(buf, e.Type)
	buf = append(buf, `,"param":null,"code":`...)
	buf = appendJSONString(buf, e.Code)
	return append(buf, "}}\n\n"...)
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string, as encoding/json writes it
// (without HTML escaping): invalid UTF-8 becomes U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < 0x80 {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
