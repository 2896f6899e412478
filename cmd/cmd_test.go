package cmd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/inferhq/infer/models/bert"
	"github.com/inferhq/infer/models/onnx/onnxtest"
	"github.com/inferhq/infer/server"
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
			h, e := cfg.Host, cfg.Encoder
			if h.Addr != "127.0.0.1:8080" || e.Batch.MaxBatch != 64 || e.Batch.MaxLatency != 100*time.Millisecond ||
				e.Workers != 1 || e.Batch.Policy != batch.Adaptive || fmt.Sprint(e.Batch.Buckets) != "[16 32 64]" || h.Timeout != 30*time.Second || h.MaxBody != 1<<20 ||
				h.DrainTimeout != 30*time.Second || h.IdleTimeout != 75*time.Second || h.MaxConns != 0 || e.MaxItems != 0 {
				t.Errorf("defaults = %+v", cfg)
			}
			if o.Model.Model != "use-lite" || o.Model.Task != "" || o.Model.MaxSeqLen != 128 || !o.Model.Truncate ||
				o.Model.Threads != 0 || o.Model.SimFixed != 77*time.Millisecond || o.Model.SimPerItem != 1160*time.Microsecond {
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
				h, e := cfg.Host, cfg.Encoder
				if e.Batch.MaxBatch != 32 || e.Batch.MaxLatency != 5*time.Millisecond || e.Workers != 4 ||
					e.Batch.Policy != batch.Immediate || e.Batch.QueueCap != 512 || h.MaxBody != 64<<10 || h.Addr != ":9000" {
					t.Errorf("config = %+v", cfg)
				}
				if o.Model.SimPerItem != 100*time.Microsecond {
					t.Errorf("sim per item = %v", o.Model.SimPerItem)
				}
			}},
		{args: []string{"--batch", "0"}, wantErr: "--batch 0"},
		{args: []string{"--batch", "9223372036854775807"}, wantErr: "batch size 9223372036854775807: want 1 to 4096"},
		{args: []string{"--workers", "1000"}, wantErr: "workers 1000: want 1 to 64"},
		{args: []string{"--max-latency", "1000h"}, wantErr: "max latency 1000h0m0s: want 0 to 1m0s"},
		{args: []string{"--queue-cap", "100000000"}, wantErr: "queue capacity 100000000"},
		{args: []string{"--cache-size", "100000000000"}, wantErr: "cache size"},
		{args: []string{"--policy", "sometimes"}, wantErr: "unknown batching policy"},
		{args: []string{"--max-body", "lots"}, wantErr: `--max-body "lots": want a positive size`},
		{args: []string{"--max-body", "65MiB"}, wantErr: "--max-body 68157440: want 1 to 67108864 bytes"},
		{args: []string{"--max-conns", "-1"}, wantErr: "--max-conns -1: want 0 (the default) to 1048576"},
		{args: []string{"--max-items", "-1"}, wantErr: "max items -1: must not be negative"},
		{args: []string{"--queue-cap", "-1"}, wantErr: "queue capacity -1"},
		{args: []string{"--cache-ttl", "-1s"}, wantErr: "TTL must not be negative"},
		{args: []string{"--timeout", "0s"}, wantErr: "--timeout 0s: must not be 0"},
		{args: []string{"--workers", "0"}, wantErr: "--workers 0: must be at least 1"},
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
			if !execFlags(t, cmd, tc.args, tc.wantErr) {
				return
			}
			tc.check(t, got)
		})
	}
}

// execFlags runs cmd with args, wanting a usage error (exit code 2) that
// contains wantErr, or success when wantErr is empty. It reports whether the
// command succeeded, so that the caller checks the options it parsed.
func execFlags(t *testing.T, cmd *cobra.Command, args []string, wantErr string) bool {
	t.Helper()
	cmd.SetArgs(args)
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{msg: flagError(err)} })
	err := cmd.Execute()
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("error = %v, want one containing %q", err, wantErr)
		}
		if code := exitCode(err, &bytes.Buffer{}); code != exitUsage {
			t.Errorf("exit code = %d, want %d", code, exitUsage)
		}
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

