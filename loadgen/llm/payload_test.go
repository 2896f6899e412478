package llm

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inferhq/infer/models/bpe"
)

func TestLengthJSON(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Length
	}{
		{`256`, Fixed(256)},
		{`{"dist":"uniform","min":100,"max":300}`, Length{Dist: "uniform", Min: 100, Max: 300}},
		{`{"dist":"lognormal","median":138,"sigma":0.8,"max":1024}`, Length{Dist: "lognormal", Median: 138, Sigma: 0.8, Max: 1024}},
	} {
		var l Length
		if err := json.Unmarshal([]byte(tc.in), &l); err != nil || l != tc.want {
			t.Errorf("%s: %+v, %v; want %+v", tc.in, l, err, tc.want)
		}
		b, _ := json.Marshal(l)
		var back Length
		if err := json.Unmarshal(b, &back); err != nil || back != l {
			t.Errorf("%s round trip: %s → %+v, %v", tc.in, b, back, err)
		}
	}
	for _, bad := range []string{
		`0`, `-3`, `2000000`, `1.5`, `"12"`, `{"dist":"normal","min":1,"max":2}`, `{"dist":"uniform","min":5,"max":2}`,
		`{"dist":"uniform","min":0,"max":2}`, `{"dist":"uniform","min":1,"max":2,"median":3}`, `{"dist":"lognormal","median":100,"sigma":1}`,
		`{"dist":"lognormal","median":0,"sigma":1,"max":10}`, `{"dist":"lognormal","median":10,"sigma":-1,"max":10}`,
		`{"dist":"uniform","min":1,"max":2,"mean":3}`, `{"min":1,"max":2}`,
	} {
		var l Length
		err := json.Unmarshal([]byte(bad), &l)
		if err == nil {
			t.Errorf("%s accepted as %+v", bad, l)
		}
	}
	if err := (Length{N: 5, Min: 2}).Validate(); !errors.Is(err, ErrLength) {
		t.Errorf("a fixed length with min: %v", err)
	}
}

func TestLengthDraw(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	u := Length{Dist: "uniform", Min: 10, Max: 20}
	seen := map[int]bool{}
	for range 10000 {
		v := u.Draw(r)
		if v < 10 || v > 20 {
			t.Fatalf("uniform [10, 20] drew %d", v)
		}
		seen[v] = true
	}
	if len(seen) != 11 {
		t.Errorf("uniform [10, 20] drew %d distinct values, want 11", len(seen))
	}
	ln := Length{Dist: "lognormal", Median: 138, Sigma: 0.5, Max: 10000}
	var vs []float64
	for range 20001 {
		vs = append(vs, float64(ln.Draw(r)))
	}
	below := 0
	for _, v := range vs {
		if v < 138 {
			below++
		}
	}
	if frac := float64(below) / float64(len(vs)); math.Abs(frac-0.5) > 0.02 {
		t.Errorf("lognormal median 138: %.3f of draws below it, want 0.5", frac)
	}
	capped := Length{Dist: "lognormal", Median: 100, Sigma: 2, Min: 50, Max: 120}
	for range 1000 {
		if v := capped.Draw(r); v < 50 || v > 120 {
			t.Fatalf("lognormal [50, 120] drew %d", v)
		}
	}
	if got := (Length{Dist: "lognormal", Median: 100, Sigma: 0.5, Max: 1}).Mean(); math.Abs(got-100*math.Exp(0.125)) > 1e-9 {
		t.Errorf("lognormal mean %v", got)
	}
}

func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("body %s: %v", b, err)
	}
	return m
}

func TestGenerator(t *testing.T) {
	tok := bpe.GPT2()
	cfg := PayloadConfig{API: Completions, Model: "gpt2", Stream: true, IgnoreEOS: true, Seed: 9,
		PromptTokens: Length{Dist: "uniform", Min: 50, Max: 300}, OutputTokens: Fixed(64), Extra: map[string]any{"temperature": 0}}
	g, err := NewGenerator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	g2, _ := NewGenerator(cfg)
	for i := range uint64(50) {
		req := g.Request(i)
		if again := g2.Request(i); string(again.Body) != string(req.Body) {
			t.Fatalf("request %d differs between two generators of one seed", i)
		}
		m := decode(t, req.Body)
		prompt, _ := m["prompt"].(string)
		if n := tok.Count(prompt); n < req.PromptTokens-2 || n > req.PromptTokens+2 || req.PromptTokens < 50 || req.PromptTokens > 300 {
			t.Errorf("request %d: prompt of %d tokens, drawn %d", i, n, req.PromptTokens)
		}
		if m["max_tokens"] != 64.0 || m["stream"] != true || m["ignore_eos"] != true || m["model"] != "gpt2" || m["temperature"] != 0.0 {
			t.Errorf("request %d body %s", i, req.Body)
		}
		if so, _ := m["stream_options"].(map[string]any); so["include_usage"] != true {
			t.Errorf("request %d: no include_usage", i)
		}
		if req.MaxTokens != 64 || !req.Stream || req.API != Completions {
			t.Errorf("request %d: %+v", i, req)
		}
	}
	g3, _ := NewGenerator(PayloadConfig{Seed: 10, PromptTokens: cfg.PromptTokens})
	if string(g3.Request(0).Body) == string(g.Request(0).Body) {
		t.Errorf("seeds 9 and 10 gave the same request")
	}
}

