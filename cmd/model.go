package cmd

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/bert"
	"github.com/inferhq/infer/models/onnx"
	"github.com/inferhq/infer/models/sim"
	"github.com/inferhq/infer/models/simlm"
	"github.com/inferhq/infer/models/wordpiece"
)

// modelOptions choose and configure the model; shared by the commands that
// load one.
type modelOptions struct {
	Model      string
	Task       string
	Devices    string
	Threads    int
	OrtLib     string
	MaxSeqLen  int
	Truncate   bool
	SimFixed   time.Duration
	SimPerItem time.Duration
	SimFailOn  string
}

const defaultModel = "bert-mini"

// bind binds --model and the model's settings.
func (o *modelOptions) bind(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.Model, "model", defaultModel,
		"model: sim (simulated accelerator), a built-in "+builtinNames()+", or a path to an .onnx file")
	o.bindSettings(cmd)
}

// bindSettings binds the model's settings, for commands that name the model
// as an argument.
func (o *modelOptions) bindSettings(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.Task, "task", string(bert.FillMask), "head of a built-in model: fill-mask or embed (a file's task comes from its outputs)")
	f.StringVar(&o.Devices, "devices", "cpu", "devices for the model instances: cpu, auto, or cuda:0[,cuda:1…]; workers are assigned round-robin")
	f.IntVar(&o.Threads, "threads", 0, "ONNX Runtime intra-op threads per session (0: the CPUs divided among the sessions)")
	f.StringVar(&o.OrtLib, "ort-lib", "", "ONNX Runtime shared library (default: $ONNXRUNTIME_LIB, then "+onnx.SetupPath+", then the system's)")
	f.IntVar(&o.MaxSeqLen, "max-seq-len", 128, "most tokens of one item, [CLS] and [SEP] included")
	f.BoolVar(&o.Truncate, "truncate", true, "truncate longer items to --max-seq-len; with --truncate=false they are refused with 413")
	f.DurationVar(&o.SimFixed, "sim-fixed", 77*time.Millisecond, "sim: fixed cost of any batch")
	f.DurationVar(&o.SimPerItem, "sim-per-item", 1160*time.Microsecond, "sim: added cost per item in a batch")
	f.StringVar(&o.SimFailOn, "sim-fail-on", "", "sim: fault injection: a batch holding an item that contains this text fails as a whole")
}

func builtinNames() string {
	var names []string
	for _, a := range bert.Archs() {
		names = append(names, a.String())
	}
	return strings.Join(names, "|")
}

// open returns the factory for the chosen model, sized for workers instances
// computing at once. A built-in model is generated into the cache on first
// use. It logs the model it opened.
func (o *modelOptions) open(workers int, log *slog.Logger) (models.Factory, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f, err := o.factory(workers, log)
	if err != nil {
		return nil, err
	}
	log.Info("model", "name", describe(f.Info()))
	return f, nil
}

// factory builds the model's factory; see open.
func (o *modelOptions) factory(workers int, log *slog.Logger) (models.Factory, error) {
	devices, err := models.ParseDevices(o.Devices)
	if err != nil {
		return nil, usageErrorf("--devices: %v", err)
	}
	if o.Model == "sim" {
		f, err := sim.New(sim.Config{Fixed: o.SimFixed, PerItem: o.SimPerItem, FailOn: o.SimFailOn})
		if err != nil {
			return nil, usageErrorf("%v", err)
		}
		return f, nil
	}
	if o.MaxSeqLen < 3 {
		return nil, usageErrorf("--max-seq-len %d: want at least 3", o.MaxSeqLen)
	}
	if o.Threads < 0 {
		return nil, usageErrorf("--threads %d: must not be negative", o.Threads)
	}
	path, name, err := o.modelFile(log)
	if err != nil {
		return nil, err
	}
	return onnx.New(onnx.Config{
		Path:       path,
		Name:       name,
		Tokenizer:  wordpiece.BertBaseUncased(),
		MaxSeqLen:  o.MaxSeqLen,
		RejectLong: !o.Truncate,
		Runtime:    onnx.Runtime{Devices: devices, Workers: workers, Threads: o.Threads, Library: o.OrtLib, Logger: log},
	})
}

