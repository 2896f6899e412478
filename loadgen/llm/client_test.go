package llm_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/inferhq/infer/loadgen/llm"
	"github.com/inferhq/infer/loadgen/llm/llmtest"
)

// body returns a request body of the api asking for n tokens.
func body(api llm.API, n int, stream bool) *llm.Request {
	var b string
	if api == llm.Chat {
		b = `{"model":"m","messages":[{"role":"user","content":"Say something."}]`
	} else {
		b = `{"model":"m","prompt":"Say something."`
	}
	b += fmt.Sprintf(`,"max_tokens":%d`, n)
	if stream {
		b += `,"stream":true,"stream_options":{"include_usage":true}`
	}
	return &llm.Request{API: api, Body: []byte(b + "}"), Stream: stream, PromptTokens: 2, MaxTokens: n}
}

// do runs one request against a fake of cfg, inside a synctest bubble:
// the fake's clock is the bubble's, so every time is exact.
func do(t *testing.T, cfg llmtest.Config, ccfg llm.ClientConfig, req *llm.Request) *llm.Result {
	t.Helper()
	var res llm.Result
	synctest.Test(t, func(t *testing.T) {
		hc, url, stop := llmtest.ServePipe(llmtest.New(cfg))
		defer stop()
		ccfg.HTTP, ccfg.BaseURL = hc, url
		c, err := llm.NewClient(ccfg)
		if err != nil {
			t.Fatal(err)
		}
		c.Do(context.Background(), req, &res, nil)
	})
	return &res
}

// quirks are the wire forms of real servers, one by one and all at once.
var quirks = []struct {
	name string
	q    llmtest.Quirks
}{
	{"plain", llmtest.Quirks{}},
	{"no space after data:", llmtest.Quirks{NoSpace: true}},
	{"CRLF", llmtest.Quirks{EOL: "\r\n"}},
	{"CR", llmtest.Quirks{EOL: "\r"}},
	{"keep-alive comments", llmtest.Quirks{KeepAlive: true}},
	{"multi-line data", llmtest.Quirks{MultiLine: true}},
	{"event: message", llmtest.Quirks{EventType: "message"}},
	{"no [DONE]", llmtest.Quirks{NoDone: true}},
	{"usage in the last chunk", llmtest.Quirks{UsageInLast: true}},
	{"role chunk at once", llmtest.Quirks{RoleFirst: true}},
	{"role chunk with null content", llmtest.Quirks{RoleFirst: true, RoleNull: true}},
	{"role in every chunk", llmtest.Quirks{RoleEvery: true}},
	{"all at once", llmtest.Quirks{NoSpace: true, EOL: "\r", KeepAlive: true, MultiLine: true, EventType: "message", NoDone: true, RoleFirst: true}},
	{"vLLM", llmtest.VLLM()},
	{"TGI", llmtest.TGI()},
	{"llama.cpp", llmtest.LlamaCpp()},
	{"Ollama", llmtest.Ollama()},
}

