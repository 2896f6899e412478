// Package registry maps what a user names as a model, a built-in name or a
// path, to the model: an encoder (models.Factory) or a decoder
// (models.DecoderFactory), with what is known of it before it is loaded (its
// engine defaults, its context) and what infer models list shows of it. It
// is the one place that knows every model: the command line asks it, and
// never a backend, what a name means.
//
// # The table
//
// Every model is one Entry of the table in table.go, in the order infer
// models list shows them:
//
//   - a built-in is found by its Name (or an Alias), in any case: sim,
//     bert-mini, sim-lm, gpt2-tiny…;
//   - a format is found by sniffing a path (Sniff), in table order: a decoder
//     export (an .onnx file with a KV cache, or an export directory), else
//     an .onnx encoder file.
//
// # Adding a model
//
// Write the model's package (its graph or its simulation, its tokenizer),
// then add one Entry to table() in table.go, next to the entries of its kind:
//
//   - a built-in sets Name, Kind, Family, Tasks (the first is the default;
//     an encoder with several heads picks one by Settings.Task), Listing,
//     Cached (which tasks are in the cache), and Write if infer models gen
//     can write its graph;
//   - a format sets Format (how a user reads it: "a llama2.c checkpoint"),
//     Exts (the extensions that make a name a path: ".bin"), and Sniff,
//     which claims a path after reading at most its header; put it before
//     the formats that would also claim its files;
//   - an encoder sets OpenEncoder, a decoder OpenDecoder; open checks the
//     settings it uses (with its backend's Validate) before it generates or
//     loads anything, and logs what it generated with Settings.Logger;
//   - a decoder sets Engine, its backend's engine defaults (the same as
//     its factory's models.DecoderInfo.Engine; zero for the engine's own,
//     an accelerator's), and Context when it is known before loading.
//
// A built-in with weights that loads through models/onnx with the
// settings' runtime (Settings.runtime) gets its quantised twins (-int8, and
// -int4 for a decoder) with no more code: see twin.go.
//
// registry_test.go then checks that the new name resolves, and infer models
// list, --help and the unknown-model errors name it with no other change.
package registry

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/inferhq/infer/internal/setting"
	"github.com/inferhq/infer/internal/suggest"
	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/onnx"
	"github.com/inferhq/infer/models/onnxgraph"
	"github.com/inferhq/infer/models/sim"
	"github.com/inferhq/infer/models/simlm"
)

// Kind is what a model does.
type Kind int

const (
	// Encoder models take items and give one output each (models.Factory):
	// infer serve's /naive, /batched and KServe v2 endpoints.
	Encoder Kind = iota + 1
	// Decoder models generate tokens (models.DecoderFactory): infer
	// serve's OpenAI-compatible API.
	Decoder
)

