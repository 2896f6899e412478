package onnx

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/bpe"
	"github.com/inferhq/infer/models/gpt2"
	"github.com/inferhq/infer/server"
	"github.com/inferhq/infer/server/generate"
	"github.com/inferhq/infer/server/openai"
	"github.com/inferhq/infer/server/servertest"
)

// The decoder through the real server: gpt2-tiny on ONNX Runtime behind the
// OpenAI API (server/openai), reached with the official OpenAI Go client or
// net/http over a loopback socket.

var prefixes = []string{"/v1", "/static/v1", "/naive/v1"}

// serveTiny serves gpt2-tiny through the OpenAI API until the test ends and
// returns its URL once it is ready. wrap, if set, wraps the factory.
func serveTiny(t *testing.T, kvTokens int, ecfg generate.Config, wrap func(models.DecoderFactory) models.DecoderFactory) string {
	t.Helper()
	return serveSpec(t, tinySpec(), kvTokens, ecfg, wrap)
}

// serveSpec is serveTiny for the graph of spec.
func serveSpec(t *testing.T, spec gpt2.Spec, kvTokens int, ecfg generate.Config, wrap func(models.DecoderFactory) models.DecoderFactory) string {
	t.Helper()
	requireRuntime(t)
	f, err := OpenDecoder(DecoderConfig{Path: testModel(t, spec), KVTokens: kvTokens})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	var df models.DecoderFactory = f
	if wrap != nil {
		df = wrap(f)
	}
	svc, err := openai.New(openai.Config{Engine: ecfg}, df)
	if err != nil {
		t.Fatal(err)
	}
	return servertest.Start(t, server.Config{Timeout: 2 * time.Minute, DrainTimeout: 30 * time.Second}, svc).URL
}

// completion is one request's parameters.
type completion struct {
	prompt    string
	maxTokens int64
	temp      float64
	seed      int64
	ignoreEOS bool
}

// streamed is what a stream gave: the text, the batch its first token ran
// in and the prompt tokens found cached (from Server-Timing), and the error
// if it failed.
type streamed struct {
	text   string
	batch  string
	cached string
	err    error
}

// stream sends c to base (a /v1 URL) with the official client and reads the
// stream to its end; first, if set, is closed at the first token.
func stream(ctx context.Context, base string, c completion, first chan<- struct{}) streamed {
	client := oai.NewClient(option.WithBaseURL(base+"/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	p := oai.CompletionNewParams{
		Model:       "gpt2-tiny",
		Prompt:      oai.CompletionNewParamsPromptUnion{OfString: oai.String(c.prompt)},
		MaxTokens:   oai.Int(c.maxTokens),
		Temperature: oai.Float(c.temp),
		Seed:        oai.Int(c.seed),
	}
	var resp *http.Response
	opts := []option.RequestOption{option.WithResponseInto(&resp)}
	if c.ignoreEOS {
		opts = append(opts, option.WithJSONSet("ignore_eos", true))
	}
	s := client.Completions.NewStreaming(ctx, p, opts...)
	defer s.Close()
	var b strings.Builder
	for s.Next() {
		if ch := s.Current(); len(ch.Choices) > 0 {
			b.WriteString(ch.Choices[0].Text)
			if first != nil && b.Len() > 0 {
				close(first)
				first = nil
			}
		}
	}
	out := streamed{text: b.String(), err: s.Err()}
	if resp != nil {
		for _, part := range strings.Split(resp.Header.Get("Server-Timing"), ",") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(part), "batch;desc="); ok {
				out.batch = v
			}
			if v, ok := strings.CutPrefix(strings.TrimSpace(part), "cached;desc="); ok {
				out.cached = v
			}
		}
	}
	return out
}

// words returns n words of a fixed text, a prompt of about n tokens.
func words(n, from int) string {
	w := strings.Fields("the river ran past the old mill where a miller kept his books of grain and debts " +
		"while children played by the water and the seasons turned from spring to a long dry summer")
	out := make([]string, n)
	for i := range out {
		out[i] = w[(from+i)%len(w)]
	}
	return strings.Join(out, " ")
}