func TestUnknownModel(t *testing.T) {
	t.Setenv(bert.CacheDirEnv, t.TempDir())
	for _, tc := range []struct {
		o       modelOptions
		use     modelUse
		wantErr string
	}{
		{modelOptions{Model: "gpt-17", Devices: "cpu", MaxSeqLen: 128}, serveModels, `--model "gpt-17": unknown model; want sim, sim-lm, a built-in bert-tiny|bert-mini|bert-small|bert-medium|bert-base|use-lite or gpt2-tiny|gpt2-mini|gpt2-small|stories260k (each also quantised, as NAME-int8 or NAME-int4), or a path to a llama2.c checkpoint (.bin), a decoder export directory or an .onnx file`},
		{modelOptions{Model: "bert-mni", Devices: "cpu", MaxSeqLen: 128}, serveModels, `--model "bert-mni": unknown model (did you mean "bert-mini"?); want sim, sim-lm, a built-in`},
		{modelOptions{Model: "simlm", Devices: "cpu"}, serveModels, `(did you mean "sim-lm"?)`},
		// infer worker serves encoders: it suggests and names those only.
		{modelOptions{Model: "simlm", Devices: "cpu"}, workerModels, `--model "simlm": unknown model (did you mean "sim"?); want sim, a built-in bert-tiny|bert-mini|bert-small|bert-medium|bert-base|use-lite (each also quantised, as NAME-int8), or a path to an .onnx file`},
		{modelOptions{Model: "gpt2-tiny", Devices: "cpu"}, workerModels, "--model gpt2-tiny: a generative model: infer worker serves encoder models"},
		{modelOptions{Model: "sim-lm", Devices: "cpu"}, benchModels, "model sim-lm: a simulated decoder"},
		{modelOptions{Model: "sim", Devices: "tpu"}, serveModels, "--devices"},
		{modelOptions{Model: "bert-mini", Task: "translate", TaskSet: true, Devices: "cpu", MaxSeqLen: 128}, serveModels, "--task translate: unknown task of bert-mini (want fill-mask or embed)"},
		{modelOptions{Model: "bert-mini", Devices: "cpu", MaxSeqLen: 2}, serveModels, "--max-seq-len 2: want at least 3"},
		{modelOptions{Model: "bert-mini", Devices: "cpu", Threads: -1}, serveModels, "--threads -1: must not be negative"},
		{modelOptions{Model: "sim", Devices: "cpu", SimFixed: -time.Millisecond}, serveModels, "--sim-fixed -1ms: must not be negative"},
		{modelOptions{Model: "no/such/model.onnx", Devices: "cpu", MaxSeqLen: 128}, serveModels, "--model: stat no/such/model.onnx: no such file"},
	} {
		_, err := tc.o.open(tc.use, 1, nil)
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("open(%+v) = %v, want an error containing %q", tc.o, err, tc.wantErr)
		}
		var ue *usageError
		if !errors.As(err, &ue) {
			t.Errorf("open(%+v) = %v, want a usage error", tc.o, err)
		}
		if strings.Contains(fmt.Sprint(err), "infer serve: also") {
			t.Errorf("open(%+v) = %v: it speaks of another command", tc.o, err)
		}
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

// TestHelpGolden keeps the user-facing help text of every command under
// review (run go test ./cmd -run Golden -update after changing a flag):
// written to something that is not a terminal it is wrapped at 80
// columns, and every line fits them; each command's prose before Usage
// stays short (the rest is in docs/).
func TestHelpGolden(t *testing.T) {
	var paths [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			return
		}
		paths = append(paths, path)
		for _, sub := range c.Commands() {
			walk(sub, append(slices.Clone(path), sub.Name()))
		}
	}
	walk(newCmdRoot(io.Discard, io.Discard), nil)
	if len(paths) < 12 {
		t.Fatalf("found %d commands: %v", len(paths), paths)
	}
	for _, path := range paths {
		name := strings.Join(append([]string{"infer"}, path...), "_") + ".help"
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			root := newCmdRoot(&out, &out)
			root.SetArgs(append(slices.Clone(path), "--help"))
			if err := root.Execute(); err != nil {
				t.Fatal(err)
			}
			for i, line := range strings.Split(out.String(), "\n") {
				if n := utf8.RuneCountInString(line); n > 80 {
					t.Errorf("line %d is %d columns: %s", i+1, n, line)
				}
			}
			prose, _, _ := strings.Cut(out.String(), "\nUsage:")
			if n := strings.Count(prose, "\n"); n > 16 {
				t.Errorf("%d lines before Usage, want at most 16: move the rest to docs/", n)
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

// TestUnknownFlagSuggests: a mistyped flag is answered with the closest
// one of the command, if one is close.
func TestUnknownFlagSuggests(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--batchh", "8"}, "unknown flag: --batchh (did you mean --batch?)"},
		{[]string{"bench", "--rat", "2"}, "unknown flag: --rat (did you mean --rate?)"},
		{[]string{"serve", "--max-lantecy", "5ms"}, "(did you mean --max-latency?)"},
	} {
		var out bytes.Buffer
		root := newCmdRoot(&out, &out)
		root.SetArgs(tc.args)
		if code := exitCode(root.Execute(), &out); code != exitUsage || !strings.Contains(out.String(), tc.want) {
			t.Errorf("infer %s: exit %d\n%s\nwant %q", strings.Join(tc.args, " "), code, out.String(), tc.want)
		}
	}
	var out bytes.Buffer
	root := newCmdRoot(&out, &out)
	root.SetArgs([]string{"serve", "--zzzzzzzz"})
	if exitCode(root.Execute(), &out); strings.Contains(out.String(), "did you mean") {
		t.Errorf("a flag like none suggested one:\n%s", out.String())
	}
}

func TestModelsBenchFlags(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		calib   bool
		want    func(o *modelsBenchOptions) bool
		wantErr string
	}{
		{args: []string{"bert-mini"}, want: func(o *modelsBenchOptions) bool {
			return o.Model.Model == "bert-mini" && fmt.Sprint(o.Batches) == "[1 8 32 64]" && o.Duration == 3*time.Second && !o.JSON
		}},
		{args: []string{"m.onnx", "--batch", "2,4", "--seq-len", "32", "--threads", "1", "--json", "--duration", "1s"}, want: func(o *modelsBenchOptions) bool {
			return o.Model.Model == "m.onnx" && fmt.Sprint(o.Batches) == "[2 4]" && o.SeqLen == 32 && o.Model.Threads == 1 && o.JSON && o.Duration == time.Second
		}},
		{args: []string{"bert-mini"}, calib: true, want: func(o *modelsBenchOptions) bool {
			return fmt.Sprint(o.Batches) == "[1 2 4 8 16 32 64]" && o.Duration == 2*time.Second
		}},
		{args: nil, wantErr: "takes a model"},
		{args: []string{"a", "b"}, wantErr: "takes a model"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var got *modelsBenchOptions
			runF := func(_ context.Context, o *modelsBenchOptions) error { got = o; return nil }
			cmd := newCmdModelsBench(runF)
			if tc.calib {
				cmd = newCmdModelsCalibrate(runF)
			}
			cmd.SetArgs(tc.args)
			cmd.SetOut(&bytes.Buffer{})
			cmd.SetErr(&bytes.Buffer{})
			err := cmd.Execute()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.want(got) {
				t.Errorf("options = %+v", got)
			}
		})
	}
}