// TestAccuracy is issue 12's accuracy bar against a server of known
// timing (first token after 40 ms, a chunk every 8 ms, every third chunk
// two tokens): TTFT and every ITL exact, TPOT from usage tokens (not
// chunks), a chat TTFT that ignores the role chunk sent at once.
func TestAccuracy(t *testing.T) {
	const n = 50
	for _, api := range []llm.API{llm.Completions, llm.Chat} {
		for _, tc := range quirks {
			t.Run(api.String()+"/"+tc.name, func(t *testing.T) {
				cfg := llmtest.Config{Timing: llmtest.Timing{FirstToken: 40 * time.Millisecond, Interval: 8 * time.Millisecond, DoubleEvery: 3}, Quirks: tc.q}
				truth := cfg.Truth(n)
				res := do(t, cfg, llm.ClientConfig{}, body(api, n, true))
				if !res.OK() {
					t.Fatalf("failed: %s %s", res.Cause, res.Err)
				}
				if got := res.TTFT(); got != truth.TTFT {
					t.Errorf("TTFT = %v, want %v", got, truth.TTFT)
				}
				if len(res.Chunks) != truth.Chunks {
					t.Fatalf("%d content chunks, want %d", len(res.Chunks), truth.Chunks)
				}
				for i := 1; i < len(res.Chunks); i++ {
					if itl := res.Chunks[i] - res.Chunks[i-1]; itl != truth.ITL {
						t.Fatalf("ITL %d = %v, want %v", i, itl, truth.ITL)
					}
				}
				if res.E2EL() != truth.E2EL {
					t.Errorf("E2EL = %v, want %v", res.E2EL(), truth.E2EL)
				}
				if res.OutputTokens != n || res.Source != llm.FromUsage {
					t.Errorf("output tokens %d from %v, want %d from usage", res.OutputTokens, res.Source, n)
				}
				if res.TPOT() != truth.TPOT || truth.TPOT >= truth.ITL {
					t.Errorf("TPOT = %v, want %v (below the ITL %v: chunks carry two tokens)", res.TPOT(), truth.TPOT, truth.ITL)
				}
				if want := api == llm.Chat && tc.q.RoleFirst; res.RoleFirst != want {
					t.Errorf("RoleFirst = %v, want %v", res.RoleFirst, want)
				}
				if res.Done == tc.q.NoDone || !res.Streamed {
					t.Errorf("Done %v, Streamed %v", res.Done, res.Streamed)
				}
			})
		}
	}
}

func TestNoUsage(t *testing.T) {
	const n = 30
	cfg := llmtest.Config{Timing: llmtest.Timing{DoubleEvery: 2}, Quirks: llmtest.Quirks{NoUsage: true}}
	truth := cfg.Truth(n)
	res := do(t, cfg, llm.ClientConfig{}, body(llm.Chat, n, true))
	if !res.OK() || res.Source != llm.FromChunks || res.OutputTokens != truth.Chunks {
		t.Errorf("no usage, no tokenizer: %d tokens from %v (%s), want %d from chunks", res.OutputTokens, res.Source, res.Err, truth.Chunks)
	}
	res = do(t, cfg, llm.ClientConfig{Tokenizer: llm.KnownTokenizer("openai-community/gpt2")}, body(llm.Completions, n, true))
	if !res.OK() || res.Source != llm.FromTokenizer || res.OutputTokens != n {
		t.Errorf("no usage, GPT-2 tokenizer: %d tokens from %v (%s), want %d from the tokenizer", res.OutputTokens, res.Source, res.Err, n)
	}
	if res.PromptTokens != 2 {
		t.Errorf("prompt tokens without usage = %d, want the client's 2", res.PromptTokens)
	}
}

func TestKnownTokenizer(t *testing.T) {
	for model, known := range map[string]bool{"gpt2": true, "GPT2-XL": true, "openai-community/gpt2-medium": true, "distilgpt2": true,
		"gpt2-tiny": true, "sim-lm": true, "meta-llama/Llama-3.1-8B-Instruct": false, "": false, "gpt-4o": false} {
		if got := llm.KnownTokenizer(model) != nil; got != known {
			t.Errorf("KnownTokenizer(%q) known = %v, want %v", model, got, known)
		}
	}
}

func TestNonStreaming(t *testing.T) {
	const n = 20
	cfg := llmtest.Config{}
	truth := cfg.Truth(n)
	for _, tc := range []struct {
		name   string
		cfg    llmtest.Config
		stream bool
	}{
		{"not asked", cfg, false},
		{"asked, answered whole", llmtest.Config{Quirks: llmtest.Quirks{NotStreamed: true}}, true},
	} {
		for _, api := range []llm.API{llm.Completions, llm.Chat} {
			res := do(t, tc.cfg, llm.ClientConfig{}, body(api, n, tc.stream))
			if !res.OK() || res.Streamed || res.TTFT() != truth.E2EL || res.E2EL() != truth.E2EL || res.OutputTokens != n {
				t.Errorf("%s %v: ok %v (%s) streamed %v TTFT %v E2EL %v tokens %d; want TTFT = E2EL = %v, %d tokens",
					tc.name, api, res.OK(), res.Err, res.Streamed, res.TTFT(), res.E2EL(), res.OutputTokens, truth.E2EL, n)
			}
		}
	}
}

