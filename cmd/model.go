package cmd

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/inferhq/infer/internal/suggest"
	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/onnx"
	"github.com/inferhq/infer/models/registry"
	"github.com/inferhq/infer/models/sim"
	"github.com/inferhq/infer/models/simlm"
	"github.com/inferhq/infer/models/use"
)

// modelOptions choose and configure the model; shared by the commands that
// load one. The model registry (models/registry) says what --model names.
type modelOptions struct {
	Model      string
	Task       string
	TaskSet    bool // --task was given: else the model's default task
	Devices    string
	Threads    int
	OrtLib     string
	MaxSeqLen  int
	Truncate   bool
	SimFixed   time.Duration
	SimPerItem time.Duration
	SimFailOn  string
	Tokenizer  string
}

// defaultModel is what infer serve and infer worker serve without --model:
// use-lite, a trained sentence encoder, so that a newcomer's first request
// gets an answer that means something (docs/embeddings.md says why).
const defaultModel = use.Name

// bind binds --model and the model's settings.
func (o *modelOptions) bind(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.Model, "model", defaultModel,
		"model: sim (simulated accelerator), a built-in one ("+nameList(isEncoder)+")"+twinsNote(isEncoder)+", or a path to "+registry.Formats(isEncoder))
	o.bindSettings(cmd)
}

// bindSettings binds the model's settings, for commands that name the model
// as an argument.
func (o *modelOptions) bindSettings(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.Task, "task", "", "head of a built-in model with several: fill-mask or embed for BERT (default: the model's first; a file's task comes from its outputs)")
	f.StringVar(&o.Devices, "devices", models.DefaultDevices, "devices for the model instances: cpu, auto, or cuda:0[,cuda:1…]; workers are assigned round-robin")
	f.IntVar(&o.Threads, "threads", 0, "ONNX Runtime intra-op threads per session (0: the CPUs divided among the sessions)")
	f.StringVar(&o.OrtLib, "ort-lib", "", "ONNX Runtime shared library (default: $ONNXRUNTIME_LIB, then where scripts/setup-ort.sh puts it, then the system's)")
	f.IntVar(&o.MaxSeqLen, "max-seq-len", onnx.DefaultMaxSeqLen, "most tokens of one item, [CLS] and [SEP] included")
	f.BoolVar(&o.Truncate, "truncate", true, "truncate longer items to --max-seq-len; with --truncate=false they are refused with 413")
	f.DurationVar(&o.SimFixed, "sim-fixed", sim.DefaultFixed, "sim: fixed cost of any batch")
	f.DurationVar(&o.SimPerItem, "sim-per-item", sim.DefaultPerItem, "sim: added cost per item in a batch")
	f.StringVar(&o.SimFailOn, "sim-fail-on", "", "sim: fault injection: a batch holding an item that contains this text fails as a whole")
}

// bindTokenizer binds --tokenizer, for the commands that serve or measure
// decoders.
func (o *modelOptions) bindTokenizer(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.Tokenizer, "tokenizer", "", "llama2.c checkpoints: the tokenizer file (default: tokenizer.bin, or the one tok*.bin, beside the checkpoint)")
}

// taskSet records whether cmd's --task was given; call it in RunE.
func (o *modelOptions) taskSet(cmd *cobra.Command) { o.TaskSet = cmd.Flags().Changed("task") }

func isEncoder(e registry.Entry) bool { return e.Kind == registry.Encoder }
func isDecoder(e registry.Entry) bool { return e.Kind == registry.Decoder }

// builtinNames lists the built-ins that keep, the simulated ones and the
// quantised twins aside: "bert-tiny|bert-mini|…".
func builtinNames(keep func(registry.Entry) bool) string {
	return strings.Join(registry.Builtins(func(e registry.Entry) bool { return !e.Simulated && e.Of == "" && keep(e) }), "|")
}

// twinsNote says which quantised twins the built-ins that keep have:
// " (each also as NAME-int8)".
func twinsNote(keep func(registry.Entry) bool) string {
	var suffixes []string
	for _, t := range registry.TwinSuffixes {
		if len(registry.Builtins(func(e registry.Entry) bool { return e.Of != "" && strings.HasSuffix(e.Name, t.Suffix) && keep(e) })) > 0 {
			suffixes = append(suffixes, "NAME"+t.Suffix)
		}
	}
	if len(suffixes) == 0 {
		return ""
	}
	return " (each also quantised, as " + strings.Join(suffixes, " or ") + ")"
}

// nameList is builtinNames as a list that help can wrap: "a, b, c".
func nameList(keep func(registry.Entry) bool) string {
	return strings.ReplaceAll(builtinNames(keep), "|", ", ")
}

// A modelUse is what a command takes as a model, and how its errors name
// the model.
type modelUse struct {
	arg    string                    // the model's name in errors: "--model"
	takes  func(registry.Entry) bool // the models the command serves
	refuse string                    // why it refuses a model it does not take
}

