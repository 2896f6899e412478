package loadgen

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inferhq/infer/loadgen/llm"
	"github.com/inferhq/infer/loadgen/record"
	"github.com/inferhq/infer/loadgen/scenario"
)

// TestRunSharedPrefix runs the shared-prefix workload against real sim-lm
// servers with the prefix cache on and off: the record's hit rates, from
// the clients' cached_tokens and from the server's counters, agree.
func TestRunSharedPrefix(t *testing.T) {
	sc := mustParse(t, `
server:
  model: sim-lm
payload:
  api: completions
  shared_prefix: {groups: 2, prefix_tokens: 256, question_tokens: 16}
  output_tokens: 8
  ignore_eos: true
load:
  concurrency: 4
  warmup: 300ms
  duration: 1s
sweep:
  prefix_cache: [true, false]
`)
	out, err := Run(context.Background(), sc, Config{Dir: t.TempDir(), Launcher: testLauncher()})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Records) != 2 {
		t.Fatalf("%d records, want cache on and off", len(out.Records))
	}
	on, off := out.Records[0], out.Records[1]
	if on.Point.Name != "continuous cache=on c=4" || off.Point.Name != "continuous cache=off c=4" {
		t.Errorf("points %q and %q", on.Point.Name, off.Point.Name)
	}
	for i, r := range out.Records {
		l := r.LLM
		if l.Completed == 0 || l.Failed != 0 || l.PromptTokens != int64(272*l.Completed) {
			t.Errorf("%s: completed %d, failed %d, prompt tokens %d (want 272 each)", r.Point.Name, l.Completed, l.Failed, l.PromptTokens)
		}
		if l.Server == nil || l.Server.PrefixCache == nil || *l.Server.PrefixCache != (i == 0) || l.Server.BlockSize != 16 {
			t.Errorf("%s: server side %+v", r.Point.Name, l.Server)
		}
	}
	// After the warm-up every request finds its group's prefix: 256 of
	// its 272 tokens.
	p := on.LLM.Prefix
	if p == nil || p.Reported != on.LLM.Completed || p.HitRate < 0.9 || p.Hits != p.Reported || p.TTFTHit.N == 0 {
		t.Errorf("cache on: client side %+v", p)
	}
	if s := on.LLM.Server; math.Abs(s.PrefixHitRate-p.HitRate) > 0.05 {
		t.Errorf("cache on: server's hit rate %v, clients' %v", s.PrefixHitRate, p.HitRate)
	}
	if p := off.LLM.Prefix; p == nil || p.CachedTokens != 0 || p.Misses != p.Reported || off.LLM.Server.PrefixQueries != 0 {
		t.Errorf("cache off: client side %+v, server queries %v", p, off.LLM.Server.PrefixQueries)
	}
}

