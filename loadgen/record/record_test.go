package record

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestHistogramQuantilesWithinOnePercent(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var h Histogram
	var all []time.Duration
	for range 100000 {
		d := time.Duration(rng.ExpFloat64() * float64(20*time.Millisecond))
		h.Record(d)
		all = append(all, d)
	}
	slices.Sort(all)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		want := all[int(q*float64(len(all)))-1]
		got := h.Quantile(q)
		if rel := float64(got-want) / float64(want); rel < -0.01 || rel > 0.011 {
			t.Errorf("Quantile(%v) = %v, want %v ± 1%% (off by %.2f%%)", q, got, want, rel*100)
		}
	}
	if h.Count() != 100000 {
		t.Errorf("Count() = %d", h.Count())
	}
}

func TestHistogramJSONRoundTripAndMerge(t *testing.T) {
	var a, b Histogram
	for i := 1; i <= 100; i++ {
		a.Record(time.Duration(i) * time.Millisecond)
		b.Record(time.Duration(i+100) * time.Millisecond)
	}
	raw, err := json.Marshal(&a)
	if err != nil {
		t.Fatal(err)
	}
	var back Histogram
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if back.Percentiles() != a.Percentiles() {
		t.Errorf("round trip: %+v, want %+v", back.Percentiles(), a.Percentiles())
	}
	back.Merge(&b)
	if back.Count() != 200 || back.Max() != 200*time.Millisecond {
		t.Errorf("merged count %d max %v", back.Count(), back.Max())
	}
	if p50 := back.Quantile(0.5); p50 < 99*time.Millisecond || p50 > 102*time.Millisecond {
		t.Errorf("merged p50 = %v, want ~100ms", p50)
	}
	var empty Histogram
	if empty.Quantile(0.99) != 0 || empty.Mean() != 0 {
		t.Error("empty histogram has non-zero quantiles")
	}
}

func TestWriteAndReadRun(t *testing.T) {
	dir := t.TempDir()
	if err := WriteManifest(dir, &Manifest{Scenario: "quick", Cores: 2}); err != nil {
		t.Fatal(err)
	}
	w, err := Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	var h Histogram
	h.Record(5 * time.Millisecond)
	for i := range 3 {
		r := &Record{Index: i, Point: Point{Endpoint: "batched", Batch: 8 << i, Load: Load{Mode: "closed", Concurrency: 4}},
			Throughput: 100, Latency: h.Percentiles(), Histogram: &h, Status: map[string]int{"200": 10}, Valid: true,
			Duration: Duration(time.Second), Timeline: []Tick{{At: 0, Target: 10, Sent: 10, OK: 10, P50: Duration(time.Millisecond)}}}
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	// A run killed mid-write leaves a truncated last line.
	f, _ := os.OpenFile(filepath.Join(dir, ResultsFile), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"index": 3, "point": {"endp`)
	f.Close()

	run, err := ReadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	if run.Manifest.Scenario != "quick" || len(run.Records) != 3 || run.Records[2].Point.Batch != 32 {
		t.Errorf("run = %+v", run)
	}
	if run.Records[0].Histogram.Quantile(0.5) != h.Quantile(0.5) || run.Records[0].Duration.D() != time.Second {
		t.Errorf("record 0 lost its histogram or duration: %+v", run.Records[0])
	}
	if tl := run.Records[0].Timeline; len(tl) != 1 || tl[0].Sent != 10 || tl[0].P50.D() != time.Millisecond {
		t.Errorf("record 0 timeline = %+v", tl)
	}
}

func TestReadRejectsBadLineInTheMiddle(t *testing.T) {
	_, err := Read(bytes.NewBufferString("{\"index\":0}\nnot json\n{\"index\":1}\n"))
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("Read() = %v, want an error naming line 2", err)
	}
}

func TestDurationJSON(t *testing.T) {
	var d Duration
	for in, want := range map[string]time.Duration{`"1.5ms"`: 1500 * time.Microsecond, `2000`: 2 * time.Microsecond} {
		if err := json.Unmarshal([]byte(in), &d); err != nil || d.D() != want {
			t.Errorf("Unmarshal(%s) = %v, %v; want %v", in, d.D(), err, want)
		}
	}
	if b, _ := json.Marshal(Duration(time.Second)); string(b) != `"1s"` {
		t.Errorf("Marshal(1s) = %s", b)
	}
}

// TestLegacyMeanBatch: records written before the response-weighted mean
// had its name carry it as server.mean_batch; it is read as ResponseBatch,
// and the mean batch is the batch-weighted figure of /metrics.
func TestLegacyMeanBatch(t *testing.T) {
	const line = `{"index":0,"point":{"name":"p","endpoint":"batched","targets":null,"load":{"mode":"closed"},"items_per_request":1},` +
		`"start":"2025-01-01T00:00:00Z","duration":"1s","sent":1,"target_rate":0,"achieved_rate":1,"throughput":1,"items_per_sec":1,` +
		`"latency":{"mean":"1ms","p50":"1ms","p90":"1ms","p99":"1ms","p999":"1ms","max":"1ms"},"status":{"200":1},` +
		`"server":{"mean_batch":30.1,"metrics":{"batches":2,"items":32,"mean_batch":16,"mean_queue":"1ms"}},"valid":true,"generator_cpu":0}` + "\n"
	recs, err := Read(strings.NewReader(line))
	if err != nil {
		t.Fatal(err)
	}
	r := recs[0]
	if r.Server.ResponseBatch != 30.1 || r.Server.Batch != 0 || r.MeanBatch() != 16 {
		t.Errorf("response batch %v, batch %v, MeanBatch() %v; want 30.1, 0, 16", r.Server.ResponseBatch, r.Server.Batch, r.MeanBatch())
	}
	b, err := json.Marshal(r.Server)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"response_batch":30.1`) || strings.Contains(string(b), `"server":{"mean_batch"`) {
		t.Errorf("written back as %s", b)
	}
}

// TestPrintable: what a server sends reaches terminals and files without
// its control characters, and bounded.
func TestPrintable(t *testing.T) {
	if got := Printable("\x1b[2J\x1b]0;owned\x07 ok é"); got != "?[2J?]0;owned? ok é" {
		t.Errorf("Printable kept control characters: %q", got)
	}
	if got := Printable(strings.Repeat("é", 300)); len([]rune(got)) != maxText+1 || !strings.HasSuffix(got, "…") {
		t.Errorf("Printable kept %d runes of 300, want %d and an ellipsis", len([]rune(got)), maxText)
	}
	if got := Round3(1.23456); got != 1.235 {
		t.Errorf("Round3(1.23456) = %v, want 1.235", got)
	}
}
