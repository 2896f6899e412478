package cmd

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/inferhq/infer/loadgen"
	"github.com/inferhq/infer/loadgen/record"
)

// benchSearch runs infer bench on a scenario against url with the JSON
// summary, and returns the exit code, the summary and stderr.
func benchSearch(t *testing.T, scenario, url string) (int, loadgen.Summary, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	opts := &benchOptions{Scenario: writeScenario(t, scenario), Targets: []string{url}, Out: filepath.Join(t.TempDir(), "run"),
		Output: "json", Log: logOptions{Level: "warn", Format: "text"}, Stdout: &stdout, Stderr: &stderr}
	code := exitCode(runBench(context.Background(), opts), &stderr)
	var s loadgen.Summary
	if err := json.Unmarshal(stdout.Bytes(), &s); err != nil {
		t.Fatalf("stdout is not a JSON summary: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	return code, s, stderr.String()
}

const searchScenario = `
target:
  urls: http://unused:1
load:
  search: {over: rate, from: 20}
  warmup: 100ms
  duration: 500ms
slo:
  p99: 1s
`

// TestBenchSearchNoLoadMeets: a server that answers 500 at every load is
// "no load meets the SLO", exit code 3, after one level.
func TestBenchSearchNoLoadMeets(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/batched" {
			http.NotFound(w, r)
			return
		}
		http.Error(w, "boom", http.StatusInternalServerError)
	}))
	defer ts.Close()
	code, s, stderr := benchSearch(t, searchScenario, ts.URL)
	if code != exitThresholds || !strings.Contains(stderr, "SLO not met: 0 of 1 configurations meet the SLO at some load (all must); no load meets the SLO for batched") {
		t.Errorf("exit %d, stderr:\n%s", code, stderr)
	}
	if len(s.Rows) != 1 || len(s.Capacity) != 1 || s.Capacity[0].Capacity != 0 || !strings.Contains(s.Capacity[0].Why, "even the lowest level, 20 req/s, misses the SLO") {
		t.Errorf("summary rows %d, capacity %+v", len(s.Rows), s.Capacity)
	}
}

// TestBenchSearchTargetGone: a target that goes away mid-search leaves a
// partial result, flagged, and exit code 3.
func TestBenchSearchTargetGone(t *testing.T) {
	var hits atomic.Int64
	var once sync.Once
	var ts *httptest.Server
	ts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/batched" {
			http.NotFound(w, r)
			return
		}
		if hits.Add(1) > 30 {
			once.Do(func() {
				go func() {
					ts.Listener.Close()
					ts.CloseClientConnections()
				}()
			})
			return
		}
		w.Write([]byte(`{"outputs": [0]}`))
	}))
	defer ts.Close()
	code, s, stderr := benchSearch(t, searchScenario, ts.URL)
	if code != exitThresholds || !strings.Contains(stderr, "the target stopped answering mid-search: the result is partial") {
		t.Errorf("exit %d, stderr:\n%s", code, stderr)
	}
	if len(s.Capacity) != 1 || !s.Capacity[0].Partial || s.Capacity[0].End != record.EndTargetFailed {
		t.Errorf("capacity %+v", s.Capacity)
	}
	last := s.Rows[len(s.Rows)-1]
	if !last.Partial || !strings.Contains(strings.Join(last.Flags, ","), record.FlagTargetFailed) {
		t.Errorf("last row %+v", last)
	}
}

// TestBenchSearchBadKeys: a bad search key is an error at its line, exit
// code 2, before any load.
func TestBenchSearchBadKeys(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"server:\n  model: sim\nload:\n  search:\n    over: rate\n    tolerence: 5%\nslo:\n  p99: 1s\n", `:6:5: unknown field "tolerence" (did you mean "tolerance"?)`},
		{"server:\n  model: sim\nload:\n  search:\n    over: qps\nslo:\n  p99: 1s\n", `:5:5: load.search.over "qps": want rate`},
		{"server:\n  model: sim\nload:\n  search: {over: rate, max_points: 1}\nslo:\n  p99: 1s\n", `:4:24: load.search.max_points 1`},
	} {
		path := writeScenario(t, tc.yaml)
		var out bytes.Buffer
		root := newCmdRoot(&out, &out)
		root.SetArgs([]string{"bench", "-s", path, "--no-tui"})
		if code := exitCode(root.Execute(), &out); code != exitUsage || !strings.Contains(out.String(), path+tc.want) {
			t.Errorf("exit %d, output:\n%s\nwant exit %d and %q", code, out.String(), exitUsage, path+tc.want)
		}
	}
}

func TestBenchSearchDryRun(t *testing.T) {
	var out bytes.Buffer
	root := newCmdRoot(&out, &out)
	root.SetArgs([]string{"bench", "-s", "../scenarios/search-sim.yaml", "--dry-run"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "batched") || !strings.Contains(out.String(), "1 configuration, searched over rate from 50 req/s") {
		t.Errorf("dry run:\n%s", out.String())
	}
}