// runInfer runs the command line with args and returns its output.
func runInfer(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	root := newCmdRoot(&out, &out)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

func TestModelsCommands(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(bert.CacheDirEnv, filepath.Join(dir, "cache"))
	out, err := runInfer(t, "models", "list")
	if err != nil || !regexp.MustCompile(`bert-base\s+12\s+768\s+12\s+109.5M`).MatchString(out) || strings.Contains(out, "fill-mask\n") {
		t.Fatalf("models list = %v:\n%s", err, out)
	}

	file := filepath.Join(dir, "tiny.onnx")
	if out, err = runInfer(t, "models", "gen", "bert-tiny", "--task", "embed", "-o", file); err != nil || !strings.Contains(out, "bert-tiny embed") {
		t.Fatalf("models gen = %v:\n%s", err, out)
	}
	out, err = runInfer(t, "models", "info", file)
	for _, want := range []string{"opset:      17", "input_ids            int64    [batch, sequence]", "embedding            float32  [batch, 128]"} {
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("models info = %v, want %q in:\n%s", err, want, out)
		}
	}

	out, err = runInfer(t, "models", "bench", "bert-tiny", "--batch", "1,3", "--duration", "20ms", "--json")
	onnxtest.SkipWithoutRuntime(t, err)
	var rep benchReport
	if err != nil || json.Unmarshal([]byte(out), &rep) != nil {
		t.Fatalf("models bench = %v:\n%s", err, out)
	}
	if rep.Model != "bert-tiny" || rep.Task != "fill-mask" || len(rep.Points) != 2 || rep.Points[1].Batch != 3 ||
		rep.Points[1].ItemsPerSec <= 0 || rep.PrepareNs <= 0 || rep.ORT == "" || len(rep.SHA256) != 64 {
		t.Errorf("models bench report = %+v", rep)
	}
	if out, _ := runInfer(t, "models", "list"); !strings.Contains(out, "fill-mask\n") {
		t.Errorf("models list after bench does not show bert-tiny fill-mask cached:\n%s", out)
	}
}

