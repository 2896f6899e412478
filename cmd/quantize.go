package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/quant"
	"github.com/inferhq/infer/models/registry"
)

// infer models quantize, and the -int8 twins of the built-in models.

type modelsQuantizeOptions struct {
	In, Out     string
	Task        string
	Activations string
	PerTensor   bool
	Bits        int
	Block       int
	Exclude     []string
	KeepHead    bool
	KeepEmbed   bool
	JSON        bool
	Stdout      io.Writer
}

func newCmdModelsQuantize(runF func(context.Context, *modelsQuantizeOptions) error) *cobra.Command {
	opts := &modelsQuantizeOptions{}
	cmd := &cobra.Command{
		Use:   "quantize IN OUT.onnx",
		Short: "Write a dynamically quantised int8 (or int4) copy of a model",
		Long: `Write a dynamically quantised copy of a model: the float32 weights of its
MatMul and Gemm nodes become int8 (or int4) with scales, and their inputs are
quantised at run time, in the forms ONNX Runtime runs in its integer kernels.
Embedding tables (the float32 tables Gather reads rows of) become int8
with a scale per row unless --keep-embeddings; the LM head is quantised
unless --keep-head.
A decoder (a graph with a KV cache) gets activations per row, exact under
batching and fastest for decode steps; any other graph activations per
tensor, fastest for large batches; int4 weights (--bits 4) or a --block
activations per block (ONNX Runtime's MatMulNBits).

IN is an .onnx file or a built-in model name; OUT is written atomically. A
model that is not ONNX, has nothing to quantise or is quantised already is
refused (exit 2). Measure it with infer models bench and infer models compare;
see docs/quantization.md.`,
		Example: `  infer models quantize model.onnx model-int8.onnx
  infer models quantize gpt2-small gpt2-small-int8.onnx --keep-head
  infer models quantize model.onnx out.onnx --exclude 'encoder.layer.0.*'
  infer models quantize decoder.onnx decoder-int4.onnx --bits 4 --block 32`,
		Args: exactArgs(2, "an input model and an output .onnx file"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.In, opts.Out, opts.Stdout = args[0], args[1], cmd.OutOrStdout()
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runModelsQuantize(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Activations, "activations", quant.ActivationsAuto.String(), "run-time quantisation of the activations: tensor (one scale per batch: fastest for encoders), row (each row on its own: exact under batching, fastest for decode steps), block (each row on its own, per block of the weights: MatMulNBits, int4), or auto (block for --bits 4 or a --block, else row for a decoder, tensor otherwise)")
	f.BoolVar(&opts.PerTensor, "per-tensor", false, "activations per tensor: one scale per weight instead of one per output channel")
	f.IntVar(&opts.Bits, "bits", quant.DefaultBits, "weight bits: 8, or 4 (activations per block)")
	f.IntVar(&opts.Block, "block", 0, fmt.Sprintf("activations per block: weights along K that share a scale, 16 to 256 (0: %d)", quant.DefaultBlock))
	f.StringArrayVar(&opts.Exclude, "exclude", nil, "keep in float32 the nodes whose name or weight name matches this pattern ('*' any run of characters but '/'); repeatable")
	f.BoolVar(&opts.KeepHead, "keep-head", false, "keep the LM head (the product that makes the logits) in float32")
	f.BoolVar(&opts.KeepEmbed, "keep-embeddings", false, "keep the embedding tables (the float32 tables Gather reads rows of) in float32")
	f.StringVar(&opts.Task, "task", "", "head of a built-in encoder given as IN with several: fill-mask or embed for BERT (default: the model's first)")
	f.BoolVar(&opts.JSON, "json", false, "print what was done as JSON")
	return cmd
}

// quantizeReport is what quantize prints with --json.
type quantizeReport struct {
	Input       string       `json:"input"`
	Output      string       `json:"output"`
	Form        string       `json:"form"`
	Products    int          `json:"products"`
	Quantized   []string     `json:"quantized"`
	Tables      int          `json:"embedding_lookups"`
	Lookups     []string     `json:"embedding_lookups_quantized"`
	Skipped     []quant.Skip `json:"skipped"`
	Head        string       `json:"head,omitempty"`
	BytesBefore int64        `json:"weight_bytes_before"`
	BytesAfter  int64        `json:"weight_bytes_after"`
	Seconds     float64      `json:"seconds"`
}

func runModelsQuantize(_ context.Context, opts *modelsQuantizeOptions) error {
	if st, err := os.Stat(filepath.Dir(opts.Out)); err != nil || !st.IsDir() {
		return usageErrorf("%s: its directory does not exist", opts.Out)
	}
	in, err := graphOf(opts.In, opts.Task, nil)
	if err != nil {
		return err
	}
	acts, err := quant.ParseActivations(opts.Activations)
	if err != nil {
		return usageErrorf("--activations: %v", err)
	}
	start := time.Now()
	rep, err := quant.File(in, opts.Out, quant.Options{Activations: acts, PerTensor: opts.PerTensor, Bits: opts.Bits,
		Block: opts.Block, Exclude: opts.Exclude, KeepHead: opts.KeepHead, KeepEmbeddings: opts.KeepEmbed})
	if err != nil {
		return quantError(err)
	}
	took := time.Since(start)
	if opts.JSON {
		return writeJSON(opts.Stdout, quantizeReport{Input: in, Output: opts.Out, Form: rep.Form,
			Products: rep.Products, Quantized: rep.Quantized, Tables: rep.Tables, Lookups: rep.Lookups, Skipped: rep.Skipped, Head: rep.Head,
			BytesBefore: rep.BytesBefore, BytesAfter: rep.BytesAfter, Seconds: took.Seconds()})
	}
	w := opts.Stdout
	fmt.Fprintf(w, "%s: %s, in %v\n", opts.Out, rep, took.Round(time.Millisecond))
	switch {
	case rep.Head == "":
		fmt.Fprintln(w, "LM head: none found")
	case opts.KeepHead:
		fmt.Fprintf(w, "LM head: %s, kept in float32\n", rep.Head)
	default:
		fmt.Fprintf(w, "LM head: %s, quantised (--keep-head keeps it in float32)\n", rep.Head)
	}
	reasons := map[string]int{}
	for _, s := range rep.Skipped {
		reasons[s.Reason]++
	}
	for _, why := range slices.Sorted(func(yield func(string) bool) {
		for k := range reasons {
			if !yield(k) {
				return
			}
		}
	}) {
		fmt.Fprintf(w, "left in float32: %d, %s\n", reasons[why], why)
	}
	return nil
}

// quantError makes an error in what was asked of the quantizer a usage
// error (exit 2).
func quantError(err error) error {
	var ie *quant.InputError
	if errors.As(err, &ie) {
		return usageErrorf("%v", err)
	}
	return err
}

// graphOf resolves a model named on the command line, a built-in (generated
// into the cache on first use) or a path, to its ONNX graph file; task is a
// built-in encoder's head.
func graphOf(model, task string, log *slog.Logger) (string, error) {
	mo := &modelOptions{Model: model, Task: task, TaskSet: task != "", Devices: models.DefaultDevices}
	m, err := mo.lookup(quantizeModels)
	if err != nil {
		return "", err
	}
	s, err := mo.settings(1, log)
	if err != nil {
		return "", err
	}
	path, err := m.Graph(s)
	if err != nil {
		if errors.Is(err, quant.ErrQuantized) {
			return "", usageErrorf("%v", err)
		}
		return "", settingError(err)
	}
	return path, nil
}

// quantizeModels are the models infer models quantize and compare take:
// those with an ONNX graph.
var quantizeModels = modelUse{arg: "model", takes: func(e registry.Entry) bool { return !e.Simulated },
	refuse: "a simulated model: it has no graph to quantise or compare"}
