package llama

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/llama/stories260k"
	"github.com/inferhq/infer/models/llama/tokenizer"
	"github.com/inferhq/infer/models/onnx"
)

func writeFiles(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestOpen: the built-in by name, and any checkpoint by path with its
// tokenizer given or found beside it, served with the checkpoint's context
// and BOS as the end of a sequence.
func TestOpen(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string][]byte{"stories260K.bin": stories260k.Checkpoint, "tok512.bin": stories260k.Tokenizer})
	for _, tc := range []struct {
		cfg  Config
		name string
	}{
		{Config{Checkpoint: "Stories260K"}, "stories260k"},
		{Config{Checkpoint: filepath.Join(dir, "stories260K.bin")}, "stories260K"},
		{Config{Checkpoint: filepath.Join(dir, "stories260K.bin"), Tokenizer: filepath.Join(dir, "tok512.bin"), Name: "tiny-stories"}, "tiny-stories"},
	} {
		tc.cfg.CacheDir, tc.cfg.KVTokens = testCache, 2048
		f, err := Open(tc.cfg)
		requireRuntime(t, err)
		info, dinfo := f.Info(), f.Decoder()
		want := models.DecoderInfo{Context: 512, EOS: 1, Vocab: 512, KVTokens: 2048, BlockKV: true, Engine: onnx.DecoderEngine()}
		if info.Name != tc.name || info.Task != Task || dinfo != want {
			t.Errorf("%+v: %+v %+v, want name %s and %+v", tc.cfg, info, dinfo, tc.name, want)
		}
		if _, ok := f.Tokenizer().(models.ContextTokenizer); !ok || f.KVBytesPerToken() != stories.KVBytesPerToken() {
			t.Errorf("%+v: tokenizer %T, %d KV bytes per token", tc.cfg, f.Tokenizer(), f.KVBytesPerToken())
		}
		f.Close()
	}
}

// TestOpenHostile: what is wrong with a checkpoint or its tokenizer is said
// with the fix, before ONNX Runtime is needed.
func TestOpenHostile(t *testing.T) {
	dir := t.TempDir()
	ck := filepath.Join(dir, "model.bin")
	gqaTok := func() []byte { // a tokenizer of gqa's 300 tokens
		var b bytes.Buffer
		b.Write(stories260k.Tokenizer[:4])
		tok, _ := tokenizer.Parse(stories260k.Tokenizer)
		off := 4
		for id := range 300 {
			n := 8 + len(tok.Piece(int32(id)))
			b.Write(stories260k.Tokenizer[off : off+n])
			off += n
		}
		return b.Bytes()
	}()
	for _, tc := range []struct {
		name  string
		files map[string][]byte
		cfg   Config
		want  string
	}{
		{"no checkpoint", nil, Config{}, "no checkpoint"},
		{"a missing checkpoint", nil, Config{Checkpoint: filepath.Join(dir, "none.bin")}, "no such file"},
		{"a truncated checkpoint", map[string][]byte{"model.bin": stories260k.Checkpoint[:500_000], "tokenizer.bin": stories260k.Tokenizer},
			Config{Checkpoint: ck}, "the checkpoint is truncated"},
		{"a header that does not match the file", map[string][]byte{"model.bin": append(bytes.Clone(stories260k.Checkpoint), 0, 0, 0, 0)},
			Config{Checkpoint: ck}, "the header does not match the file"},
		{"no tokenizer beside it", map[string][]byte{"model.bin": stories260k.Checkpoint},
			Config{Checkpoint: ck}, "pass --tokenizer"},
		{"two tokenizers beside it", map[string][]byte{"model.bin": stories260k.Checkpoint, "tok512.bin": stories260k.Tokenizer, "tok4096.bin": stories260k.Tokenizer},
			Config{Checkpoint: ck}, "2 tokenizers beside"},
		{"a tokenizer of another vocabulary", map[string][]byte{"model.bin": stories260k.Checkpoint, "tok300.bin": gqaTok},
			Config{Checkpoint: ck}, "the tokenizer has 300 tokens and the checkpoint's vocabulary 512: use the tokenizer the checkpoint was trained with"},
		{"a checkpoint as the tokenizer", map[string][]byte{"model.bin": stories260k.Checkpoint},
			Config{Checkpoint: ck, Tokenizer: ck}, "--tokenizer names llama2.c's tokenizer.bin"},
		{"the built-in with another tokenizer", map[string][]byte{"tok300.bin": gqaTok},
			Config{Checkpoint: Builtin, Tokenizer: filepath.Join(dir, "tok300.bin")}, "the tokenizer has 300 tokens"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				os.Remove(filepath.Join(dir, e.Name()))
			}
			writeFiles(t, dir, tc.files)
			tc.cfg.CacheDir = t.TempDir()
			_, err := Open(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) || errors.Is(err, onnx.ErrNoRuntime) {
				t.Errorf("Open: %v, want an error containing %q", err, tc.want)
			}
			if left, _ := os.ReadDir(tc.cfg.CacheDir); len(left) != 0 {
				t.Errorf("a refused checkpoint left %v in the cache", left)
			}
		})
	}
}

func TestReadArch(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gqa.bin")
	writeFiles(t, dir, map[string][]byte{"gqa.bin": randomCheckpoint(gqa, 1), "bad.bin": []byte("not a checkpoint")})
	for name, want := range map[string]Arch{Builtin: stories, "STORIES260K": stories, path: gqa} {
		if got, err := ReadArch(name); err != nil || got != want {
			t.Errorf("ReadArch(%s) = %+v, %v; want %+v", name, got, err, want)
		}
	}
	if _, err := ReadArch(filepath.Join(dir, "bad.bin")); err == nil || !strings.Contains(err.Error(), "bad.bin") {
		t.Errorf("ReadArch of a bad file: %v", err)
	}
}

func TestFindTokenizer(t *testing.T) {
	dir := t.TempDir()
	ck := filepath.Join(dir, "stories15M.bin")
	writeFiles(t, dir, map[string][]byte{"stories15M.bin": nil, "tok512.bin": nil})
	if got, err := FindTokenizer(ck); err != nil || got != filepath.Join(dir, "tok512.bin") {
		t.Errorf("FindTokenizer = %s, %v; want tok512.bin", got, err)
	}
	writeFiles(t, dir, map[string][]byte{"tokenizer.bin": nil, "tok4096.bin": nil})
	if got, err := FindTokenizer(ck); err != nil || got != filepath.Join(dir, "tokenizer.bin") {
		t.Errorf("FindTokenizer = %s, %v; want tokenizer.bin first", got, err)
	}
	// The checkpoint itself is not its tokenizer.
	other := t.TempDir()
	writeFiles(t, other, map[string][]byte{"tok-model.bin": nil})
	if _, err := FindTokenizer(filepath.Join(other, "tok-model.bin")); err == nil || !strings.Contains(err.Error(), "no tokenizer beside") {
		t.Errorf("FindTokenizer beside tok-model.bin alone: %v", err)
	}
}
