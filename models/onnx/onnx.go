// Package onnx serves a BERT-family ONNX graph with ONNX Runtime: it
// tokenizes text, pads each batch to its own longest item, runs the graph on
// the CPU or a CUDA device, and decodes the outputs it finds in the graph
// (fill-mask candidates or an embedding vector). It is the only importer of
// github.com/yalue/onnxruntime_go.
//
// The graph takes int64 input_ids and attention_mask [batch, sequence] and,
// if it declares it, token_type_ids. Its outputs decide the task:
//
//	mask_positions, top_scores, top_ids   fill-mask, top-k inside the graph (models/bert)
//	logits [batch, sequence, vocab]       fill-mask, softmax and top-k here (a masked-LM export)
//	embedding [batch, hidden]             embed, the vector as is (models/bert)
//	last_hidden_state [b, s, hidden]      embed, mean-pooled over the tokens and L2-normalised here
//	any other float32 [batch, n]          embed, the vector as is
//
// A fill-mask output is a *FillMask; an embed output is a []float32.
//
// OpenDecoder opens a decoder graph instead (models/gpt2, or a Hugging Face
// optimum export of GPT-2): a models.DecoderFactory whose instances hold a
// KV cache and run batched prefill and decode steps (decoder.go,
// decoderstep.go, kvcache.go, sample.go).
package onnx

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/inferhq/infer/internal/setting"
	"github.com/inferhq/infer/models"
)

// Tokenizer turns text into token ids: *wordpiece.Tokenizer ([CLS] …
// [SEP]) and *sentencepiece.Tokenizer satisfy it. It must be safe for
// concurrent use.
type Tokenizer interface {
	// AppendEncode appends the ids of text to dst, at most maxLen of them
	// (maxLen <= 0: no limit), and reports whether it truncated.
	AppendEncode(dst []int32, text string, maxLen int) ([]int32, bool)
	// Token returns the text of id, "" if there is none.
	Token(id int32) string
	// ID returns the id of token.
	ID(token string) (int32, bool)
}

// MaskToken is the token a fill-mask input must contain.
const MaskToken = "[MASK]"

// Config configures a Factory. Path and Tokenizer are required; every other
// field has a documented default for its zero value.
type Config struct {
	// Path is the .onnx file.
	Path string
	// Tokenizer tokenizes inputs, and names the token ids of results.
	Tokenizer Tokenizer
	// Name is the model's name as clients address it. Default: the file's
	// base name without ".onnx".
	Name string
	// MaxSeqLen is the most tokens of one item, [CLS] and [SEP] included
	// where the tokenizer adds them; at least 3. Default DefaultMaxSeqLen.
	MaxSeqLen int
	// RejectLong refuses items longer than MaxSeqLen with
	// models.ErrInputTooLong (HTTP 413). Default false: such items are
	// truncated by the tokenizer (WordPiece: to their first MaxSeqLen-1
	// tokens and [SEP]; SentencePiece: to their first MaxSeqLen tokens).
	RejectLong bool
	Runtime
}

// DefaultMaxSeqLen is Config.MaxSeqLen's default, in tokens: BERT's
// sentence tasks fit in it, and a batch padded to it stays cheap.
const DefaultMaxSeqLen = 128

// The names of the settings in errors (*setting.Error).
const (
	SettingMaxSeqLen setting.Name = "max sequence length" // Config.MaxSeqLen
	SettingThreads   setting.Name = "threads"             // Runtime.Threads
	SettingKVTokens  setting.Name = "KV tokens"           // DecoderConfig.KVTokens
	SettingContext   setting.Name = "context"             // DecoderConfig.Context
)

// Validate reports the settings New refuses, before it reads any file.
func (c Config) Validate() error {
	if c.MaxSeqLen < 0 || c.MaxSeqLen > 0 && c.MaxSeqLen < 3 {
		return setting.Errorf(SettingMaxSeqLen, c.MaxSeqLen, "want at least 3 ([CLS], a token, [SEP])")
	}
	return c.Runtime.validate()
}