func TestModelsCalibrateSim(t *testing.T) {
	out, err := runInfer(t, "models", "calibrate", "sim", "--sim-fixed", "2ms", "--sim-per-item", "100us", "--batch", "1,8", "--duration", "20ms")
	if err != nil || !strings.Contains(out, "infer serve --model sim --sim-fixed ") || !strings.Contains(out, "t(n) = ") {
		t.Errorf("models calibrate = %v:\n%s", err, out)
	}
}

// Usage errors say what the flag wants and name the subcommand's help.
func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		msg, hint string
	}{
		{[]string{"serve", "--batch", "abc"}, `--batch "abc": want a whole number`, "Run 'infer serve --help' for usage."},
		{[]string{"serve", "--batch", "99999999999999999999"}, `--batch "99999999999999999999": out of range`, "Run 'infer serve --help' for usage."},
		{[]string{"serve", "--max-latency", "soon"}, `--max-latency "soon": want a duration`, "Run 'infer serve --help' for usage."},
		{[]string{"serve", "--truncate=maybe"}, `--truncate "maybe": want true or false`, "Run 'infer serve --help' for usage."},
		{[]string{"serve", "--workers", "0"}, "--workers 0", "Run 'infer serve --help' for usage."},
		{[]string{"models", "bench", "--no-such-flag"}, "unknown flag", "Run 'infer models bench --help' for usage."},
		{[]string{"nonsense"}, "unknown command", "Run 'infer --help' for usage."},
	} {
		var out bytes.Buffer
		root := newCmdRoot(&out, &out)
		root.SetArgs(tc.args)
		if code := exitCode(execute(context.Background(), root), &out); code != exitUsage {
			t.Errorf("infer %v: exit %d, want %d", tc.args, code, exitUsage)
		}
		if got := out.String(); !strings.Contains(got, tc.msg) || !strings.Contains(got, tc.hint) || strings.Contains(got, "strconv") {
			t.Errorf("infer %v:\n%s\nwant %q and %q", tc.args, got, tc.msg, tc.hint)
		}
	}
}

// A drain that timed out exits with its own documented code.
func TestDrainTimeoutExitCode(t *testing.T) {
	err := fmt.Errorf("%w after 5s: 3 requests still running were answered 503 draining", server.ErrDrainTimeout)
	if code := exitCode(err, &bytes.Buffer{}); code != exitDrainTimeout {
		t.Errorf("exitCode(%v) = %d, want %d", err, code, exitDrainTimeout)
	}
}
