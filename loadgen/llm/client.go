package llm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Client defaults and bounds.
const (
	// DefaultTimeout bounds one request, stream included.
	DefaultTimeout = 10 * time.Minute
	// maxBody bounds a non-streamed answer; maxErrorBody the part of an
	// error answer read for its message.
	maxBody      = 16 << 20
	maxErrorBody = 4 << 10
	// doneGrace is how long the rest of a stream may take to end after
	// data: [DONE] before the connection is dropped.
	doneGrace = 100 * time.Millisecond
)

// ClientConfig configures a Client. The zero value, with a BaseURL, is
// usable.
type ClientConfig struct {
	// BaseURL is the server, e.g. "http://127.0.0.1:8000"; the API's path
	// (/v1/completions or /v1/chat/completions) is appended to it, after
	// any path it has (a trailing "/v1" is dropped, as OpenAI clients'
	// base URLs usually end in it).
	BaseURL string
	// APIKey, if set, is sent as "Authorization: Bearer <key>".
	APIKey string
	// Header holds extra headers for every request.
	Header http.Header
	// KeyHeader, when set, names the header that carries each request's
	// Key (its tenant, its group of a shared prefix, its session), as a
	// router's hash policy reads it (infer route's X-Routing-Key).
	KeyHeader string
	// HTTP is the HTTP client. Default: one over NewTransport(0). Its
	// Timeout should be 0; Timeout below bounds each request.
	HTTP *http.Client
	// Timeout bounds each request, stream included. Default DefaultTimeout.
	Timeout time.Duration
	// Tokenizer counts output tokens when a stream has no usage; nil:
	// one token per content chunk. See KnownTokenizer.
	Tokenizer Counter
	// MaxEvent bounds one SSE line and event; 0: DefaultMaxEvent.
	MaxEvent int
}

// Client sends requests to one OpenAI-compatible server and times them.
// It is safe for concurrent use: each Do runs on its caller's goroutine,
// which reads the stream with a pooled parser, so a stream costs one
// goroutine and no allocation per chunk.
type Client struct {
	cfg  ClientConfig
	urls [2]string // by API
	auth string
	pool sync.Pool // *stream
}

// NewTransport returns an HTTP/1.1 transport for load: conns idle
// connections kept per host (0: 1024), no compression (an event stream is
// read as it comes), a 5 s dial time-out.
func NewTransport(conns int) *http.Transport {
	if conns <= 0 {
		conns = 1024
	}
	return &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
}