func TestGeneratorChat(t *testing.T) {
	g, err := NewGenerator(PayloadConfig{API: Chat, Prompts: []Prompt{
		{Messages: []Message{{"system", "Be brief."}, {"user", "What is the capital of France?"}}},
	}, PromptTokens: Fixed(40)})
	if err != nil {
		t.Fatal(err)
	}
	req := g.Request(3)
	m := decode(t, req.Body)
	msgs, _ := m["messages"].([]any)
	if len(msgs) != 2 {
		t.Fatalf("messages %v", m["messages"])
	}
	last := msgs[1].(map[string]any)
	if n := bpe.GPT2().Count(last["content"].(string)); n < 38 || n > 42 || last["role"] != "user" {
		t.Errorf("last message %v: %d tokens, want 40 (extended with the prompt itself)", last, n)
	}
	if _, ok := m["stream"]; ok || m["max_tokens"] != float64(DefaultOutputTokens) {
		t.Errorf("body %s: want no stream, max_tokens %d", req.Body, DefaultOutputTokens)
	}
	// Uncut, a prompt's tokens are counted as they are.
	g, _ = NewGenerator(PayloadConfig{API: Chat, Prompts: []Prompt{{Text: "Hello there", ReplyTokens: 77}}})
	if req := g.Request(0); req.PromptTokens != 2 || req.MaxTokens != 77 {
		t.Errorf("uncut chat: %d prompt tokens, max_tokens %d; want 2 and the reply's 77", req.PromptTokens, req.MaxTokens)
	}
	if _, err := NewGenerator(PayloadConfig{Extra: map[string]any{"max_tokens": 3}}); err == nil {
		t.Errorf("an extra field overriding max_tokens was accepted")
	}
	if _, err := NewGenerator(PayloadConfig{Prompts: []Prompt{}}); err == nil {
		t.Errorf("an empty prompt set was accepted")
	}
	if _, err := NewGenerator(PayloadConfig{OutputTokens: Fixed(-1)}); err == nil {
		t.Errorf("output_tokens -1 was accepted")
	}
}

func TestBuiltinPrompts(t *testing.T) {
	ps := builtinPrompts()
	if len(ps) < 600 {
		t.Fatalf("%d built-in prompts", len(ps))
	}
	for _, p := range ps {
		if strings.Contains(p.Text, "[MASK]") || p.Text == "" {
			t.Fatalf("built-in prompt %q", p.Text)
		}
	}
	g, _ := NewGenerator(PayloadConfig{PromptTokens: Fixed(1000)})
	if n := bpe.GPT2().Count(decode(t, g.Request(1).Body)["prompt"].(string)); n < 995 || n > 1005 {
		t.Errorf("a 1000-token prompt from sentences: %d tokens", n)
	}
}

func TestReadPrompts(t *testing.T) {
	jsonl := `{"prompt": "Tell me a story."}
{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]}

{"id": "x", "conversations": [{"from": "human", "value": "What is Go?"}, {"from": "gpt", "value": "A programming language made at Google."}]}
{"id": "y", "conversations": [{"from": "gpt", "value": "orphan"}]}
`
	ps, skipped, err := ReadPrompts(strings.NewReader("\uFEFF" + jsonl))
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 3 || skipped != 1 || ps[0].Text != "Tell me a story." || len(ps[1].Messages) != 2 ||
		ps[2].Text != "What is Go?" || ps[2].ReplyTokens != bpe.GPT2().Count("A programming language made at Google.") {
		t.Errorf("prompts %+v, skipped %d", ps, skipped)
	}
	array := `[{"id":"a","conversations":[{"from":"human","value":"one"},{"from":"gpt","value":"two words"}]},
	{"id":"b","conversations":[]}, {"id":"c","conversations":[{"from":"human","value":"three"}]}]`
	ps, skipped, err = ReadPrompts(strings.NewReader(array))
	if err != nil || len(ps) != 2 || skipped != 1 || ps[0].ReplyTokens != 2 || ps[1].ReplyTokens != 0 {
		t.Errorf("ShareGPT array: %+v, skipped %d, %v", ps, skipped, err)
	}
	for _, tc := range []struct{ in, line string }{
		{"{\"prompt\": \"a\"}\n{oops}\n", "line 2"},
		{"{\"prompt\": \"a\", \"messages\": [{\"role\":\"user\",\"content\":\"b\"}]}\n", "line 1"},
		{"{\"other\": 1}\n", "line 1"},
		{"{\"messages\": []}\n", "line 1"},
		{"{\"messages\": [{\"content\": \"no role\"}]}\n", "line 1"},
		{"", "no prompts"},
		{"[]", "no prompts"},
		{"[{\"prompt\": \"a\"}, 3]", "line 2"},
	} {
		_, _, err := ReadPrompts(strings.NewReader(tc.in))
		var pe *PromptFileError
		if err == nil || !strings.Contains(err.Error(), tc.line) || (strings.HasPrefix(tc.line, "line") && !errors.As(err, &pe)) {
			t.Errorf("ReadPrompts(%q) = %v, want an error naming %q", tc.in, err, tc.line)
		}
	}
	path := filepath.Join(t.TempDir(), "p.jsonl")
	if err := os.WriteFile(path, []byte(jsonl), 0o644); err != nil {
		t.Fatal(err)
	}
	if ps, _, err := ReadPromptsFile(path); err != nil || len(ps) != 3 {
		t.Errorf("ReadPromptsFile: %d prompts, %v", len(ps), err)
	}
	if _, _, err := ReadPromptsFile(path + ".missing"); err == nil {
		t.Errorf("a missing file was read")
	}
}

func TestValidUTF8(t *testing.T) {
	for in, want := range map[string]string{"abc": "abc", "ab\xe2\x82": "ab", "é\xc3": "é", "a\xffb": "a\uFFFDb", "": ""} {
		if got := validUTF8(in); got != want {
			t.Errorf("validUTF8(%q) = %q, want %q", in, got, want)
		}
	}
}
