package llmtest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func TestTruth(t *testing.T) {
	c := Config{Timing: Timing{DoubleEvery: 3}}
	// 10 tokens: 1 1 2 1 1 2 1 1 → 8 chunks.
	got := c.Truth(10)
	want := Truth{Tokens: 10, Chunks: 8, TTFT: 40 * time.Millisecond, ITL: 8 * time.Millisecond,
		E2EL: 96 * time.Millisecond, TPOT: 56 * time.Millisecond / 9}
	if got != want {
		t.Errorf("Truth(10) = %+v, want %+v", got, want)
	}
	if one := (Config{}).Truth(1); one.Chunks != 1 || one.TPOT != 0 || one.E2EL != 40*time.Millisecond {
		t.Errorf("Truth(1) = %+v", one)
	}
}

func post(t *testing.T, hc *http.Client, url, body string) (*http.Response, string) {
	t.Helper()
	resp, err := hc.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestServerWire(t *testing.T) {
	const chat = `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`
	for _, tc := range []struct {
		name     string
		q        Quirks
		has, not []string
	}{
		{"plain", Quirks{}, []string{"data: {", "\n\ndata: [DONE]\n\n", `"usage":{"completion_tokens":3`, `"role":"assistant","content":" the"`}, []string{"\r", "data:{"}},
		{"TGI", TGI(), []string{"data:{", `"finish_reason":"length"`, "data:[DONE]"}, []string{"data: "}},
		{"CR, keep-alive, multi-line", Quirks{EOL: "\r", KeepAlive: true, MultiLine: true}, []string{": keep-alive\r:\r", "data: {\rdata: \"choices\""}, []string{"\n"}},
		{"role first, no [DONE], no usage", Quirks{RoleFirst: true, RoleNull: true, NoDone: true, NoUsage: true}, []string{`"delta":{"content":null,"role":"assistant"}`}, []string{"[DONE]", "usage"}},
	} {
		synctest.Test(t, func(t *testing.T) {
			hc, url, stop := ServePipe(New(Config{Quirks: tc.q}))
			defer stop()
			resp, body := post(t, hc, url+"/v1/chat/completions", chat)
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
				t.Fatalf("%s: %d %s", tc.name, resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			for _, s := range tc.has {
				if !strings.Contains(body, s) {
					t.Errorf("%s: %q missing from\n%s", tc.name, s, body)
				}
			}
			for _, s := range tc.not {
				if strings.Contains(body, s) {
					t.Errorf("%s: %q in\n%s", tc.name, s, body)
				}
			}
		})
	}
}

func TestServerMeasured(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New(Config{Timing: Timing{FirstToken: 30 * time.Millisecond, Interval: 5 * time.Millisecond}})
		hc, url, stop := ServePipe(s)
		defer stop()
		post(t, hc, url+"/v1/completions", `{"prompt":"a b c","max_tokens":10,"stream":true}`)
		_, body := post(t, hc, url+MeasuredPath, "")
		var m Measured
		if err := json.Unmarshal([]byte(body), &m); err != nil {
			t.Fatal(err)
		}
		if m != (Measured{TTFTP50: 30 * time.Millisecond, ITLP50: 5 * time.Millisecond, Answers: 1, Gaps: 9}) || s.Requests() != 1 {
			t.Errorf("measured %+v, requests %d", m, s.Requests())
		}
	})
}

func TestServerWhole(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hc, url, stop := ServePipe(New(Config{PromptTokens: 7}))
		defer stop()
		start := time.Now()
		resp, body := post(t, hc, url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":4}`)
		if took := time.Since(start); took != 64*time.Millisecond {
			t.Errorf("a whole answer of 4 tokens took %v, want 40 + 3×8 ms", took)
		}
		var v struct {
			Choices []struct {
				Message struct{ Role, Content string }
			}
			Usage struct {
				PromptTokens     int `json:"prompt_tokens"`
				CompletionTokens int `json:"completion_tokens"`
			}
		}
		if err := json.Unmarshal([]byte(body), &v); err != nil || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatal(err, body)
		}
		if len(v.Choices) != 1 || v.Choices[0].Message.Content != " the of and to" || v.Usage.PromptTokens != 7 || v.Usage.CompletionTokens != 4 {
			t.Errorf("answer %s", body)
		}
	})
}

func TestServerRejects(t *testing.T) {
	s := New(Config{})
	for _, tc := range []struct {
		method, path, body string
		code               int
	}{
		{"POST", "/v1/embeddings", `{}`, 404},
		{"GET", "/v1/completions", ``, 405},
		{"POST", "/v1/completions", `{oops`, 400},
		{"POST", "/v1/completions", `{"max_tokens":3}`, 400},
		{"POST", "/v1/chat/completions", `{"prompt":"x"}`, 400},
		{"POST", "/v1/completions", `{"prompt":"x","max_tokens":0}`, 400},
		{"POST", "/v1/completions", `{"prompt":"x","max_tokens":100001}`, 400},
	} {
		w := httptest.NewRecorder()
		s.ServeHTTP(w, httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body)))
		if w.Code != tc.code || !strings.Contains(w.Body.String(), `"error"`) {
			t.Errorf("%s %s %s: %d %s, want %d with an error body", tc.method, tc.path, tc.body, w.Code, w.Body, tc.code)
		}
	}
	w := httptest.NewRecorder()
	New(Config{Quirks: Quirks{Status: 503}}).ServeHTTP(w, httptest.NewRequest("POST", "/v1/completions", strings.NewReader(`{"prompt":"x"}`)))
	if w.Code != 503 {
		t.Errorf("Status 503 quirk: %d", w.Code)
	}
}