// TestRunTrace replays a small trace whose requests never overlap, so
// that the server's cache sees them one at a time as the offline model
// does: its measured hit rate is the LRU figure.
func TestRunTrace(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	// 40 requests 100 ms apart from 500 ms into the window, of 2 to 5
	// blocks (of 16 tokens at scale 1/32): a shared first block, then ids
	// from a small set, so that some prefixes repeat and a 256-block KV
	// evicts. The server's counters are read at the window's edges, and
	// under CI's load (-race, the other packages' tests) a read or a send
	// can be hundreds of ms late: the first request comes well after the
	// start's read, and the window ends 4.6 s after the last request (the
	// run ends when the trace's requests are answered, so the margin costs
	// nothing). With 200 ms and 600 ms, CI's run once missed the last
	// request. (50 ms apart, two requests overlapped now and then under
	// make test at load average 6 to 8, and the later one missed blocks the
	// earlier had not yet filled.)
	for i := range 40 {
		n := 2 + i%4
		ids := []string{"0"}
		for j := 1; j < n; j++ {
			ids = append(ids, fmt.Sprint((i*7+j*3)%11+j*100))
		}
		fmt.Fprintf(&b, `{"timestamp": %d, "input_length": %d, "output_length": 32, "hash_ids": [%s]}`+"\n", 500+i*100, n*512-100, strings.Join(ids, ", "))
	}
	if err := os.WriteFile(filepath.Join(dir, "t.jsonl"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	sc, err := scenario.Parse("s.yaml", dir, []byte(`
server:
  model: sim-lm
  kv_tokens: 4096
payload:
  api: completions
  trace: {file: t.jsonl, duration: 9s, scale: 0.03125}
  ignore_eos: true
load:
  warmup: 100ms
`))
	if err != nil {
		t.Fatal(err)
	}
	out, err := Run(context.Background(), sc, Config{Dir: t.TempDir(), Launcher: testLauncher()})
	if err != nil {
		t.Fatal(err)
	}
	r := out.Records[0]
	l := r.LLM
	if l.Completed != 40 || l.Failed != 0 || r.Point.Load.Arrival != "trace" || r.Point.Load.Rate != 4.444 { // 40 in 9 s, to 3 decimals
		t.Fatalf("%s: completed %d failed %d, load %+v", r.Point.Name, l.Completed, l.Failed, r.Point.Load)
	}
	tc := l.Trace
	if tc == nil || tc.Requests != 40 || tc.Capacity != 256 || tc.BlockSize != 16 || tc.Warm || !(tc.LRU > 0 && tc.LRU <= tc.Unbounded) {
		t.Fatalf("trace figures %+v", tc)
	}
	if s := l.Server; s == nil || math.Abs(s.PrefixHitRate-tc.LRU) > 0.01 || s.PrefixQueries != float64(tc.Queries) {
		t.Errorf("server: %v of %v queries; the trace allows %+v", s.PrefixHitRate, s.PrefixQueries, tc)
	}
	if p := l.Prefix; p == nil || math.Abs(p.HitRate-tc.LRU) > 0.01 {
		t.Errorf("clients: %+v; the trace allows %+v", p, tc)
	}
	if n := strings.Join(out.Manifest.Notices, "\n"); !strings.Contains(n, "trace window: 40 requests; the trace allows") {
		t.Errorf("notices %q: want the trace's figures said before the run", n)
	}
}

// TestRunMultiTurn runs sessions against a real sim-lm server: the record
// has TTFT by turn, and later turns find the conversation cached.
func TestRunMultiTurn(t *testing.T) {
	sc := mustParse(t, `
server:
  model: sim-lm
payload:
  api: chat
  multi_turn: {turns: 3, think_time: 50ms, first_tokens: 64, message_tokens: 16}
  output_tokens: 8
  ignore_eos: true
load:
  concurrency: 2
  warmup: 100ms
  duration: 1500ms
`)
	out, err := Run(context.Background(), sc, Config{Dir: t.TempDir(), Launcher: testLauncher()})
	if err != nil {
		t.Fatal(err)
	}
	l := out.Records[0].LLM
	if len(l.Turns) != 3 {
		t.Fatalf("turns %+v, want 3", l.Turns)
	}
	for i, turn := range l.Turns {
		if turn.Turn != i+1 || turn.TTFT.N == 0 || turn.PromptTokens <= 0 {
			t.Errorf("turn %d: %+v", i+1, turn)
		}
		// A later turn finds at least the full blocks of the first
		// message's prompt (64 words and the template: 4 blocks).
		if i > 0 && turn.CachedTokens < 64 {
			t.Errorf("turn %d: %v cached tokens on average; want the earlier turns' prompt", i+1, turn.CachedTokens)
		}
	}
	if l.Turns[2].PromptTokens <= l.Turns[1].PromptTokens || l.Turns[1].PromptTokens <= l.Turns[0].PromptTokens {
		t.Errorf("prompts do not grow with the conversation: %+v", l.Turns)
	}
}

// TestMergePrefix: repeats' prefix figures add up, their TTFTs (of hits,
// misses and turns) merge as distributions, and the servers' prefix-cache
// counters add up though the rest of the server's side is one repeat's.
func TestMergePrefix(t *testing.T) {
	hist := func(ms ...int) *record.Histogram {
		var h record.Histogram
		for _, v := range ms {
			h.Record(time.Duration(v) * time.Millisecond)
		}
		return &h
	}
	out := func(hits, misses int, cached int64, hit, miss, turn1, turn2 *record.Histogram) *llm.Outcome {
		return &llm.Outcome{Window: time.Second, LLM: record.LLM{
			Prefix:     &record.LLMPrefix{Reported: hits + misses, PromptTokens: 1000, CachedTokens: cached, HitShare: 0.5, Hits: hits, Misses: misses},
			Turns:      []record.LLMTurn{{Turn: 1, TTFT: record.MsStatsOf(turn1), PromptTokens: 100}, {Turn: 2, TTFT: record.MsStatsOf(turn2), PromptTokens: 300, CachedTokens: 90}},
			Histograms: &record.LLMHistograms{TTFT: hist(), TPOT: hist(), ITL: hist(), E2EL: hist(), TTFTHit: hit, TTFTMiss: miss, Turns: []*record.Histogram{turn1, turn2}},
		}}
	}
	outs := []*llm.Outcome{
		out(2, 1, 600, hist(10, 10), hist(50), hist(50), hist(10, 10)),
		out(1, 1, 300, hist(20), hist(70), hist(70), hist(20)),
	}
	servers := []*record.LLMServer{{PrefixQueries: 1000, PrefixHits: 600, PrefixHitRate: 0.6, Model: "a"}, {PrefixQueries: 3000, PrefixHits: 300, PrefixHitRate: 0.1, Model: "b"}}
	m := mergeLLM(outs, servers)
	p := m.Prefix
	if p.Reported != 5 || p.PromptTokens != 2000 || p.CachedTokens != 900 || p.HitRate != 0.45 || p.Hits != 3 || p.Misses != 2 {
		t.Errorf("prefix %+v", p)
	}
	if p.TTFTHit.N != 3 || p.TTFTMiss.N != 2 || p.TTFTMiss.Max < 69 || p.TTFTHit.P50 > 10.1 {
		t.Errorf("TTFT of hits %+v, misses %+v", p.TTFTHit, p.TTFTMiss)
	}
	if len(m.Turns) != 2 || m.Turns[0].TTFT.N != 2 || m.Turns[1].TTFT.N != 3 || m.Turns[1].PromptTokens != 300 || m.Turns[1].CachedTokens != 90 {
		t.Errorf("turns %+v", m.Turns)
	}
	if s := m.Server; s.PrefixQueries != 4000 || s.PrefixHits != 900 || s.PrefixHitRate != 0.225 {
		t.Errorf("server %+v: want the counters of both repeats", s)
	}
	if servers[0].PrefixQueries != 1000 || servers[1].PrefixQueries != 3000 {
		t.Error("merging changed a repeat's server record")
	}
}
