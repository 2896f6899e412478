package cmd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/inferhq/infer/loadgen/record"
	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/ceiling"
	"github.com/inferhq/infer/models/onnx"
	"github.com/inferhq/infer/models/onnxgraph"
	"github.com/inferhq/infer/models/registry"
	"github.com/inferhq/infer/models/simlm"
)

// Decoder models: GPT-2-architecture graphs built in (gpt2-tiny, …) and
// decoder exports by path, benchmarked and calibrated by infer models bench
// and calibrate.

// decoderOptions are the settings of infer models bench and calibrate that
// only decoders have.
type decoderOptions struct {
	Context  int
	Prompts  []int
	KVTokens int
	Memory   bool
	Seqs     int
	Steps    int
}

func (o *decoderOptions) bind(f interface {
	IntVar(*int, string, int, string)
	IntSliceVar(*[]int, string, []int, string)
	BoolVar(*bool, string, bool, string)
}, bench bool) {
	d := ceiling.DecodeConfig{}.WithDefaults()
	f.IntVar(&o.Context, "context", d.Context, "decoders: mean tokens in each sequence's cache while its decode steps are timed")
	f.IntSliceVar(&o.Prompts, "prompts", d.Prompts, "decoders: prompt lengths of the prefill points")
	f.IntVar(&o.KVTokens, "kv-tokens", 0, "decoders: KV cache bound in tokens (0: what the timed points need; with --memory, the model's default)")
	if bench {
		f.BoolVar(&o.Memory, "memory", false, "decoders: instead of timing, fill --seqs sequences up to --kv-tokens and report resident memory")
		f.IntVar(&o.Seqs, "seqs", 16, "decoders, --memory: sequences sharing the KV cache")
		f.IntVar(&o.Steps, "steps", 8, "decoders, --memory: decode steps run with the cache full")
	}
}

// decodeBenchReport is what bench prints with --json for a decoder.
type decodeBenchReport struct {
	ceiling.DecodeResult
	Backend     string `json:"backend"`
	Params      string `json:"params"`
	ORT         string `json:"onnxruntime"`
	KVTokens    int    `json:"kv_tokens"`
	GeneratedAt string `json:"generated_at"`
}

// measureDecoder runs the offline decode bench of the decoder m, printing
// each point as it is done unless opts.JSON.
func measureDecoder(ctx context.Context, opts *modelsBenchOptions, m registry.Model) (decodeBenchReport, error) {
	cfg, err := opts.decodeConfig()
	if err != nil {
		return decodeBenchReport{}, err
	}
	kv := opts.Decoder.KVTokens
	if kv == 0 {
		kv = cfg.KVTokens()
	} else if kv > 0 && kv < cfg.KVTokens() {
		return decodeBenchReport{}, usageErrorf("--kv-tokens %d: the points need %d (the largest --batch times --context and then some)", kv, cfg.KVTokens())
	}
	f, err := opts.Model.openDecoder(m, kv, simlm.Config{}, nil)
	if err != nil {
		return decodeBenchReport{}, err
	}
	defer f.Close()
	info := f.Info()
	rep := decodeBenchReport{Backend: info.Backend, Params: info.Params, ORT: onnx.RuntimeVersion(),
		KVTokens: f.Decoder().KVTokens, GeneratedAt: time.Now().UTC().Format(time.RFC3339)}
	var onDecode func(ceiling.Point)
	var onPrefill func(ceiling.PrefillPoint)
	if !opts.JSON {
		w := opts.Out
		fmt.Fprintf(w, "%s\ndecode, context %d ± %d tokens:\n%5s %6s %9s %9s %9s %9s %13s\n", describe(info), cfg.Context,
			cfg.Window/2, "batch", "steps", "tokens/s", "step ms", "p50 ms", "p99 ms", "per token µs")
		onDecode = func(p ceiling.Point) {
			fmt.Fprintf(w, "%5d %6d %9.1f %9.2f %9.2f %9.2f %13.1f\n", p.Batch, p.Runs, p.ItemsPerSec, p.MeanMs, p.P50Ms, p.P99Ms, p.PerItemNs/1e3)
		}
		first := true
		onPrefill = func(p ceiling.PrefillPoint) {
			if first {
				fmt.Fprintf(w, "prefill, one prompt a step:\n%6s %6s %9s %9s %9s %9s\n", "prompt", "steps", "tokens/s", "step ms", "p50 ms", "p99 ms")
				first = false
			}
			fmt.Fprintf(w, "%6d %6d %9.1f %9.2f %9.2f %9.2f\n", p.PromptLen, p.Runs, p.TokensPerSec, p.MeanMs, p.P50Ms, p.P99Ms)
		}
	}
	rep.DecodeResult, err = ceiling.MeasureDecode(ctx, f, cfg, onDecode, onPrefill)
	if err != nil {
		return rep, err
	}
	return rep, nil
}

