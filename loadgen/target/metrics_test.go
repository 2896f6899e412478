package target

import (
	"strings"
	"testing"
	"time"

	"github.com/inferhq/infer/loadgen/record"
)

const exposition = `# HELP infer_batch_size Items computed per batch.
# TYPE infer_batch_size histogram
infer_batch_size_bucket{endpoint="batched",le="1"} 3
infer_batch_size_sum{endpoint="batched"} 640
infer_batch_size_count{endpoint="batched"} 10
infer_batch_size_sum{endpoint="naive"} 5
infer_batch_size_count{endpoint="naive"} 5
infer_queue_duration_seconds_sum{endpoint="batched"} 1.5
infer_queue_duration_seconds_count{endpoint="batched"} 600
infer_dropped_items_total{endpoint="batched"} 2
infer_model_info{backend="sim",max_batch="64",max_latency="100ms",model="sim",policy="fixed",task="classify",workers="2"} 1
infer_weird{endpoint="a\"b"} 7
go_goroutines 12
malformed{endpoint="x" 1
`

func TestParseMetrics(t *testing.T) {
	samples, err := parseMetrics(strings.NewReader(exposition), "infer_")
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) != 10 {
		t.Errorf("%d samples, want 10 (infer_ lines that parse)", len(samples))
	}
	for _, s := range samples {
		if s.Name == "infer_weird" && s.Labels["endpoint"] != `a"b` {
			t.Errorf("escaped label = %q", s.Labels["endpoint"])
		}
	}
	got := CountersOf(samples, "batched")
	want := Counters{batches: 10, items: 640, queueSum: 1.5, queueN: 600, dropped: 2}
	if got != want {
		t.Errorf("CountersOf(batched) = %+v, want %+v", got, want)
	}
	in := InfoOf(samples)
	if !in.OK || in.Model != "sim" || in.Batch != 64 || in.Workers != 2 || in.MaxLatency != 100*time.Millisecond || in.Policy != "fixed" || in.Backend != "sim" {
		t.Errorf("InfoOf = %+v", in)
	}
	if InfoOf(nil).OK {
		t.Error("InfoOf(nil) is ok")
	}
	// Newer servers report the settings in effect apart from the model.
	split := `infer_model_info{backend="onnx",model="bert-mini",task="fill-mask"} 1
infer_batching_info{max_batch="32",max_latency="5ms",policy="adaptive",workers="3"} 1
`
	samples, _ = parseMetrics(strings.NewReader(split), "infer_")
	in = InfoOf(samples)
	if in.Model != "bert-mini" || in.Backend != "onnx" || in.Batch != 32 || in.Workers != 3 || in.MaxLatency != 5*time.Millisecond || in.Policy != "adaptive" {
		t.Errorf("InfoOf(split) = %+v", in)
	}
}

func TestCountersDelta(t *testing.T) {
	begin := Counters{batches: 10, items: 640, queueSum: 1.5, queueN: 600, dropped: 2}
	end := Counters{batches: 20, items: 1280, queueSum: 3.5, queueN: 1240, dropped: 2}
	got := begin.Delta(end)
	want := record.Metrics{Batches: 10, Items: 640, MeanBatch: 64, MeanQueue: record.Duration(2 * time.Second / 640)}
	if *got != want {
		t.Errorf("delta = %+v, want %+v", *got, want)
	}
	if z := begin.Delta(begin); z.MeanBatch != 0 || z.MeanQueue != 0 {
		t.Errorf("empty delta = %+v", z)
	}
}
