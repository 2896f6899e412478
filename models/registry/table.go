package registry

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/bert"
	"github.com/inferhq/infer/models/gpt2"
	"github.com/inferhq/infer/models/onnx"
	"github.com/inferhq/infer/models/sim"
	"github.com/inferhq/infer/models/simlm"
	"github.com/inferhq/infer/models/wordpiece"
)

// table returns every model, in the order infer models list shows them:
// the encoders, then the decoders, each simulated one first; then the
// formats, in the order Lookup sniffs them (a format whose files another
// also claims comes first). Add a model here (see the package doc).
func table() []Entry {
	es := []Entry{simEntry()}
	for _, a := range bert.Archs() {
		es = append(es, bertEntry(a))
	}
	es = append(es, useLiteEntry(), simLMEntry())
	for _, a := range gpt2.Archs() {
		es = append(es, gpt2Entry(a))
	}
	return append(twins(append(es, stories260kEntry())), llamaCheckpoint(), decoderExport(), onnxFile())
}

// -- encoders

func simEntry() Entry {
	return Entry{
		Name: sim.Name, Kind: Encoder, Simulated: true,
		OpenEncoder: func(_ string, s Settings) (models.Factory, error) { return encoder(sim.New(s.Sim)) },
	}
}

func bertEntry(a bert.Arch) Entry {
	var tasks []string
	params := map[string]int64{}
	for _, t := range bert.Tasks() {
		tasks = append(tasks, string(t))
		params[string(t)] = a.Params(t)
	}
	spec := func(task string, seed uint64) bert.Spec { return bert.Spec{Arch: a, Task: bert.Task(task), Seed: seed} }
	return Entry{
		Name: a.String(), Aliases: []string{a.Name}, Kind: Encoder, Family: "BERT", Tasks: tasks,
		Listing: Listing{Layers: a.Layers, Hidden: a.Hidden, Heads: a.Heads, Params: params},
		Cached: func(dir string) []string {
			return cached(dir, tasks, func(task string) string { return spec(task, 0).FileName() })
		},
		Write: func(w io.Writer, task string, seed uint64) error { return bert.Generate(w, spec(task, seed)) },
		OpenEncoder: func(_ string, s Settings) (models.Factory, error) {
			cfg := s.wordpieceEncoder()
			if err := cfg.Validate(); err != nil {
				return nil, err
			}
			path, err := ensure(s, a.String(), s.Task, func(dir string) (string, error) { return bert.Ensure(dir, spec(s.Task, 0)) })
			if err != nil {
				return nil, err
			}
			cfg.Path, cfg.Name = path, a.String()
			return encoder(onnx.New(cfg))
		},
	}
}

// onnxFile is an encoder graph by path, with the standard inputs
// (input_ids, attention_mask, optionally token_type_ids) and BERT's
// tokenizer. It claims any file, so it comes last.
func onnxFile() Entry {
	return Entry{
		Format: "an .onnx file", Exts: []string{".onnx"}, Kind: Encoder,
		Sniff: func(path string) (bool, error) {
			st, err := os.Stat(path)
			return err == nil && !st.IsDir(), nil
		},
		OpenEncoder: func(path string, s Settings) (models.Factory, error) {
			cfg := s.wordpieceEncoder()
			cfg.Path = path
			return encoder(onnx.New(cfg))
		},
	}
}

// wordpieceEncoder is the ONNX configuration of an encoder with BERT's
// tokenizer.
func (s Settings) wordpieceEncoder() onnx.Config {
	return onnx.Config{Tokenizer: wordpiece.BertBaseUncased(), MaxSeqLen: s.MaxSeqLen, RejectLong: s.RejectLong, Runtime: s.runtime()}
}

// -- decoders

func simLMEntry() Entry {
	return Entry{
		Name: simlm.Name, Kind: Decoder, Simulated: true, Context: simlm.DefaultContext,
		Listing: Listing{Context: simlm.DefaultContext},
		OpenDecoder: func(_ string, s Settings) (models.DecoderFactory, error) {
			cfg := s.SimLM
			cfg.KVTokens = s.KVTokens
			return decoder(simlm.New(cfg))
		},
	}
}