// TestServedGreedyAndSeededTextInCompany: a prompt's text at temperature 0,
// and with a seed at temperature 0.9, is the same served alone as while 15
// other requests of different lengths stream through the same path, joining
// and leaving its batches, on all three paths; and the three paths agree.
func TestServedGreedyAndSeededTextInCompany(t *testing.T) {
	url := serveTiny(t, 0, generate.Config{MaxSeqs: 16, MaxBatchedTokens: 64, MaxLatency: 20 * time.Millisecond}, nil)
	var others []completion
	for i := range 15 {
		others = append(others, completion{prompt: words(3+11*i, i), maxTokens: int64(4 + (i*13)%57),
			temp: float64(i%3) * 0.5, seed: int64(i), ignoreEOS: true})
	}
	targets := []completion{
		{prompt: "The quick brown fox jumps over the lazy dog near the river bank", maxTokens: 40},
		{prompt: "Once upon a time, in a land far away,", maxTokens: 40, temp: 0.9, seed: 42},
	}
	want := map[int]string{}
	for _, prefix := range prefixes {
		base := url + prefix
		for ti, target := range targets {
			alone := stream(t.Context(), base, target, nil)
			if alone.err != nil || alone.text == "" {
				t.Fatalf("%s alone: %q, %v", prefix, alone.text, alone.err)
			}
			if w, ok := want[ti]; ok && alone.text != w {
				t.Errorf("%s alone: %q; /v1 gave %q", prefix, alone.text, w)
			}
			want[ti] = alone.text

			// Eight others start; once one streams, the target and
			// seven more follow, so that sequences join and leave
			// while the target runs.
			var wg sync.WaitGroup
			errs := make(chan error, len(others))
			run := func(c completion, first chan<- struct{}) {
				wg.Go(func() {
					if r := stream(t.Context(), base, c, first); r.err != nil {
						errs <- r.err
					}
				})
			}
			started := make(chan struct{})
			run(others[0], started)
			for _, c := range others[1:8] {
				run(c, nil)
			}
			<-started
			var company streamed
			wg.Go(func() { company = stream(t.Context(), base, target, nil) })
			for _, c := range others[8:] {
				run(c, nil)
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Errorf("%s: another stream failed: %v", prefix, err)
			}
			if company.err != nil || company.text != alone.text {
				t.Errorf("%s target %d: in company %q (%v); alone %q", prefix, ti, company.text, company.err, alone.text)
			}
			if prefix != "/naive/v1" && (company.batch == "" || company.batch == "1") {
				t.Errorf("%s target %d: its first token ran in a batch of %q: want company", prefix, ti, company.batch)
			}
		}
	}
	// The seed is honoured: another seed draws another text.
	other := targets[1]
	other.seed = 43
	if r := stream(t.Context(), url+"/v1", other, nil); r.err != nil || r.text == want[1] {
		t.Errorf("seed 43: %q (%v); seed 42 gave the same", r.text, r.err)
	}
}

// TestServedPrefixHits: prompts that share a beginning of about 300 tokens
// are served the text a server without a prefix cache gives them, whether
// the beginning is computed (the first) or found cached (the others), alone
// and while 8 other streams, half of them with the same beginning, join and
// leave their batches; with a float32 KV cache and the -int8 twins' int8
// one (GroupQueryAttention's).
func TestServedPrefixHits(t *testing.T) {
	t.Run("float32 KV", func(t *testing.T) { testServedPrefixHits(t, tinySpec()) })
	t.Run("int8 KV", func(t *testing.T) { testServedPrefixHits(t, twinSpec(t, tinySpec().Arch)) })
}

