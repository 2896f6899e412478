package llm

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// API is the kind of endpoint a request goes to.
type API uint8

// APIs.
const (
	Completions API = iota // POST /v1/completions, a "prompt"
	Chat                   // POST /v1/chat/completions, "messages"
)

// String returns "completions" or "chat".
func (a API) String() string {
	if a == Chat {
		return "chat"
	}
	return "completions"
}

// Path returns the endpoint's path under the base URL.
func (a API) Path() string {
	if a == Chat {
		return "/v1/chat/completions"
	}
	return "/v1/completions"
}

// ParseAPI parses "completions" or "chat".
func ParseAPI(s string) (API, error) {
	switch s {
	case "completions":
		return Completions, nil
	case "chat":
		return Chat, nil
	}
	return 0, fmt.Errorf("api %q: want completions or chat", s)
}

// UnmarshalText decodes "completions" or "chat" (from YAML or JSON).
func (a *API) UnmarshalText(b []byte) error {
	v, err := ParseAPI(string(b))
	*a = v
	return err
}

// MarshalText encodes a as its name.
func (a API) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// Request is one prepared request: its body is built before its send time
// so that building it never delays the send.
type Request struct {
	API  API
	Body []byte // JSON
	// Stream is whether Body asks for a stream.
	Stream bool
	// PromptTokens is the client's count of the prompt's tokens, used when
	// the server reports no usage.
	PromptTokens int
	// MaxTokens is the max_tokens sent.
	MaxTokens int
	// Turn is the request's turn in a multi-turn session, from 1; 0
	// outside sessions.
	Turn int
	// KeepText asks the client to keep the answer's text (Result.Text).
	KeepText bool
	// Key is what the request belongs to (a tenant, a shared prefix's
	// group, a session), sent in ClientConfig.KeyHeader when set; "" for
	// none.
	Key string
}

// Cause classifies a failed request.
type Cause string

// Causes of failure. Cause "" is success.
const (
	CauseConnect     Cause = "connect"      // no connection: refused, unreachable, DNS, dial time-out
	CauseTransport   Cause = "transport"    // connected, but no HTTP answer (reset, closed before the headers)
	CauseHTTP4xx     Cause = "http_4xx"     // a 4xx status
	CauseHTTP5xx     Cause = "http_5xx"     // a 5xx status
	CauseHTTPOther   Cause = "http_other"   // another status that is not 200
	CauseStreamError Cause = "stream_error" // an error event or error chunk in a 200 answer
	CauseMalformed   Cause = "malformed"    // a chunk that is not JSON, an event over the bound, a cut event
	CauseNoContent   Cause = "no_content"   // a 200 answer without a single content chunk
	CauseDisconnect  Cause = "disconnect"   // the answer broke off (a read error mid-stream)
	CauseTimeout     Cause = "timeout"      // the request's time-out passed
	CauseCancelled   Cause = "cancelled"    // the caller cancelled it (the run stopped)
)

// TokenSource says where a request's output token count came from.
type TokenSource uint8

// Token sources, from the most to the least trusted.
const (
	FromUsage     TokenSource = iota // the server's usage
	FromTokenizer                    // the client's tokenizer over the output text
	FromChunks                       // one token per content chunk
)

// Result is what one request did. Times are from the monotonic clock.
type Result struct {
	// Intended is when the schedule meant the request to go, Sent when
	// it was handed to the HTTP client. Queued is the part of the delay
	// between them spent waiting for a free stream slot (open loop, when
	// all were busy); the rest is the sender's own lateness (timers, CPU).
	Intended, Sent time.Time
	Queued         time.Duration
	// Chunks are the arrival times of the content chunks, from Sent. A
	// non-streamed answer has one, when its body was read.
	Chunks []time.Duration
	// End is when the answer was read to its end, from Sent.
	End time.Duration

	Status int    // HTTP status, 0 without an answer
	Cause  Cause  // "" on success
	Err    string // what went wrong, for a failure

	PromptTokens int         // usage's prompt_tokens, else Request.PromptTokens
	OutputTokens int         // from Source
	Source       TokenSource //
	Streamed     bool        // the answer was an event stream
	Done         bool        // the stream ended with data: [DONE]
	// RoleFirst is set when a role-only (or empty) chunk came before the
	// first content chunk: the chunk a naive client takes for the first
	// token.
	RoleFirst bool
	// Timed is set when the answer's Server-Timing header gave the
	// server's queue time and time to first token (infer serve's
	// "queue;dur=…, ttft;dur=…").
	Timed                   bool
	ServerQueue, ServerTTFT time.Duration
	// Cached is the prompt tokens the server found in its prefix cache,
	// from usage.prompt_tokens_details.cached_tokens, else the
	// Server-Timing header's "cached;desc=N"; CachedKnown tells whether
	// the answer said.
	Cached      int
	CachedKnown bool
	// Turn is the request's turn in a multi-turn session (Request.Turn).
	Turn int

	text []byte // the output text, for the tokenizer or Request.KeepText
}