// Runtime is how a factory's instances run, the same for Config and
// DecoderConfig. Every field has a documented default for its zero value.
type Runtime struct {
	// Devices are where instances run; the instance of worker i runs on
	// models.ForWorker(Devices, i). A cuda device needs a runtime built
	// with CUDA; auto takes cuda:0 if the runtime can use it, else the CPU.
	// Default: the CPU.
	Devices []models.Device
	// Workers is the number of instances that compute at the same time; it
	// sets the default of Threads. Default 1.
	Workers int
	// Threads is the number of intra-op threads of each session; not
	// negative. Default: the number of CPUs divided among the Workers, at
	// least 1.
	Threads int
	// Spin lets ONNX Runtime's idle pool threads spin waiting for work.
	// Default false: spinning threads would hold the cores that the HTTP
	// server and the tokenizer need between batches.
	Spin bool
	// Library is the ONNX Runtime shared library. Default: FindLibrary's
	// search, then the system's.
	Library string
	// Logger receives what the factory decides (library, device, threads);
	// nil discards it.
	Logger *slog.Logger
	// Rewrite, when set, replaces the model's graph before it is loaded:
	// models/registry loads the quantised twins of its models so
	// (bert-base-int8). Default nil: the graph is loaded as it is.
	Rewrite *Rewrite
}

// A Rewrite makes the graph a factory loads from the model's graph.
type Rewrite struct {
	// File returns the file to load in place of the graph file path,
	// which it must not modify.
	File func(path string) (string, error)
	// Suffix is added to the model's name ("-int8").
	Suffix string
}

// apply returns the file to load in place of path, and the model's name
// with r's suffix; path and name as they are for a nil r.
func (r *Rewrite) apply(path, name string) (string, string, error) {
	if r == nil {
		return path, name, nil
	}
	file, err := r.File(path)
	if err != nil {
		return "", "", err
	}
	return file, name + r.Suffix, nil
}

func (r Runtime) validate() error {
	if r.Threads < 0 {
		return setting.Errorf(SettingThreads, r.Threads, "must not be negative")
	}
	return nil
}

// Factory loads one ONNX graph and makes model instances of it. It is a
// models.Factory.
type Factory struct {
	cfg Config
	log *slog.Logger
	sig signature
	dec decoder
	placement

	sessions sessions

	hashOnce sync.Once
	hash     string
	hashErr  error
}

// New loads the ONNX Runtime (once per process), reads the graph's inputs and
// outputs, and checks the devices. It creates no session yet.
func New(cfg Config) (*Factory, error) {
	if cfg.Path == "" {
		return nil, fmt.Errorf("onnx: no model path")
	}
	if cfg.Tokenizer == nil {
		return nil, fmt.Errorf("onnx: no tokenizer")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("onnx: %w", err)
	}
	if cfg.Name == "" {
		cfg.Name = strings.TrimSuffix(filepath.Base(cfg.Path), ".onnx")
	}
	if cfg.MaxSeqLen == 0 {
		cfg.MaxSeqLen = DefaultMaxSeqLen
	}
	f := &Factory{cfg: cfg, log: cfg.Logger}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	if _, err := os.Stat(cfg.Path); err != nil {
		return nil, fmt.Errorf("onnx: model: %w", err)
	}
	var err error
	if cfg.Path, cfg.Name, err = cfg.Rewrite.apply(cfg.Path, cfg.Name); err != nil {
		return nil, err
	}
	f.cfg = cfg
	if f.placement, err = place(cfg.Library, cfg.Devices, cfg.Threads, cfg.Workers, f.log); err != nil {
		return nil, err
	}
	ins, outs, err := ort.GetInputOutputInfo(cfg.Path)
	trimHeap()
	if err != nil {
		return nil, fmt.Errorf("onnx: read %s: %w", cfg.Path, err)
	}
	if f.sig, err = readSignature(ins, outs); err != nil {
		return nil, fmt.Errorf("onnx: %s: %w", cfg.Path, err)
	}
	f.dec = decoder{tok: cfg.Tokenizer, maskID: -1}
	if f.sig.head.task() == TaskFillMask {
		id, ok := cfg.Tokenizer.ID(MaskToken)
		if !ok {
			return nil, fmt.Errorf("onnx: %s is a fill-mask model but the tokenizer has no %s token", cfg.Path, MaskToken)
		}
		f.dec.maskID = id
	}
	f.log.Info("onnx model", append([]any{"path", cfg.Path, "task", f.sig.head.task(), "outputs", strings.Join(f.sig.outputs, ",")},
		f.logAttrs()...)...)
	return f, nil
}