func testServedPrefixHits(t *testing.T, spec gpt2.Spec) {
	ecfg := generate.Config{MaxSeqs: 16, MaxBatchedTokens: 64, MaxLatency: 20 * time.Millisecond}
	cold := ecfg
	cold.NoPrefixCache = true
	ref, url := serveSpec(t, spec, 0, cold, nil), serveSpec(t, spec, 0, ecfg, nil)
	shared := words(300, 0)
	var targets []completion
	for i, end := range []string{" The miller said", " At night the children", " In the spring the river"} {
		targets = append(targets, completion{prompt: shared + end, maxTokens: int64(20 + 5*i)})
	}
	want := make([]string, len(targets))
	for i, c := range targets {
		r := stream(t.Context(), ref+"/v1", c, nil)
		if r.err != nil || r.text == "" || r.cached != "0" {
			t.Fatalf("target %d without a cache: %q, %s cached (%v)", i, r.text, r.cached, r.err)
		}
		want[i] = r.text
	}
	for i, c := range targets {
		r := stream(t.Context(), url+"/v1", c, nil)
		if r.err != nil || r.text != want[i] {
			t.Errorf("target %d alone: %q (%v), want %q", i, r.text, r.err, want[i])
		}
		if hit := r.cached != "0" && r.cached != ""; hit != (i > 0) {
			t.Errorf("target %d alone: %s prompt tokens cached", i, r.cached)
		}
	}
	var wg sync.WaitGroup
	got := make([]streamed, len(targets))
	for i := range 8 {
		c := completion{prompt: words(20+9*i, i), maxTokens: int64(10 + 6*i), temp: 0.5, seed: int64(i), ignoreEOS: true}
		if i%2 == 0 {
			c.prompt = shared + c.prompt
		}
		wg.Go(func() {
			if r := stream(t.Context(), url+"/v1", c, nil); r.err != nil {
				t.Errorf("other %d: %v", i, r.err)
			}
		})
		if i == 3 {
			for j, c := range targets {
				wg.Go(func() { got[j] = stream(t.Context(), url+"/v1", c, nil) })
			}
		}
	}
	wg.Wait()
	for i, r := range got {
		if r.err != nil || r.text != want[i] || r.cached == "0" || r.cached == "" {
			t.Errorf("target %d in company: %q, %s cached (%v); want %q, a hit", i, r.text, r.cached, r.err, want[i])
		}
	}
}

// TestServedUnderKVPressure: more sequences than the KV holds run on /v1
// with the KV bound at the context. The engine preempts and recomputes; no
// step ever asks the decoder for more than its bound (onnx.ErrKVFull would
// be a 500), and every text is the one served alone.
func TestServedUnderKVPressure(t *testing.T) {
	url := serveTiny(t, 1024, generate.Config{MaxSeqs: 8, MaxBatchedTokens: 256}, nil)
	var reqs []completion
	for i := range 6 {
		reqs = append(reqs, completion{prompt: words(150+10*i, 3*i), maxTokens: 100, ignoreEOS: true})
	}
	want := make([]string, len(reqs))
	for i, c := range reqs {
		r := stream(t.Context(), url+"/naive/v1", c, nil)
		if r.err != nil {
			t.Fatalf("alone: %v", r.err)
		}
		want[i] = r.text
	}
	got := make([]streamed, len(reqs))
	var wg sync.WaitGroup
	for i, c := range reqs {
		wg.Go(func() { got[i] = stream(t.Context(), url+"/v1", c, nil) })
	}
	wg.Wait()
	for i := range reqs {
		if got[i].err != nil || got[i].text != want[i] {
			t.Errorf("request %d under KV pressure: %q (%v); alone %q", i, got[i].text, got[i].err, want[i])
		}
	}
	if p := metricValue(t, url, `infer_gen_num_preemptions_total{endpoint="v1"}`); p == "" || p == "0" {
		t.Errorf("preemptions = %q: the load was meant to outgrow the KV", p)
	}
}

