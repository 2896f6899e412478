package onnx

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/inferhq/infer/internal/setting"
	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/bpe"
	"github.com/inferhq/infer/models/onnxgraph"
)

// TaskTextGeneration is the task of a decoder, as models.Info.Task reports
// it.
const TaskTextGeneration = "text-generation"

// Graph inputs and outputs of a decoder, as in Hugging Face optimum's
// decoder-with-past export and models/gpt2.
const (
	positionIDs    = "position_ids"     // int64 [batch, sequence]; optional
	useCacheBranch = "use_cache_branch" // bool [1]; only in merged decoders
	logitsToKeep   = "logits_to_keep"   // int64 [1]; optional: logits for the last k positions (0: all)
	logitsOutput   = "logits"           // float32 [batch, sequence or k, vocab]
	// A graph whose attention is ONNX Runtime's GroupQueryAttention
	// (models/gpt2's with GQA) takes these in place of attention_mask.
	seqLensK            = "seqlens_k"             // int32 [batch]: each row's past + fed positions − 1
	totalSequenceLength = "total_sequence_length" // int32 [1]: the longest row's past + fed positions
)

// Defaults of a decoder.
const (
	// DefaultContext is the context of a graph that says none, in
	// tokens: GPT-2's n_positions.
	DefaultContext = 1024
	// DefaultKVContexts is DecoderConfig.KVTokens' default, in full
	// contexts: 16,384 tokens for GPT-2.
	DefaultKVContexts = 16
	// DecoderMaxSeqs and DecoderMaxBatchedTokens are a decoder's engine
	// defaults (models.DecoderInfo.Engine), sized for a CPU, where a
	// step's cost grows with its rows and a long prompt chunk stalls every
	// stream of its step (scripts/accept-gpt2.sh serve-defaults measures
	// them against an accelerator's).
	DecoderMaxSeqs          = 16
	DecoderMaxBatchedTokens = 256
)

// DecoderEngine returns a decoder's engine defaults: DecoderMaxSeqs and
// DecoderMaxBatchedTokens.
func DecoderEngine() models.EngineDefaults {
	return models.EngineDefaults{MaxSeqs: DecoderMaxSeqs, MaxBatchedTokens: DecoderMaxBatchedTokens}
}

var pastRe = regexp.MustCompile(`^past_key_values\.(\d+)\.(key|value)$`)

// Exports in a directory, in the order OpenDecoder prefers them: optimum's
// merged decoder, its older with-past decoder, a single-file export.
var exportFiles = []string{"decoder_model_merged.onnx", "decoder_with_past_model.onnx", "model.onnx"}

// ErrNotDecoder means a graph has no KV cache inputs: it is an encoder, or a
// decoder exported without past.
var ErrNotDecoder = errors.New("not a decoder graph")

// ErrKVFull means a Step would hold more tokens than DecoderInfo.KVTokens.
// The engine's admission keeps within the bound, so this names an engine
// that does not.
var ErrKVFull = errors.New("kv cache full")

// DecoderConfig configures OpenDecoder. Path is required; every other field
// has a documented default for its zero value.
type DecoderConfig struct {
	// Path is the .onnx file, or a directory holding an optimum export
	// (decoder_model_merged.onnx, else decoder_with_past_model.onnx, else
	// model.onnx).
	Path string
	// Name is the model's name as clients address it. Default: the value
	// of the infer.arch metadata, else the file's base name without .onnx
	// (the directory's name for an export directory).
	Name string
	// KVTokens bounds the KV cache of one instance, in tokens summed over
	// its sequences. Default DefaultKVContexts full contexts (16,384
	// tokens for GPT-2).
	KVTokens int
	// Context is the most tokens of one sequence. Default: the graph's
	// infer.context metadata, else n_positions (or max_position_embeddings)
	// of a config.json next to the file, else DefaultContext (GPT-2's).
	Context int
	// Tokenizer converts text and ids. Default: GPT-2's byte-level BPE,
	// which needs a vocabulary of at least its 50,257 tokens.
	Tokenizer models.Tokenizer
	Runtime
}

