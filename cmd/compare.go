package cmd

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/inferhq/infer/loadgen/corpus"
	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/compare"
	"github.com/inferhq/infer/models/onnx"
	"github.com/inferhq/infer/models/registry"
	"github.com/inferhq/infer/models/simlm"
)

// infer models compare: the accuracy of one model against another.

type modelsCompareOptions struct {
	A, B      string
	Task      string
	Corpus    string
	Items     int
	Prompts   int
	Tokens    int
	Threads   int
	OrtLib    string
	MaxSeqLen int
	JSON      bool
	Stdout    io.Writer
}

// Bounds and defaults of compare.
const (
	compareBatch      = 32
	maxCompareItems   = 100_000
	maxComparePrompts = 1024
	defaultPrompts    = 16
	defaultGenTokens  = 128
)

func newCmdModelsCompare(runF func(context.Context, *modelsCompareOptions) error) *cobra.Command {
	opts := &modelsCompareOptions{}
	cmd := &cobra.Command{
		Use:   "compare A B",
		Short: "Measure how closely model B's outputs follow model A's",
		Long: `Measure how closely model B's outputs follow model A's on the same inputs:
a quantised model against its original, or any two models of one task.

Encoders with an embedding head: the cosine of A's and B's vectors for each
item (mean, first percentile, minimum), and whether item pairs ranked by
similarity keep their order (Kendall's tau over every pair of the first 1,000
items; the share of items whose nearest neighbour stays the same).
Fill-mask encoders: top-1 agreement and top-5 overlap over every [MASK].
Decoders: the top-1 agreement of the next token at every position of the
--corpus lines and of A's greedy continuation of each (--tokens), both models
fed the same text (teacher forcing); the mean log-probability each gives that
text; and how many tokens B's greedy run would match A's before they first
differ.

A and B are as for infer serve --model: a built-in name, a built-in's int8
twin (bert-base-int8, quantised into the cache on first use) or a path.`,
		Example: `  infer models compare bert-base bert-base-int8
  infer models compare gpt2-small gpt2-small-int8 --tokens 256
  infer models compare model.onnx model-int8.onnx --corpus sentences.txt --json`,
		Args: exactArgs(2, "two models"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.A, opts.B, opts.Stdout = args[0], args[1], cmd.OutOrStdout()
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runModelsCompare(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Task, "task", "", "head of built-in encoders with several: fill-mask or embed for BERT (default: the models' first)")
	f.StringVar(&opts.Corpus, "corpus", "", "file of items, one a line: encoder inputs, or decoder prompts (default: the built-in masked-sentence corpus)")
	f.IntVar(&opts.Items, "items", 0, "encoders: compare the first N items of the corpus (0: all)")
	f.IntVar(&opts.Prompts, "prompts", defaultPrompts, "decoders: the first N corpus lines are the prompts")
	f.IntVar(&opts.Tokens, "tokens", defaultGenTokens, "decoders: tokens A generates greedily after each prompt (0: compare along the prompts only)")
	f.IntVar(&opts.Threads, "threads", 0, "ONNX Runtime intra-op threads per session (0: all the CPUs)")
	f.StringVar(&opts.OrtLib, "ort-lib", "", "ONNX Runtime shared library (default: $ONNXRUNTIME_LIB, then "+onnx.SetupPath+", then the system's)")
	f.IntVar(&opts.MaxSeqLen, "max-seq-len", 128, "encoders: most tokens of one item, [CLS] and [SEP] included")
	f.BoolVar(&opts.JSON, "json", false, "print the comparison as JSON")
	return cmd
}

// compareReport is what compare prints with --json.
type compareReport struct {
	A         string                   `json:"a"`
	B         string                   `json:"b"`
	Task      string                   `json:"task"`
	Embedding *compare.EmbeddingReport `json:"embedding,omitempty"`
	FillMask  *compare.FillMaskReport  `json:"fill_mask,omitempty"`
	Decoding  *compare.DecodingReport  `json:"decoding,omitempty"`
}

func runModelsCompare(ctx context.Context, opts *modelsCompareOptions) error {
	rep, err := compareModels(ctx, opts)
	if err != nil {
		return err
	}
	if opts.JSON {
		return writeJSON(opts.Stdout, rep)
	}
	printComparison(opts.Stdout, rep)
	return nil
}

// compareModels measures opts.B against opts.A.
func compareModels(ctx context.Context, opts *modelsCompareOptions) (compareReport, error) {
	var rep compareReport
	switch {
	case opts.Items < 0 || opts.Items > maxCompareItems:
		return rep, usageErrorf("--items %d: want 0 to %d", opts.Items, maxCompareItems)
	case opts.Prompts < 1 || opts.Prompts > maxComparePrompts:
		return rep, usageErrorf("--prompts %d: want 1 to %d", opts.Prompts, maxComparePrompts)
	case opts.Tokens < 0:
		return rep, usageErrorf("--tokens %d: must not be negative", opts.Tokens)
	case opts.Threads < 0:
		return rep, usageErrorf("--threads %d: must not be negative", opts.Threads)
	}
	var ms [2]registry.Model
	for i, name := range []string{opts.A, opts.B} {
		m, err := (&modelOptions{Model: name}).lookup(quantizeModels)
		if err != nil {
			return rep, err
		}
		ms[i] = m
	}
	if ms[0].Kind != ms[1].Kind {
		return rep, usageErrorf("%s is an %s and %s a %s: compare models of one kind", opts.A, ms[0].Kind, opts.B, ms[1].Kind)
	}
	texts, err := compareTexts(opts)
	if err != nil {
		return rep, err
	}
	rep = compareReport{A: opts.A, B: opts.B}
	if ms[0].Kind == registry.Decoder {
		err = compareDecoders(ctx, opts, ms, texts, &rep)
	} else {
		err = compareEncoders(ctx, opts, ms, texts, &rep)
	}
	return rep, err
}

// benchCompare bounds the comparison infer bench makes of a sweep's
// models: the first items of the built-in corpus, or prompts and tokens
// of a decoder.
var benchCompare = modelsCompareOptions{Items: 256, Prompts: 8, Tokens: 64, MaxSeqLen: 128}

// accuracy says in one line how closely model b follows model a, on
// benchCompare's inputs: what infer bench adds to a sweep of models.
func accuracy(ctx context.Context, a, b string) (string, error) {
	opts := benchCompare
	opts.A, opts.B = a, b
	rep, err := compareModels(ctx, &opts)
	if err != nil {
		return "", err
	}
	var parts []string
	if r := rep.Embedding; r != nil {
		parts = append(parts, fmt.Sprintf("embedding cosine mean %.4f, p1 %.4f, min %.4f over %d items; ranking Kendall's tau %.4f",
			r.Cosine.Mean, r.Cosine.P1, r.Cosine.Min, r.Items, r.KendallTau))
	}
	if r := rep.FillMask; r != nil {
		parts = append(parts, fmt.Sprintf("fill-mask top-1 agreement %.4f, top-5 overlap %.4f over %d masks", r.Top1, r.Top5, r.Masks))
	}
	if r := rep.Decoding; r != nil {
		parts = append(parts, fmt.Sprintf("teacher-forced top-1 agreement %.4f over %d tokens; greedy runs agree for %.1f tokens on average; log-prob %.3f vs %.3f",
			r.Top1, r.Positions, r.Diverge.Mean, r.LogProbB, r.LogProbA))
	}
	return strings.Join(parts, "; "), nil
}

// compareTexts returns the corpus: a file's lines or the built-in masked
// sentences.
func compareTexts(opts *modelsCompareOptions) ([]string, error) {
	if opts.Corpus == "" {
		return corpus.Masked(), nil
	}
	texts, err := corpus.Load(opts.Corpus)
	if err != nil {
		return nil, usageErrorf("--corpus: %v", err)
	}
	return texts, nil
}

// modelOptions returns the settings of the models compared.
func (opts *modelsCompareOptions) modelOptions() *modelOptions {
	return &modelOptions{Task: opts.Task, TaskSet: opts.Task != "", Devices: models.DefaultDevices, Threads: opts.Threads,
		OrtLib: opts.OrtLib, MaxSeqLen: opts.MaxSeqLen, Truncate: true}
}

func compareEncoders(ctx context.Context, opts *modelsCompareOptions, ms [2]registry.Model, texts []string, rep *compareReport) error {
	if opts.Items > 0 && opts.Items < len(texts) {
		texts = texts[:opts.Items]
	}
	var outs [2][]models.Output
	var task string
	for i, m := range ms {
		f, err := opts.modelOptions().openEncoder(m, 1, nil)
		if err != nil {
			return err
		}
		if i == 0 {
			task = f.Info().Task
		} else if f.Info().Task != task {
			f.Close()
			return usageErrorf("%s is a %s model and %s a %s model: compare models of one task", opts.A, task, opts.B, f.Info().Task)
		}
		m, err := f.New(ctx, 0)
		if err != nil {
			f.Close()
			return err
		}
		outs[i], err = compare.Predict(ctx, f, m, texts, compareBatch)
		m.Close()
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", []string{opts.A, opts.B}[i], err)
		}
	}
	rep.Task = task
	switch task {
	case onnx.TaskFillMask:
		var a, b [][]int64
		for i := range outs[0] {
			ma, mb := outs[0][i].(*onnx.FillMask), outs[1][i].(*onnx.FillMask)
			if len(ma.Masks) != len(mb.Masks) {
				return fmt.Errorf("item %d: %d masks for A, %d for B", i+1, len(ma.Masks), len(mb.Masks))
			}
			for j := range ma.Masks {
				a, b = append(a, candidateIDs(ma.Masks[j])), append(b, candidateIDs(mb.Masks[j]))
			}
		}
		r, err := compare.FillMask(a, b)
		if err != nil {
			return err
		}
		rep.FillMask = &r
	default:
		var a, b [][]float32
		for i := range outs[0] {
			a, b = append(a, outs[0][i].([]float32)), append(b, outs[1][i].([]float32))
		}
		r, err := compare.Embeddings(a, b)
		if err != nil {
			return err
		}
		rep.Embedding = &r
	}
	return nil
}

func candidateIDs(m onnx.Mask) []int64 {
	ids := make([]int64, len(m.Candidates))
	for i, c := range m.Candidates {
		ids[i] = c.ID
	}
	return ids
}

func compareDecoders(ctx context.Context, opts *modelsCompareOptions, ms [2]registry.Model, texts []string, rep *compareReport) error {
	rep.Task = onnx.TaskTextGeneration
	texts = texts[:min(opts.Prompts, len(texts))]
	var steppers [2]compare.Stepper
	var info models.DecoderInfo
	var prompts [][]int32
	for i, m := range ms {
		f, err := opts.modelOptions().openDecoder(m, 0, simlm.Config{}, nil)
		if err != nil {
			return err
		}
		defer f.Close()
		di := f.Decoder()
		if i == 0 {
			info = di
			for _, t := range texts {
				// The masked corpus's [MASK] means nothing to a decoder.
				ids := f.Tokenizer().Encode(strings.ReplaceAll(t, onnx.MaskToken, "something"))
				prompts = append(prompts, ids[:min(len(ids), max(1, di.Context-opts.Tokens))])
			}
			if opts.Tokens >= di.Context {
				return usageErrorf("--tokens %d: the context of %s is %d", opts.Tokens, opts.A, di.Context)
			}
		} else if di.Vocab != info.Vocab {
			return usageErrorf("%s has a vocabulary of %d tokens and %s of %d: compare decoders of one tokenizer", opts.A, info.Vocab, opts.B, di.Vocab)
		}
		need := 0
		for _, p := range prompts {
			need += len(p) + opts.Tokens
		}
		if need > di.KVTokens {
			return usageErrorf("--prompts %d and --tokens %d need %d tokens of KV cache; %s holds %d", len(prompts), opts.Tokens, need, []string{opts.A, opts.B}[i], di.KVTokens)
		}
		d, err := f.New(ctx, 0)
		if err != nil {
			return err
		}
		defer d.Close()
		s, ok := d.(compare.Stepper)
		if !ok {
			return fmt.Errorf("%s: this decoder does not show its logits", []string{opts.A, opts.B}[i])
		}
		steppers[i] = s
	}
	r, err := compare.Decode(ctx, steppers[0], steppers[1], prompts, compare.DecodeConfig{Tokens: opts.Tokens, Context: info.Context, EOS: info.EOS})
	if err != nil {
		return err
	}
	rep.Decoding = &r
	return nil
}

func printComparison(w io.Writer, rep compareReport) {
	fmt.Fprintf(w, "A: %s\nB: %s\n", rep.A, rep.B)
	if r := rep.Embedding; r != nil {
		fmt.Fprintf(w, "embeddings, %d items: cosine of A's and B's vectors mean %.4f, p1 %.4f, min %.4f\n",
			r.Items, r.Cosine.Mean, r.Cosine.P1, r.Cosine.Min)
		fmt.Fprintf(w, "ranking of %d item pairs by similarity: Kendall's tau %.4f (%.2f%% of orderings swapped); nearest neighbour kept for %.1f%% of items\n",
			r.Pairs, r.KendallTau, 100*r.Swapped, 100*r.Neighbours)
	}
	if r := rep.FillMask; r != nil {
		fmt.Fprintf(w, "fill-mask, %d masks: top-1 agreement %.4f, top-5 overlap %.4f\n", r.Masks, r.Top1, r.Top5)
	}
	if r := rep.Decoding; r != nil {
		fmt.Fprintf(w, "teacher forcing, %d positions: top-1 agreement %.4f; mean log-probability of the text A %.4f, B %.4f\n",
			r.Positions, r.Top1, r.LogProbA, r.LogProbB)
		if r.Runs > 0 {
			fmt.Fprintf(w, "greedy runs: %d; tokens before B first differs from A: mean %.1f, p1 %.0f, min %.0f; %d never differed\n",
				r.Runs, r.Diverge.Mean, r.Diverge.P1, r.Diverge.Min, r.Full)
		}
	}
}