// TestServedDecoderBadInput: awkward input through the real server gets its
// documented error, or works, and never a 500.
func TestServedDecoderBadInput(t *testing.T) {
	url := serveTiny(t, 0, generate.Config{MaxSeqs: 4, MaxBatchedTokens: 256}, nil)
	tok := bpe.GPT2()
	// Prompts of exactly n tokens: " the" is one token.
	ofTokens := func(n int) string { return "the" + strings.Repeat(" the", n-1) }
	if n := len(tok.Encode(ofTokens(1023))); n != 1023 {
		t.Fatalf("prompt of %d tokens, want 1023", n)
	}
	stops := func(n, size int) string {
		s := make([]string, n)
		for i := range s {
			s[i] = fmt.Sprintf("%0*d", size, i)
		}
		b, _ := json.Marshal(s)
		return string(b)
	}
	for _, tc := range []struct {
		name, path, body string
		status           int
		code             string // the error's code, or for a 200 the finish reason
	}{
		{"prompt over the context", "/v1/completions", `{"prompt":"` + ofTokens(1100) + `"}`, 413, "context_length_exceeded"},
		{"prompt of the whole context", "/v1/completions", `{"prompt":"` + ofTokens(1024) + `"}`, 413, "context_length_exceeded"},
		{"prompt one short of the context", "/v1/completions", `{"prompt":"` + ofTokens(1023) + `"}`, 200, "length"},
		{"max_tokens past the context", "/v1/completions", `{"prompt":"` + ofTokens(1000) + `","max_tokens":25}`, 422, "context_length_exceeded"},
		{"max_tokens up to the context", "/static/v1/completions", `{"prompt":"` + ofTokens(1000) + `","max_tokens":24,"ignore_eos":true}`, 200, "length"},
		{"chat over the context", "/v1/chat/completions", `{"messages":[{"role":"user","content":"` + ofTokens(1100) + `"}]}`, 413, "context_length_exceeded"},
		{"empty prompt", "/v1/completions", `{"prompt":""}`, 422, "empty_prompt"},
		{"empty token list", "/naive/v1/completions", `{"prompt":[]}`, 422, "empty_prompt"},
		{"token outside the vocabulary", "/v1/completions", `{"prompt":[1,50257]}`, 422, "invalid_value"},
		{"negative token", "/v1/completions", `{"prompt":[-1]}`, 422, "invalid_value"},
		{"invalid UTF-8", "/v1/completions", "{\"prompt\":\"caf\xe9 \xff\xfe\"}", 400, "invalid_utf8"},
		{"invalid UTF-8 in chat", "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"\xc3\x28\"}]}", 400, "invalid_utf8"},
		{"lone surrogate escape (decoded as U+FFFD)", "/v1/completions", `{"prompt":"a \ud800 b","max_tokens":4}`, 200, "length"},
		{"emoji", "/v1/completions", `{"prompt":"I 😀 the 🇫🇷 flag 👍🏽 and 👨‍👩‍👧","max_tokens":8,"ignore_eos":true}`, 200, "length"},
		{"CJK", "/static/v1/completions", `{"prompt":"东京是日本的首都。한국어 텍스트","max_tokens":8,"ignore_eos":true}`, 200, "length"},
		{"emoji and CJK in chat", "/naive/v1/chat/completions", `{"messages":[{"role":"user","content":"你好 🌏"}],"max_tokens":8,"ignore_eos":true}`, 200, "length"},
		{"100 stop strings", "/v1/completions", `{"prompt":"x","stop":` + stops(100, 3) + `}`, 422, "invalid_value"},
		{"17 stop strings", "/v1/completions", `{"prompt":"x","stop":` + stops(17, 3) + `}`, 422, "invalid_value"},
		{"16 stop strings of 256 bytes", "/v1/completions", `{"prompt":"x","max_tokens":8,"ignore_eos":true,"stop":` + stops(16, 256) + `}`, 200, "length"},
		{"a stop string of 257 bytes", "/v1/completions", `{"prompt":"x","stop":` + stops(1, 257) + `}`, 422, "invalid_value"},
		{"an empty stop string", "/v1/completions", `{"prompt":"x","stop":[""]}`, 422, "invalid_value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := http.Post(url+tc.path, "application/json", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			raw, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			var body struct {
				Error *struct{ Code, Message string }
				Usage struct {
					PromptTokens int `json:"prompt_tokens"`
				}
				Choices []struct {
					FinishReason string `json:"finish_reason"`
				}
			}
			if err := json.Unmarshal(raw, &body); err != nil {
				t.Fatalf("status %d, body %.300s: %v", resp.StatusCode, raw, err)
			}
			got := ""
			switch {
			case body.Error != nil:
				got = body.Error.Code
			case len(body.Choices) == 1:
				got = body.Choices[0].FinishReason
			}
			if resp.StatusCode != tc.status || got != tc.code {
				t.Errorf("got %d %q, want %d %q: %.300s", resp.StatusCode, got, tc.status, tc.code, raw)
			}
		})
	}
}

