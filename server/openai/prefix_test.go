package openai_test

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/simlm"
	"github.com/inferhq/infer/server"
	"github.com/inferhq/infer/server/openai"
	"github.com/inferhq/infer/server/servertest"
)

// cachedCompletion posts prompt and returns its usage's prompt and cached
// tokens and its Server-Timing.
func cachedCompletion(t *testing.T, url, prompt string, fields ...string) (promptTokens, cached int, timing string) {
	t.Helper()
	req := `{"prompt":` + strconv.Quote(prompt) + `,"max_tokens":4,"temperature":0`
	for _, f := range fields {
		req += "," + f
	}
	resp := post(t, url+"/v1/completions", req+"}")
	body := readAll(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	var w struct {
		Usage struct {
			PromptTokens        int `json:"prompt_tokens"`
			PromptTokensDetails struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(body), &w); err != nil {
		t.Fatal(err)
	}
	return w.Usage.PromptTokens, w.Usage.PromptTokensDetails.CachedTokens, resp.Header.Get("Server-Timing")
}

var cachedTimingRE = regexp.MustCompile(`, cached;desc=(\d+)$`)

// The prefix cache over HTTP: cached tokens in usage and Server-Timing, the
// counters, and the admin API turning it off and changing the block size.
func TestPrefixCacheOverHTTP(t *testing.T) {
	ts := startServer(t, simlm.Config{}, openai.Config{}, server.Config{AdminToken: "secret"})
	prompt := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 20)
	n, c1, _ := cachedCompletion(t, ts.URL, prompt)
	_, c2, timing := cachedCompletion(t, ts.URL, prompt)
	want := (n - 1) / 16 * 16
	if c1 != 0 || c2 != want {
		t.Errorf("cached tokens %d, then %d; want 0, then %d of %d", c1, c2, want, n)
	}
	if m := cachedTimingRE.FindStringSubmatch(timing); m == nil || m[1] != strconv.Itoa(want) {
		t.Errorf("Server-Timing %q, want it to end in cached;desc=%d", timing, want)
	}
	// vLLM's cache_salt: only requests with the same salt share.
	if _, c, _ := cachedCompletion(t, ts.URL, prompt, `"cache_salt":"tenant a"`); c != 0 {
		t.Errorf("another tenant's first request: %d cached tokens, want 0", c)
	}
	if _, c, _ := cachedCompletion(t, ts.URL, prompt, `"cache_salt":"tenant a"`); c != want {
		t.Errorf("its second: %d cached tokens, want %d", c, want)
	}
	resp := post(t, ts.URL+"/v1/completions", `{"prompt":"x","cache_salt":"`+strings.Repeat("s", 300)+`"}`)
	if body := readAll(t, resp); resp.StatusCode != 422 || !strings.Contains(body, "cache salt of 300 bytes") {
		t.Errorf("a 300-byte salt: %d %s", resp.StatusCode, body)
	}
	for name, want := range map[string]int{
		`infer_gen_prefix_cache_queries_total{endpoint="v1"}`:     4 * n,
		`infer_gen_prefix_cache_hits_total{endpoint="v1"}`:        2 * want,
		`infer_gen_prefix_cache_queries_total{endpoint="static"}`: 0,
	} {
		if got := metric(t, ts.URL, name); got != strconv.Itoa(want) {
			t.Errorf("%s = %q, want %d", name, got, want)
		}
	}

	patch := func(body string) (int, string) {
		req, _ := http.NewRequest(http.MethodPatch, ts.URL+"/admin/batching", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer secret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, readAll(t, resp)
	}
	for _, tc := range []struct {
		body   string
		status int
		want   string
	}{
		{`{"block_size":5000}`, 422, "block_size 5000: want 1 to 1024"},
		{`{"prefix_cache":"yes"}`, 400, "malformed_json"},
		{`{"prefix_cache":false}`, 200, `"prefix_cache":false,"block_size":16`},
	} {
		if status, body := patch(tc.body); status != tc.status || !strings.Contains(body, tc.want) {
			t.Errorf("PATCH %s: %d %s; want %d %s", tc.body, status, body, tc.status, tc.want)
		}
	}
	if _, c, _ := cachedCompletion(t, ts.URL, prompt); c != 0 {
		t.Errorf("prefix cache off: %d cached tokens", c)
	}
	if got := metric(t, ts.URL, `infer_gen_prefix_cache_queries_total{endpoint="v1"}`); got != strconv.Itoa(4*n) {
		t.Errorf("queries counted while the cache is off: %s, want %d", got, 4*n)
	}
	if status, body := patch(`{"prefix_cache":true,"block_size":32}`); status != 200 || !strings.Contains(body, `"prefix_cache":true,"block_size":32`) {
		t.Fatalf("PATCH on again, blocks of 32: %d %s", status, body)
	}
	cachedCompletion(t, ts.URL, prompt)
	if _, c, _ := cachedCompletion(t, ts.URL, prompt); c != (n-1)/32*32 {
		t.Errorf("blocks of 32: %d cached tokens, want %d", c, (n-1)/32*32)
	}
	if got := metric(t, ts.URL, `infer_gen_batching_info{block_size="32",kv_tokens="65536",max_batched_tokens="2048",max_latency="0s",max_seqs="32",policy="continuous",prefix_cache="true"}`); got != "1" {
		t.Errorf("infer_gen_batching_info with the new settings = %q, want 1", got)
	}
}

// noBlocks is sim-lm described as a decoder that cannot reuse KV.
type noBlocks struct{ *simlm.Factory }

func (f noBlocks) Decoder() models.DecoderInfo {
	d := f.Factory.Decoder()
	d.BlockKV = false
	return d
}

// A model whose decoder cannot reuse KV serves with the cache off, says
// so, and refuses to turn it on.
func TestPrefixCacheStaysOffWithoutBlockKV(t *testing.T) {
	f, err := simlm.New(simlm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := openai.New(openai.Config{}, noBlocks{f})
	if err != nil {
		t.Fatal(err)
	}
	srv := servertest.Start(t, server.Config{AdminToken: "secret", DrainTimeout: 10 * time.Second}, svc)
	prompt := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 20)
	cachedCompletion(t, srv.URL, prompt)
	if _, c, timing := cachedCompletion(t, srv.URL, prompt); c != 0 || !strings.HasSuffix(timing, "cached;desc=0") {
		t.Errorf("cached tokens %d, Server-Timing %q; want none", c, timing)
	}
	req, _ := http.NewRequest(http.MethodPatch, srv.URL+"/admin/batching", strings.NewReader(`{"prefix_cache":true}`))
	req.Header.Set("Authorization", "Bearer secret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if body := readAll(t, resp); resp.StatusCode != 422 || !strings.Contains(body, "cannot reuse KV") {
		t.Errorf("PATCH prefix_cache true: %d %s", resp.StatusCode, body)
	}
	req, _ = http.NewRequest(http.MethodGet, srv.URL+"/admin/batching", nil)
	req.Header.Set("Authorization", "Bearer secret")
	resp, _ = http.DefaultClient.Do(req)
	if body := readAll(t, resp); !strings.Contains(body, `"prefix_cache":false`) {
		t.Errorf("GET /admin/batching = %s", body)
	}
}