// Info describes the model.
func (f *Factory) Info() models.Info {
	return models.Info{
		Name:    f.cfg.Name,
		Task:    f.sig.head.task(),
		Backend: "onnx",
		Params:  fmt.Sprintf("%s max_seq_len=%d", f.params(), f.cfg.MaxSeqLen),
	}
}

// Task returns TaskFillMask or TaskEmbed, as found from the graph's outputs.
func (f *Factory) Task() string { return f.sig.head.task() }

// Path returns the graph file the factory loads.
func (f *Factory) Path() string { return f.cfg.Path }

// Threads returns the intra-op threads of each session.
func (f *Factory) Threads() int { return f.threads }

// SHA256 returns the hex SHA-256 of the model file, for manifests. It reads
// the file on the first call.
func (f *Factory) SHA256() (string, error) {
	f.hashOnce.Do(func() {
		file, err := os.Open(f.cfg.Path)
		if err != nil {
			f.hashErr = fmt.Errorf("hash model: %w", err)
			return
		}
		defer file.Close()
		h := sha256.New()
		if _, err := io.Copy(h, file); err != nil {
			f.hashErr = fmt.Errorf("hash model: %w", err)
			return
		}
		f.hash = hex.EncodeToString(h.Sum(nil))
	})
	return f.hash, f.hashErr
}

// Prepare tokenizes one item. An item of no tokens (an empty text, with a
// tokenizer that adds none of its own) is refused with
// models.ErrInvalidInput. An item longer than MaxSeqLen tokens is
// truncated, or refused with models.ErrInputTooLong under RejectLong. A
// fill-mask item must hold a [MASK] within its first MaxSeqLen tokens, or it
// is refused with models.ErrInvalidInput. It is safe for concurrent use.
func (f *Factory) Prepare(text string) (models.Input, error) {
	ids, truncated := f.cfg.Tokenizer.AppendEncode(nil, text, f.cfg.MaxSeqLen)
	if len(ids) == 0 {
		return models.Input{}, fmt.Errorf("%w: the text has no tokens", models.ErrInvalidInput)
	}
	if truncated && f.cfg.RejectLong {
		return models.Input{}, fmt.Errorf("%w: more than %d tokens", models.ErrInputTooLong, f.cfg.MaxSeqLen)
	}
	if f.dec.maskID >= 0 && !slices.Contains(ids, f.dec.maskID) {
		if truncated {
			return models.Input{}, fmt.Errorf("%w: no %s within the first %d tokens (the rest is truncated)", models.ErrInvalidInput, MaskToken, f.cfg.MaxSeqLen)
		}
		return models.Input{}, fmt.Errorf("%w: no %s token to fill", models.ErrInvalidInput, MaskToken)
	}
	return models.Input{Text: text, Tokens: ids}, nil
}

// New returns an instance for worker number worker, on its device. Each
// worker number has one session, created by its first instance: instances of
// the same worker share it, so the weights of the naive endpoint's instance,
// which the server numbers 0, are those of worker 0. Sessions of different
// workers compute at the same time without contending for one thread pool
// (concurrent runs of one CPU session mostly wait for each other). A session
// is released when the last instance using it is closed.
func (f *Factory) New(_ context.Context, worker int) (models.Model, error) {
	s, err := f.sessions.get(worker, func() (*ort.DynamicAdvancedSession, error) {
		return newSession(f.cfg.Path, f.sig.inputs, f.sig.outputs, models.ForWorker(f.devices, worker), f.threads, f.cfg.Spin)
	})
	if err != nil {
		return nil, err
	}
	return &Model{f: f, s: s, sess: s.sess}, nil
}

// Close releases the sessions; the instances must be closed first.
func (f *Factory) Close() error {
	f.sessions.close()
	return nil
}