func TestFailures(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   llmtest.Config
		cause llm.Cause
		text  string
	}{
		{"error chunk (vLLM, Ollama)", llmtest.Config{Quirks: llmtest.Quirks{ErrorAfter: 5}}, llm.CauseStreamError, "fake failure mid-stream"},
		{"error string (TGI)", llmtest.Config{Quirks: llmtest.Quirks{ErrorAfter: 5, ErrorStyle: "tgi"}}, llm.CauseStreamError, "fake failure mid-stream"},
		{"event: error", llmtest.Config{Quirks: llmtest.Quirks{ErrorAfter: 5, ErrorStyle: "event"}}, llm.CauseStreamError, "fake failure mid-stream"},
		{"error: line (llama.cpp)", llmtest.Config{Quirks: llmtest.Quirks{ErrorAfter: 5, ErrorStyle: "llamacpp", NoSpace: true}}, llm.CauseStreamError, "fake failure mid-stream"},
		{"error after the first token", llmtest.Config{Quirks: llmtest.Quirks{ErrorAfter: 1, EOL: "\r\n"}}, llm.CauseStreamError, "fake failure"},
		{"cut mid-stream", llmtest.Config{Quirks: llmtest.Quirks{CutAfter: 3}}, llm.CauseDisconnect, "stream broke off before [DONE]"},
		{"429", llmtest.Config{Quirks: llmtest.Quirks{Status: 429}}, llm.CauseHTTP4xx, "HTTP 429: fake failure"},
		{"503", llmtest.Config{Quirks: llmtest.Quirks{Status: 503}}, llm.CauseHTTP5xx, "HTTP 503: fake failure"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := do(t, tc.cfg, llm.ClientConfig{}, body(llm.Chat, 10, true))
			if res.Cause != tc.cause || !strings.Contains(res.Err, tc.text) {
				t.Errorf("cause %q, error %q; want %q containing %q", res.Cause, res.Err, tc.cause, tc.text)
			}
		})
	}
}

// handler serves a fixed stream.
type handler string

func (h handler) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	_, _ = w.Write([]byte(h))
}

func TestMalformed(t *testing.T) {
	const token = `data: {"choices":[{"text":"a"}]}` + "\n\n"
	for _, tc := range []struct {
		name, stream string
		cause        llm.Cause
	}{
		{"not JSON", token + "data: {oops}\n\n", llm.CauseMalformed},
		{"cut inside an event", token + "data: {\"choices\":[{\"text\":\"b\"}]}\n", llm.CauseMalformed},
		{"[DONE] without its blank line", token + "data: [DONE]", ""},
		{"event over the bound", "data: " + strings.Repeat("x", 2000) + "\n\n", llm.CauseMalformed},
		{"no content at all", `data: {"choices":[{"delta":{"role":"assistant"}}]}` + "\n\ndata: [DONE]\n\n", llm.CauseNoContent},
		{"empty events are keep-alives", "data:\n\n" + token + "data: \n\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var res llm.Result
			synctest.Test(t, func(t *testing.T) {
				hc, url, stop := llmtest.ServePipe(handler(tc.stream))
				defer stop()
				c, _ := llm.NewClient(llm.ClientConfig{BaseURL: url, HTTP: hc, MaxEvent: 1000})
				c.Do(context.Background(), body(llm.Completions, 5, true), &res, nil)
			})
			if res.Cause != tc.cause {
				t.Errorf("cause %q (%s), want %q", res.Cause, res.Err, tc.cause)
			}
		})
	}
}

