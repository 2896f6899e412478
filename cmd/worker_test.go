package cmd

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inferhq/infer/server/batch"
)

func TestWorkerFlags(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    func(t *testing.T, o *workerOptions)
		wantErr string
	}{
		{args: nil, want: func(t *testing.T, o *workerOptions) {
			cfg, err := o.config()
			if err != nil {
				t.Fatal(err)
			}
			if cfg.URL != "redis://127.0.0.1:6379/0" || cfg.Batch.MaxBatch != 64 || cfg.Batch.MaxLatency != 100*time.Millisecond ||
				cfg.Batch.Policy != batch.Adaptive || fmt.Sprint(cfg.Batch.Buckets) != "[16 32 64]" || cfg.Instances != 1 || cfg.Visibility != 10*time.Second || o.MetricsAddr != "127.0.0.1:9101" {
				t.Errorf("defaults = %+v", cfg)
			}
		}},
		{args: []string{"--broker", "rediss://u:p@redis:6380/2", "--batch", "32", "--max-latency", "5ms", "--policy", "immediate",
			"--workers", "2", "--visibility-timeout", "3s", "--metrics-addr", "", "--model", "sim", "--devices", "cuda:0,cuda:1",
			"--buckets", "16,32", "--no-isolation"},
			want: func(t *testing.T, o *workerOptions) {
				cfg, err := o.config()
				if err != nil {
					t.Fatal(err)
				}
				if cfg.URL != "rediss://u:p@redis:6380/2" || cfg.Batch.MaxBatch != 32 || cfg.Batch.MaxLatency != 5*time.Millisecond ||
					cfg.Batch.Policy != batch.Immediate || fmt.Sprint(cfg.Batch.Buckets) != "[16 32]" || !cfg.Batch.DisableIsolation ||
					cfg.Instances != 2 || cfg.Visibility != 3*time.Second || o.MetricsAddr != "" {
					t.Errorf("config = %+v", cfg)
				}
				if o.Model.Model != "sim" || o.Model.Devices != "cuda:0,cuda:1" {
					t.Errorf("model = %+v", o.Model)
				}
			}},
		{args: []string{"--batch", "0"}, wantErr: "--batch 0"},
		{args: []string{"--max-latency", "-1s"}, wantErr: "--max-latency"},
		{args: []string{"--workers", "0"}, wantErr: "--workers 0"},
		{args: []string{"--visibility-timeout", "0s"}, wantErr: "--visibility-timeout"},
		{args: []string{"--broker", ""}, wantErr: "--broker"},
		{args: []string{"--policy", "sometimes"}, wantErr: "unknown batching policy"},
		{args: []string{"extra"}, wantErr: "takes no arguments"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var got *workerOptions
			cmd := newCmdWorker(func(_ context.Context, o *workerOptions) error {
				got = o
				_, err := o.config()
				return err
			})
			if !execFlags(t, cmd, tc.args, tc.wantErr) {
				return
			}
			tc.want(t, got)
		})
	}
}

// A broker URL that cannot be parsed is a usage error, for both sides.
func TestBadBrokerURL(t *testing.T) {
	for _, args := range [][]string{
		{"worker", "--model", "sim", "--broker", "http://example.com"},
		{"serve", "--model", "sim", "--broker", "redis://host:port:6379/x"},
	} {
		var out bytes.Buffer
		root := newCmdRoot(&out, &out)
		root.SetArgs(args)
		if got := exitCode(root.Execute(), &out); got != exitUsage || !strings.Contains(out.String(), "--broker") {
			t.Errorf("infer %v: exit %d, want %d with a --broker error (%s)", args, got, exitUsage, out.String())
		}
	}
}

// The worker's help is under review like the others' (see TestHelpGolden).
func TestWorkerHelpGolden(t *testing.T) {
	var out bytes.Buffer
	root := newCmdRoot(&out, &out)
	root.SetArgs([]string{"worker", "--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "infer_worker.help")
	if *update {
		if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if out.String() != string(want) {
		t.Errorf("help differs from %s (rerun with -update if intended):\n%s", path, out.String())
	}
}

// A worker whose --metrics-addr was not given takes the next free port when
// the default one is in use, so that the README's workers can share a host;
// one whose --metrics-addr was given and is in use fails, naming the flag.
func TestWorkerMetricsAddrInUse(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	gone, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	noRedis := "redis://" + gone.Addr().String() + "/0" // nobody listens there
	gone.Close()
	options := func(set bool, stderr io.Writer) *workerOptions {
		o := &workerOptions{}
		cmd := newCmdWorker(func(_ context.Context, got *workerOptions) error { *o = *got; return nil })
		cmd.SetArgs([]string{"--broker", noRedis, "--model", "sim", "--sim-fixed", "1ms", "--sim-per-item", "0s", "--batch", "4"})
		if err := cmd.Execute(); err != nil {
			t.Fatal(err)
		}
		o.MetricsAddr, o.MetricsAddrSet, o.Stderr = busy.Addr().String(), set, stderr
		return o
	}

	err = runWorker(context.Background(), options(true, io.Discard))
	if err == nil || !strings.Contains(err.Error(), "--metrics-addr "+busy.Addr().String()) || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("--metrics-addr in use: runWorker() = %v, want an error naming --metrics-addr and the address in use", err)
	}

	var buf bytes.Buffer
	log := &lockedWriter{w: &buf}
	logged := func() string {
		log.mu.Lock()
		defer log.mu.Unlock()
		return buf.String()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runWorker(ctx, options(false, log)) }()
	var addr string
	for range 500 {
		if _, rest, ok := strings.Cut(logged(), `msg=listening addr=`); ok {
			addr, _, _ = strings.Cut(rest, " ")
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if addr == "" || addr == busy.Addr().String() {
		cancel()
		t.Fatalf("the default port in use: the worker listens on %q, want another port (log:\n%s; runWorker: %v)", addr, logged(), <-done)
	}
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("GET /healthz on %s: %v %v", addr, resp, err)
	} else {
		resp.Body.Close()
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("runWorker() = %v after it was stopped", err)
	}
}
