package cmd

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/inferhq/infer/server/generate"
)

func TestServeDecoderFlags(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		check   func(t *testing.T, o *serveOptions, cfg generate.Config)
		wantErr string
	}{
		{args: []string{"--model", "sim-lm"}, check: func(t *testing.T, o *serveOptions, cfg generate.Config) {
			if cfg.Policy != generate.Continuous || cfg.MaxSeqs != 32 || cfg.MaxBatchedTokens != 2048 || cfg.KVTokens != 0 || cfg.MaxLatency != 100*time.Millisecond {
				t.Errorf("engine defaults = %+v", cfg)
			}
			if o.Gen.SimStep != 8*time.Millisecond || o.Gen.SimPerSeq != 250*time.Microsecond || o.Gen.SimPerPrefillToken != 20*time.Microsecond {
				t.Errorf("sim-lm defaults = %+v", o.Gen)
			}
			f, err := decoderFactory("sim-lm", &o.Gen)
			if err != nil || f == nil || f.Info().Name != "sim-lm" || f.Decoder().KVTokens != 65536 {
				t.Errorf("decoderFactory(sim-lm) = %v, %v", f, err)
			}
			if f, err := decoderFactory("bert-mini", &o.Gen); f != nil || err != nil {
				t.Errorf("decoderFactory(bert-mini) = %v, %v; want nil, nil (an encoder)", f, err)
			}
		}},
		{args: []string{"--model", "sim-lm", "--max-seqs", "64", "--max-batched-tokens", "512", "--kv-tokens", "8192", "--gen-policy", "static",
			"--max-latency", "20ms", "--queue-cap", "100", "--sim-step", "4ms", "--sim-per-seq", "0.1ms", "--sim-per-prefill-token", "0.01ms"},
			check: func(t *testing.T, o *serveOptions, cfg generate.Config) {
				if cfg.Policy != generate.Static || cfg.MaxSeqs != 64 || cfg.MaxBatchedTokens != 512 || cfg.KVTokens != 8192 || cfg.MaxLatency != 20*time.Millisecond || cfg.QueueCap != 100 {
					t.Errorf("engine = %+v", cfg)
				}
				f, _ := decoderFactory("sim-lm", &o.Gen)
				if f.Decoder().KVTokens != 8192 || !strings.Contains(f.Info().Params, "step=4ms per_seq=100µs per_prefill_token=10µs") {
					t.Errorf("sim-lm = %s, %+v", f.Info().Params, f.Decoder())
				}
			}},
		{args: []string{"--model", "sim-lm", "--max-seqs", "0"}, wantErr: "--max-seqs 0"},
		{args: []string{"--model", "sim-lm", "--max-seqs", "100000"}, wantErr: "--max-seqs 100000"},
		{args: []string{"--model", "sim-lm", "--max-seqs", "64", "--max-batched-tokens", "32"}, wantErr: "--max-batched-tokens 32"},
		{args: []string{"--model", "sim-lm", "--gen-policy", "eager"}, wantErr: "unknown generation policy"},
		{args: []string{"--model", "sim-lm", "--kv-tokens", "-1"}, wantErr: "--kv-tokens -1"},
		{args: []string{"--model", "sim-lm", "--queue-cap", "1000000"}, wantErr: "--queue-cap 1000000"},
		{args: []string{"--model", "sim-lm", "--sim-step", "-1ms"}, wantErr: "negative cost"},
		{args: []string{"--model", "sim-lm", "--kv-tokens", "100"}, wantErr: "less than the context"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var got *serveOptions
			var ecfg generate.Config
			cmd := newCmdServe(func(_ context.Context, o *serveOptions) error {
				got = o
				if _, err := o.config(); err != nil {
					return err
				}
				var err error
				if ecfg, err = o.Gen.engine(o.Batching.MaxLatency, o.QueueCap, o.AdmitLate); err != nil {
					return err
				}
				_, err = decoderFactory(o.Model.Model, &o.Gen)
				return err
			})
			if !execFlags(t, cmd, tc.args, tc.wantErr) {
				return
			}
			tc.check(t, got, ecfg)
		})
	}
}