// modelFile returns the .onnx file of --model and the name to serve it as:
// a path as given, or a built-in model generated once into the cache.
func (o *modelOptions) modelFile(log *slog.Logger) (path, name string, err error) {
	if strings.HasSuffix(o.Model, ".onnx") || strings.ContainsRune(o.Model, filepath.Separator) {
		if _, err := os.Stat(o.Model); err != nil {
			return "", "", usageErrorf("--model: %v", err)
		}
		return o.Model, strings.TrimSuffix(filepath.Base(o.Model), ".onnx"), nil
	}
	arch, err := bert.Lookup(o.Model)
	if err != nil {
		return "", "", usageErrorf("--model %q: unknown model; want sim, a built-in %s or %s (infer serve: also sim-lm), or a path to an .onnx file or a decoder export directory",
			o.Model, builtinNames(), strings.Join(decoderNames(), "|"))
	}
	task, err := bert.ParseTask(o.Task)
	if err != nil {
		return "", "", usageErrorf("--task: %v", err)
	}
	start := time.Now()
	path, err = bert.Ensure(bert.DefaultCacheDir(), bert.Spec{Arch: arch, Task: task})
	if err != nil {
		return "", "", fmt.Errorf("built-in model %s: %w", arch, err)
	}
	log.Info("built-in model", "name", arch.String(), "task", task, "path", path, "took", time.Since(start).Round(time.Millisecond))
	return path, arch.String(), nil
}

func describe(info models.Info) string {
	if info.Params == "" {
		return info.Name
	}
	return fmt.Sprintf("%s (%s)", info.Name, info.Params)
}

// decoderFactory returns the factory of the generative model named by
// --model: sim-lm, a built-in GPT-2 decoder (generated into the cache on
// first use) or a decoder export by path, opened with --kv-tokens as its
// KV bound. It returns nil when --model is not a decoder model (then it
// names an encoder, or nothing). Add decoder models here.
func decoderFactory(m *modelOptions, o *genOptions, log *slog.Logger) (models.DecoderFactory, error) {
	if m.Model == "sim-lm" {
		f, err := simlm.New(simlm.Config{Step: o.SimStep, PerSeq: o.SimPerSeq, PerPrefillToken: o.SimPerPrefillToken, KVTokens: o.KVTokens})
		if err != nil {
			return nil, usageErrorf("%v", err)
		}
		return f, nil
	}
	// The engines of infer serve's three paths share one session per
	// device, and one path computes at a time in the common case: each
	// session gets all the threads.
	f, ok, err := m.openDecoder(o.KVTokens, 1, log)
	if !ok || err != nil {
		return nil, err // no typed nil: a non-decoder is a nil interface
	}
	return f, nil
}

// Engine settings left at 0 (--max-seqs, --max-batched-tokens) take their
// model's defaults: an accelerator's for sim-lm, which simulates one, and
// for ONNX Runtime decoders a CPU's, where a step's cost grows with its rows
// and a long prompt chunk stalls every stream of the step (measured with
// scripts/accept-gpt2.sh serve-defaults; see the README).
type engineDefaults struct{ maxSeqs, maxBatchedTokens int }

var (
	accelDefaults = engineDefaults{maxSeqs: 32, maxBatchedTokens: 2048}
	cpuDefaults   = engineDefaults{maxSeqs: 16, maxBatchedTokens: 256}
)

// generative says, without loading anything, whether --model names a
// generative model, with the engine defaults of its backend and its context
// when that is known before loading (a built-in GPT-2's; else 0).
func (o *modelOptions) generative() (d engineDefaults, context int, ok bool, err error) {
	if o.Model == "sim-lm" {
		return accelDefaults, 0, true, nil
	}
	ref, ok, err := lookupDecoder(o.Model)
	if !ok || err != nil {
		return engineDefaults{}, 0, ok, err
	}
	return cpuDefaults, ref.context(), true, nil
}
