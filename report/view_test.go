package report

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/inferhq/infer/loadgen/record"
)

// tp is a trusted point with throughput thr and p99 in milliseconds.
func tp(thr float64, p99ms int) *record.Record {
	r := point(func(r *record.Record) {
		r.Throughput = thr
		r.Latency.P99 = record.Duration(time.Duration(p99ms) * time.Millisecond)
	})
	return &r
}

func names(recs []*record.Record) []string {
	var s []string
	for _, r := range recs {
		s = append(s, fmt.Sprintf("%g/%v", r.Throughput, r.Latency.P99.D()))
	}
	return s
}

func TestFrontier(t *testing.T) {
	bad := tp(1000, 10)
	bad.Valid = false
	recs := []*record.Record{tp(100, 50), tp(100, 80), tp(200, 60), tp(150, 70), tp(400, 300), tp(300, 400), bad}
	got := names(frontier(recs))
	want := []string{"100/50ms", "200/60ms", "400/300ms"}
	if !slices.Equal(got, want) {
		t.Errorf("frontier = %v, want %v", got, want)
	}
}

func TestKnee(t *testing.T) {
	for _, tc := range []struct {
		name  string
		front []*record.Record
		want  string
	}{
		{"hockey stick", []*record.Record{tp(100, 50), tp(800, 60), tp(1000, 90), tp(1050, 900)}, "1000/90ms"},
		{"knee before the last climb", []*record.Record{tp(100, 50), tp(500, 55), tp(900, 70), tp(950, 400), tp(960, 2000)}, "900/70ms"},
		{"concave: no knee", []*record.Record{tp(10, 80), tp(100, 120), tp(400, 135), tp(1500, 190)}, ""},
		{"straight line: no knee", []*record.Record{tp(100, 100), tp(200, 200), tp(300, 300)}, ""},
		{"two points", []*record.Record{tp(100, 50), tp(1000, 900)}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ""
			if k := knee(tc.front); k != nil {
				got = names([]*record.Record{k})[0]
			}
			if got != tc.want {
				t.Errorf("knee = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestRanked(t *testing.T) {
	fast := tp(900, 400)
	erring := tp(950, 100)
	erring.Status = map[string]int{"200": 950, "429": 50}
	flagged := tp(2000, 50)
	flagged.Valid = false
	recs := []*record.Record{tp(100, 50), tp(500, 100), fast, erring, flagged, tp(500, 90)}
	for _, tc := range []struct {
		slo  record.SLO
		want []string
	}{
		{record.SLO{}, []string{"950/100ms", "900/400ms", "500/90ms", "500/100ms", "100/50ms"}},
		{record.SLO{P99: record.Duration(200 * time.Millisecond)}, []string{"950/100ms", "500/90ms", "500/100ms", "100/50ms"}},
		{record.SLO{P99: record.Duration(200 * time.Millisecond), MaxErrorRate: 0.01}, []string{"500/90ms", "500/100ms", "100/50ms"}},
		{record.SLO{MinThroughput: 600, MaxErrorRate: 0.01}, []string{"900/400ms"}},
		{record.SLO{P99: record.Duration(10 * time.Millisecond)}, nil},
	} {
		if got := names(ranked(recs, tc.slo)); !slices.Equal(got, tc.want) {
			t.Errorf("ranked(%+v) = %v, want %v", tc.slo, got, tc.want)
		}
	}
}

func TestPanelLoads(t *testing.T) {
	var loads []record.Load
	for _, r := range []float64{10, 20, 50, 100, 200, 500, 1000} {
		loads = append(loads, record.Load{Mode: "open", Rate: r})
	}
	for _, tc := range []struct {
		n, of int
		want  []float64
	}{
		{4, 7, []float64{10, 50, 200, 1000}},
		{4, 5, []float64{10, 20, 50, 200}},
		{4, 3, []float64{10, 20, 50}},
		{4, 1, []float64{10}},
	} {
		var got []float64
		for _, l := range panelLoads(loads[:tc.of], tc.n) {
			got = append(got, l.Rate)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("panelLoads(%d levels, %d) = %v, want %v", tc.of, tc.n, got, tc.want)
		}
	}
}

func TestLoadLabel(t *testing.T) {
	for _, tc := range []struct {
		l    record.Load
		want string
	}{
		{record.Load{Mode: "open", Pacer: "constant", Rate: 400}, "400 req/s"},
		{record.Load{Mode: "open", Pacer: "ramp", RampFrom: 10, Rate: 400}, "ramp 10→400 req/s"},
		{record.Load{Mode: "closed", Concurrency: 16}, "16 clients"},
		{record.Load{Mode: "open", Rate: 12.5}, "12.5 req/s"},
		{record.Load{}, "unknown load"},
	} {
		if got := loadLabel(tc.l); got != tc.want {
			t.Errorf("loadLabel(%+v) = %q, want %q", tc.l, got, tc.want)
		}
	}
}

func TestNiceTicks(t *testing.T) {
	for _, tc := range []struct {
		lo, hi float64
		want   []string
	}{
		{0, 1.05, []string{"0", "0.2", "0.4", "0.6", "0.8", "1"}},
		{0, 2300, []string{"0", "500", "1000", "1500", "2000"}},
		{0.9, 1.3, []string{"0.9", "1", "1.1", "1.2", "1.3"}},
		{0, 0.021, []string{"0", "0.005", "0.01", "0.015", "0.02"}},
	} {
		var got []string
		for _, tk := range (niceTicks{}).Ticks(tc.lo, tc.hi) {
			if tk.Label != "" {
				got = append(got, tk.Label)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("niceTicks(%v, %v) labels = %q, want %q", tc.lo, tc.hi, got, tc.want)
		}
	}
}
