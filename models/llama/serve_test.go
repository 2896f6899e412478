package llama

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/llama/stories260k"
	"github.com/inferhq/infer/models/llama/tokenizer"
	"github.com/inferhq/infer/models/onnx"
	"github.com/inferhq/infer/server"
	"github.com/inferhq/infer/server/generate"
	"github.com/inferhq/infer/server/openai"
	"github.com/inferhq/infer/server/servertest"
)

// stories260k served: through models/onnx's decoder and the generation
// engine, and through the OpenAI API, against the Go reference.

// openStories opens the built-in model with Open, as the registry does.
func openStories(t testing.TB, kv int) *onnx.DecoderFactory {
	t.Helper()
	f, err := Open(Config{Checkpoint: Builtin, KVTokens: kv, CacheDir: testCache, Runtime: onnx.Runtime{Threads: 1}})
	requireRuntime(t, err)
	t.Cleanup(func() { f.Close() })
	return f
}

// story is what the Go reference writes greedily after a prompt: its text
// (each token read after the one before it, EOS left out) and whether it
// ended with EOS.
type story struct {
	text string
	eos  bool
}

func (r *reference) story(tok *tokenizer.Tokenizer, prompt string, maxTokens int) story {
	ids := tok.Encode(prompt)
	gen := r.greedy(ids, maxTokens, false)
	var b []byte
	prev := ids[len(ids)-1]
	var s story
	for _, id := range gen {
		if id == EOS {
			s.eos = true
			break
		}
		b = append(b, tok.TokenBytesAfter(prev, id)...)
		prev = id
	}
	s.text = string(b)
	return s
}

func storiesReference(t testing.TB) (*reference, *tokenizer.Tokenizer) {
	t.Helper()
	tok, err := tokenizer.Parse(stories260k.Tokenizer)
	if err != nil {
		t.Fatal(err)
	}
	return loadReference(t, readBytes(t, stories260k.Checkpoint)), tok
}

// startEngine runs an engine over a new instance of f until the test ends.
func startEngine(t testing.TB, f models.DecoderFactory, cfg generate.Config) *generate.Engine {
	t.Helper()
	dec, err := f.New(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	e, err := generate.New(cfg, dec, f.Decoder(), f.Tokenizer())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v", err)
		}
		dec.Close()
	})
	return e
}

type generated struct {
	text string
	res  generate.Result
	err  error
}

// generateText runs req on e to its end; first, if set, is closed when
// the first token comes.
func generateText(ctx context.Context, e *generate.Engine, tok models.Tokenizer, prompt string, req generate.Request, first chan<- struct{}) generated {
	req.Prompt = tok.Encode(prompt)
	s, err := e.Generate(ctx, req)
	if err != nil {
		return generated{err: err}
	}
	var b strings.Builder
	var toks []generate.Token
	for {
		toks, err = s.Next(ctx, toks[:0])
		for _, t := range toks {
			b.WriteString(t.Text)
		}
		if len(toks) > 0 && first != nil {
			close(first)
			first = nil
		}
		if err == io.EOF {
			return generated{text: b.String(), res: s.Result()}
		}
		if err != nil {
			return generated{text: b.String(), err: err}
		}
	}
}

// targets are the greedy requests of the exactness tests: BOS alone (a
// story from nothing, as llama2.c runs without a prompt), a story's
// beginning, and a prompt in the middle of one.
var targets = []struct {
	prompt    string
	maxTokens int
}{
	{"", 200},
	{"Once upon a time", 120},
	{"Lily and Ben went to the park. They saw a big dog", 80},
}

