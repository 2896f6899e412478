package cmd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/bert"
	"github.com/inferhq/infer/models/onnx"
	"github.com/inferhq/infer/models/onnx/onnxtest"
	"github.com/inferhq/infer/models/registry"
	"github.com/inferhq/infer/models/simlm"
	"github.com/inferhq/infer/server/generate"
)

// openDecoder opens the decoder the options of infer serve name.
func openDecoder(t *testing.T, o *serveOptions) models.DecoderFactory {
	t.Helper()
	m, err := o.Model.lookup(serveModels)
	if err != nil {
		t.Fatal(err)
	}
	f, err := o.Model.openDecoder(m, o.Gen.KVTokens, o.Gen.simLM(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestServeDecoderFlags(t *testing.T) {
	t.Setenv(bert.CacheDirEnv, t.TempDir()) // gpt2-tiny is generated there
	for _, tc := range []struct {
		args    []string
		check   func(t *testing.T, o *serveOptions, cfg generate.Config)
		wantErr string
	}{
		{args: []string{"--model", "sim-lm"}, check: func(t *testing.T, o *serveOptions, cfg generate.Config) {
			if cfg.Policy != generate.Continuous || cfg.MaxSeqs != 32 || cfg.MaxBatchedTokens != 2048 || cfg.KVTokens != 0 || cfg.MaxLatency != 100*time.Millisecond ||
				cfg.BlockSize != generate.DefaultBlockSize || cfg.NoPrefixCache {
				t.Errorf("engine defaults = %+v", cfg)
			}
			if o.Gen.SimStep != 8*time.Millisecond || o.Gen.SimPerSeq != 250*time.Microsecond || o.Gen.SimPerPrefillToken != 20*time.Microsecond {
				t.Errorf("sim-lm defaults = %+v", o.Gen)
			}
			f := openDecoder(t, o)
			if f.Info().Name != "sim-lm" || f.Decoder().KVTokens != simlm.DefaultKVTokens {
				t.Errorf("sim-lm = %s %+v", f.Info().Name, f.Decoder())
			}
			for _, name := range []string{"bert-mini", "sim", "testdata/infer.help"} {
				if m, err := (&modelOptions{Model: name}).lookup(serveModels); err != nil || m.Kind != registry.Encoder {
					t.Errorf("lookup(%s) = %v %v, %v; want an encoder", name, m, m.Kind, err)
				}
			}
			// Only decoders come in directories: one that holds no export is an error.
			if _, err := (&modelOptions{Model: "testdata"}).lookup(serveModels); err == nil || !strings.Contains(err.Error(), "holds none of") {
				t.Errorf("lookup(testdata) = %v; want the files it lacks", err)
			}
		}},
		{args: []string{"--model", "sim-lm", "--max-seqs", "64", "--max-batched-tokens", "512", "--kv-tokens", "8192", "--gen-policy", "static",
			"--max-latency", "20ms", "--queue-cap", "100", "--sim-step", "4ms", "--sim-per-seq", "0.1ms", "--sim-per-prefill-token", "0.01ms"},
			check: func(t *testing.T, o *serveOptions, cfg generate.Config) {
				if cfg.Policy != generate.Static || cfg.MaxSeqs != 64 || cfg.MaxBatchedTokens != 512 || cfg.KVTokens != 8192 || cfg.MaxLatency != 20*time.Millisecond || cfg.QueueCap != 100 {
					t.Errorf("engine = %+v", cfg)
				}
				f := openDecoder(t, o)
				if f.Decoder().KVTokens != 8192 || !strings.Contains(f.Info().Params, "step=4ms per_seq=100µs per_prefill_token=10µs") {
					t.Errorf("sim-lm = %s, %+v", f.Info().Params, f.Decoder())
				}
			}},
		{args: []string{"--model", "sim-lm", "--prefix-cache=false", "--block-size", "32"}, check: func(t *testing.T, o *serveOptions, cfg generate.Config) {
			if !cfg.NoPrefixCache || cfg.BlockSize != 32 {
				t.Errorf("engine = %+v, want the prefix cache off, blocks of 32", cfg)
			}
		}},
		{args: []string{"--model", "sim-lm", "--block-size", "5000"}, wantErr: "--block-size 5000: want 1 to 1024 tokens"},
		{args: []string{"--model", "sim-lm", "--block-size", "0"}, wantErr: "--block-size 0: want 1 to 1024 tokens"}, // not the default silently
		{args: []string{"--model", "sim-lm", "--max-seqs", "-1"}, wantErr: "--max-seqs -1"},
		{args: []string{"--model", "sim-lm", "--max-batched-tokens", "-1"}, wantErr: "--max-batched-tokens -1"},
		{args: []string{"--model", "sim-lm", "--max-seqs", "100000"}, wantErr: "--max-seqs 100000"},
		{args: []string{"--model", "sim-lm", "--max-seqs", "64", "--max-batched-tokens", "32"}, wantErr: "--max-batched-tokens 32"},
		{args: []string{"--model", "sim-lm", "--gen-policy", "eager"}, wantErr: "unknown generation policy"},
		{args: []string{"--model", "sim-lm", "--kv-tokens", "-1"}, wantErr: "--kv-tokens -1"},
		{args: []string{"--model", "sim-lm", "--queue-cap", "1000000"}, wantErr: "--queue-cap 1000000"},
		{args: []string{"--model", "sim-lm", "--sim-step", "-1ms"}, wantErr: "--sim-step -1ms: must not be negative"},
		{args: []string{"--model", "sim-lm", "--kv-tokens", "100"}, wantErr: "--kv-tokens 100: want at least the model's context (4096 tokens)"},
		// GPT-2 on ONNX Runtime: the CPU defaults, the KV bound shared by
		// the decoder and its engines.
		{args: []string{"--model", "gpt2-tiny"}, check: func(t *testing.T, o *serveOptions, cfg generate.Config) {
			if cfg.MaxSeqs != 16 || cfg.MaxBatchedTokens != 256 || cfg.KVTokens != 0 {
				t.Errorf("engine = %+v, want the CPU defaults", cfg)
			}
		}},
		{args: []string{"--model", "gpt2-tiny", "--max-seqs", "300", "--kv-tokens", "4096"}, check: func(t *testing.T, o *serveOptions, cfg generate.Config) {
			if cfg.MaxSeqs != 300 || cfg.MaxBatchedTokens != 300 || cfg.KVTokens != 4096 {
				t.Errorf("engine = %+v", cfg)
			}
		}},
		{args: []string{"--model", "gpt2-tiny", "--kv-tokens", "512"}, wantErr: "--kv-tokens 512: want at least the model's context (1024 tokens)"},
		{args: []string{"--model", "gpt2-tiny", "--kv-tokens", "-5"}, wantErr: "--kv-tokens -5"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var got *serveOptions
			var ecfg generate.Config
			var noRuntime error
			cmd := newCmdServe(func(_ context.Context, o *serveOptions) error {
				got = o
				if _, err := o.config(); err != nil {
					return err
				}
				m, err := o.Model.lookup(serveModels)
				if err != nil || m.Kind != registry.Decoder {
					return fmt.Errorf("lookup() = %v %v, %v, want a generative model", m, m.Kind, err)
				}
				if ecfg, err = o.decoderEngine(m); err != nil {
					return err
				}
				f, err := o.Model.openDecoder(m, o.Gen.KVTokens, o.Gen.simLM(), nil)
				if errors.Is(err, onnx.ErrNoRuntime) {
					noRuntime = err
					return nil
				}
				if err != nil {
					return err
				}
				defer f.Close()
				if o.Model.Model == "gpt2-tiny" {
					if d, ok := f.(*onnx.DecoderFactory); !ok || d.Decoder().KVTokens != cmp.Or(o.Gen.KVTokens, 16384) || d.Threads() != runtime.NumCPU() {
						return fmt.Errorf("openDecoder(gpt2-tiny) = %T %+v", f, f.Decoder())
					}
				}
				return settingError(ecfg.CheckModel(f.Decoder()))
			})
			if !execFlags(t, cmd, tc.args, tc.wantErr) {
				return
			}
			onnxtest.SkipWithoutRuntime(t, noRuntime)
			tc.check(t, got, ecfg)
		})
	}
}

// Every flag is checked before the model is loaded: a built-in decoder is
// not generated when a flag is wrong.
func TestServeChecksFlagsBeforeLoading(t *testing.T) {
	cache := t.TempDir()
	t.Setenv(bert.CacheDirEnv, cache)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // should a check be missed, the server stops at once
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--model", "gpt2-tiny", "--max-seqs", "-1"}, "--max-seqs -1"},
		{[]string{"--model", "gpt2-tiny", "--max-seqs", "8", "--max-batched-tokens", "4"}, "--max-batched-tokens 4"},
		{[]string{"--model", "gpt2-tiny", "--gen-policy", "eager"}, "unknown generation policy"},
		{[]string{"--model", "gpt2-tiny", "--queue-cap", "1000000"}, "--queue-cap 1000000"},
		{[]string{"--model", "gpt2-tiny", "--kv-tokens", "512"}, "--kv-tokens 512: want at least the model's context (1024 tokens)"},
		{[]string{"--model", "gpt2-tiny", "--devices", "tpu"}, "--devices"},
		{[]string{"--model", "gpt2-tiny", "--broker", "redis://127.0.0.1:1/0"}, "--broker: distributed mode serves encoder models only"},
		{[]string{"--model", "bert-mini", "--broker", "http://127.0.0.1:1"}, "--broker: broker url"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			cmd := newCmdServe(nil)
			cmd.SetContext(ctx)
			execFlags(t, cmd, append([]string{"--addr", "127.0.0.1:0", "--log-level", "error"}, tc.args...), tc.wantErr)
			if files, _ := os.ReadDir(cache); len(files) > 0 {
				t.Errorf("the model cache holds %v: a model was generated before the flags were checked", files)
			}
		})
	}
}