func TestTimeoutAndCancel(t *testing.T) {
	slow := llmtest.Config{Timing: llmtest.Timing{FirstToken: time.Hour}}
	res := do(t, slow, llm.ClientConfig{Timeout: time.Second}, body(llm.Chat, 5, true))
	if res.Cause != llm.CauseTimeout {
		t.Errorf("a first token after 1h with a 1s time-out: cause %q (%s), want timeout", res.Cause, res.Err)
	}
	synctest.Test(t, func(t *testing.T) {
		hc, url, stop := llmtest.ServePipe(llmtest.New(llmtest.Config{}))
		defer stop()
		c, _ := llm.NewClient(llm.ClientConfig{BaseURL: url, HTTP: hc})
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Millisecond)
		defer cancel()
		var res llm.Result
		c.Do(ctx, body(llm.Chat, 100, true), &res, nil)
		if res.Cause != llm.CauseCancelled || len(res.Chunks) != 3 {
			t.Errorf("cancelled at 60ms: cause %q, %d chunks; want cancelled after 3", res.Cause, len(res.Chunks))
		}
	})
}

func TestConnectError(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c, err := llm.NewClient(llm.ClientConfig{BaseURL: "http://" + addr})
	if err != nil {
		t.Fatal(err)
	}
	var res llm.Result
	c.Do(context.Background(), body(llm.Completions, 5, true), &res, nil)
	if res.Cause != llm.CauseConnect || strings.Contains(res.Err, "Post ") {
		t.Errorf("a closed port: cause %q, error %q; want connect, without the URL prefix", res.Cause, res.Err)
	}
}

func TestNewClient(t *testing.T) {
	for _, tc := range []struct{ base, want string }{
		{"http://h:8000", "http://h:8000/v1/completions"},
		{"http://h:8000/", "http://h:8000/v1/completions"},
		{"http://h:8000/v1", "http://h:8000/v1/completions"},
		{"https://h/static/v1/", "https://h/static/v1/completions"},
	} {
		c, err := llm.NewClient(llm.ClientConfig{BaseURL: tc.base})
		if err != nil || c.URL(llm.Completions) != tc.want {
			t.Errorf("NewClient(%q).URL = %v, %v; want %s", tc.base, c.URL(llm.Completions), err, tc.want)
		}
	}
	for _, bad := range []string{"", "h:8000", "ftp://h", "http://", "://x"} {
		if _, err := llm.NewClient(llm.ClientConfig{BaseURL: bad}); err == nil {
			t.Errorf("NewClient(%q) accepted", bad)
		}
	}
}

func TestKeyHeader(t *testing.T) {
	var got atomic.Pointer[[]string]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := r.Header.Values("X-Routing-Key")
		got.Store(&v)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[{"text":"hi"}],"usage":{"prompt_tokens":1,"completion_tokens":1}}`)
	}))
	defer srv.Close()
	for _, tc := range []struct {
		header, key string
		want        []string
	}{
		{"X-Routing-Key", "tenant-3", []string{"tenant-3"}},
		{"X-Routing-Key", "", nil},            // no key: no header
		{"", "tenant-3", nil},                 // no header named: the key is not sent
		{"x-routing-key", "t", []string{"t"}}, // canonicalised
	} {
		c, err := llm.NewClient(llm.ClientConfig{BaseURL: srv.URL, KeyHeader: tc.header})
		if err != nil {
			t.Fatal(err)
		}
		req := body(llm.Completions, 1, false)
		req.Key = tc.key
		var res llm.Result
		c.Do(context.Background(), req, &res, nil)
		if !res.OK() {
			t.Fatalf("%+v: %s", tc, res.Err)
		}
		if g := *got.Load(); !slices.Equal(g, tc.want) {
			t.Errorf("header %q key %q: the server got %q, want %q", tc.header, tc.key, g, tc.want)
		}
	}
}
