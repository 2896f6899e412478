package cmd

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/inferhq/infer/models/bert"
	"github.com/inferhq/infer/models/onnx/onnxtest"
)

func TestModelsDecoderFlags(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		calib   bool
		want    func(o *modelsBenchOptions) bool
		wantErr string
	}{
		{args: []string{"gpt2-tiny"}, want: func(o *modelsBenchOptions) bool {
			d := o.Decoder
			return !o.BatchSet && d.Context == 256 && fmt.Sprint(d.Prompts) == "[32 128]" && d.KVTokens == 0 &&
				!d.Memory && d.Seqs == 16 && d.Steps == 8
		}},
		{args: []string{"gpt2-mini", "--batch", "4", "--context", "64", "--prompts", "16,512", "--kv-tokens", "9000"},
			want: func(o *modelsBenchOptions) bool {
				d := o.Decoder
				return o.BatchSet && fmt.Sprint(o.Batches) == "[4]" && d.Context == 64 && fmt.Sprint(d.Prompts) == "[16 512]" && d.KVTokens == 9000
			}},
		{args: []string{"gpt2-small", "--memory", "--seqs", "4", "--steps", "2"}, want: func(o *modelsBenchOptions) bool {
			return o.Decoder.Memory && o.Decoder.Seqs == 4 && o.Decoder.Steps == 2
		}},
		{args: []string{"gpt2-tiny", "--context", "100"}, calib: true, want: func(o *modelsBenchOptions) bool {
			return o.Decoder.Context == 100 && !o.BatchSet
		}},
		{args: []string{"gpt2-tiny", "--memory"}, calib: true, wantErr: "unknown flag: --memory"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var got *modelsBenchOptions
			runF := func(_ context.Context, o *modelsBenchOptions) error { got = o; return nil }
			cmd := newCmdModelsBench(runF)
			if tc.calib {
				cmd = newCmdModelsCalibrate(runF)
			}
			if !execFlags(t, cmd, tc.args, tc.wantErr) {
				return
			}
			if !tc.want(got) {
				t.Errorf("options = %+v", got)
			}
		})
	}
}

// TestModelsDecoderCommands runs the models commands on gpt2-tiny for real:
// generated into a fresh cache, listed, inspected, benchmarked, calibrated.
func TestModelsDecoderCommands(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(bert.CacheDirEnv, filepath.Join(dir, "cache"))
	out, err := runInfer(t, "models", "list")
	if err != nil || !regexp.MustCompile(`gpt2-small\s+12\s+768\s+12\s+1024\s+124.4M\s+72.0 KiB\s+-`).MatchString(out) {
		t.Fatalf("models list = %v:\n%s", err, out)
	}
	file := filepath.Join(dir, "tiny.onnx")
	if out, err = runInfer(t, "models", "gen", "gpt2-tiny", "-o", file); err != nil || !strings.Contains(out, "gpt2-tiny text-generation (7.0M params)") {
		t.Fatalf("models gen = %v:\n%s", err, out)
	}
	if _, err = runInfer(t, "models", "gen", "gpt2-tiny", "--task", "embed", "-o", file); err == nil || !strings.Contains(err.Error(), "its one task is text-generation") {
		t.Errorf("models gen gpt2-tiny --task embed = %v", err)
	}
	if _, err = runInfer(t, "models", "gen", "gpt3"); err == nil || !strings.Contains(err.Error(), "gpt2-tiny, gpt2-mini, gpt2-small") {
		t.Errorf("models gen gpt3 = %v, want the decoders named", err)
	}
	out, err = runInfer(t, "models", "info", file)
	for _, want := range []string{"parameters: 6960768 (7.0M)", "decoder:    2 layers, 2 heads of 64, vocabulary 50257, KV cache 2.0 KiB a token",
		"past_key_values.1.value  float32  [batch_size, 2, past_sequence_length, 64]", "infer.eos_token_id = 50256"} {
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("models info = %v, want %q in:\n%s", err, want, out)
		}
	}

	// By path: the decoder is recognised from its graph.
	out, err = runInfer(t, "models", "bench", file, "--batch", "1,2", "--context", "32", "--prompts", "8,16", "--duration", "20ms", "--json")
	onnxtest.SkipWithoutRuntime(t, err)
	var rep decodeBenchReport
	if err != nil || json.Unmarshal([]byte(out), &rep) != nil {
		t.Fatalf("models bench = %v:\n%s", err, out)
	}
	if rep.Model != "gpt2-tiny" || rep.Context != 32 || len(rep.Decode) != 2 || rep.Decode[1].Batch != 2 || rep.Decode[1].ItemsPerSec <= 0 ||
		len(rep.Prefill) != 2 || rep.Prefill[1].PromptLen != 16 || rep.Prefill[1].TokensPerSec <= 0 || rep.ORT == "" || rep.KVTokens != 96 {
		t.Errorf("models bench report = %+v", rep)
	}
	out, err = runInfer(t, "models", "calibrate", "gpt2-tiny", "--batch", "1,2", "--context", "32", "--prompts", "8,16", "--duration", "20ms")
	if err != nil || !strings.Contains(out, "infer serve --model sim-lm --sim-step ") || !strings.Contains(out, "--sim-per-prefill-token ") {
		t.Errorf("models calibrate = %v:\n%s", err, out)
	}
	if out, _ := runInfer(t, "models", "list"); !regexp.MustCompile(`gpt2-tiny .* text-generation\n`).MatchString(out) {
		t.Errorf("models list after bench does not show gpt2-tiny cached:\n%s", out)
	}
	out, err = runInfer(t, "models", "bench", "gpt2-tiny", "--memory", "--seqs", "2", "--kv-tokens", "64", "--steps", "2", "--json")
	var mem memoryReport
	if err != nil || json.Unmarshal([]byte(out), &mem) != nil {
		t.Fatalf("models bench --memory = %v:\n%s", err, out)
	}
	if mem.Seqs != 2 || mem.TokensPerSeq != 32 || mem.KVBytes != 64*2048 || mem.RSSLoadedBytes <= 0 || mem.RSSPeakBytes < mem.RSSFullBytes {
		t.Errorf("models bench --memory report = %+v", mem)
	}
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--context", "0"}, "--context 0"},
		{[]string{"--context", "1020"}, "want within 1..1024"},
		{[]string{"--prompts", "0"}, "--prompts 0"},
		{[]string{"--seq-len", "8"}, "a decoder's are --context and --prompts"},
		{[]string{"--batch", "40", "--kv-tokens", "10", "--context", "20", "--prompts", "4"}, "--kv-tokens 10: the points need 1440"},
		{[]string{"--memory", "--seqs", "0"}, "--seqs 0"},
		{[]string{"--memory", "--seqs", "4", "--kv-tokens", "16", "--steps", "4"}, "leaves 4 tokens a sequence"},
	} {
		_, err := runInfer(t, append([]string{"models", "bench", "gpt2-tiny", "--duration", "10ms"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("models bench gpt2-tiny %v = %v, want an error containing %q", tc.args, err, tc.wantErr)
		}
	}
}
