package loadgen

import (
	"fmt"
	"math"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Fuzz targets of the parsers that read what a server says: its /metrics
// and its Server-Timing header. Seeds are in testdata/fuzz/<target>; `make
// fuzz` runs each for a while.

// FuzzParseMetrics: any text parses without panicking, and a sample written
// by the Prometheus client library reads back with its label and value.
func FuzzParseMetrics(f *testing.F) {
	f.Add("infer_batch_size_count{endpoint=\"batched\"} 12\n", "batched", 12.5)
	f.Add("infer_x{a=\"\\\"q\\\\\",b=\"\\n\"} NaN\n# HELP infer_y y\n", "a \"quoted\" \\ label\nwith a newline", math.Inf(-1))
	f.Add("infer_z{", "", 0.0)
	f.Fuzz(func(t *testing.T, text, label string, value float64) {
		if _, err := parseMetrics(strings.NewReader(text), "infer_"); err != nil && !strings.Contains(err.Error(), "too long") {
			t.Fatalf("parseMetrics: %v", err)
		}
		if !utf8.ValidString(label) {
			return // the client library refuses such labels
		}
		reg := prometheus.NewRegistry()
		g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "infer_fuzz", Help: "fuzz"}, []string{"l"})
		reg.MustRegister(g)
		g.WithLabelValues(label).Set(value)
		rec := httptest.NewRecorder()
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		samples, err := parseMetrics(rec.Body, "infer_")
		if err != nil || len(samples) != 1 {
			t.Fatalf("parsed %+v, %v from\n%s", samples, err, rec.Body)
		}
		s := samples[0]
		same := s.value == value || (math.IsNaN(s.value) && math.IsNaN(value))
		if s.name != "infer_fuzz" || s.labels["l"] != label || !same {
			t.Fatalf("read back %q %q %v, want infer_fuzz %q %v", s.name, s.labels["l"], s.value, label, value)
		}
	})
}

// FuzzServerTiming: any header parses without panicking, and one in the
// server's documented form ("queue;dur=12.345, compute;dur=151.240,
// batch;desc=64, pad;desc=1.37, cache;desc=2") reads back within its
// rounding.
func FuzzServerTiming(f *testing.F) {
	f.Add("queue;dur=12.345, compute;dur=151.240, batch;desc=64, pad;desc=1.37", int64(12345), int64(151240), 64, 1.37)
	f.Add("queue;dur=\"1\";desc=x,,compute", int64(0), int64(1), 1, 0.0)
	f.Fuzz(func(t *testing.T, header string, queueUS, computeUS int64, batch int, pad float64) {
		parseServerTiming(header)
		if queueUS < 0 || computeUS < 0 || queueUS > 1e12 || computeUS > 1e12 || batch < 0 || !(pad == 0 || pad >= 1 && pad < 1e6) {
			return // not something a server says
		}
		h := fmt.Sprintf("queue;dur=%.3f, compute;dur=%.3f, batch;desc=%d", float64(queueUS)/1000, float64(computeUS)/1000, batch)
		if pad > 0 {
			h += fmt.Sprintf(", pad;desc=%.2f", pad)
		}
		h += ", cache;desc=3"
		st, ok := parseServerTiming(h)
		near := func(got time.Duration, us int64) bool {
			return (got - time.Duration(us)*time.Microsecond).Abs() <= time.Microsecond
		}
		if !ok || !near(st.queue, queueUS) || !near(st.compute, computeUS) || st.batch != batch || math.Abs(st.pad-pad) > 0.005+1e-9 {
			t.Fatalf("%q read back as %+v, %v", h, st, ok)
		}
	})
}