// TestGreedyInABatchOf16: each target's greedy text, through models/onnx's
// decoder and the engine, is the Go reference's, alone and while 15 other
// sequences of different lengths and samplings join and leave its batch,
// with continuous and static batching.
func TestGreedyInABatchOf16(t *testing.T) {
	f := openStories(t, 0)
	ref, tok := storiesReference(t)
	var others []generate.Request
	var otherPrompts []string
	for i := range 15 {
		others = append(others, generate.Request{MaxTokens: 5 + (i*37)%150, IgnoreEOS: i%2 == 0,
			Sampling: models.Sampling{Temperature: float32(i%3) * 0.5, Seed: uint64(i)}})
		otherPrompts = append(otherPrompts, strings.Repeat("The cat sat on the mat. ", i%5)+fmt.Sprintf("Tom had %d apples", i))
	}
	for _, policy := range []generate.Policy{generate.Continuous, generate.Static} {
		t.Run(string(policy), func(t *testing.T) {
			e := startEngine(t, f, generate.Config{Policy: policy, MaxSeqs: 16, MaxBatchedTokens: 256, MaxLatency: 20 * time.Millisecond})
			for _, target := range targets {
				want := ref.story(tok, target.prompt, target.maxTokens)
				req := generate.Request{MaxTokens: target.maxTokens}
				alone := generateText(t.Context(), e, f.Tokenizer(), target.prompt, req, nil)
				if alone.err != nil || alone.text != want.text || (alone.res.Finish == generate.Stop) != want.eos {
					t.Fatalf("%q alone: %q (%s, %v)\nthe reference: %q (eos %v)", target.prompt, alone.text, alone.res.Finish, alone.err, want.text, want.eos)
				}

				// Eight others start; once one streams, the target and
				// seven more follow, so that sequences join and leave
				// while the target runs.
				var wg sync.WaitGroup
				errs := make(chan error, len(others))
				run := func(i int, first chan<- struct{}) {
					wg.Go(func() {
						if g := generateText(t.Context(), e, f.Tokenizer(), otherPrompts[i], others[i], first); g.err != nil {
							errs <- g.err
						}
					})
				}
				started := make(chan struct{})
				run(0, started)
				for i := 1; i < 8; i++ {
					run(i, nil)
				}
				<-started
				var company generated
				wg.Go(func() { company = generateText(t.Context(), e, f.Tokenizer(), target.prompt, req, nil) })
				for i := 8; i < 15; i++ {
					run(i, nil)
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Errorf("another sequence failed: %v", err)
				}
				if company.err != nil || company.text != alone.text {
					t.Errorf("%q in company: %q (%v)\nalone: %q", target.prompt, company.text, company.err, alone.text)
				}
				if policy == generate.Continuous && company.res.Batch < 2 {
					t.Errorf("%q: its first token ran in a batch of %d: want company", target.prompt, company.res.Batch)
				}
			}
		})
	}
}

// serveStories serves stories260k through the OpenAI API until the test
// ends and returns its URL.
func serveStories(t *testing.T, kv int, ecfg generate.Config) string {
	t.Helper()
	f := openStories(t, kv)
	svc, err := openai.New(openai.Config{Engine: ecfg}, f)
	if err != nil {
		t.Fatal(err)
	}
	return servertest.Start(t, server.Config{Timeout: 2 * time.Minute, DrainTimeout: 30 * time.Second}, svc).URL
}

// send posts body to url and returns the answer's status and body.
func send(t *testing.T, url, body string) (int, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, raw
}

// post sends body to url and decodes the JSON answer into v; it returns
// the status.
func post(t *testing.T, url, body string, v any) int {
	t.Helper()
	status, raw := send(t, url, body)
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("%s: status %d, %.300s: %v", url, status, raw, err)
	}
	return status
}

type completionAnswer struct {
	Choices []struct {
		Text         string `json:"text"`
		FinishReason string `json:"finish_reason"`
		Message      struct {
			Content string `json:"content"`
		} `json:"message"`
	} `json:"choices"`
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
	} `json:"usage"`
	Error *struct{ Code, Message string } `json:"error"`
}

// streamText sends a streamed completion and returns its text.
func streamText(t *testing.T, url, body string) string {
	t.Helper()
	status, raw := send(t, url, body)
	if status != http.StatusOK {
		t.Fatalf("%s: status %d, %.300s", url, status, raw)
	}
	var b strings.Builder
	for _, line := range strings.Split(string(raw), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var chunk completionAnswer
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		if len(chunk.Choices) > 0 {
			b.WriteString(chunk.Choices[0].Text)
		}
	}
	return b.String()
}