// decodeConfig checks the decoder flags of opts and returns the bench's
// configuration.
func (opts *modelsBenchOptions) decodeConfig() (ceiling.DecodeConfig, error) {
	o := opts.Decoder
	for _, n := range opts.Batches {
		if n < 1 {
			return ceiling.DecodeConfig{}, usageErrorf("--batch %d: want at least 1", n)
		}
	}
	for _, n := range o.Prompts {
		if n < 1 {
			return ceiling.DecodeConfig{}, usageErrorf("--prompts %d: want at least 1", n)
		}
	}
	switch {
	case opts.Duration <= 0:
		return ceiling.DecodeConfig{}, usageErrorf("--duration %v: must be positive", opts.Duration)
	case o.Context < 1:
		return ceiling.DecodeConfig{}, usageErrorf("--context %d: want at least 1", o.Context)
	case opts.SeqLen > 0 || opts.Corpus != "":
		return ceiling.DecodeConfig{}, usageErrorf("--seq-len and --corpus are for encoder models; a decoder's are --context and --prompts")
	}
	return ceiling.DecodeConfig{Batches: opts.Batches, Context: o.Context, Prompts: o.Prompts, Duration: opts.Duration}.WithDefaults(), nil
}

func runDecodeBench(ctx context.Context, opts *modelsBenchOptions, m registry.Model) error {
	if opts.Decoder.Memory {
		return runDecodeMemory(ctx, opts, m)
	}
	rep, err := measureDecoder(ctx, opts, m)
	if err != nil {
		return err
	}
	if opts.JSON {
		return writeJSON(opts.Out, rep)
	}
	return nil
}

// decodeCalibration is what calibrate prints with --json for a decoder.
type decodeCalibration struct {
	Bench decodeBenchReport `json:"bench"`
	Fit   ceiling.DecodeFit `json:"fit"`
	Flags string            `json:"flags"`
}

func runDecodeCalibrate(ctx context.Context, opts *modelsBenchOptions, m registry.Model) error {
	rep, err := measureDecoder(ctx, opts, m)
	if err != nil {
		return err
	}
	fit, err := ceiling.FitDecode(rep.DecodeResult)
	if err != nil {
		return usageErrorf("--batch and --prompts: %v", err)
	}
	c := decodeCalibration{Bench: rep, Fit: fit, Flags: fmt.Sprintf("--model sim-lm --sim-step %v --sim-per-seq %v --sim-per-prefill-token %v",
		record.Round(fit.Step), record.Round(fit.PerSeq), record.Round(fit.PerPrefillToken))}
	if opts.JSON {
		return writeJSON(opts.Out, c)
	}
	fmt.Fprintf(opts.Out, "\nstep(n decoding, p prefill tokens) = %v + %v·n + %v·p\n", record.Round(fit.Step),
		record.Round(fit.PerSeq), record.Round(fit.PerPrefillToken))
	fmt.Fprintf(opts.Out, "  decode fit: rms error %v, worst %.1f%% of a step; prefill fit: intercept %v, rms error %v, worst %.1f%%\n",
		record.Round(fit.Decode.RMSE), 100*fit.Decode.MaxRelErr, record.Round(fit.Prefill.Fixed),
		record.Round(fit.Prefill.RMSE), 100*fit.Prefill.MaxRelErr)
	fmt.Fprintf(opts.Out, "infer serve %s\n", c.Flags)
	return nil
}

// memoryReport is what bench --memory prints with --json.
type memoryReport struct {
	Model           string `json:"model"`
	Seqs            int    `json:"seqs"`
	TokensPerSeq    int    `json:"tokens_per_seq"`
	KVTokens        int    `json:"kv_tokens"`
	KVBytes         int64  `json:"kv_bytes"`
	RSSOpenedBytes  int64  `json:"rss_opened_bytes"`   // the runtime and the graph's description loaded
	RSSLoadedBytes  int64  `json:"rss_loaded_bytes"`   // the session created: weights in memory
	RSSFullBytes    int64  `json:"rss_full_bytes"`     // the cache full, after a garbage collection
	RSSPeakBytes    int64  `json:"rss_peak_bytes"`     // the process's high-water mark
	GoHeapLiveBytes uint64 `json:"go_heap_live_bytes"` // of RSSFull: the cache buffers and the rest of the Go heap
}

