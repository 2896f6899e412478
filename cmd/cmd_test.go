package cmd

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/inferhq/infer/server/batch"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func TestServeFlags(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		check   func(t *testing.T, o *serveOptions)
		wantErr string
	}{
		{args: nil, check: func(t *testing.T, o *serveOptions) {
			cfg, err := o.config()
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Addr != "127.0.0.1:8080" || cfg.Batch.MaxBatch != 64 || cfg.Batch.MaxLatency != 100*time.Millisecond ||
				cfg.Workers != 1 || cfg.Batch.Policy != batch.Fixed || cfg.Timeout != 30*time.Second || cfg.MaxBody != 1<<20 {
				t.Errorf("defaults = %+v", cfg)
			}
			if o.Model.Model != "sim" || o.Model.SimFixed != 77*time.Millisecond || o.Model.SimPerItem != 1160*time.Microsecond {
				t.Errorf("model defaults = %+v", o.Model)
			}
		}},
		{args: []string{"--batch", "32", "--max-latency", "5ms", "--workers", "4", "--policy", "immediate",
			"--queue-cap", "512", "--max-body", "64KiB", "--sim-fixed", "4ms", "--sim-per-item", "0.1ms", "--addr", ":9000"},
			check: func(t *testing.T, o *serveOptions) {
				cfg, err := o.config()
				if err != nil {
					t.Fatal(err)
				}
				if cfg.Batch.MaxBatch != 32 || cfg.Batch.MaxLatency != 5*time.Millisecond || cfg.Workers != 4 ||
					cfg.Batch.Policy != batch.Immediate || cfg.Batch.QueueCap != 512 || cfg.MaxBody != 64<<10 || cfg.Addr != ":9000" {
					t.Errorf("config = %+v", cfg)
				}
				if o.Model.SimPerItem != 100*time.Microsecond {
					t.Errorf("sim per item = %v", o.Model.SimPerItem)
				}
			}},
		{args: []string{"--batch", "0"}, wantErr: "--batch 0"},
		{args: []string{"--policy", "sometimes"}, wantErr: "unknown batching policy"},
		{args: []string{"--max-body", "lots"}, wantErr: "invalid argument"},
		{args: []string{"--queue-cap", "10", "--max-items", "20"}, wantErr: "exceeds the queue capacity"},
		{args: []string{"extra"}, wantErr: "takes no arguments"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var got *serveOptions
			cmd := newCmdServe(func(_ context.Context, o *serveOptions) error {
				got = o
				if _, err := o.config(); err != nil {
					return err
				}
				return nil
			})
			cmd.SetArgs(tc.args)
			cmd.SetOut(&bytes.Buffer{})
			cmd.SetErr(&bytes.Buffer{})
			cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err.Error()} })
			err := cmd.Execute()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				if code := exitCode(err, &bytes.Buffer{}); code != exitUsage {
					t.Errorf("exit code = %d, want %d", code, exitUsage)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, got)
		})
	}
}

func TestUnknownModel(t *testing.T) {
	o := modelOptions{Model: "gpt-17", Devices: "cpu"}
	if _, err := o.open(); err == nil || !strings.Contains(err.Error(), "unknown model") {
		t.Errorf("open() = %v, want unknown model", err)
	}
	o = modelOptions{Model: "sim", Devices: "tpu"}
	if _, err := o.open(); err == nil {
		t.Error("open() with --devices tpu succeeded")
	}
}

func TestVersion(t *testing.T) {
	var out bytes.Buffer
	root := newCmdRoot(&out, &out)
	root.SetArgs([]string{"version"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "infer ") || !strings.Contains(out.String(), "commit ") {
		t.Errorf("version output = %q", out.String())
	}
}

func TestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"version"}, exitOK},
		{[]string{"nonsense"}, exitUsage},
		{[]string{"serve", "--no-such-flag"}, exitUsage},
		{[]string{"serve", "--model", "nope"}, exitUsage},
	} {
		var out bytes.Buffer
		root := newCmdRoot(&out, &out)
		root.SetArgs(tc.args)
		if got := exitCode(root.Execute(), &out); got != tc.want {
			t.Errorf("infer %v: exit %d, want %d (%s)", tc.args, got, tc.want, out.String())
		}
	}
}

// TestHelpGolden keeps the user-facing help text under review: run
// go test ./cmd -run Golden -update after changing a flag.
func TestHelpGolden(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"serve", "--help"}, {"bench", "--help"}} {
		name := strings.Join(append([]string{"infer"}, args[:len(args)-1]...), "_") + ".help"
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			root := newCmdRoot(&out, &out)
			root.SetArgs(args)
			if err := root.Execute(); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", name)
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
		})
	}
}