// Validate reports the settings OpenDecoder refuses, before it reads any
// file.
func (c DecoderConfig) Validate() error {
	switch {
	case c.KVTokens < 0:
		return setting.Errorf(SettingKVTokens, c.KVTokens, "must not be negative")
	case c.Context < 0:
		return setting.Errorf(SettingContext, c.Context, "must not be negative")
	}
	return c.Runtime.validate()
}

// decoderSig is what a decoder graph takes and gives.
type decoderSig struct {
	layers, heads, headDim, vocab int
	positions                     bool // the graph takes position_ids
	cacheBranch                   bool // the graph takes use_cache_branch (a merged decoder)
	keepLast                      bool // the graph takes logits_to_keep (models/gpt2's graphs)
	// inPlace: the graph outputs new.{i}.key|value, the fed tokens' keys
	// and values, rather than present.{i}.key|value (models/gpt2's graphs
	// with InPlaceKV); the decoder writes them into the cache in place
	// (see kvcache.go).
	inPlace bool
	// gqa: the graph takes seqlens_k and total_sequence_length instead of
	// attention_mask, and its present.{i}.key|value are the past's own
	// tensors, into which GroupQueryAttention writes the fed tokens' keys
	// and values after each row's past (models/gpt2's graphs with GQA;
	// the cache float32 or int8, the scales of the latter in the graph).
	// Its rows are left-aligned as an in-place graph's.
	gqa bool
	// kvElem is the element type of the cache's keys and values: float32,
	// or int8 (a GQA graph only).
	kvElem          elemType
	inputs, outputs []string
}

// DecoderFactory loads a decoder graph and makes instances of it. It is a
// models.DecoderFactory.
type DecoderFactory struct {
	cfg  DecoderConfig
	log  *slog.Logger
	sig  decoderSig
	info models.DecoderInfo
	tok  models.Tokenizer
	placement
	sessions sessions
}

var _ models.DecoderFactory = (*DecoderFactory)(nil)

// IsDecoder reports whether path is a decoder graph: an export directory, or
// an .onnx file whose graph takes past_key_values inputs. It reads the
// file's description, not its weights. OpenDecoder says whether it can serve
// it.
func IsDecoder(path string) (bool, error) {
	file, err := decoderFile(path)
	if err != nil {
		return false, err
	}
	info, err := onnxgraph.Inspect(file)
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(info.Inputs, func(t onnxgraph.Tensor) bool { return pastRe.MatchString(t.Name) }), nil
}

// DecoderShape is what a decoder graph's inputs and outputs say about it.
type DecoderShape struct {
	Layers, Heads, HeadDim, Vocab int
	PositionIDs                   bool // it takes position_ids
	Merged                        bool // it takes use_cache_branch
	// QuantizedKV says its KV cache is int8 rather than float32 (its
	// scales are the graph's).
	QuantizedKV bool
}

// KVBytesPerToken is the size of one token's keys and values over all
// layers.
func (s DecoderShape) KVBytesPerToken() int64 {
	perHead := 4 * s.HeadDim
	if s.QuantizedKV {
		perHead = s.HeadDim
	}
	return int64(2 * s.Layers * s.Heads * perHead)
}

// DecoderShapeOf reads the shape of a decoder graph from its description,
// or says why OpenDecoder could not serve it (ErrNotDecoder for a graph
// without a KV cache).
func DecoderShapeOf(info onnxgraph.Info) (DecoderShape, error) {
	sig, err := readDecoderSig(info)
	if err != nil {
		return DecoderShape{}, err
	}
	return sig.shape(), nil
}

func (s decoderSig) shape() DecoderShape {
	return DecoderShape{Layers: s.layers, Heads: s.heads, HeadDim: s.headDim, Vocab: s.vocab, PositionIDs: s.positions,
		Merged: s.cacheBranch, QuantizedKV: s.kvElem == elemInt8}
}

// decoderFile returns the .onnx file of path: path itself, or the preferred
// export of a directory.
func decoderFile(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("onnx: model: %w", err)
	}
	if !st.IsDir() {
		return path, nil
	}
	for _, name := range exportFiles {
		if _, err := os.Stat(filepath.Join(path, name)); err == nil {
			return filepath.Join(path, name), nil
		}
	}
	return "", fmt.Errorf("onnx: %s holds none of %s", path, strings.Join(exportFiles, ", "))
}