// sessions are a factory's sessions, one per worker number, made by the
// worker's first instance and destroyed with its last. The zero value is
// ready to use.
type sessions struct {
	mu       sync.Mutex
	byWorker map[int]*session
	closed   bool
}

// session is a worker number's session and the count of its instances.
type session struct {
	sess   *ort.DynamicAdvancedSession
	worker int
	users  int
}

// get returns worker's session with one more user, made by open if there is
// none yet.
func (ss *sessions) get(worker int, open func() (*ort.DynamicAdvancedSession, error)) (*session, error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closed {
		return nil, errors.New("onnx: factory closed")
	}
	s := ss.byWorker[worker]
	if s == nil {
		sess, err := open()
		if err != nil {
			return nil, err
		}
		if ss.byWorker == nil {
			ss.byWorker = map[int]*session{}
		}
		s = &session{sess: sess, worker: worker}
		ss.byWorker[worker] = s
	}
	s.users++
	return s, nil
}

// release forgets one user of s, and destroys s with the last, so that
// removing a worker gives its memory back.
func (ss *sessions) release(s *session) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if s.users--; s.users > 0 || ss.byWorker[s.worker] != s {
		return
	}
	delete(ss.byWorker, s.worker)
	s.sess.Destroy()
	trimHeap()
}

// close destroys the sessions; later gets fail.
func (ss *sessions) close() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.closed = true
	for w, s := range ss.byWorker {
		s.sess.Destroy()
		delete(ss.byWorker, w)
	}
}

// threadsPerSession returns the intra-op threads of each session: threads,
// or by default the CPUs divided among the workers, at least 1.
func threadsPerSession(threads, workers int) int {
	if threads > 0 {
		return threads
	}
	return max(1, runtime.NumCPU()/max(1, workers))
}

// newSession loads the graph at path on dev, fetching the named inputs and
// outputs.
func newSession(path string, inputs, outputs []string, dev models.Device, threads int, spin bool) (*ort.DynamicAdvancedSession, error) {
	opts, err := sessionOptions(dev, threads, spin)
	if err != nil {
		return nil, err
	}
	defer opts.Destroy()
	s, err := ort.NewDynamicAdvancedSession(path, inputs, outputs, opts)
	trimHeap()
	if err != nil {
		return nil, fmt.Errorf("onnx: session on %v: %w", dev, err)
	}
	return s, nil
}

// sessionOptions sets threads, spinning, the execution provider of dev and,
// on the CPU, no memory pattern.
func sessionOptions(dev models.Device, threads int, spinning bool) (*ort.SessionOptions, error) {
	opts, err := ort.NewSessionOptions()
	if err != nil {
		return nil, fmt.Errorf("onnx: session options: %w", err)
	}
	spin := "0"
	if spinning {
		spin = "1"
	}
	for _, step := range []func() error{
		func() error { return opts.SetIntraOpNumThreads(threads) },
		func() error { return opts.SetInterOpNumThreads(1) },
		func() error { return opts.AddSessionConfigEntry("session.intra_op.allow_spinning", spin) },
		func() error { return opts.AddSessionConfigEntry("session.inter_op.allow_spinning", spin) },
		func() error {
			if dev.Kind == "cuda" {
				return appendCUDA(opts, dev.Index)
			}
			// On the CPU, no memory pattern: ONNX Runtime would keep a
			// planned block of every activation for each set of input
			// shapes it has seen, and batches come in many shapes. With
			// the arena alone, bert-base-int8 at batch 32 × 128 tokens
			// peaks at 373 MB instead of 519 MB (bert-mini-int8 143 / 194
			// MB), at the same speed (35.2 / 34.4 items/s; gpt2-tiny's
			// decode the same within noise).
			return opts.SetMemPattern(false)
		},
	} {
		if err := step(); err != nil {
			opts.Destroy()
			return nil, fmt.Errorf("onnx: session options for %v: %w", dev, err)
		}
	}
	return opts, nil
}

func devicesString(ds []models.Device) string { return join(ds, ",") }

// join joins the strings of xs with sep.
func join[T fmt.Stringer](xs []T, sep string) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = x.String()
	}
	return strings.Join(s, sep)
}
