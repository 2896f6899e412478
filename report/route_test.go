package report

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inferhq/infer/loadgen/record"
)

// routedRun is a run of three policies at two load levels, each point
// with four replicas' shares.
func routedRun() *record.Run {
	run := &record.Run{Manifest: record.Manifest{Scenario: "route"}}
	loads := []record.Load{{Mode: "closed", Concurrency: 128}, {Mode: "open", Rate: 15, Arrival: "poisson"}}
	for li, l := range loads {
		for pi, p := range []string{"round-robin", "hash", "prefix"} {
			tok := []float64{1400, 3400, 3800}[pi] / float64(li+1)
			shares := make([]record.ReplicaShare, 4)
			for k := range shares {
				shares[k] = record.ReplicaShare{Name: "127.0.0.1:900" + string(rune('1'+k)), Requests: float64(100 + 40*pi*k),
					OutputTokensPerS: tok / 4, PrefixQueries: 1000, PrefixHits: float64(250 + 300*pi)}
			}
			run.Records = append(run.Records, record.Record{
				Index: len(run.Records), Valid: true, Status: map[string]int{"200": 100}, Throughput: 20,
				Point:    record.Point{Name: "continuous route=" + p, Endpoint: "continuous", RoutePolicy: p, Load: l, MaxSeqs: 32},
				Duration: record.Duration(30 * time.Second),
				LLM: &record.LLM{Completed: 100, RequestsPerS: 20, OutputTokensPerS: tok,
					TTFT:     record.MsStats{N: 100, P50: 100 / float64(pi+1), P90: 300 / float64(pi+1), P99: 900 / float64(pi+1)},
					Replicas: shares},
			})
		}
	}
	return run
}

func TestRouteChartAndTable(t *testing.T) {
	dir := t.TempDir()
	res, err := Write(context.Background(), routedRun(), nil, dir, small)
	if err != nil {
		t.Fatal(err)
	}
	drawn := false
	for _, c := range res.Charts {
		if c.File == routeFile {
			if c.Skipped != "" {
				t.Fatalf("route.png skipped: %s", c.Skipped)
			}
			drawn = true
			checkPNG(t, filepath.Join(dir, c.File), small.Width, small.Height)
		}
	}
	if !drawn {
		t.Fatal("no route.png")
	}
	b, err := os.ReadFile(res.Summary)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{
		"## Routing policies",
		"| 128 clients | prefix | 3800 | 33.3 ms | 100 ms | 300 ms | 100 / 180 / 260 / 340 | 0.4",
		"| 128 clients | round-robin | 1400 | 100 ms | 300 ms | 900 ms | 100 / 100 / 100 / 100 | 0.00 | 25.0% |",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("summary lacks %q:\n%s", want, s)
		}
	}
}

func TestBalance(t *testing.T) {
	shares := []record.ReplicaShare{{Requests: 1}, {Requests: 1}, {Requests: 2}}
	lo, hi, cv := record.Balance(shares, func(s record.ReplicaShare) float64 { return s.Requests })
	if lo != 0.25 || hi != 0.5 || cv != 0.354 {
		t.Errorf("Balance = %v, %v, %v; want 0.25, 0.5, 0.354", lo, hi, cv)
	}
	if lo, hi, cv := record.Balance(nil, func(s record.ReplicaShare) float64 { return s.Requests }); lo != 0 || hi != 0 || cv != 0 {
		t.Errorf("Balance(nil) = %v, %v, %v", lo, hi, cv)
	}
}