// OpenDecoder loads the ONNX Runtime (once per process), reads the decoder
// graph's inputs, outputs and metadata, and checks the devices. It creates
// no session yet.
func OpenDecoder(cfg DecoderConfig) (*DecoderFactory, error) {
	if cfg.Path == "" {
		return nil, errors.New("onnx: no model path")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("onnx: %w", err)
	}
	file, err := decoderFile(cfg.Path)
	if err != nil {
		return nil, err
	}
	dirName := ""
	if file != cfg.Path {
		dirName = filepath.Base(filepath.Clean(cfg.Path))
	}
	// A config.json beside the export describes a rewritten graph too.
	exportDir := filepath.Dir(file)
	if cfg.Rewrite != nil {
		if file, err = cfg.Rewrite.File(file); err != nil {
			return nil, err
		}
	}
	cfg.Path = file
	f := &DecoderFactory{cfg: cfg, log: cfg.Logger}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	info, err := onnxgraph.Inspect(file)
	if err != nil {
		return nil, fmt.Errorf("onnx: %w", err)
	}
	if f.sig, err = readDecoderSig(*info); err != nil {
		return nil, fmt.Errorf("onnx: %s: %w", file, err)
	}
	hf, err := readHFConfig(filepath.Join(exportDir, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("onnx: %w", err)
	}
	if err := f.describe(*info, hf, dirName); err != nil {
		return nil, fmt.Errorf("onnx: %s: %w", file, err)
	}
	if cfg.Rewrite != nil {
		f.cfg.Name += cfg.Rewrite.Suffix
	}
	if f.placement, err = place(cfg.Library, cfg.Devices, cfg.Threads, cfg.Workers, f.log); err != nil {
		return nil, err
	}
	if !f.sig.positions {
		f.log.Warn("decoder graph has no position_ids input: only sequences of equal lengths share a run, "+
			"so batches are small; re-export with position_ids (optimum does for gpt2)", "path", file)
	}
	f.log.Info("onnx decoder", append([]any{"path", file, "layers", f.sig.layers, "heads", f.sig.heads, "head_dim", f.sig.headDim,
		"vocab", f.sig.vocab, "context", f.info.Context, "kv_tokens", f.info.KVTokens,
		"kv_mib", f.KVBytes() >> 20, "merged", f.sig.cacheBranch}, f.logAttrs()...)...)
	return f, nil
}

// hfConfig holds the fields of a Hugging Face config.json the decoder uses.
type hfConfig struct {
	NPositions            int             `json:"n_positions"`
	MaxPositionEmbeddings int             `json:"max_position_embeddings"`
	EOSTokenID            json.RawMessage `json:"eos_token_id"` // an id or a list of ids
}

// readHFConfig reads path, or returns the zero hfConfig when there is none.
func readHFConfig(path string) (hfConfig, error) {
	var c hfConfig
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	} else if err != nil {
		return c, err
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// eos returns the config's end-of-sequence id, the first of a list.
func (c hfConfig) eos() (int32, bool) {
	var id int32
	if json.Unmarshal(c.EOSTokenID, &id) == nil {
		return id, true
	}
	var ids []int32
	if json.Unmarshal(c.EOSTokenID, &ids) == nil && len(ids) > 0 {
		return ids[0], true
	}
	return 0, false
}

// describe fills the factory's name, DecoderInfo and tokenizer from the
// config, the graph's metadata and a config.json, in that order of
// precedence. dir is the name of the export directory, if the model came in
// one.
func (f *DecoderFactory) describe(info onnxgraph.Info, hf hfConfig, dir string) error {
	meta := info.Metadata
	f.cfg.Name = cmp.Or(f.cfg.Name, meta["infer.arch"], dir, strings.TrimSuffix(filepath.Base(f.cfg.Path), ".onnx"))
	f.tok = f.cfg.Tokenizer
	if f.tok == nil {
		if f.sig.vocab < bpe.Vocab {
			return fmt.Errorf("vocabulary of %d tokens: the built-in tokenizer is GPT-2's, of %d", f.sig.vocab, bpe.Vocab)
		}
		f.tok = bpe.GPT2()
	}
	ctxLen := f.cfg.Context
	for _, c := range []int{metaInt(meta, "infer.context"), hf.NPositions, hf.MaxPositionEmbeddings, DefaultContext} {
		if ctxLen <= 0 {
			ctxLen = c
		}
	}
	eos, ok := int32(metaInt(meta, "infer.eos_token_id")), meta["infer.eos_token_id"] != ""
	if !ok {
		eos, ok = hf.eos()
	}
	if !ok {
		eos = bpe.EOS
	}
	if eos < 0 || int(eos) >= f.sig.vocab {
		return fmt.Errorf("end-of-sequence id %d is outside the vocabulary of %d tokens", eos, f.sig.vocab)
	}
	kv := f.cfg.KVTokens
	if kv == 0 {
		kv = DefaultKVContexts * ctxLen
	}
	f.info = models.DecoderInfo{Context: ctxLen, EOS: eos, Vocab: f.sig.vocab, KVTokens: kv, BlockKV: true,
		Engine: DecoderEngine()}
	return nil
}

func metaInt(meta map[string]string, key string) int {
	n, _ := strconv.Atoi(meta[key])
	return n
}

// readDecoderSig matches a graph's inputs and outputs against what Step
// feeds and reads. The error lists the graph's inputs or outputs.
func readDecoderSig(info onnxgraph.Info) (decoderSig, error) {
	var sig decoderSig
	type kv struct{ key, value *onnxgraph.Tensor }
	var past []kv
	layer := func(m []string) (*kv, error) {
		i, err := strconv.Atoi(m[1])
		if err != nil || i > 1024 {
			return nil, fmt.Errorf("layer number %q", m[1])
		}
		for len(past) <= i {
			past = append(past, kv{})
		}
		return &past[i], nil
	}
	if !slices.ContainsFunc(info.Inputs, func(t onnxgraph.Tensor) bool { return pastRe.MatchString(t.Name) }) {
		return sig, fmt.Errorf("%w: no past_key_values inputs, so no KV cache: export the model with past "+
			"(optimum-cli export onnx --task text-generation-with-past) and use decoder_model_merged.onnx; its inputs: %s",
			ErrNotDecoder, listTensors(info.Inputs))
	}
	have := map[string]bool{}
	for i := range info.Inputs {
		in := &info.Inputs[i]
		switch m := pastRe.FindStringSubmatch(in.Name); {
		case in.Name == inputIDs || in.Name == attentionMask || in.Name == positionIDs:
			if in.Type != "int64" || len(in.Shape) != 2 {
				return sig, fmt.Errorf("graph input %s: want int64 [batch, sequence]", in)
			}
		case in.Name == seqLensK || in.Name == totalSequenceLength:
			if in.Type != "int32" || len(in.Shape) != 1 {
				return sig, fmt.Errorf("graph input %s: want int32 [batch] or [1]", in)
			}
		case in.Name == useCacheBranch:
			if in.Type != "bool" {
				return sig, fmt.Errorf("graph input %s: want bool [1]", in)
			}
		case in.Name == logitsToKeep:
			// Read as models/gpt2 defines it, transformers' integer
			// argument (the last k positions); a 1-D tensor there can also
			// be a list of indices, which a graph of another origin may
			// mean.
			if in.Type != "int64" || len(in.Shape) != 1 || (in.Shape[0] != 1 && in.Shape[0] != -1) {
				return sig, fmt.Errorf("graph input %s: want int64 [1]", in)
			}
		case m != nil:
			l, err := layer(m)
			if err != nil {
				return sig, fmt.Errorf("graph input %s: %w", in.Name, err)
			}
			if m[2] == "key" {
				l.key = in
			} else {
				l.value = in
			}
		default:
			return sig, fmt.Errorf("unsupported graph input %s; a decoder takes %s, %s (or %s and %s), optionally %s, %s "+
				"and %s, and past_key_values.{i}.key|value; its inputs: %s", in, inputIDs, attentionMask, seqLensK,
				totalSequenceLength, positionIDs, useCacheBranch, logitsToKeep, listTensors(info.Inputs))
		}
		have[in.Name] = true
	}
	sig.gqa = have[seqLensK]
	if have[totalSequenceLength] != sig.gqa {
		return sig, fmt.Errorf("graph takes one of %s and %s: GroupQueryAttention takes both; its inputs: %s", seqLensK,
			totalSequenceLength, listTensors(info.Inputs))
	}
	required := []string{inputIDs, attentionMask}
	if sig.gqa {
		required = []string{inputIDs, totalSequenceLength, positionIDs}
		if have[attentionMask] || have[useCacheBranch] {
			return sig, fmt.Errorf("graph takes %s, so no %s or %s; its inputs: %s", seqLensK, attentionMask, useCacheBranch,
				listTensors(info.Inputs))
		}
	}
	for _, name := range required {
		if !have[name] {
			return sig, fmt.Errorf("graph has no %s input; its inputs: %s", name, listTensors(info.Inputs))
		}
	}
	sig.positions, sig.cacheBranch, sig.keepLast, sig.layers = have[positionIDs], have[useCacheBranch], have[logitsToKeep], len(past)
	sig.heads, sig.headDim = -1, -1
	for i, l := range past {
		for _, t := range []*onnxgraph.Tensor{l.key, l.value} {
			if t == nil {
				return sig, fmt.Errorf("layer %d lacks past_key_values.%d.key or .value", i, i)
			}
			if !isCacheType(t.Type) || len(t.Shape) != 4 || t.Shape[1] <= 0 || t.Shape[3] <= 0 {
				return sig, fmt.Errorf("graph input %s: want float32 (or int8, with %s) [batch, heads, past, head_dim] with fixed heads and head_dim", t, seqLensK)
			}
			if sig.heads < 0 {
				sig.heads, sig.headDim, sig.kvElem = int(t.Shape[1]), int(t.Shape[3]), cacheElem[t.Type]
			} else if int(t.Shape[1]) != sig.heads || int(t.Shape[3]) != sig.headDim {
				return sig, fmt.Errorf("graph input %s: every layer must have %d heads of %d", t, sig.heads, sig.headDim)
			}
			if cacheElem[t.Type] != sig.kvElem {
				return sig, fmt.Errorf("graph input %s: every layer's keys and values must be %s, as past_key_values.0.key", t, sig.kvElem)
			}
		}
	}
	if sig.kvElem == elemInt8 && !sig.gqa {
		// Its scales would be inputs of their own; only GroupQueryAttention
		// holds them in the graph.
		return sig, fmt.Errorf("graph input %s: an int8 KV cache is served in graphs that take %s (GroupQueryAttention) only", past[0].key, seqLensK)
	}

	outs := map[string]onnxgraph.Tensor{}
	for _, o := range info.Outputs {
		outs[o.Name] = o
	}
	logits, ok := outs[logitsOutput]
	if !ok || logits.Type != "float32" || len(logits.Shape) != 3 || logits.Shape[2] <= 0 {
		return sig, fmt.Errorf("want a float32 output logits [batch, sequence, vocab] with a fixed vocab; its outputs: %s",
			listTensors(info.Outputs))
	}
	sig.vocab = int(logits.Shape[2])
	sig.inputs = []string{inputIDs, attentionMask}
	if sig.gqa {
		sig.inputs = []string{inputIDs, seqLensK, totalSequenceLength}
	}
	if sig.positions {
		sig.inputs = append(sig.inputs, positionIDs)
	}
	sig.outputs = []string{logitsOutput}
	_, sig.inPlace = outs["new.0.key"]
	if sig.inPlace && sig.gqa {
		return sig, fmt.Errorf("graph takes %s and outputs new.0.key: one of the two layouts of a cache in place, not both", seqLensK)
	}
	if sig.inPlace && !sig.positions {
		return sig, fmt.Errorf("graph outputs new.0.key (its KV cache in place) but takes no %s", positionIDs)
	}
	for i := range sig.layers {
		for _, kind := range []string{"key", "value"} {
			name, want := fmt.Sprintf("present.%d.%s", i, kind), "past + sequence"
			switch {
			case sig.inPlace:
				name, want = fmt.Sprintf("new.%d.%s", i, kind), "sequence"
			case sig.gqa:
				want = "capacity"
			}
			o, ok := outs[name]
			if !ok || !isCacheType(o.Type) || cacheElem[o.Type] != sig.kvElem || len(o.Shape) != 4 {
				return sig, fmt.Errorf("no %s output %s [batch, heads, %s, %d]; its outputs: %s",
					sig.kvElem, name, want, sig.headDim, listTensors(info.Outputs))
			}
			// A GQA graph's present is the past's own tensor, bound as
			// both: of the past's shape, its capacity whatever the decoder
			// makes it.
			if in := past[i].key; sig.gqa && (in.Shape[2] > 0 || o.Shape[2] > 0 || o.Shape[1] != in.Shape[1] || o.Shape[3] != in.Shape[3]) {
				return sig, fmt.Errorf("graph output %s: want %s [batch, %d, capacity, %d] with a dynamic capacity, as %s, which the "+
					"decoder binds as the output too", o, sig.kvElem, sig.heads, sig.headDim, in)
			}
			sig.inputs = append(sig.inputs, fmt.Sprintf("past_key_values.%d.%s", i, kind))
			sig.outputs = append(sig.outputs, name)
		}
	}
	if sig.cacheBranch {
		sig.inputs = append(sig.inputs, useCacheBranch)
	}
	if sig.keepLast {
		sig.inputs = append(sig.inputs, logitsToKeep)
	}
	return sig, nil
}

func listTensors(ts []onnxgraph.Tensor) string { return join(ts, ", ") }

// cacheElem maps the element types of KV cache tensors a decoder takes to
// their elemType.
var cacheElem = map[string]elemType{"float32": elemFloat32, "int8": elemInt8}

// isCacheType reports whether a decoder takes KV cache tensors of type t.
func isCacheType(t string) bool {
	_, ok := cacheElem[t]
	return ok
}

// Info describes the model.
func (f *DecoderFactory) Info() models.Info {
	return models.Info{
		Name:    f.cfg.Name,
		Task:    TaskTextGeneration,
		Backend: "onnx",
		Params:  fmt.Sprintf("%s context=%d kv_tokens=%d", f.params(), f.info.Context, f.info.KVTokens),
	}
}

// Decoder returns the model's context, EOS, vocabulary and KV bound.
func (f *DecoderFactory) Decoder() models.DecoderInfo { return f.info }

// Tokenizer returns the model's tokenizer: GPT-2's BPE unless the config
// named another.
func (f *DecoderFactory) Tokenizer() models.Tokenizer { return f.tok }

// Path returns the .onnx file the factory loaded.
func (f *DecoderFactory) Path() string { return f.cfg.Path }

// Threads returns the intra-op threads of each session.
func (f *DecoderFactory) Threads() int { return f.threads }

// KVBytesPerToken is the size of one token's keys and values over all
// layers.
func (f *DecoderFactory) KVBytesPerToken() int64 { return f.sig.shape().KVBytesPerToken() }

// KVBytes is the size of a full KV cache of KVTokens tokens, without the
// padding of batches of mixed lengths (see Decoder).
func (f *DecoderFactory) KVBytes() int64 { return int64(f.info.KVTokens) * f.KVBytesPerToken() }

// New returns an instance for engine number worker, on its device
// (round-robin), with an empty KV cache. The instances on one device share
// one session, so the weights are loaded once however many engines serve
// the model (infer serve runs three, one per scheduling path): ONNX Runtime
// runs a session from several threads at once, and each instance owns its
// KV cache.
func (f *DecoderFactory) New(_ context.Context, worker int) (models.Decoder, error) {
	dev := worker % len(f.devices)
	s, err := f.sessions.get(dev, func() (*ort.DynamicAdvancedSession, error) {
		return newSession(f.cfg.Path, f.sig.inputs, f.sig.outputs, f.devices[dev], f.threads, f.cfg.Spin)
	})
	if err != nil {
		return nil, err
	}
	return newDecoder(f, s), nil
}

// Close releases the sessions; the instances must be closed first.
func (f *DecoderFactory) Close() error {
	f.sessions.close()
	return nil
}