// runDecodeMemory fills --seqs sequences until the cache holds --kv-tokens
// tokens (prefilling in chunks of at most 512 tokens, as an engine with a
// step budget does, then decoding --steps tokens each), and reports the
// process's resident memory.
func runDecodeMemory(ctx context.Context, opts *modelsBenchOptions, m registry.Model) error {
	o := opts.Decoder
	switch {
	case o.Seqs < 1:
		return usageErrorf("--seqs %d: want at least 1", o.Seqs)
	case o.Steps < 0:
		return usageErrorf("--steps %d: must not be negative", o.Steps)
	}
	f, err := opts.Model.openDecoder(m, o.KVTokens, simlm.Config{}, nil)
	if err != nil {
		return err
	}
	defer f.Close()
	sized, ok := f.(interface{ KVBytesPerToken() int64 })
	if !ok {
		return usageErrorf("--memory: %s does not say the size of its KV cache", m)
	}
	info := f.Decoder()
	per := min(info.KVTokens/o.Seqs, info.Context)
	if per <= o.Steps {
		return usageErrorf("--kv-tokens %d over --seqs %d leaves %d tokens a sequence, not more than --steps %d", info.KVTokens, o.Seqs, per, o.Steps)
	}
	rep := memoryReport{Model: f.Info().Name, Seqs: o.Seqs, TokensPerSeq: per, KVTokens: info.KVTokens,
		KVBytes: int64(o.Seqs*per) * sized.KVBytesPerToken()}
	rep.RSSOpenedBytes = rss("VmRSS")
	d, err := f.New(ctx, 0)
	if err != nil {
		return err
	}
	defer d.Close()
	rep.RSSLoadedBytes = rss("VmRSS")

	const chunk = 512
	prompt := per - o.Steps
	seqs := make([]models.StepSeq, o.Seqs)
	next := make([]int32, o.Seqs)
	for i := range seqs {
		seqs[i] = models.StepSeq{ID: models.SeqID(i + 1), PromptLen: prompt}
	}
	for fed := 0; fed < prompt; fed += chunk {
		n := min(chunk, prompt-fed)
		for i := range seqs {
			seqs[i].Past, seqs[i].Tokens, seqs[i].Sample = fed, make([]int32, n), fed+n == prompt
			for j := range seqs[i].Tokens {
				seqs[i].Tokens[j] = int32((i*7919 + (fed+j)*104729) % info.Vocab)
			}
		}
		if err := d.Step(ctx, seqs, next); err != nil {
			return err
		}
	}
	for k := range o.Steps {
		for i := range seqs {
			seqs[i].Past, seqs[i].Tokens, seqs[i].Sample = prompt+k, next[i:i+1], true
		}
		if err := d.Step(ctx, seqs, next); err != nil {
			return err
		}
	}
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	rep.RSSFullBytes, rep.RSSPeakBytes, rep.GoHeapLiveBytes = rss("VmRSS"), rss("VmHWM"), ms.HeapAlloc
	if opts.JSON {
		return writeJSON(opts.Out, rep)
	}
	w := tabwriter.NewWriter(opts.Out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "%s: %d sequences × %d tokens = %d tokens of KV cache (%s, %s a token; bound %d)\n", rep.Model,
		rep.Seqs, per, rep.Seqs*per, mib(rep.KVBytes), kib(sized.KVBytesPerToken()), info.KVTokens)
	fmt.Fprintf(w, "resident memory:\topened %s\tloaded %s\tcache full %s\tpeak %s\t(Go heap %s)\n",
		mib(rep.RSSOpenedBytes), mib(rep.RSSLoadedBytes), mib(rep.RSSFullBytes), mib(rep.RSSPeakBytes), mib(int64(rep.GoHeapLiveBytes)))
	return w.Flush()
}

func mib(n int64) string { return strconv.FormatFloat(float64(n)/(1<<20), 'f', 0, 64) + " MiB" }
func kib(n int64) string { return strconv.FormatFloat(float64(n)/(1<<10), 'f', 1, 64) + " KiB" }

// rss returns field (VmRSS, VmHWM) of /proc/self/status in bytes, or 0 where
// there is none (not Linux).
func rss(field string) int64 {
	file, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer file.Close()
	s := bufio.NewScanner(file)
	for s.Scan() {
		name, value, ok := strings.Cut(s.Text(), ":")
		if !ok || name != field {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		if err != nil {
			return 0
		}
		return kb << 10
	}
	return 0
}

// describeDecoder writes what a decoder graph's inputs say about it, or
// nothing for another graph.
func describeDecoder(w io.Writer, info *onnxgraph.Info) {
	shape, err := onnx.DecoderShapeOf(*info)
	if errors.Is(err, onnx.ErrNotDecoder) {
		return
	}
	if err != nil {
		fmt.Fprintf(w, "decoder:    not servable: %v\n", err)
		return
	}
	extra := ""
	if !shape.PositionIDs {
		extra += ", no position_ids"
	}
	if shape.Merged {
		extra += ", merged (use_cache_branch)"
	}
	fmt.Fprintf(w, "decoder:    %d layers, %d heads of %d, vocabulary %d, KV cache %s a token%s\n",
		shape.Layers, shape.Heads, shape.HeadDim, shape.Vocab, kib(shape.KVBytesPerToken()), extra)
}
