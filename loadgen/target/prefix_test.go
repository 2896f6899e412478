package target

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestGenPrefixCache: the prefix cache's settings from
// infer_gen_batching_info, and its hit rate over a window from the
// counters' deltas.
func TestGenPrefixCache(t *testing.T) {
	text := func(queries, hits string) []Sample {
		s, err := parseMetrics(strings.NewReader(`infer_gen_batching_info{block_size="16",kv_tokens="65536",max_batched_tokens="2048",max_latency="100ms",max_seqs="32",policy="continuous",prefix_cache="false"} 1
infer_gen_prefix_cache_queries_total{endpoint="v1"} `+queries+`
infer_gen_prefix_cache_hits_total{endpoint="v1"} `+hits+`
infer_gen_prefix_cache_queries_total{endpoint="static"} 99999
`), "infer_")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	g := GenInfoOf(text("0", "0"))
	if g.PrefixCache == nil || *g.PrefixCache || g.BlockSize != 16 {
		t.Errorf("info %+v: want prefix_cache false, block size 16", g)
	}
	if g := GenInfoOf(nil); g.PrefixCache != nil || g.BlockSize != 0 {
		t.Errorf("no metric: %+v", g)
	}
	a, _ := GenOf(text("1000", "200"), "v1")
	b, _ := GenOf(text("5000", "3800"), "v1")
	d := GenDelta(a, b, time.Second)
	if d.PrefixQueries != 4000 || d.PrefixHits != 3600 || d.PrefixHitRate != 0.9 {
		t.Errorf("delta %+v: want 4000 queries, 3600 hits, rate 0.9", d)
	}
	if d := GenDelta(a, a, time.Second); d.PrefixHitRate != 0 {
		t.Errorf("no queries: hit rate %v", d.PrefixHitRate)
	}
}

func TestPrefixCacheSettings(t *testing.T) {
	off, on := false, true
	if p := patchOf(Settings{PrefixCache: &off, MaxSeqs: 8}); p["prefix_cache"] != false || p["max_seqs"] != 8 {
		t.Errorf("patch %v", p)
	}
	if _, ok := patchOf(Settings{})["prefix_cache"]; ok {
		t.Error("a patch of no setting turns the cache")
	}
	if d := took(Settings{PrefixCache: &on}, batching{PrefixCache: &off}); !strings.Contains(d, "prefix_cache false, asked true") {
		t.Errorf("took: %q", d)
	}
	if d := took(Settings{PrefixCache: &on}, batching{}); !strings.Contains(d, "prefix_cache absent") {
		t.Errorf("took from a server without the setting: %q", d)
	}
	if d := took(Settings{PrefixCache: &on}, batching{PrefixCache: &on}); d != "" {
		t.Errorf("took: %q", d)
	}
	s := Serve{Model: "sim-lm", BlockSize: 32}
	if f := s.Flags(Settings{PrefixCache: &off}); !slices.Contains(f, "--prefix-cache=false") || !slices.Contains(f, "--block-size") {
		t.Errorf("flags %q", f)
	}
	for _, tc := range []struct {
		arg, key string
		want     bool
	}{
		{"--prefix-cache", "prefix_cache", true}, {"--prefix-cache=false", "prefix_cache", true}, {"--prefix-caches", "prefix_cache", false},
		{"--block-size=8", "block_size", true}, {"--block-size", "prefix_cache", false}, {"--kv-tokens", "kv_tokens", false},
	} {
		if got := SetsFlag(tc.arg, tc.key); got != tc.want {
			t.Errorf("SetsFlag(%q, %q) = %v", tc.arg, tc.key, got)
		}
	}
}
