package llama

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/inferhq/infer/models/llama/stories260k"
	"github.com/inferhq/infer/models/llama/tokenizer"
	"github.com/inferhq/infer/models/onnx"
	"github.com/inferhq/infer/models/onnxgraph"
)

// Builtin is the name of the built-in checkpoint, stories260k: llama2.c's
// stories260K and its tokenizer, embedded in the binary.
const Builtin = stories260k.Name

// IsBuiltin reports whether name is a built-in model, in any case.
func IsBuiltin(name string) bool { return strings.EqualFold(name, Builtin) }

// Config configures Open. Checkpoint is required; every other field has a
// documented default for its zero value.
type Config struct {
	// Checkpoint is a llama2.c checkpoint file (legacy version 0 format,
	// e.g. stories15M.bin), or "stories260k" for the built-in model.
	Checkpoint string
	// Tokenizer is llama2.c's tokenizer file for the checkpoint. Default:
	// the built-in's own for stories260k; else tokenizer.bin beside the
	// checkpoint, else the one tok*.bin there (tok512.bin, tok4096.bin).
	Tokenizer string
	// Name is the model's name as clients address it. Default:
	// stories260k, or the checkpoint's base name without .bin.
	Name string
	// KVTokens bounds the KV cache of one instance, in tokens summed over
	// its sequences. Default: models/onnx's, 16 full contexts.
	KVTokens int
	// CacheDir is where the generated ONNX graph is kept. Default:
	// onnxgraph.DefaultCacheDir().
	CacheDir string
	// Runtime is how the instances run (devices, threads, the ONNX Runtime
	// library, the logger).
	onnx.Runtime
}

// Open reads a llama2.c checkpoint and its tokenizer, generates the ONNX
// graph of the model into the cache on first use (named by the checkpoint's
// SHA-256, so a changed checkpoint gets a new graph), and opens it with
// models/onnx's decoder: the context is the checkpoint's seq_len, the end
// of sequence BOS. The returned factory is a models.DecoderFactory.
func Open(cfg Config) (*onnx.DecoderFactory, error) {
	if cfg.Checkpoint == "" {
		return nil, errors.New("llama: no checkpoint: name a llama2.c .bin file or " + Builtin)
	}
	ck, name, err := openCheckpoint(cfg)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	tok, err := loadTokenizer(cfg)
	if err != nil {
		return nil, err
	}
	if err := tok.CheckVocab(ck.Vocab); err != nil {
		return nil, fmt.Errorf("llama: %s: %w (--tokenizer)", name, err)
	}
	start := time.Now()
	path, err := Ensure(cmp.Or(cfg.CacheDir, onnxgraph.DefaultCacheDir()), ck, name)
	if err != nil {
		return nil, fmt.Errorf("llama: %w", err)
	}
	if cfg.Logger != nil {
		cfg.Logger.Info("llama2.c checkpoint", "name", name, "shape", ck.Shape(), "params", ck.Params(),
			"graph", path, "took", time.Since(start).Round(time.Millisecond))
	}
	return onnx.OpenDecoder(onnx.DecoderConfig{Path: path, Name: name, KVTokens: cfg.KVTokens, Tokenizer: tok, Runtime: cfg.Runtime})
}

// WriteBuiltin writes the ONNX graph of the built-in checkpoint to w.
func WriteBuiltin(w io.Writer) error {
	ck, name, err := openCheckpoint(Config{Checkpoint: Builtin})
	if err != nil {
		return err
	}
	return Generate(w, ck, name)
}

// ReadArch returns the shape of a checkpoint, a path or the built-in's
// name, from its header alone: what a caller needs to know before Open
// (the context, the KV bytes per token).
func ReadArch(checkpoint string) (Arch, error) {
	ck, _, err := openCheckpoint(Config{Checkpoint: checkpoint})
	if err != nil {
		return Arch{}, err
	}
	defer ck.Close()
	return ck.Arch, nil
}

// openCheckpoint opens cfg's checkpoint and returns it with the model's
// name.
func openCheckpoint(cfg Config) (*Checkpoint, string, error) {
	if IsBuiltin(cfg.Checkpoint) {
		ck, err := Read(bytes.NewReader(stories260k.Checkpoint), int64(len(stories260k.Checkpoint)))
		if err != nil {
			return nil, "", fmt.Errorf("llama: built-in %s: %w", Builtin, err)
		}
		return ck, cmp.Or(cfg.Name, Builtin), nil
	}
	ck, err := OpenFile(cfg.Checkpoint)
	if err != nil {
		return nil, "", fmt.Errorf("llama: %w", err)
	}
	return ck, cmp.Or(cfg.Name, strings.TrimSuffix(filepath.Base(cfg.Checkpoint), ".bin")), nil
}

// loadTokenizer reads cfg's tokenizer.
func loadTokenizer(cfg Config) (*tokenizer.Tokenizer, error) {
	path := cfg.Tokenizer
	if path == "" && IsBuiltin(cfg.Checkpoint) {
		tok, err := tokenizer.Parse(stories260k.Tokenizer)
		if err != nil {
			return nil, fmt.Errorf("llama: built-in %s tokenizer: %w", Builtin, err)
		}
		return tok, nil
	}
	if path == "" {
		var err error
		if path, err = FindTokenizer(cfg.Checkpoint); err != nil {
			return nil, fmt.Errorf("llama: %w", err)
		}
	}
	tok, err := tokenizer.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("llama: %w (--tokenizer names llama2.c's tokenizer.bin)", err)
	}
	return tok, nil
}

// FindTokenizer returns the tokenizer beside a checkpoint: tokenizer.bin in
// its directory, else the only tok*.bin there. The error says where it
// looked and what to do.
func FindTokenizer(checkpoint string) (string, error) {
	dir := filepath.Dir(checkpoint)
	if p := filepath.Join(dir, "tokenizer.bin"); isFile(p) {
		return p, nil
	}
	matches, err := filepath.Glob(filepath.Join(dir, "tok*.bin"))
	if err != nil {
		return "", err
	}
	matches = slices.DeleteFunc(matches, func(p string) bool {
		return !isFile(p) || filepath.Clean(p) == filepath.Clean(checkpoint)
	})
	switch len(matches) {
	case 1:
		return matches[0], nil
	case 0:
		return "", fmt.Errorf("no tokenizer beside %s (looked for tokenizer.bin and tok*.bin in %s): "+
			"pass --tokenizer with the llama2.c tokenizer of the checkpoint (tokenizer.bin for Llama 2 exports)", checkpoint, dir)
	}
	for i, m := range matches {
		matches[i] = filepath.Base(m)
	}
	return "", fmt.Errorf("%d tokenizers beside %s (%s): pass --tokenizer to say which", len(matches), checkpoint, strings.Join(matches, ", "))
}

func isFile(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

// BuiltinFileName returns the name Ensure gives the built-in's graph in
// the cache (FileName of stories260k and its checkpoint's hash).
var BuiltinFileName = sync.OnceValue(func() string {
	sum := sha256.Sum256(stories260k.Checkpoint)
	return FileName(Builtin, hex.EncodeToString(sum[:]))
})

// BuiltinArch is the shape of the built-in checkpoint, from its header.
var BuiltinArch = sync.OnceValues(func() (Arch, error) { return ReadArch(Builtin) })
