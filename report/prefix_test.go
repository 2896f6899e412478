package report

import (
	"context"
	"image/color"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/inferhq/infer/loadgen/record"
)

// llmRecord is a completed LLM point of cache on (or off) at 8 clients.
func llmRecord(i int, cache bool, tokens, ttft50 float64) record.Record {
	return record.Record{
		Index: i, Valid: true, Status: map[string]int{"200": 100}, Throughput: 10,
		Point: record.Point{Name: "p", Endpoint: "continuous", MaxSeqs: 32, PrefixCache: &cache, Load: record.Load{Mode: "closed", Concurrency: 8}},
		LLM: &record.LLM{API: "chat", Stream: true, Requests: 100, Completed: 100, RequestsPerS: 10, OutputTokensPerS: tokens,
			TTFT: record.MsStats{P50: ttft50, P99: 2 * ttft50, N: 100}},
	}
}

// turns returns TTFT by turn: p50 first·(1 + growth·(t−1)), p99 twice it.
func turns(first, growth float64) []record.LLMTurn {
	var out []record.LLMTurn
	for t := 1; t <= 5; t++ {
		p50 := first * (1 + growth*float64(t-1))
		out = append(out, record.LLMTurn{Turn: t, TTFT: record.MsStats{P50: p50, P99: 2 * p50, N: 20}, PromptTokens: float64(512 + 256*(t-1))})
	}
	return out
}

func TestPrefixReportMultiTurn(t *testing.T) {
	on, off := llmRecord(0, true, 425, 20), llmRecord(1, false, 380, 100)
	on.LLM.Turns, off.LLM.Turns = turns(20, 0.05), turns(30, 0.6)
	on.LLM.Prefix = &record.LLMPrefix{Reported: 100, PromptTokens: 100000, CachedTokens: 75000, HitRate: 0.75, HitShare: 0.5, Hits: 80, Misses: 20,
		TTFTHit: record.MsStats{P50: 18, P99: 40, N: 80}, TTFTMiss: record.MsStats{P50: 30, P99: 60, N: 20}}
	on.LLM.Server = &record.LLMServer{PrefixCache: &[]bool{true}[0], PrefixQueries: 100000, PrefixHits: 74000, PrefixHitRate: 0.74}
	off.LLM.Server = &record.LLMServer{PrefixCache: &[]bool{false}[0]}
	run := &record.Run{Records: []record.Record{on, off}}
	dir := t.TempDir()
	res, err := Write(context.Background(), run, nil, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var drawn []string
	for _, c := range res.Charts {
		if c.Skipped == "" {
			drawn = append(drawn, c.File)
		}
	}
	if !slices.Contains(drawn, "turn-ttft.png") {
		t.Fatalf("charts drawn %v, want turn-ttft.png", drawn)
	}
	path := filepath.Join(dir, "turn-ttft.png")
	checkPNG(t, path, 1200, 800)
	// Both configurations are drawn, in their colours.
	v := newView(run)
	n := colours(t, path)
	for _, s := range []llmSeries{llmSeriesOf(on.Point), llmSeriesOf(off.Point)} {
		r, g, b, _ := v.llmColor(s).RGBA()
		if c := (color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8), 255}); n[c] < 200 {
			t.Errorf("turn-ttft.png has %d pixels of %s's colour, want its lines", n[c], v.llmLabel(s))
		}
	}
	sum, err := os.ReadFile(res.Summary)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"## Prefix cache",
		"| 8 clients | continuous | 425 | 380 | 1.12 | 20 ms | 100 ms | 5.00 | 40 ms | 200 ms | 5.00 |",
		"| continuous cache on @ 8 clients | 74.00 % | 75.00 % | 80 / 20 | 18 ms · 40 ms | 30 ms · 60 ms |",
		"| continuous cache off @ 8 clients | off | – | – | – | – |",
		"## TTFT by turn",
		"| continuous cache on @ 8 clients | 20 ms (40 ms) | 21 ms (42 ms) | 22 ms (44 ms) | 23 ms (46 ms) | 24 ms (48 ms) | 1.20 |",
		"| continuous cache off @ 8 clients | 30 ms (60 ms) | 48 ms (96 ms) | 66 ms (132 ms) | 84 ms (168 ms) | 102 ms (204 ms) | 3.40 |",
		"![TTFT by turn of multi-turn sessions](turn-ttft.png)",
	} {
		if !strings.Contains(string(sum), want) {
			t.Errorf("summary.md lacks %q", want)
		}
	}
	if strings.Contains(string(sum), "The trace allows") {
		t.Error("summary.md speaks of a trace the run did not replay")
	}
}

func TestPrefixReportTrace(t *testing.T) {
	on, off := llmRecord(0, true, 300, 15), llmRecord(1, false, 290, 25)
	for _, r := range []*record.Record{&on, &off} {
		r.Point.Load = record.Load{Mode: "open", Rate: 29.855, Arrival: "trace"}
		r.LLM.Trace = &record.TraceCache{Requests: 2060, Queries: 770000, Unbounded: 0.4, LRU: 0.2, Capacity: 4096, BlockSize: 16}
	}
	on.LLM.Server = &record.LLMServer{PrefixQueries: 770000, PrefixHits: 150000, PrefixHitRate: 0.195}
	on.LLM.Prefix = &record.LLMPrefix{Reported: 100, PromptTokens: 1000, CachedTokens: 196, HitRate: 0.196, HitShare: 0.5}
	off.LLM.Trace.Warm = true
	run := &record.Run{Records: []record.Record{on, off}}
	dir := t.TempDir()
	res, err := Write(context.Background(), run, nil, dir, Options{Width: 600, Height: 400})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range res.Charts {
		if c.File == "turn-ttft.png" {
			t.Errorf("turn-ttft.png listed for a run without sessions")
		}
	}
	sum, err := os.ReadFile(res.Summary)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"an unbounded cache finds 40.00 % of the window's 770000 prompt tokens, LRU at the server's KV capacity of 4096 blocks 20.00 %",
		// Rates from the counts: 150,000 of 770,000 tokens; 196 of 1,000.
		"| continuous cache on @ 29.86 req/s trace | 2060 | 19.48 % | 0.974 | 19.60 % | 0.980 | 40.00 % |",
		"| continuous cache off @ 29.86 req/s trace (warm: its server's cache held earlier load) | 2060 | off | – | off | – | 40.00 % |",
	} {
		if !strings.Contains(string(sum), want) {
			t.Errorf("summary.md lacks %q", want)
		}
	}
}