func gpt2Entry(a gpt2.Arch) Entry {
	tasks := []string{gpt2.Task}
	// The graph has its KV cache in place: a decode step reads it once,
	// where the standard graph of exports copies it and reads it again.
	// The -int8 twin's keeps it in int8 (kvInt8), in ONNX Runtime's
	// GroupQueryAttention (kvInt8Spec).
	spec := func(seed uint64) gpt2.Spec { return gpt2.Spec{Arch: a, Seed: seed, InPlaceKV: true} }
	kv8 := gpt2.Spec{Arch: a, GQA: true, KVInt8: true}
	return Entry{
		Name: a.String(), Kind: Decoder, Family: "GPT-2", Tasks: tasks, Engine: onnx.DecoderEngine(), Context: a.Context,
		Listing: Listing{Layers: a.Layers, Hidden: a.Hidden, Heads: a.Heads, Context: a.Context,
			Params: map[string]int64{gpt2.Task: a.Params()}, KVBytesPerToken: a.KVBytesPerToken()},
		KVInt8BytesPerToken: kv8.KVBytesPerToken(),
		Cached: func(dir string) []string {
			return cached(dir, tasks, func(string) string { return spec(0).FileName() })
		},
		Write: func(w io.Writer, _ string, seed uint64) error { return gpt2.Generate(w, spec(seed)) },
		OpenDecoder: func(_ string, s Settings) (models.DecoderFactory, error) {
			cfg := onnx.DecoderConfig{KVTokens: s.KVTokens, Runtime: s.runtime()}
			if err := cfg.Validate(); err != nil {
				return nil, err
			}
			gen := func(sp gpt2.Spec) (string, error) {
				return ensure(s, a.String(), "", func(dir string) (string, error) { return gpt2.Ensure(dir, sp) })
			}
			float32Graph := func() (string, error) { return gen(spec(0)) }
			var path string
			var err error
			if s.kvInt8 {
				path, err = gen(kvInt8Spec(a, float32Graph, s))
			} else {
				path, err = float32Graph()
			}
			if err != nil {
				return nil, err
			}
			cfg.Path, cfg.Name = path, a.String()
			return decoder(onnx.OpenDecoder(cfg))
		},
	}
}

// kvInt8Spec returns the graph of a's -int8 twin before its weights are
// quantised: GroupQueryAttention over an int8 KV cache with static scales
// per layer, head and channel, each channel's largest |key| or |value| in
// a's float32 graph (in place, made by float32Graph if need be) over
// gpt2.CalibrationText, / 127, measured when the twin's graph is first
// made: once that is cached, the float32 graph is not needed. Its decode
// step took 0.84–0.87 of the time of the twins' earlier form, an int8
// cache with a scale per token and head and integer products (gpt2-small,
// 16 rows after 256 positions, the graphs alone; docs/quantization.md).
func kvInt8Spec(a gpt2.Arch, float32Graph func() (string, error), s Settings) gpt2.Spec {
	calibrate := func() ([]float32, error) {
		floatPath, err := float32Graph()
		if err != nil {
			return nil, err
		}
		rt := s.runtime()
		rt.Rewrite = nil // the float32 graph itself
		f, err := onnx.OpenDecoder(onnx.DecoderConfig{Path: floatPath, Name: a.String(), Runtime: rt})
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return onnx.CalibrateKV(context.Background(), f, f.Tokenizer().Encode(gpt2.CalibrationText))
	}
	return gpt2.Spec{Arch: a, GQA: true, KVInt8: true,
		KVScales: &gpt2.KVScales{ID: "absmax/127 over " + gpt2.CalibrationID(), Compute: calibrate}}
}

// decoderExport is a decoder graph by path: an .onnx file whose graph has
// past_key_values inputs (models/gpt2's, or a Hugging Face optimum export),
// or an optimum export directory.
func decoderExport() Entry {
	return Entry{
		Format: "a decoder export directory", Kind: Decoder, Engine: onnx.DecoderEngine(),
		Sniff: func(path string) (bool, error) {
			st, err := os.Stat(path)
			if err != nil {
				return false, nil
			}
			dec, err := onnx.IsDecoder(path)
			if err != nil && st.IsDir() {
				return false, err // only decoders come in directories
			}
			return err == nil && dec, nil // not a decoder: the encoder format says what is wrong
		},
		OpenDecoder: func(path string, s Settings) (models.DecoderFactory, error) {
			return decoder(onnx.OpenDecoder(onnx.DecoderConfig{Path: path, KVTokens: s.KVTokens, Runtime: s.runtime()}))
		},
	}
}

// -- helpers

// ensure returns the file of a built-in, generating it into the cache by
// gen if it is not there yet, and logs it.
func ensure(s Settings, name, task string, gen func(dir string) (string, error)) (string, error) {
	start := time.Now()
	path, err := gen(s.cacheDir())
	if err != nil {
		return "", fmt.Errorf("built-in model %s: %w", name, err)
	}
	attrs := []any{"name", name}
	if task != "" {
		attrs = append(attrs, "task", task)
	}
	s.logger().Info("built-in model", append(attrs, "path", path, "took", time.Since(start).Round(time.Millisecond))...)
	settle()
	return path, nil
}

// settle hands the memory a model's generation used back to the operating
// system. The Go runtime would keep it mapped for minutes, and the server
// that loads the model next would carry it in its resident set (bert-base-int8
// served, generated on first use: 647 MiB once ready; from the cache: 244 MiB).
// A model found in the cache leaves little garbage: a collection of a small
// heap.
func settle() { debug.FreeOSMemory() }

// cached returns the tasks whose file (named by file) is in dir.
func cached(dir string, tasks []string, file func(task string) string) []string {
	var have []string
	for _, t := range tasks {
		if _, err := os.Stat(filepath.Join(dir, file(t))); err == nil {
			have = append(have, t)
		}
	}
	return have
}

// encoder and decoder return a backend's factory as the interface, and no
// typed nil on error.
func encoder[F models.Factory](f F, err error) (models.Factory, error) {
	if err != nil {
		return nil, err
	}
	return f, nil
}

func decoder[F models.DecoderFactory](f F, err error) (models.DecoderFactory, error) {
	if err != nil {
		return nil, err
	}
	return f, nil
}