// Text returns the answer's text when the request asked to keep it
// (Request.KeepText) or the client counts tokens; it is valid until r is
// reused.
func (r *Result) Text() []byte { return r.text }

// reset empties r for reuse, keeping its buffers.
func (r *Result) reset() {
	*r = Result{Chunks: r.Chunks[:0], text: r.text[:0]}
}

// OK reports whether the request succeeded.
func (r *Result) OK() bool { return r.Cause == "" }

// TTFT is the time to the first content chunk.
func (r *Result) TTFT() time.Duration {
	if len(r.Chunks) == 0 {
		return 0
	}
	return r.Chunks[0]
}

// E2EL is the time to the last content chunk.
func (r *Result) E2EL() time.Duration {
	if len(r.Chunks) == 0 {
		return 0
	}
	return r.Chunks[len(r.Chunks)-1]
}

// TPOT is (E2EL − TTFT) / (output tokens − 1); 0 for one token or none.
func (r *Result) TPOT() time.Duration {
	if r.OutputTokens <= 1 {
		return 0
	}
	return (r.E2EL() - r.TTFT()) / time.Duration(r.OutputTokens-1)
}

// Lag is how late the request was sent: Sent − Intended.
func (r *Result) Lag() time.Duration { return r.Sent.Sub(r.Intended) }

// Queue is how long the request waited for a stream slot.
func (r *Result) Queue() time.Duration { return r.Queued }

// fail records a failure, keeping the first.
func (r *Result) fail(c Cause, format string, args ...any) {
	if r.Cause != "" {
		return
	}
	r.Cause = c
	r.Err = shorten(fmt.Sprintf(format, args...))
}

// maxErrText bounds an error text, so that texts group and stay readable.
const maxErrText = 160

func shorten(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > maxErrText {
		cut := maxErrText
		for cut > 0 && s[cut]&0xC0 == 0x80 { // not inside a UTF-8 sequence
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

// Counter counts the tokens of a text, as a model's tokenizer would.
type Counter interface {
	Count(text string) int
}

// serverTiming is what a Server-Timing header says: infer serve's
// "queue;dur=0.12, ttft;dur=41.3, batch;desc=8, cached;desc=96" (dur in
// milliseconds).
type serverTiming struct {
	queue, ttft time.Duration
	timed       bool // a ttft metric was there
	cached      int
	cachedOK    bool
}

// parseServerTiming reads the queue, ttft and cached metrics of a
// Server-Timing header.
func parseServerTiming(h string) serverTiming {
	var st serverTiming
	for h != "" {
		var metric string
		metric, h, _ = strings.Cut(h, ",")
		name, params, _ := strings.Cut(strings.TrimSpace(metric), ";")
		if name != "queue" && name != "ttft" && name != "cached" {
			continue
		}
		for params != "" {
			var p string
			p, params, _ = strings.Cut(params, ";")
			k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
			if name == "cached" && k == "desc" {
				if n, err := strconv.Atoi(strings.Trim(v, `"`)); err == nil && n >= 0 {
					st.cached, st.cachedOK = n, true
				}
				continue
			}
			if k != "dur" {
				continue
			}
			ms, err := strconv.ParseFloat(strings.Trim(v, `"`), 64)
			if err != nil || ms < 0 || ms > 1e9 {
				break
			}
			d := time.Duration(ms * float64(time.Millisecond))
			if name == "queue" {
				st.queue = d
			} else if name == "ttft" {
				st.ttft, st.timed = d, true
			}
		}
	}
	return st
}