// NewClient returns a client of cfg.
func NewClient(cfg ClientConfig) (*Client, error) {
	u, err := url.Parse(cfg.BaseURL)
	if err != nil {
		return nil, fmt.Errorf("base URL %q: %w", cfg.BaseURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("base URL %q: want http://host[:port][/path]", cfg.BaseURL)
	}
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{Transport: NewTransport(0)}
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	base := strings.TrimSuffix(strings.TrimSuffix(u.String(), "/"), "/v1")
	c := &Client{cfg: cfg}
	c.urls[Completions] = base + Completions.Path()
	c.urls[Chat] = base + Chat.Path()
	if cfg.APIKey != "" {
		c.auth = "Bearer " + cfg.APIKey
	}
	c.pool.New = func() any {
		st := &stream{}
		st.sr.OnField = st.onField
		return st
	}
	return c, nil
}

// URL returns where requests of api go.
func (c *Client) URL(api API) string { return c.urls[api&1] }

// stream is the per-request parsing state, pooled.
type stream struct {
	sr    Reader
	ch    chunk
	res   *Result
	field []byte // an "error:" field seen (llama.cpp's way)
	// The usage seen: completion tokens (when usage), prompt tokens and
	// cached prompt tokens (-1 when not given).
	usage                      bool
	completion, prompt, cached int64
	keep                       bool // keep the output text
}

// seen keeps the usage of the chunk just parsed.
func (st *stream) seen() {
	if st.ch.usage {
		st.usage, st.completion = true, st.ch.completion
	}
	if st.ch.prompt >= 0 {
		st.prompt = st.ch.prompt
	}
	if st.ch.cached >= 0 {
		st.cached = st.ch.cached
	}
}

func (st *stream) onField(name, value []byte) {
	if string(name) == "error" && st.field == nil {
		st.field = append([]byte{}, value...)
	}
}

// Do sends req and records into res (which it resets first; its Intended
// and Queued are kept, and Sent is set to now). live, if not nil, is
// incremented at each content chunk, for a live tokens/s. Do returns when
// the answer has been read to its end or has failed; the failure is in
// res.Cause.
func (c *Client) Do(ctx context.Context, req *Request, res *Result, live *atomic.Int64) {
	intended, queued := res.Intended, res.Queued
	res.reset()
	res.Intended, res.Queued, res.Turn = intended, queued, req.Turn

	rctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	hr, err := http.NewRequestWithContext(rctx, http.MethodPost, c.URL(req.API), bytes.NewReader(req.Body))
	if err != nil {
		res.Sent = time.Now()
		res.fail(CauseTransport, "%v", err)
		return
	}
	for k, v := range c.cfg.Header {
		hr.Header[k] = v
	}
	if c.cfg.KeyHeader != "" && req.Key != "" {
		hr.Header.Set(c.cfg.KeyHeader, req.Key)
	}
	hr.Header.Set("Content-Type", "application/json")
	if req.Stream {
		hr.Header.Set("Accept", "text/event-stream")
	} else {
		hr.Header.Set("Accept", "application/json")
	}
	if c.auth != "" {
		hr.Header.Set("Authorization", c.auth)
	}

	res.Sent = time.Now()
	if res.Intended.IsZero() {
		res.Intended = res.Sent
	}
	resp, err := c.cfg.HTTP.Do(hr)
	if err != nil {
		cause, text := transportCause(ctx, rctx, err)
		res.fail(cause, "%s", text)
		return
	}
	defer resp.Body.Close()
	res.Status = resp.StatusCode
	if h := resp.Header.Get("Server-Timing"); h != "" {
		st := parseServerTiming(h)
		res.ServerQueue, res.ServerTTFT, res.Timed = st.queue, st.ttft, st.timed
		res.Cached, res.CachedKnown = st.cached, st.cachedOK
	}
	if resp.StatusCode != http.StatusOK {
		c.failStatus(resp, res)
		return
	}

	st := c.pool.Get().(*stream)
	defer func() {
		st.res = nil
		st.sr.Reset(nil) // keeps the buffers, not the body
		c.pool.Put(st)
	}()
	st.res, st.field, st.usage, st.completion, st.prompt, st.cached = res, nil, false, 0, -1, -1
	st.keep = c.cfg.Tokenizer != nil || req.KeepText
	if isEventStream(resp, req.Stream) {
		res.Streamed = true
		c.readStream(ctx, rctx, cancel, resp.Body, st, live)
	} else {
		c.readWhole(ctx, rctx, resp.Body, st, live)
	}
	if res.OK() {
		c.count(req, res, st)
	}
}

// isEventStream tells an event stream from a whole JSON answer by its
// Content-Type; without one, by whether a stream was asked for.
func isEventStream(resp *http.Response, asked bool) bool {
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		return err == nil && mt == "text/event-stream"
	}
	return asked
}

// readStream reads an event stream to its end.
func (c *Client) readStream(ctx, rctx context.Context, cancel context.CancelFunc, body io.Reader, st *stream, live *atomic.Int64) {
	res := st.res
	sr := &st.sr
	sr.Reset(body)
	sr.Max = c.cfg.MaxEvent
	sawEmpty := false
	for {
		ev, err := sr.Next()
		now := time.Since(res.Sent)
		res.End = now
		if st.field != nil && !res.Done {
			res.fail(CauseStreamError, "error event: %s", errorText(&st.ch, st.field))
			break
		}
		if err != nil {
			switch {
			case res.Done:
				// Whatever happens after [DONE] (the grace ran out, or
				// the server kept talking) is not the answer's.
			case err == io.EOF:
			case errors.Is(err, ErrIncompleteEvent):
				if string(bytes.TrimSpace(sr.Pending())) == "[DONE]" {
					res.Done = true // "data: [DONE]" without its blank line
					break
				}
				res.fail(CauseMalformed, "stream ended inside an event")
			case errors.Is(err, ErrEventTooLarge):
				res.fail(CauseMalformed, "%v", err)
			default:
				cause, text := transportCause(ctx, rctx, err)
				if cause == CauseTransport {
					cause, text = CauseDisconnect, "stream broke off before [DONE]: "+text
				}
				res.fail(cause, "%s", text)
			}
			break
		}
		if res.Done {
			continue // draining
		}
		data := ev.Data
		if string(ev.Type) == "error" {
			res.fail(CauseStreamError, "error event: %s", errorText(&st.ch, data))
			break
		}
		if trimmed := bytes.TrimSpace(data); len(trimmed) == 0 {
			continue // an empty event: a keep-alive
		} else if string(trimmed) == "[DONE]" {
			res.Done = true
			// The server should end the body at once; if it does not,
			// the connection is dropped after a short grace.
			t := time.AfterFunc(doneGrace, cancel)
			defer t.Stop()
			continue
		}
		if err := st.ch.parse(data); err != nil {
			res.fail(CauseMalformed, "chunk is not JSON: %.60q", data)
			break
		}
		ch := &st.ch
		if ch.err {
			res.fail(CauseStreamError, "error chunk: %s", errorText(ch, nil))
			break
		}
		st.seen()
		if ch.content {
			res.Chunks = append(res.Chunks, now)
			if st.keep {
				res.text = append(res.text, ch.text...)
			}
			if live != nil {
				live.Add(1)
			}
			if len(res.Chunks) == 1 && sawEmpty {
				res.RoleFirst = true
			}
		} else if ch.choices && len(res.Chunks) == 0 {
			sawEmpty = true
		}
	}
	if res.OK() && len(res.Chunks) == 0 {
		res.fail(CauseNoContent, "no content chunk in the stream")
	}
}