// TestServedTextRoundTrip: emoji and CJK prompts are tokenised as GPT-2
// does, and the streamed text is the generated tokens' bytes exactly, the
// same as the whole answer: the tokens the decoder draws on its own, outside
// the server (bytes that no token completes come out as U+FFFD, as JSON
// has them).
func TestServedTextRoundTrip(t *testing.T) {
	url := serveTiny(t, 0, generate.Config{MaxSeqs: 4}, nil)
	_, d := openTestDecoder(t, tinySpec(), DecoderConfig{})
	tok := bpe.GPT2()
	prompt := "Emoji 😀🇫🇷👍🏽 and CJK 东京 한국 日本語: "
	ids := tok.Encode(prompt)
	for seed := int64(1); seed <= 2; seed++ {
		c := completion{prompt: prompt, maxTokens: 200, temp: 1.5, seed: seed, ignoreEOS: true}
		tr := decodeAlone(t, d, models.SeqID(seed), ids, int(c.maxTokens)-1,
			models.Sampling{Temperature: float32(c.temp), TopP: 1, Seed: uint64(seed)})
		var b []byte
		for _, id := range tr.tokens {
			if id != bpe.EOS {
				b = append(b, tok.TokenBytes(id)...)
			}
		}
		want := asJSON(t, string(b))
		got := stream(t.Context(), url+"/v1", c, nil)
		if got.err != nil || got.text != want {
			t.Errorf("seed %d: streamed %q (%v);\nwant %q", seed, got.text, got.err, want)
		}
		whole := complete(t, url+"/v1", c)
		if whole.Choices[0].Text != want || whole.Usage.PromptTokens != int64(len(ids)) {
			t.Errorf("seed %d: whole answer %q, %d prompt tokens; want %q, %d", seed, whole.Choices[0].Text, whole.Usage.PromptTokens, want, len(ids))
		}
	}
}

// TestServedSplitCharacters: when the model generates emoji and CJK, whose
// characters GPT-2's byte-level BPE splits across tokens, every streamed
// chunk is whole characters and the stream is the text exactly, on every
// path. The untrained model never draws such tokens in order, so the
// instances' samples are replaced by the text's tokens, after the real
// steps.
func TestServedSplitCharacters(t *testing.T) {
	tok := bpe.GPT2()
	text := "东京 😀 한국어 👍🏽 日本語 🇫🇷 fin"
	script := tok.Encode(text)
	// Each token releases the whole characters it completes, in a chunk of
	// its own; a token that completes none sends nothing.
	wantChunks, released := 0, 0
	var b []byte
	for _, id := range script {
		b = append(b, tok.TokenBytes(id)...)
		whole := len(b)
		for !utf8.Valid(b[:whole]) {
			whole--
		}
		if whole > released {
			wantChunks++
			released = whole
		}
	}
	if wantChunks == len(script) {
		t.Fatalf("%q: no token ends inside a character", text)
	}
	url := serveTiny(t, 0, generate.Config{MaxSeqs: 4}, func(f models.DecoderFactory) models.DecoderFactory {
		return &scriptedFactory{DecoderFactory: f, script: script}
	})
	body := fmt.Sprintf(`{"prompt":"write it","max_tokens":%d,"ignore_eos":true,"stream":true}`, len(script))
	for _, prefix := range prefixes {
		resp, err := http.Post(url+prefix+"/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s %v", prefix, resp.StatusCode, raw, err)
		}
		var got strings.Builder
		chunks := 0
		for _, line := range strings.Split(string(raw), "\n") {
			data, ok := strings.CutPrefix(line, "data: ")
			if !ok || data == "[DONE]" {
				continue
			}
			var ch struct{ Choices []struct{ Text string } }
			if err := json.Unmarshal([]byte(data), &ch); err != nil || len(ch.Choices) != 1 {
				t.Fatalf("%s: chunk %s: %v", prefix, data, err)
			}
			if c := ch.Choices[0].Text; strings.ContainsRune(c, utf8.RuneError) {
				t.Errorf("%s: chunk %q holds U+FFFD: a character was cut", prefix, c)
			}
			got.WriteString(ch.Choices[0].Text)
			chunks++
		}
		if got.String() != text || chunks != wantChunks {
			t.Errorf("%s: streamed %q in %d chunks; want %q in %d (of %d tokens)", prefix, got.String(), chunks, text, wantChunks, len(script))
		}
	}
}

// scriptedFactory makes instances that run their steps for real, then
// replace each sampled token by the script's token at that position of the
// answer.
type scriptedFactory struct {
	models.DecoderFactory
	script []int32
}

func (f *scriptedFactory) New(ctx context.Context, worker int) (models.Decoder, error) {
	d, err := f.DecoderFactory.New(ctx, worker)
	if err != nil {
		return nil, err
	}
	return &scriptedDecoder{Decoder: d, script: f.script}, nil
}

