package loadgen

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inferhq/infer/loadgen/llm"
	"github.com/inferhq/infer/loadgen/llm/llmtest"
)

// hostileChunk is one well-formed completions chunk of a stream.
const hostileChunk = `data: {"id":"c","object":"text_completion","model":"m","choices":[{"index":0,"text":"hi","finish_reason":null}]}` + "\n\n"

// TestRunLLMHostile runs the bench end to end against six hostile servers
// and reads its summary as a user would: a stream that never ends, a
// 1 byte/s drip and a POST black hole are counted as cut off at the drain
// (the streams opened in the warm-up among them, since every stream is
// opened there); an event over the client's bound, an HTML page instead
// of JSON and a connection closed mid-stream are named in words on the
// causes line, not only by their class.
func TestRunLLMHostile(t *testing.T) {
	// pace slows the servers that fail at once, so that the closed loop's
	// retries stay few.
	pace := func(r *http.Request) bool {
		select {
		case <-time.After(20 * time.Millisecond):
			return true
		case <-r.Context().Done():
			return false
		}
	}
	stream := func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush()
	}
	for _, tc := range []struct {
		name    string
		handler http.Handler
		cause   string // a text the causes line must hold; "" for streams cut at the drain
		class   string // the failure class
	}{
		{name: "never ends", handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			stream(w)
			w.Write([]byte(hostileChunk))
			http.NewResponseController(w).Flush()
			<-r.Context().Done()
		})},
		{name: "drip", handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			stream(w)
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for i := 0; ; i++ {
				w.Write([]byte{hostileChunk[i%len(hostileChunk)]})
				http.NewResponseController(w).Flush()
				select {
				case <-tick.C:
				case <-r.Context().Done():
					return
				}
			}
		})},
		{name: "black hole", handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done()
		})},
		{name: "event too large", cause: "sse: event too large", class: "malformed", handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !pace(r) {
				return
			}
			stream(w)
			w.Write([]byte(`data: {"choices":[{"index":0,"text":"`))
			w.Write(bytes.Repeat([]byte("x"), llm.DefaultMaxEvent))
			w.Write([]byte(`"}]}` + "\n\n"))
		})},
		{name: "html", cause: `answer is not JSON: "<html>`, class: "malformed", handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !pace(r) {
				return
			}
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Write([]byte("<html><body><h1>Welcome to nginx!</h1></body></html>\n"))
		})},
		{name: "cut mid-stream", cause: "stream broke off before [DONE]: unexpected EOF", class: "disconnect", handler: llmtest.New(llmtest.Config{
			Quirks: llmtest.Quirks{CutAfter: 2, NoDone: true}, Tokens: 6,
			Timing: llmtest.Timing{FirstToken: 20 * time.Millisecond, Interval: time.Millisecond}})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// Hostile to requests only: its GETs (/readyz, /metrics) are
			// answered 404, as by a server that is not infer. The body is
			// read first, so that a client's close ends the request's
			// context; stop ends the handlers still running at the end.
			stop := make(chan struct{})
			fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodPost {
					http.NotFound(w, r)
					return
				}
				body, err := io.ReadAll(r.Body)
				if err != nil {
					return
				}
				ctx, cancel := context.WithCancel(r.Context())
				defer cancel()
				go func() {
					select {
					case <-stop:
						cancel()
					case <-ctx.Done():
					}
				}()
				r = r.WithContext(ctx)
				r.Body = io.NopCloser(bytes.NewReader(body))
				tc.handler.ServeHTTP(w, r)
			}))
			defer fake.Close()
			defer close(stop) // before Close, which waits for the handlers
			sc := mustParse(t, `
target:
  urls: [`+fake.URL+`]
  model: gpt2
payload:
  api: completions
  output_tokens: 6
load:
  concurrency: 2
  warmup: 500ms
  duration: 1s
  drain: 300ms
`)
			start := time.Now()
			out, err := Run(context.Background(), sc, Config{Dir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("the bench took %v against a hostile server", d)
			}
			sum := Summarize(out, sc.SLO)
			var b strings.Builder
			if err := sum.WriteText(&b); err != nil {
				t.Fatal(err)
			}
			text := b.String()
			t.Logf("summary:\n%s", text)
			if len(sum.Rows) != 1 || sum.Rows[0].LLMRow == nil {
				t.Fatalf("rows %+v, want one LLM row", sum.Rows)
			}
			row := sum.Rows[0]
			if tc.cause == "" {
				// Both closed-loop streams open in the warm-up and never
				// end: both are cut off at the drain, and nothing failed.
				if row.Unfinished != 2 {
					t.Errorf("%d cut off, want the 2 streams opened in the warm-up", row.Unfinished)
				}
				if !strings.Contains(text, strconv.Itoa(row.Unfinished)+" cut off at the drain") {
					t.Errorf("the summary does not count the streams cut off:\n%s", text)
				}
				if len(row.Failures) > 0 || strings.Contains(text, "failed in") {
					t.Errorf("failures %v: a stream cut at the drain is not a failure:\n%s", row.Failures, text)
				}
				return
			}
			if row.Failures[tc.class] == 0 || len(row.Failures) != 1 || row.ErrorRate != 1 {
				t.Errorf("failures %v (error rate %v), want every request %s", row.Failures, row.ErrorRate, tc.class)
			}
			causes := regexp.MustCompile(`(?m)^  causes: (.*)$`).FindStringSubmatch(text)
			if causes == nil || !strings.Contains(causes[1], tc.cause) {
				t.Errorf("the causes line does not name %q:\n%s", tc.cause, text)
			}
		})
	}
}