// readWhole reads a non-streamed answer: its one time is TTFT and E2EL.
func (c *Client) readWhole(ctx, rctx context.Context, body io.Reader, st *stream, live *atomic.Int64) {
	res := st.res
	b, err := io.ReadAll(io.LimitReader(body, maxBody+1))
	res.End = time.Since(res.Sent)
	switch {
	case err != nil:
		cause, text := transportCause(ctx, rctx, err)
		if cause == CauseTransport {
			cause, text = CauseDisconnect, "answer broke off: "+text
		}
		res.fail(cause, "%s", text)
		return
	case len(b) > maxBody:
		res.fail(CauseMalformed, "answer over %d bytes", maxBody)
		return
	}
	ch := &st.ch
	if err := ch.parse(b); err != nil {
		res.fail(CauseMalformed, "answer is not JSON: %.60q", b)
		return
	}
	if ch.err {
		res.fail(CauseStreamError, "error answer: %s", errorText(ch, nil))
		return
	}
	st.seen()
	if !ch.content {
		res.fail(CauseNoContent, "no content in the answer")
		return
	}
	res.Chunks = append(res.Chunks, res.End)
	if st.keep {
		res.text = append(res.text, ch.text...)
	}
	if live != nil {
		live.Add(1)
	}
}

// count sets the token counts of a successful request.
func (c *Client) count(req *Request, res *Result, st *stream) {
	res.PromptTokens = req.PromptTokens
	if st.prompt >= 0 {
		res.PromptTokens = int(st.prompt)
	}
	if st.cached >= 0 {
		res.Cached, res.CachedKnown = int(st.cached), true
	}
	switch {
	case st.usage:
		res.OutputTokens, res.Source = int(st.completion), FromUsage
	case c.cfg.Tokenizer != nil:
		res.OutputTokens, res.Source = c.cfg.Tokenizer.Count(string(res.text)), FromTokenizer
	default:
		res.OutputTokens, res.Source = len(res.Chunks), FromChunks
	}
}

// failStatus records a non-200 answer, with the server's message.
func (c *Client) failStatus(resp *http.Response, res *Result) {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	cause := CauseHTTPOther
	switch {
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		cause = CauseHTTP4xx
	case resp.StatusCode >= 500 && resp.StatusCode < 600:
		cause = CauseHTTP5xx
	}
	text := "HTTP " + strconv.Itoa(resp.StatusCode)
	var ch chunk
	if ch.parse(b) == nil && ch.err && len(ch.errMsg) > 0 {
		text += ": " + string(ch.errMsg)
	}
	res.fail(cause, "%s", text)
}

// errorText is the message of an error chunk in ch (parsed from data, when
// data is not nil), or data itself.
func errorText(ch *chunk, data []byte) string {
	if data != nil {
		if ch.parse(data) != nil || !ch.err {
			return string(data)
		}
	}
	if len(ch.errMsg) == 0 {
		return "(no message)"
	}
	return string(ch.errMsg)
}

// transportCause classifies an error of the HTTP client or of a body read.
func transportCause(ctx, rctx context.Context, err error) (Cause, string) {
	text := err.Error()
	var ue *url.Error
	if errors.As(err, &ue) {
		text = ue.Err.Error() // without `Post "http://…": `, so that texts group
	}
	var op *net.OpError
	var dns *net.DNSError
	switch {
	case ctx.Err() != nil:
		return CauseCancelled, "cancelled"
	case errors.Is(rctx.Err(), context.DeadlineExceeded):
		return CauseTimeout, "request time-out"
	case errors.As(err, &op) && op.Op == "dial", errors.As(err, &dns):
		return CauseConnect, text
	}
	return CauseTransport, text
}