type scriptedDecoder struct {
	models.Decoder
	script []int32
}

func (d *scriptedDecoder) Step(ctx context.Context, seqs []models.StepSeq, next []int32) error {
	if err := d.Decoder.Step(ctx, seqs, next); err != nil {
		return err
	}
	for i, s := range seqs {
		if k := s.Past + len(s.Tokens) - s.PromptLen; s.Sample && k >= 0 && k < len(d.script) {
			next[i] = d.script[k]
		}
	}
	return nil
}

// asJSON returns s as a JSON string carries it: each invalid byte U+FFFD.
func asJSON(t *testing.T, s string) string {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var out string
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func complete(t *testing.T, base string, c completion) *oai.Completion {
	t.Helper()
	client := oai.NewClient(option.WithBaseURL(base+"/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	r, err := client.Completions.New(t.Context(), oai.CompletionNewParams{
		Model: "gpt2-tiny", Prompt: oai.CompletionNewParamsPromptUnion{OfString: oai.String(c.prompt)},
		MaxTokens: oai.Int(c.maxTokens), Temperature: oai.Float(c.temp), Seed: oai.Int(c.seed),
	}, option.WithJSONSet("ignore_eos", c.ignoreEOS))
	if err != nil || len(r.Choices) != 1 {
		t.Fatalf("completion: %v, %v", r, err)
	}
	return r
}

// failingFactory makes instances whose Step fails once each time fail is
// set.
type failingFactory struct {
	models.DecoderFactory
	fail atomic.Bool
}

func (f *failingFactory) New(ctx context.Context, worker int) (models.Decoder, error) {
	d, err := f.DecoderFactory.New(ctx, worker)
	if err != nil {
		return nil, err
	}
	return &failingDecoder{Decoder: d, f: f}, nil
}

type failingDecoder struct {
	models.Decoder
	f *failingFactory
}

var errInjected = errors.New("injected step failure")

func (d *failingDecoder) Step(ctx context.Context, seqs []models.StepSeq, next []int32) error {
	if d.f.fail.CompareAndSwap(true, false) {
		return errInjected
	}
	return d.Decoder.Step(ctx, seqs, next)
}

// TestServedStepFailure: when a decoder step fails, the requests of that
// step fail (a stream with an error event in OpenAI's shape, a whole answer
// with 500), the server goes on, and the instance's cache is intact: the
// next request's text is what it was before.
func TestServedStepFailure(t *testing.T) {
	var ff *failingFactory
	url := serveTiny(t, 0, generate.Config{MaxSeqs: 4}, func(f models.DecoderFactory) models.DecoderFactory {
		ff = &failingFactory{DecoderFactory: f}
		return ff
	})
	c := completion{prompt: "A long walk home", maxTokens: 64, ignoreEOS: true}
	before := stream(t.Context(), url+"/v1", c, nil)
	if before.err != nil {
		t.Fatal(before.err)
	}

	resp, err := http.Post(url+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt":"fails mid-stream","max_tokens":500,"ignore_eos":true,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	var events []string
	buf := make([]byte, 64<<10)
	var all strings.Builder
	for armed := false; ; {
		n, err := resp.Body.Read(buf)
		all.Write(buf[:n])
		if !armed && strings.Count(all.String(), "data: ") >= 3 {
			ff.fail.Store(true) // after a few tokens
			armed = true
		}
		if err != nil {
			break
		}
	}
	for _, line := range strings.Split(all.String(), "\n") {
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			events = append(events, d)
		}
	}
	n := len(events)
	if n < 4 || events[n-1] != "[DONE]" || !strings.Contains(events[n-2], `"code":"model_error"`) || !strings.Contains(events[n-2], `"type":"server_error"`) {
		t.Errorf("stream after the failure ends with %q", events[max(0, n-3):])
	}

	ff.fail.Store(true)
	r, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"fails whole","max_tokens":8}`))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != http.StatusInternalServerError || !strings.Contains(string(raw), `"code":"model_error"`) {
		t.Errorf("whole answer of a failed step: %d %s", r.StatusCode, raw)
	}

	if after := stream(t.Context(), url+"/v1", c, nil); after.err != nil || after.text != before.text {
		t.Errorf("after the failures: %q (%v); before %q", after.text, after.err, before.text)
	}
}

func metricValue(t *testing.T, url, name string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	return ""
}