// TestServedGreedyTextIsTheReference: greedy text through the OpenAI API,
// whole and streamed, on the continuous, static and naive paths, is the Go
// reference's, and ends with the model's end of a story (BOS) as it does.
func TestServedGreedyTextIsTheReference(t *testing.T) {
	url := serveStories(t, 0, generate.Config{MaxSeqs: 8})
	ref, tok := storiesReference(t)
	for _, target := range targets {
		want := ref.story(tok, target.prompt, target.maxTokens)
		finish := "length"
		if want.eos {
			finish = "stop"
		}
		body, _ := json.Marshal(map[string]any{"model": Builtin, "prompt": target.prompt, "max_tokens": target.maxTokens, "temperature": 0})
		for _, prefix := range []string{"/v1", "/static/v1", "/naive/v1"} {
			var got completionAnswer
			if status := post(t, url+prefix+"/completions", string(body), &got); status != http.StatusOK || len(got.Choices) != 1 {
				t.Fatalf("%s %q: status %d, %+v", prefix, target.prompt, status, got)
			}
			if c := got.Choices[0]; c.Text != want.text || c.FinishReason != finish || got.Usage.PromptTokens != len(tok.Encode(target.prompt)) {
				t.Errorf("%s %q: %q (%s, %d prompt tokens)\nthe reference: %q (%s)", prefix, target.prompt, c.Text, c.FinishReason,
					got.Usage.PromptTokens, want.text, finish)
			}
		}
		streamed := strings.Replace(string(body), "{", `{"stream":true,`, 1)
		if got := streamText(t, url+"/v1/completions", streamed); got != want.text {
			t.Errorf("streamed %q: %q\nthe reference: %q", target.prompt, got, want.text)
		}
	}
	// Chat renders "role: content" lines, then "assistant:".
	want := ref.story(tok, "user: Tell me a story about a cat.\nassistant:", 60)
	var chat completionAnswer
	status := post(t, url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Tell me a story about a cat."}],"max_tokens":60,"temperature":0}`, &chat)
	if status != http.StatusOK || len(chat.Choices) != 1 || chat.Choices[0].Message.Content != want.text {
		t.Errorf("chat: status %d, %+v\nthe reference: %q", status, chat, want.text)
	}
}

// TestServedBadInput: a prompt longer than the context gets the error the
// GPT-2 path gives, and awkward text works.
func TestServedBadInput(t *testing.T) {
	url := serveStories(t, 0, generate.Config{MaxSeqs: 4})
	_, tok := storiesReference(t)
	// " the" is one token, after BOS: n tokens in all.
	ofTokens := func(n int) string { return "the" + strings.Repeat(" the", n-2) }
	if n := len(tok.Encode(ofTokens(511))); n != 511 {
		t.Fatalf("prompt of %d tokens, want 511", n)
	}
	for _, tc := range []struct {
		name, path, body string
		status           int
		code             string // the error's code, or for a 200 the finish reason
	}{
		{"prompt over the context", "/v1/completions", `{"prompt":"` + ofTokens(600) + `"}`, 413, "context_length_exceeded"},
		{"prompt of the whole context", "/naive/v1/completions", `{"prompt":"` + ofTokens(512) + `"}`, 413, "context_length_exceeded"},
		{"prompt one short of the context", "/static/v1/completions", `{"prompt":"` + ofTokens(511) + `","ignore_eos":true}`, 200, "length"},
		{"max_tokens past the context", "/v1/completions", `{"prompt":"` + ofTokens(500) + `","max_tokens":13}`, 422, "context_length_exceeded"},
		{"chat over the context", "/v1/chat/completions", `{"messages":[{"role":"user","content":"` + ofTokens(600) + `"}]}`, 413, "context_length_exceeded"},
		{"token outside the vocabulary", "/v1/completions", `{"prompt":[1,512]}`, 422, "invalid_value"},
		{"CJK and emoji", "/v1/completions", `{"prompt":"东京 😀 café","max_tokens":8,"ignore_eos":true,"temperature":1.5,"seed":3}`, 200, "length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got completionAnswer
			status := post(t, url+tc.path, tc.body, &got)
			code := ""
			switch {
			case got.Error != nil:
				code = got.Error.Code
			case len(got.Choices) == 1:
				code = got.Choices[0].FinishReason
			}
			if status != tc.status || code != tc.code {
				t.Errorf("got %d %q, want %d %q: %+v", status, code, tc.status, tc.code, got)
			}
		})
	}
}

// TestServedGreedyInCompany: greedy text streamed through the OpenAI API
// is the Go reference's while 15 other streams of different lengths and
// samplings join and leave the batch, on the continuous and static paths.
func TestServedGreedyInCompany(t *testing.T) {
	url := serveStories(t, 0, generate.Config{MaxSeqs: 16, MaxLatency: 20 * time.Millisecond})
	ref, tok := storiesReference(t)
	target := targets[1]
	want := ref.story(tok, target.prompt, target.maxTokens)
	body, _ := json.Marshal(map[string]any{"prompt": target.prompt, "max_tokens": target.maxTokens, "temperature": 0, "stream": true})
	for _, prefix := range []string{"/v1", "/static/v1"} {
		var wg sync.WaitGroup
		other := func(i int, first chan<- struct{}) {
			b, _ := json.Marshal(map[string]any{
				"prompt":     strings.Repeat("The cat sat on the mat. ", i%5) + fmt.Sprintf("Tom had %d apples", i),
				"max_tokens": 5 + (i*37)%150, "ignore_eos": i%2 == 0, "temperature": float64(i%3) * 0.5, "seed": i, "stream": true,
			})
			wg.Go(func() {
				if err := streamUntilDone(url+prefix+"/completions", string(b), first); err != nil {
					t.Errorf("%s: stream %d: %v", prefix, i, err)
				}
			})
		}
		started := make(chan struct{})
		other(0, started)
		for i := 1; i < 8; i++ {
			other(i, nil)
		}
		<-started
		var got string
		wg.Go(func() { got = streamText(t, url+prefix+"/completions", string(body)) })
		for i := 8; i < 15; i++ {
			other(i, nil)
		}
		wg.Wait()
		if got != want.text {
			t.Errorf("%s %q among 15 other streams: %q\nthe reference: %q", prefix, target.prompt, got, want.text)
		}
	}
}

// streamUntilDone reads a streamed completion to its end; first, if not
// nil, is closed at its first event.
func streamUntilDone(url, body string, first chan<- struct{}) error {
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("status %d: %.200s", resp.StatusCode, raw)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if first != nil && strings.HasPrefix(sc.Text(), "data: ") {
			close(first)
			first = nil
		}
		if sc.Text() == "data: [DONE]" {
			return nil
		}
	}
	return fmt.Errorf("the stream ended without [DONE]: %v", sc.Err())
}
