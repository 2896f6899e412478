package target

import (
	"math"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// FuzzParseMetrics is a fuzz target of the parser that reads what a server
// says in its /metrics. Seeds are in testdata/fuzz/FuzzParseMetrics; `make
// fuzz` runs it for a while.

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
		same := s.Value == value || (math.IsNaN(s.Value) && math.IsNaN(value))
		if s.Name != "infer_fuzz" || s.Labels["l"] != label || !same {
			t.Fatalf("read back %q %q %v, want infer_fuzz %q %v", s.Name, s.Labels["l"], s.Value, label, value)
		}
	})
}
