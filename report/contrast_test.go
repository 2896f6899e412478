package report

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/inferhq/infer/loadgen/record"
	"gonum.org/v1/plot"
)

// at makes a trusted point of a closed-loop sweep.
func at(policy string, buckets []int, clients int, thr float64, p50, p99 time.Duration, pad float64) record.Record {
	return record.Record{
		Point: record.Point{Endpoint: "batched", Batch: 64, Workers: 1, Latency: record.Duration(100 * time.Millisecond), Policy: policy,
			Buckets: buckets, Load: record.Load{Mode: "closed", Concurrency: clients}, Items: 1},
		Sent: 1000, Throughput: thr, ItemsPerSec: thr, Status: map[string]int{"200": 1000}, Valid: true,
		Latency: record.Percentiles{P50: record.Duration(p50), P99: record.Duration(p99)},
		Server:  record.ServerSide{MeanPadding: pad},
	}
}

func summaryOf(t *testing.T, recs []record.Record) string {
	t.Helper()
	for i := range recs {
		recs[i].Index = i
	}
	res, err := Write(context.Background(), &record.Run{Dir: t.TempDir(), Records: recs}, nil, "", small)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(res.Summary)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestContrastSections: the summary's policy, bucketing and injected-fault
// sections, on points made to give known ratios.
func TestContrastSections(t *testing.T) {
	ms := func(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }
	for _, tc := range []struct {
		name    string
		recs    []record.Record
		want    []string
		notWant []string
	}{
		{"adaptive misses", []record.Record{
			at("fixed", nil, 1, 6.4, ms(156), ms(160), 0), at("fixed", nil, 64, 400, ms(230), ms(260), 0),
			at("immediate", nil, 1, 12.7, ms(79), ms(80), 0), at("immediate", nil, 64, 380, ms(240), ms(300), 0),
			at("adaptive", nil, 1, 12.6, ms(79.5), ms(96), 0), at("adaptive", nil, 64, 380, ms(235), ms(255), 0),
		}, []string{
			"## Policies",
			"| load | fixed | immediate | adaptive | adaptive p99 ÷ best other | adaptive req/s ÷ fixed |",
			"| 1 client | 156 ms / 160 ms · 6.40 | 79 ms / 80 ms · 12.7 | 79.5 ms / 96 ms · 12.6 | 1.20× | 1.97× |",
			"| 64 clients | 230 ms / 260 ms · 400 | 240 ms / 300 ms · 380 | 235 ms / 255 ms · 380 | 0.98× | 0.95× |",
			"within 1.1× of the better other policy's at 1 of 2 load levels (**misses the bar**; worst 1.20× at 1 client)",
			"At the highest load level (64 clients) its throughput is 0.95× fixed's (**misses the bar**: ≥ 0.97×).",
			"![Batching policies vs offered load](policy.png)",
		}, []string{"## Bucketing", "## Injected faults"}},
		{"two policies, no adaptive", []record.Record{
			at("fixed", nil, 8, 100, ms(80), ms(90), 0), at("immediate", nil, 8, 90, ms(70), ms(85), 0),
		}, []string{"| load | fixed | immediate |\n|---|--:|--:|\n| 8 clients |"}, []string{"adaptive p99", "Adaptive's p99"}},
		{"buckets", []record.Record{
			at("", nil, 8, 100, ms(70), ms(80), 2.8), at("", nil, 32, 150, ms(180), ms(220), 2.9),
			at("", []int{16, 32, 64}, 8, 160, ms(45), ms(50), 1.2), at("", []int{16, 32, 64}, 32, 240, ms(120), ms(140), 1.25),
		}, []string{
			"## Bucketing",
			"| load | no buckets | buckets 16,32,64 | req/s buckets 16,32,64 ÷ no buckets |",
			"| 8 clients | 100 · 80 ms · 2.80× | 160 · 50 ms · 1.20× | 1.60× |",
			"| 32 clients | 150 · 220 ms · 2.90× | 240 · 140 ms · 1.25× | 1.60× |",
			"Under the same p99 bound (≤ 80 ms, the lowest every setting reaches), the best throughput is 100 req/s with no buckets, 160 req/s with buckets 16,32,64 (1.60×).",
			"| padding |",
		}, []string{"## Policies", "policy.png"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := summaryOf(t, tc.recs)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("summary.md lacks %q; got:\n%s", w, got)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(got, w) {
					t.Errorf("summary.md has %q", w)
				}
			}
		})
	}
}

func TestInjectedSection(t *testing.T) {
	clean, leaky := at("", nil, 8, 100, 80*time.Millisecond, 90*time.Millisecond, 0), at("", nil, 32, 100, 80*time.Millisecond, 90*time.Millisecond, 0)
	clean.Injected = &record.Injected{Text: "poison", Sent: 20, ModelFailed: 20, OthersSent: 980, OthersModelFailed: 0}
	leaky.Injected = &record.Injected{Text: "poison", Sent: 20, ModelFailed: 20, OthersSent: 980, OthersModelFailed: 7}
	for _, tc := range []struct {
		recs []record.Record
		want string
	}{
		{[]record.Record{clean}, "| b=64 w=1 @ 8 clients | `poison` | 20 | 20 | 980 | 0 |\n\nThe model failed no request without the text, at any of the 1 point."},
		{[]record.Record{clean, leaky}, "**The model failed requests without the text at 1 of 2 points.**"},
	} {
		if got := summaryOf(t, tc.recs); !strings.Contains(got, tc.want) {
			t.Errorf("summary.md lacks %q; got:\n%s", tc.want, got)
		}
	}
}

// Client counts that grow by factors go on a log axis, with a tick at
// each level; open-loop rates, whose throughput panel draws the diagonal
// from 0, and narrow client ranges stay linear.
func TestLoadAxis(t *testing.T) {
	closed := func(cs ...int) []record.Load {
		var ls []record.Load
		for _, c := range cs {
			ls = append(ls, record.Load{Mode: "closed", Concurrency: c})
		}
		return ls
	}
	open := []record.Load{{Mode: "open", Rate: 20}, {Mode: "open", Rate: 5000}}
	for _, tc := range []struct {
		loads []record.Load
		log   bool
	}{
		{closed(1, 4, 16, 64, 256), true},
		{closed(8, 16, 32), false},
		{open, false},
	} {
		p := plot.New()
		p.X.Label.Text = "offered load (closed-loop clients)"
		loadAxis(&p.X, tc.loads)
		if isLog(p.X) != tc.log {
			t.Errorf("%v: log scale %v, want %v", tc.loads, isLog(p.X), tc.log)
		}
		ticks := p.X.Tick.Marker.Ticks(p.X.Min, p.X.Max)
		if len(ticks) != len(tc.loads) || ticks[0].Value != offered(tc.loads[0]) {
			t.Errorf("%v: ticks %v, want one at each level", tc.loads, ticks)
		}
		if tc.log && !strings.Contains(p.X.Label.Text, "log scale") {
			t.Errorf("log axis labelled %q", p.X.Label.Text)
		}
	}
}