func (k Kind) String() string {
	switch k {
	case Encoder:
		return "encoder"
	case Decoder:
		return "decoder"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Settings configure how a model is opened. The zero value is valid: every
// field has a documented default, and a model uses only the fields that
// apply to it.
type Settings struct {
	// Task is the head of a built-in encoder with several (BERT:
	// fill-mask or embed). Default: the model's first. A file's task comes
	// from its outputs; a decoder's is text-generation.
	Task string
	// Workers is the number of instances that compute at once; an ONNX
	// Runtime model divides the CPUs among them. Default 1.
	Workers int
	// Devices are where instances run, round-robin. Default: the CPU.
	Devices []models.Device
	// Threads is the number of ONNX Runtime intra-op threads per session.
	// Default: the CPUs divided among the Workers.
	Threads int
	// Library is the ONNX Runtime shared library. Default: onnx's search.
	Library string
	// MaxSeqLen is the most tokens of an item of an ONNX encoder, [CLS]
	// and [SEP] included. Default onnx.DefaultMaxSeqLen.
	MaxSeqLen int
	// RejectLong refuses longer items (HTTP 413) instead of truncating
	// them.
	RejectLong bool
	// Tokenizer is a llama2.c checkpoint's tokenizer file. Default: the
	// built-in's own for stories260k; else the one beside the checkpoint
	// (llama.FindTokenizer).
	Tokenizer string
	// KVTokens bounds the KV cache of a decoder instance, in tokens.
	// Default: the model's (sim-lm's simlm.DefaultKVTokens; an ONNX
	// decoder's onnx.DefaultKVContexts contexts).
	KVTokens int
	// Sim is the cost of sim. Its zero value computes instantly; infer
	// serve's defaults are sim.DefaultFixed and sim.DefaultPerItem.
	Sim sim.Config
	// SimLM is the cost and shape of sim-lm; KVTokens replaces its
	// KVTokens. Its zero value computes instantly; infer serve's defaults
	// are simlm.DefaultStep, DefaultPerSeq and DefaultPerPrefillToken.
	SimLM simlm.Config
	// CacheDir is where built-ins are generated on first use. Default
	// onnxgraph.DefaultCacheDir().
	CacheDir string
	// Logger receives what is generated and loaded; nil discards it.
	Logger *slog.Logger

	// rewrite is a quantised twin's (twin.go).
	rewrite *onnx.Rewrite
	// kvInt8 asks a built-in decoder with Entry.KVInt8BytesPerToken for
	// its graph with the KV cache in int8: an -int8 twin's (twin.go).
	kvInt8 bool
}

func (s Settings) cacheDir() string {
	if s.CacheDir == "" {
		return onnxgraph.DefaultCacheDir()
	}
	return s.CacheDir
}

func (s Settings) logger() *slog.Logger {
	if s.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Logger
}

func (s Settings) runtime() onnx.Runtime {
	return onnx.Runtime{Devices: s.Devices, Workers: s.Workers, Threads: s.Threads, Library: s.Library, Logger: s.Logger, Rewrite: s.rewrite}
}

// SettingTask names Settings.Task in errors (*setting.Error).
const SettingTask setting.Name = "task"

// An Entry is one row of the table: a built-in model, or a format of model
// files. See the package doc for how to add one.
type Entry struct {
	// Name is a built-in's name, lower case ("bert-mini"); "" for a format.
	Name string
	// Of is the name of a quantised twin's original ("bert-mini" for
	// bert-mini-int8); "" for any other model. The table makes the twins
	// (twin.go).
	Of string
	// Aliases are other names of a built-in ("mini"), matched as Name is.
	Aliases []string
	// Format says what a user names for a format: "an .onnx file", "a
	// decoder export directory". "" for a built-in.
	Format string
	// Exts are the file name extensions of a format (".onnx"): a name
	// that ends in one is a path, and is not there if no file is.
	Exts []string
	// Sniff, for a format, reports whether path, which exists, is in this
	// format, reading at most its description. An error means that path is
	// meant for this format but cannot be served (a directory holding no
	// export).
	Sniff func(path string) (bool, error)

	Kind Kind
	// Family names the built-ins of one architecture in listings: "BERT",
	// "GPT-2". "" for a format.
	Family string
	// Simulated marks a simulated accelerator: no weights; its Settings
	// (Sim, SimLM) set its cost.
	Simulated bool
	// Tasks are a built-in's tasks; the first is the default. An encoder
	// with several picks one by Settings.Task.
	Tasks []string
	// Engine is a decoder's engine defaults, as its factory's
	// DecoderInfo.Engine says; zero leaves the engine's own.
	Engine models.EngineDefaults
	// Context is a decoder's context in tokens when it is known before
	// loading; 0 when only loading tells.
	Context int
	// Listing is what infer models list shows of a built-in.
	Listing Listing
	// KVInt8BytesPerToken is, for a built-in decoder that has a graph
	// with its KV cache in int8 (models/gpt2's Spec.KVInt8), a token's KV
	// cache in that graph; its -int8 twin is quantised from that graph,
	// and OpenDecoder opens it when Settings ask (kvInt8). 0 for the
	// others, whose twins keep the float32 cache.
	KVInt8BytesPerToken int64
	// Cached returns the tasks of a built-in whose files are in cacheDir;
	// nil for one that has none to cache.
	Cached func(cacheDir string) []string
	// Write writes a generated built-in's graph for task (one of Tasks)
	// with the random weights of seed (0: the default): infer models gen.
	// nil for a model that is not generated.
	Write func(w io.Writer, task string, seed uint64) error

	// OpenEncoder and OpenDecoder load the model of this Kind: path is
	// the path a format resolved ("" for a built-in), s the settings, with
	// Task set to one of Tasks for a built-in that has them.
	OpenEncoder func(path string, s Settings) (models.Factory, error)
	OpenDecoder func(path string, s Settings) (models.DecoderFactory, error)
}

// Listing is what infer models list shows of a built-in. Zero fields are
// shown as "-".
type Listing struct {
	Layers, Hidden, Heads int
	// Context is a decoder's most tokens of a sequence.
	Context int
	// Params are the model's parameters by task.
	Params map[string]int64
	// KVBytesPerToken is the size of a decoder's KV cache per token.
	KVBytesPerToken int64
}

// Entries returns the table: every built-in and format, in the order infer
// models list shows them. The entries share their slices and maps with the
// table: read them, do not modify them.
func Entries() []Entry { return slices.Clone(entries) }

var entries = table()

// Builtins returns the names of the built-ins that keep, in table order.
func Builtins(keep func(Entry) bool) []string {
	var names []string
	for _, e := range entries {
		if e.Name != "" && (keep == nil || keep(e)) {
			names = append(names, e.Name)
		}
	}
	return names
}

// Model is a model a user named, resolved but not loaded.
type Model struct {
	Entry
	// Path is the path a format resolved; "" for a built-in.
	Path string
}

// String is the model's name: a built-in's, or the path as given.
func (m Model) String() string {
	if m.Path != "" {
		return m.Path
	}
	return m.Name
}

// NotFoundError says that a name or path is no model the registry knows.
type NotFoundError struct {
	Ref string // as given
	// Suggestion is the built-in's name nearest to Ref when Ref looks
	// like a typo of it; "" otherwise.
	Suggestion string
	// Err says why a path is no model (it is not there, or holds none);
	// nil for a name no built-in has.
	Err error
}

func (e *NotFoundError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("model %s: %v", e.Ref, e.Err)
	}
	msg := fmt.Sprintf("unknown model %q", e.Ref)
	if e.Suggestion != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", e.Suggestion)
	}
	return msg
}