var (
	serveModels  = modelUse{arg: "--model", takes: func(registry.Entry) bool { return true }}
	workerModels = modelUse{arg: "--model", takes: isEncoder,
		refuse: "a generative model: infer worker serves encoder models (distributed mode); serve it with infer serve"}
	benchModels = modelUse{arg: "model", takes: func(e registry.Entry) bool { return e.Kind == registry.Encoder || !e.Simulated },
		refuse: "a simulated decoder: its step costs what --sim-step, --sim-per-seq and --sim-per-prefill-token say, there is nothing to measure"}
)

// want says which models u takes: "sim, a built-in bert-tiny|… or
// gpt2-tiny|…, or a path to an .onnx file".
func (u modelUse) want() string {
	parts := registry.Builtins(func(e registry.Entry) bool { return e.Simulated && u.takes(e) })
	var builtins []string
	for _, k := range []registry.Kind{registry.Encoder, registry.Decoder} {
		if names := builtinNames(func(e registry.Entry) bool { return e.Kind == k && u.takes(e) }); names != "" {
			builtins = append(builtins, names)
		}
	}
	if len(builtins) > 0 {
		parts = append(parts, "a built-in "+strings.Join(builtins, " or ")+twinsNote(u.takes))
	}
	if f := registry.Formats(u.takes); f != "" {
		parts = append(parts, "or a path to "+f)
	}
	return strings.Join(parts, ", ")
}

// lookup resolves o.Model for a command that takes u, without loading it.
func (o *modelOptions) lookup(u modelUse) (registry.Model, error) {
	m, err := registry.Lookup(o.Model)
	var nf *registry.NotFoundError
	switch {
	case errors.As(err, &nf) && nf.Err != nil:
		return m, usageErrorf("%s: %v", u.arg, nf.Err)
	case errors.As(err, &nf):
		hint := ""
		if s := suggest.Closest(strings.ToLower(nf.Ref), registry.Builtins(u.takes)); s != "" {
			hint = fmt.Sprintf(" (did you mean %q?)", s)
		}
		return m, usageErrorf("%s %q: unknown model%s; want %s", u.arg, nf.Ref, hint, u.want())
	case err != nil:
		return m, err
	case !u.takes(m.Entry):
		return m, usageErrorf("%s %s: %s", u.arg, m, u.refuse)
	}
	return m, nil
}

// settings returns the registry's settings of the flags, for workers
// instances computing at once.
func (o *modelOptions) settings(workers int, log *slog.Logger) (registry.Settings, error) {
	devices, err := models.ParseDevices(o.Devices)
	if err != nil {
		return registry.Settings{}, usageErrorf("--devices: %v", err)
	}
	s := registry.Settings{
		Workers:    workers,
		Devices:    devices,
		Threads:    o.Threads,
		Library:    o.OrtLib,
		MaxSeqLen:  o.MaxSeqLen,
		RejectLong: !o.Truncate,
		Sim:        sim.Config{Fixed: o.SimFixed, PerItem: o.SimPerItem, FailOn: o.SimFailOn},
		Tokenizer:  o.Tokenizer,
		Logger:     log,
	}
	if o.TaskSet {
		s.Task = o.Task
	}
	return s, nil
}

// open resolves o.Model for a command that takes u, and loads it as an
// encoder, sized for workers instances computing at once. A built-in model
// is generated into the cache on first use. It logs the model it opened.
func (o *modelOptions) open(u modelUse, workers int, log *slog.Logger) (models.Factory, error) {
	m, err := o.lookup(u)
	if err != nil {
		return nil, err
	}
	return o.openEncoder(m, workers, log)
}

// openEncoder loads the encoder m; see open.
func (o *modelOptions) openEncoder(m registry.Model, workers int, log *slog.Logger) (models.Factory, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s, err := o.settings(workers, log)
	if err != nil {
		return nil, err
	}
	f, err := m.Encoder(s)
	if err != nil {
		return nil, settingError(err)
	}
	log.Info("model", "name", describe(f.Info()))
	return f, nil
}

// openDecoder loads the decoder m, with a KV bound of kvTokens (0: the
// model's) and, for sim-lm, the cost lm, for one engine computing at a
// time.
func (o *modelOptions) openDecoder(m registry.Model, kvTokens int, lm simlm.Config, log *slog.Logger) (models.DecoderFactory, error) {
	s, err := o.settings(1, log)
	if err != nil {
		return nil, err
	}
	s.KVTokens, s.SimLM = kvTokens, lm
	f, err := m.Decoder(s)
	if err != nil {
		return nil, settingError(err)
	}
	return f, nil
}

func describe(info models.Info) string {
	if info.Params == "" {
		return info.Name
	}
	return fmt.Sprintf("%s (%s)", info.Name, info.Params)
}
