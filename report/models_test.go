package report

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/inferhq/infer/loadgen/record"
)

// TestSummaryModels: a sweep of models (sweep.model) gets the models side
// by side in summary.md, as in the bench's summary: each one's best
// complete point, its p99 and peak RSS with ratios to the first, and the
// accuracy the bench measured, kept in the manifest.
func TestSummaryModels(t *testing.T) {
	ms := func(n int) record.Duration { return record.Duration(time.Duration(n) * time.Millisecond) }
	point := func(model string, c int, items, p99 float64, rss int64, partial bool) record.Record {
		return record.Record{
			Point: record.Point{Name: model + " batched c=" + string(rune('0'+c)), Model: model, Endpoint: "batched", Batch: 32, Workers: 1,
				Load: record.Load{Mode: "closed", Concurrency: c}, Items: 1},
			Sent: 100, Throughput: items, ItemsPerSec: items, Status: map[string]int{"200": 100}, Valid: true, Partial: partial,
			Latency: record.Percentiles{P50: ms(int(p99 / 2)), P99: ms(int(p99))}, Server: record.ServerSide{RSSBytes: rss << 20},
		}
	}
	run := &record.Run{Dir: t.TempDir(), Records: []record.Record{
		point("bert-base", 4, 10, 4000, 800, false),
		point("bert-base", 8, 12, 8000, 826, false),
		point("bert-base-int8", 4, 30, 1500, 400, false),
		point("bert-base-int8", 8, 60, 1000, 413, false),
		point("bert-base-int8", 9, 99, 100, 420, true), // cut short: not its best
	}}
	run.Manifest.Accuracy = map[string]string{"bert-base-int8": "fill-mask top-1 agreement 0.9636, top-5 overlap 0.9367 over 275 masks"}
	res, err := Write(context.Background(), run, nil, "", small)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(res.Summary)
	if err != nil {
		t.Fatal(err)
	}
	want := "## Models side by side\n\n" +
		"Each model's best throughput over its complete points, the p99 latency of that point and its server's peak resident memory, with ratios to `bert-base`; then how closely its outputs follow the first model's (`infer models compare`).\n\n" +
		"- bert-base: 12.0 items/s (1.00×), p99 8s (1.00×), RSS 826 MiB (1.00×) at batched c=8\n" +
		"- bert-base-int8: 60.0 items/s (5.00×), p99 1s (0.12×), RSS 420 MiB (0.51×) at batched c=8\n" +
		"  - against bert-base: fill-mask top-1 agreement 0.9636, top-5 overlap 0.9367 over 275 masks\n\n"
	if !strings.Contains(string(b), want) {
		t.Errorf("summary.md lacks\n%s\ngot:\n%s", want, b)
	}

	// A model whose only point was cut short has no throughput to show,
	// not "0.00 items/s".
	run.Records = append(run.Records[:2], point("bert-base-int8", 4, 30, 1500, 400, true))
	if res, err = Write(context.Background(), run, nil, "", small); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(res.Summary)
	if want := "- bert-base-int8: no complete point (the run stopped before one ended), RSS 400 MiB (0.48×)\n"; !strings.Contains(string(b), want) {
		t.Errorf("a model with a partial point only: summary.md lacks\n%s\ngot:\n%s", want, b)
	}

	// One model: nothing to set side by side.
	run.Records = run.Records[:2]
	if res, err = Write(context.Background(), run, nil, "", small); err != nil {
		t.Fatal(err)
	}
	if b, _ = os.ReadFile(res.Summary); strings.Contains(string(b), "Models side by side") {
		t.Errorf("one model: summary.md has a models section:\n%s", b)
	}
}

// TestSeriesByModel: points of different models (sweep.model) are series
// of their own on the charts, named by their model, never one line
// through both; a run of one model names none.
func TestSeriesByModel(t *testing.T) {
	rec := func(i int, model string, c int) record.Record {
		r := llmRecord(i, true, float64(100*c), 10)
		r.Point.Model, r.Point.Load.Concurrency, r.Point.PrefixCache = model, c, nil
		return r
	}
	run := &record.Run{Records: []record.Record{rec(0, "gpt2-tiny", 4), rec(1, "gpt2-tiny", 8), rec(2, "gpt2-tiny-int8", 4), rec(3, "gpt2-tiny-int8", 8)}}
	v := newView(run)
	order, groups := v.llmGroups()
	var labels []string
	for _, s := range order {
		labels = append(labels, v.llmLabel(s))
		if len(groups[s]) != 2 || groups[s][0].Point.Model != s.Model || groups[s][1].Point.Model != s.Model {
			t.Errorf("series %+v holds %d points, or another model's", s, len(groups[s]))
		}
	}
	if want := []string{"gpt2-tiny continuous", "gpt2-tiny-int8 continuous"}; !slices.Equal(labels, want) {
		t.Errorf("LLM series %q, want %q", labels, want)
	}
	if c := v.llmColor(order[0]); c == v.llmColor(order[1]) {
		t.Errorf("both models' series have the colour %v", c)
	}

	// Encoders: the same through /batched.
	for i := range run.Records {
		run.Records[i].LLM, run.Records[i].Point.Endpoint, run.Records[i].Point.Workers = nil, "batched", 1
	}
	v = newView(run)
	if len(v.vars) != 2 || v.seriesLabel(seriesOf(run.Records[0].Point)) != "w=1 gpt2-tiny" ||
		v.seriesLabel(seriesOf(run.Records[2].Point)) != "w=1 gpt2-tiny-int8" {
		t.Errorf("encoder variants %+v, labels %q and %q", v.vars, v.seriesLabel(seriesOf(run.Records[0].Point)),
			v.seriesLabel(seriesOf(run.Records[2].Point)))
	}
	if keyOf(run.Records[0].Point) == keyOf(run.Records[2].Point) {
		t.Error("two models' points at one load share a key")
	}

	run.Records = run.Records[:2]
	if v = newView(run); v.vary.model || v.seriesLabel(seriesOf(run.Records[0].Point)) != "w=1" {
		t.Errorf("one model: label %q", v.seriesLabel(seriesOf(run.Records[0].Point)))
	}
}