func (e *NotFoundError) Unwrap() error { return e.Err }

// Lookup resolves ref, a built-in's name or a path, without loading or
// generating anything; it reads at most a file's description. A name that
// ends in a format's extension, holds a path separator, or names a file or
// directory is a path. Errors are *NotFoundError.
func Lookup(ref string) (Model, error) {
	lower := strings.ToLower(ref)
	for _, e := range entries {
		if e.Name != "" && (e.Name == lower || slices.Contains(e.Aliases, lower)) {
			return Model{Entry: e}, nil
		}
	}
	if !isPath(ref) {
		return Model{}, &NotFoundError{Ref: ref, Suggestion: suggest.Closest(lower, Builtins(nil))}
	}
	if _, err := os.Stat(ref); err != nil {
		return Model{}, &NotFoundError{Ref: ref, Err: err}
	}
	for _, e := range entries {
		if e.Sniff == nil {
			continue
		}
		ok, err := e.Sniff(ref)
		if err != nil {
			return Model{}, &NotFoundError{Ref: ref, Err: err}
		}
		if ok {
			return Model{Entry: e, Path: ref}, nil
		}
	}
	return Model{}, &NotFoundError{Ref: ref, Err: fmt.Errorf("not a model: want %s", Formats(nil))}
}

// isPath reports whether ref names a path rather than a built-in.
func isPath(ref string) bool {
	if strings.ContainsRune(ref, filepath.Separator) || strings.ContainsRune(ref, '/') {
		return true
	}
	for _, e := range entries {
		for _, ext := range e.Exts {
			if strings.HasSuffix(strings.ToLower(ref), ext) {
				return true
			}
		}
	}
	_, err := os.Stat(ref)
	return err == nil
}

// Formats says which paths the formats that keep accept: "an .onnx file or
// a decoder export directory".
func Formats(keep func(Entry) bool) string {
	var fs []string
	for _, e := range entries {
		if e.Format != "" && (keep == nil || keep(e)) && !slices.Contains(fs, e.Format) {
			fs = append(fs, e.Format)
		}
	}
	switch len(fs) {
	case 0:
		return ""
	case 1:
		return fs[0]
	}
	return strings.Join(fs[:len(fs)-1], ", ") + " or " + fs[len(fs)-1]
}

// Task returns the built-in's task called task, in any case; its first
// (the default) for "". A model without Tasks (a file, a simulated model)
// returns task as it is.
func (m Model) Task(task string) (string, error) {
	if len(m.Tasks) == 0 {
		return task, nil
	}
	if task == "" {
		return m.Tasks[0], nil
	}
	for _, t := range m.Tasks {
		if strings.EqualFold(t, task) {
			return t, nil
		}
	}
	if len(m.Tasks) == 1 {
		return "", setting.Errorf(SettingTask, task, "unknown task of %s (its one task is %s)", m.Name, m.Tasks[0])
	}
	return "", setting.Errorf(SettingTask, task, "unknown task of %s (want %s)", m.Name, strings.Join(m.Tasks, " or "))
}

// Encoder loads an encoder model. A built-in is generated into the cache
// on first use.
func (m Model) Encoder(s Settings) (models.Factory, error) {
	if m.Kind != Encoder || m.OpenEncoder == nil {
		return nil, fmt.Errorf("%s is a decoder, not an encoder", m)
	}
	task, err := m.Task(s.Task)
	if err != nil {
		return nil, err
	}
	s.Task = task
	return m.OpenEncoder(m.Path, s)
}

// Decoder loads a decoder model. A built-in is generated into the cache on
// first use.
func (m Model) Decoder(s Settings) (models.DecoderFactory, error) {
	if m.Kind != Decoder || m.OpenDecoder == nil {
		return nil, fmt.Errorf("%s is an encoder, not a decoder", m)
	}
	return m.OpenDecoder(m.Path, s)
}
