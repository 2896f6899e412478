package openai_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inferhq/infer/loadgen/corpus"
	"github.com/inferhq/infer/loadgen/llm"
)

// TestLoad drives a running server with a closed loop of streams through
// loadgen/llm and prints what it measured as one line, "load: {json}". It
// is the load of scripts/accept-gpt2.sh's serve-* sections (until infer
// bench runs LLM scenarios) and runs only when INFER_LOAD_URL is set:
//
//	INFER_LOAD_URL            base URL, e.g. http://127.0.0.1:28000/static/v1
//	INFER_LOAD_STREAMS        closed-loop streams (default 32)
//	INFER_LOAD_WARMUP         sent but not measured (default 5s)
//	INFER_LOAD_DURATION       the measured window (default 20s)
//	INFER_LOAD_DRAIN          how long the window's streams may finish after
//	                          it (default 2m)
//	INFER_LOAD_PROMPT_WORDS   prompts of MIN-MAX words, uniform (default 8-128)
//	INFER_LOAD_PROMPT_TOKENS  instead, prompts of this many GPT-2 tokens: a
//	                          count or a distribution in JSON
//	INFER_LOAD_OUTPUT_TOKENS  max_tokens, with ignore_eos: a count or a
//	                          distribution in JSON (default 128), e.g.
//	                          {"dist":"lognormal","median":50,"sigma":0.8,"max":256}
//	INFER_LOAD_SEED           the payload's seed (default 1)
func TestLoad(t *testing.T) {
	base := os.Getenv("INFER_LOAD_URL")
	if base == "" {
		t.Skip("INFER_LOAD_URL not set: this is scripts/accept-gpt2.sh's load driver")
	}
	env := func(key, def string) string {
		if v := os.Getenv(key); v != "" {
			return v
		}
		return def
	}
	dur := func(key, def string) time.Duration {
		d, err := time.ParseDuration(env(key, def))
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		return d
	}
	length := func(key, def string) llm.Length {
		var l llm.Length
		if v := env(key, def); v != "" {
			if err := json.Unmarshal([]byte(v), &l); err != nil {
				t.Fatalf("%s: %v", key, err)
			}
		}
		return l
	}
	streams, err := strconv.Atoi(env("INFER_LOAD_STREAMS", "32"))
	if err != nil {
		t.Fatalf("INFER_LOAD_STREAMS: %v", err)
	}
	seed, err := strconv.ParseUint(env("INFER_LOAD_SEED", "1"), 10, 64)
	if err != nil {
		t.Fatalf("INFER_LOAD_SEED: %v", err)
	}
	pcfg := llm.PayloadConfig{
		API: llm.Completions, Stream: true, IgnoreEOS: true, Seed: seed,
		PromptTokens: length("INFER_LOAD_PROMPT_TOKENS", ""),
		OutputTokens: length("INFER_LOAD_OUTPUT_TOKENS", "128"),
		Extra:        map[string]any{"temperature": 0},
	}
	if pcfg.PromptTokens.IsZero() {
		var lo, hi int
		if _, err := fmt.Sscanf(env("INFER_LOAD_PROMPT_WORDS", "8-128"), "%d-%d", &lo, &hi); err != nil || lo < 1 || hi < lo {
			t.Fatalf("INFER_LOAD_PROMPT_WORDS %q: want MIN-MAX", os.Getenv("INFER_LOAD_PROMPT_WORDS"))
		}
		pcfg.Prompts = wordPrompts(seed, lo, hi, 1024)
	}
	gen, err := llm.NewGenerator(pcfg)
	if err != nil {
		t.Fatal(err)
	}
	client, err := llm.NewClient(llm.ClientConfig{BaseURL: base, Timeout: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	out, err := llm.Run(t.Context(), llm.RunConfig{
		Client: client, Source: gen, API: llm.Completions, Stream: true, Concurrency: streams,
		Warmup: dur("INFER_LOAD_WARMUP", "5s"), Duration: dur("INFER_LOAD_DURATION", "20s"), Drain: dur("INFER_LOAD_DRAIN", "2m"),
	})
	if err != nil {
		t.Fatal(err)
	}
	l := out.LLM
	line, _ := json.Marshal(map[string]any{
		"url": base, "streams": streams, "window_s": out.Window.Seconds(),
		"output_tokens_per_s": l.OutputTokensPerS, "requests_per_s": l.RequestsPerS,
		"completed": l.Completed, "failed": l.Failed, "failures": l.Failures, "errors": l.Errors,
		"ttft_p50_ms": l.TTFT.P50, "ttft_p99_ms": l.TTFT.P99, "itl_p50_ms": l.ITL.P50, "itl_p99_ms": l.ITL.P99,
		"tpot_mean_ms": l.TPOT.Mean, "e2el_mean_ms": l.E2EL.Mean, "client_cpu": out.ClientCPU, "flags": l.Flags,
	})
	fmt.Printf("load: %s\n", line)
	if l.Completed == 0 || l.Failed > 0 {
		t.Errorf("%d requests completed, %d failed: %v", l.Completed, l.Failed, l.Errors)
	}
}

// wordPrompts returns n prompts of lo to hi words (uniform) of the built-in
// English corpus.
func wordPrompts(seed uint64, lo, hi, n int) []llm.Prompt {
	var words []string
	for _, s := range corpus.Masked() {
		words = append(words, strings.Fields(strings.ReplaceAll(s, "[MASK]", "thing"))...)
	}
	r := rand.New(rand.NewPCG(seed, 11))
	ps := make([]llm.Prompt, n)
	for i := range ps {
		k, at := lo+r.IntN(hi-lo+1), r.IntN(len(words))
		w := make([]string, k)
		for j := range w {
			w[j] = words[(at+j)%len(words)]
		}
		ps[i] = llm.Prompt{Text: strings.Join(w, " ")}
	}
	return ps
}
