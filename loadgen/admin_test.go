package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inferhq/infer/loadgen/target"
)

// startTarget starts a real server process (the test binary as a server)
// with flags, as an existing target, and stops it when the test ends.
func startTarget(t *testing.T, flags ...string) string {
	t.Helper()
	srv, err := testLauncher().Launch(context.Background(), target.CommandServe, flags, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		srv.Stop(ctx)
	})
	if _, err := target.WaitReady(context.Background(), http.DefaultClient, srv, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	return srv.URL()
}

// adminSettings reads a server's batching settings from its admin API.
func adminSettings(t *testing.T, url, token string) (b struct {
	Batch      int    `json:"batch"`
	Workers    int    `json:"workers"`
	MaxLatency string `json:"max_latency"`
	Policy     string `json:"policy"`
	MaxSeqs    int    `json:"max_seqs"`
}) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url+"/admin/batching", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s/admin/batching: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&b); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRunAdminSweep sweeps the batching settings of an existing server
// through its admin API: every point runs at the settings it names (the
// batch sizes the server reports prove it), and the server gets its own
// settings back at the end.
func TestRunAdminSweep(t *testing.T) {
	url := startTarget(t, "--sim-fixed", "2ms", "--sim-per-item", "0.1ms", "--batch", "32", "--max-latency", "20ms", "--admin-token", "s3cret")
	sc := mustParse(t, fmt.Sprintf(`
target:
  urls: %s
  admin_token_env: SOME_VAR
load:
  concurrency: 8
  warmup: 200ms
  duration: 700ms
sweep:
  endpoints: [naive, batched]
  batch: [2, 8]
  workers: 2
  max_latency: 5ms
  policy: [fixed, immediate]
`, url))
	if sc.AdminTokenEnv != "SOME_VAR" {
		t.Errorf("AdminTokenEnv = %q", sc.AdminTokenEnv)
	}
	dir := filepath.Join(t.TempDir(), "run")
	out, err := Run(context.Background(), sc, Config{Dir: dir, AdminToken: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Records) != 5 {
		t.Fatalf("%d records, want 5 (naive once, batched × 2 batch × 2 policies)", len(out.Records))
	}
	for _, r := range out.Records {
		p := r.Point
		if r.Status["200"] != r.Sent || r.Sent == 0 {
			t.Errorf("%s: status %v of %d sent", p.Name, r.Status, r.Sent)
		}
		if p.Endpoint == "naive" {
			continue
		}
		if p.Workers != 2 || p.Latency.D() != 5*time.Millisecond || (p.Policy != "fixed" && p.Policy != "immediate") {
			t.Errorf("%s: recorded settings %+v", p.Name, p)
		}
		// 8 clients fill whatever batch a waiting (fixed) server allows.
		if got := r.MeanBatch(); got > float64(p.Batch) || (p.Batch == 8 && p.Policy == "fixed" && got < 2.5) {
			t.Errorf("%s: the server's mean batch is %.2f at batch %d: the setting did not take", p.Name, got, p.Batch)
		}
	}
	// The server has its own settings back.
	b := adminSettings(t, url, "s3cret")
	if b.Batch != 32 || b.Workers != 1 || b.MaxLatency != "20ms" || b.Policy != "adaptive" {
		t.Errorf("after the run the target has %+v, want its own batch 32, 1 worker, 20ms, adaptive", b)
	}
}

// TestRunAdminRefused: a sweep that sets batching settings on a target that
// has no admin API, or refuses the token, fails before any load with an
// error naming the fix.
func TestRunAdminRefused(t *testing.T) {
	withAdmin := startTarget(t, "--sim-fixed", "1ms", "--admin-token", "right")
	without := startTarget(t, "--sim-fixed", "1ms")
	for _, tc := range []struct {
		name, url, token string
		want             []string
	}{
		{"no admin API", without, "right", []string{"no admin API", "404", "--admin-token", "sweep.batch, sweep.policy"}},
		{"no token", withAdmin, "", []string{"needs the admin token", "infer bench --admin-token", "target.admin_token_env"}},
		{"wrong token", withAdmin, "wrong", []string{"refused the admin token (401)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := mustParse(t, "target:\n  urls: "+tc.url+"\nload:\n  concurrency: 1\nsweep:\n  batch: [1, 4]\n  policy: adaptive\n")
			dir := filepath.Join(t.TempDir(), "run")
			start := time.Now()
			_, err := Run(context.Background(), sc, Config{Dir: dir, AdminToken: tc.token})
			if !errors.Is(err, target.ErrAdminAPI) {
				t.Fatalf("Run = %v, want target.ErrAdminAPI", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("failing took %v", took)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("run directory created before the check (%v)", err)
			}
		})
	}
	// Without server settings in the sweep, the target is loaded as it is.
	sc := mustParse(t, "target:\n  urls: "+without+"\nload:\n  concurrency: 1\n  warmup: 0s\n  duration: 200ms\n")
	if _, err := Run(context.Background(), sc, Config{Dir: t.TempDir()}); err != nil {
		t.Errorf("plain load of a target without admin API: %v", err)
	}
}

// TestRunInjected: with the sim failing every batch that holds "poison",
// the requests carrying it fail and, with per-item isolation, no other.
func TestRunInjected(t *testing.T) {
	url := startTarget(t, "--sim-fixed", "2ms", "--sim-per-item", "0.1ms", "--batch", "16", "--max-latency", "5ms", "--sim-fail-on", "poison")
	sc := mustParse(t, "target:\n  urls: "+url+"\npayload:\n  inject: {text: poison, every: 10}\nload:\n  concurrency: 16\n  warmup: 200ms\n  duration: 1s\n")
	out, err := Run(context.Background(), sc, Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	r := out.Records[0]
	in := r.Injected
	if in == nil {
		t.Fatal("no injection counts in the record")
	}
	if in.Text != "poison" || in.Sent+in.OthersSent != r.Sent || in.Sent < r.Sent/20 || in.Sent > r.Sent/5 {
		t.Errorf("injected %+v of %d sent; want about one in ten carrying poison", in, r.Sent)
	}
	if in.ModelFailed != in.Sent || in.OthersModelFailed != 0 || r.Status["500"] != in.Sent {
		t.Errorf("injected %+v, status %v; want every carrier to fail with 500 and no other request", in, r.Status)
	}
	if r.MeanBatch() < 2 {
		t.Errorf("mean batch %.1f: the carriers did not share batches with other requests", r.MeanBatch())
	}
}
