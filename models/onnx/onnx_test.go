package onnx

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/sentencepiece"
	"github.com/inferhq/infer/models/wordpiece"
)

// testTokenizer is the real one: the WordPiece of bert-base-uncased.
func testTokenizer(testing.TB) Tokenizer { return wordpiece.BertBaseUncased() }

// requireRuntime loads the ONNX Runtime or skips the test, naming the set-up
// step; with INFER_REQUIRE_ORT=1 (CI) it fails instead.
func requireRuntime(t testing.TB) {
	t.Helper()
	if _, err := loadRuntime(""); err != nil {
		if os.Getenv("INFER_REQUIRE_ORT") == "1" {
			t.Fatalf("INFER_REQUIRE_ORT=1 but the runtime cannot be loaded: %v", err)
		}
		t.Skipf("no ONNX Runtime (run scripts/setup-ort.sh): %v", err)
	}
}

func newFactory(t testing.TB, cfg Config) *Factory {
	t.Helper()
	requireRuntime(t)
	if cfg.Tokenizer == nil {
		cfg.Tokenizer = testTokenizer(t)
	}
	f, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// predict prepares texts and runs them as one batch on a fresh instance.
func predict(t testing.TB, f *Factory, texts ...string) []models.Output {
	t.Helper()
	m, err := f.New(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ins := make([]models.Input, len(texts))
	for i, s := range texts {
		if ins[i], err = f.Prepare(s); err != nil {
			t.Fatalf("Prepare(%q): %v", s, err)
		}
	}
	out := make([]models.Output, len(ins))
	if err := m.Predict(context.Background(), ins, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestSignature(t *testing.T) {
	requireRuntime(t)
	dir := t.TempDir()
	for _, tc := range []struct {
		name     string
		graph    toyGraph
		wantTask string
		wantOut  string
		wantErr  string
	}{
		{name: "bert fill-mask", graph: toyGraph{outputs: []string{"mask_positions"}}, wantTask: TaskFillMask, wantOut: "mask_positions,top_scores,top_ids"},
		{name: "bert embed", graph: toyGraph{outputs: []string{"embedding"}}, wantTask: TaskEmbed, wantOut: "embedding"},
		{name: "masked-LM export", graph: toyGraph{outputs: []string{"logits"}}, wantTask: TaskFillMask, wantOut: "logits"},
		{name: "encoder export", graph: toyGraph{outputs: []string{"last_hidden_state", "pooler_output"}}, wantTask: TaskEmbed, wantOut: "last_hidden_state"},
		{name: "pooled export", graph: toyGraph{outputs: []string{"pooler_output"}}, wantTask: TaskEmbed, wantOut: "pooler_output"},
		{name: "no token types", graph: toyGraph{noTypeIDs: true, outputs: []string{"logits"}}, wantTask: TaskFillMask, wantOut: "logits"},
		{name: "unknown outputs", graph: toyGraph{outputs: []string{"shape"}}, wantErr: "no graph output this server can decode; its outputs: shape int64 [2]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.graph.build(t, dir, strings.ReplaceAll(tc.name, " ", "_"))
			f, err := New(Config{Path: path, Tokenizer: testTokenizer(t)})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("New() error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if got := f.Task(); got != tc.wantTask {
				t.Errorf("Task() = %q, want %q", got, tc.wantTask)
			}
			if got := strings.Join(f.sig.outputs, ","); got != tc.wantOut {
				t.Errorf("outputs = %s, want %s", got, tc.wantOut)
			}
			if got, want := f.sig.typeIDs(), !tc.graph.noTypeIDs; got != want {
				t.Errorf("token_type_ids fed = %v, want %v", got, want)
			}
		})
	}
}

// The texts of the padding tests: a short one and longer company.
var (
	short  = "Paris is the [MASK] of France."
	longer = []string{
		"The quick brown fox jumps over the lazy dog while the [MASK] watches from the old stone wall by the river.",
		"A [MASK] item of middling length.",
		"Many more words make this one the longest of the batch by far, so that the short item gets padded a lot, [MASK] included, and more.",
	}
)

// TestPaddingInvariance runs an item alone and batched with longer items, for
// every head: its output must not change (within 1e-4).
func TestPaddingInvariance(t *testing.T) {
	dir := t.TempDir()
	for _, outputs := range [][]string{{"mask_positions"}, {"logits"}, {"embedding"}, {"last_hidden_state"}, {"pooler_output"}} {
		t.Run(outputs[0], func(t *testing.T) {
			f := newFactory(t, Config{Path: toyGraph{outputs: outputs}.build(t, dir, outputs[0])})
			alone := predict(t, f, short)[0]
			batched := predict(t, f, append(append([]string{longer[0]}, short), longer[1:]...)...)
			if len(batched) != 4 {
				t.Fatalf("got %d outputs, want 4", len(batched))
			}
			assertClose(t, batched[1], alone, 1e-4)
		})
	}
}

// TestFillMaskInGraphAndInGo checks the Go softmax/top-k of a logits head
// against the same computed inside a graph with the same weights.
func TestFillMaskInGraphAndInGo(t *testing.T) {
	dir := t.TempDir()
	inGraph := newFactory(t, Config{Path: toyGraph{outputs: []string{"mask_positions"}}.build(t, dir, "topk")})
	inGo := newFactory(t, Config{Path: toyGraph{outputs: []string{"logits"}}.build(t, dir, "logits")})
	texts := append([]string{short, "[MASK] [MASK] two masks"}, longer...)
	a, b := predict(t, inGraph, texts...), predict(t, inGo, texts...)
	for i := range texts {
		fm := a[i].(*FillMask)
		if len(fm.Masks) == 0 || len(fm.Masks[0].Candidates) != TopK {
			t.Fatalf("item %d: %+v, want masks with %d candidates", i, fm, TopK)
		}
		for _, m := range fm.Masks {
			for j := 1; j < len(m.Candidates); j++ {
				if m.Candidates[j].Score > m.Candidates[j-1].Score {
					t.Errorf("item %d: scores not descending: %+v", i, m.Candidates)
				}
			}
		}
		assertClose(t, b[i], a[i], 1e-5)
	}
	if got := len(a[1].(*FillMask).Masks); got != 2 {
		t.Errorf("two masks: got %d", got)
	}
	if got, want := a[0].(*FillMask).Masks[0].Position, 4; got != want { // [CLS] paris is the [MASK]
		t.Errorf("mask position = %d, want %d", got, want)
	}
}

func TestEmbeddingIsUnitLength(t *testing.T) {
	f := newFactory(t, Config{Path: toyGraph{outputs: []string{"last_hidden_state"}}.build(t, t.TempDir(), "hidden")})
	for _, out := range predict(t, f, short, longer[0]) {
		v := out.([]float32)
		var norm float64
		for _, x := range v {
			norm += float64(x) * float64(x)
		}
		if len(v) != toyHidden || math.Abs(math.Sqrt(norm)-1) > 1e-5 {
			t.Errorf("embedding of %d values, norm %v; want %d values of norm 1", len(v), math.Sqrt(norm), toyHidden)
		}
	}
}

// TestBadInput: each awkward input gets a defined result or a clear error.
func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	fillMask := newFactory(t, Config{Path: toyGraph{outputs: []string{"mask_positions"}}.build(t, dir, "fm")})
	embed := newFactory(t, Config{Path: toyGraph{outputs: []string{"embedding"}}.build(t, dir, "embed")})
	strict := newFactory(t, Config{Path: toyGraph{outputs: []string{"embedding"}}.build(t, dir, "strict"), RejectLong: true})
	// A tokenizer that adds no [CLS] or [SEP]: an empty text has no tokens.
	pieces, err := sentencepiece.New([]sentencepiece.Piece{{Text: "\ufffd"}, {Text: "▁word", Score: -1},
		{Text: "▁", Score: -5}, {Text: "w", Score: -5}, {Text: "o", Score: -5}, {Text: "r", Score: -5}, {Text: "d", Score: -5}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	spEmbed := newFactory(t, Config{Path: toyGraph{outputs: []string{"embedding"}}.build(t, dir, "sp"), Tokenizer: pieces})
	long := strings.Repeat("word ", 2000) // 10 000 characters
	for _, tc := range []struct {
		name    string
		f       *Factory
		text    string
		wantErr error
		wantLen int // tokens, when accepted
	}{
		{"10000 characters, truncated", embed, long, nil, 128},
		{"10000 characters, --truncate=false", strict, long, models.ErrInputTooLong, 0},
		{"mask past the truncation", fillMask, long + "[MASK]", models.ErrInvalidInput, 0},
		{"mask then 10000 characters", fillMask, "[MASK] " + long, nil, 128},
		{"no mask, fill-mask", fillMask, "Paris is the capital of France.", models.ErrInvalidInput, 0},
		{"no mask, embed", embed, "Paris is the capital of France.", nil, -1},
		{"emoji", fillMask, "I 😀 [MASK] 🇫🇷 👍🏽", nil, -1},
		{"CJK", fillMask, "东京是日本的[MASK]。", nil, -1},
		{"invalid UTF-8", fillMask, "caf\xe9 [MASK] \xff", nil, -1},
		{"control characters", embed, "\x00\x01\x7f", nil, -1},
		{"no tokens", spEmbed, "", models.ErrInvalidInput, 0},
		{"10000 characters, no [SEP]", spEmbed, long, nil, 128},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, err := tc.f.Prepare(tc.text)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Prepare() error = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Prepare() error = %v", err)
			}
			if tc.wantLen >= 0 && len(in.Tokens) != tc.wantLen {
				t.Errorf("Prepare() gave %d tokens, want %d", len(in.Tokens), tc.wantLen)
			}
			predict(t, tc.f, tc.text)
		})
	}
}

// TestSessions: one session per worker number, shared by its instances.
func TestSessions(t *testing.T) {
	f := newFactory(t, Config{Path: toyGraph{outputs: []string{"logits"}}.build(t, t.TempDir(), "logits"), Runtime: Runtime{Workers: 2}})
	var ms []*Model
	for _, w := range []int{0, 0, 1} {
		m, err := f.New(context.Background(), w)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		ms = append(ms, m.(*Model))
	}
	if ms[0].sess != ms[1].sess || ms[0].sess == ms[2].sess {
		t.Errorf("sessions of workers 0, 0, 1 = %p, %p, %p; want the first two shared", ms[0].sess, ms[1].sess, ms[2].sess)
	}
	if got, want := f.Threads(), max(1, runtime.NumCPU()/2); got != want {
		t.Errorf("threads per session = %d with 2 workers, want %d", got, want)
	}
	in, err := f.Prepare(short)
	if err != nil {
		t.Fatal(err)
	}
	outs := make([][]models.Output, len(ms))
	for i, m := range ms {
		outs[i] = make([]models.Output, 1)
		if err := m.Predict(context.Background(), []models.Input{in}, outs[i]); err != nil {
			t.Fatal(err)
		}
	}
	assertClose(t, outs[2][0], outs[0][0], 0)
}

// TestSessionReleasedWithItsLastInstance: closing a worker's instances gives
// its session's memory back (a removed worker must not keep it until exit).
func TestSessionReleasedWithItsLastInstance(t *testing.T) {
	f := newFactory(t, Config{Path: toyGraph{outputs: []string{"logits"}}.build(t, t.TempDir(), "logits"), Runtime: Runtime{Workers: 2}})
	sessions := func() int {
		f.sessions.mu.Lock()
		defer f.sessions.mu.Unlock()
		return len(f.sessions.byWorker)
	}
	a, _ := f.New(context.Background(), 1)
	b, _ := f.New(context.Background(), 1)
	a.Close()
	a.Close() // twice is harmless
	if got := sessions(); got != 1 {
		t.Errorf("%d sessions with one of two instances closed, want 1", got)
	}
	b.Close()
	if got := sessions(); got != 0 {
		t.Errorf("%d sessions once every instance is closed, want 0", got)
	}
	c, err := f.New(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	in, err := f.Prepare(short)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Predict(context.Background(), []models.Input{in}, make([]models.Output, 1)); err != nil {
		t.Errorf("an instance on a fresh session: %v", err)
	}
}

func TestDevices(t *testing.T) {
	requireRuntime(t)
	path := toyGraph{outputs: []string{"embedding"}}.build(t, t.TempDir(), "embed")
	if err := probeCUDA(0); err == nil {
		t.Skip("this runtime has CUDA; the test covers a CPU-only runtime")
	}
	_, err := New(Config{Path: path, Tokenizer: testTokenizer(t), Runtime: Runtime{Devices: []models.Device{{Kind: "cuda", Index: 1}}}})
	if err == nil || !strings.Contains(err.Error(), "cuda:1") || !strings.Contains(err.Error(), "cannot use CUDA") {
		t.Errorf("New(cuda:1) error = %v, want one saying the runtime cannot use CUDA", err)
	}
	f := newFactory(t, Config{Path: path, Runtime: Runtime{Devices: []models.Device{{Kind: "auto"}}}})
	if got := devicesString(f.devices); got != "cpu" {
		t.Errorf("auto resolved to %s, want cpu", got)
	}
}

func TestFindLibrary(t *testing.T) {
	dir := t.TempDir()
	lib := dir + "/" + SetupPath
	if err := os.MkdirAll(lib[:strings.LastIndex(lib, "/")], 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lib, []byte("\x7fELF"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := findUp(dir+"/.cache/onnxruntime", SetupPath); got != lib {
		t.Errorf("findUp from below the project = %q, want %q", got, lib)
	}
	if got := findUp("/", "no/such/file"); got != "" {
		t.Errorf("findUp of a missing file = %q, want \"\"", got)
	}
	t.Setenv("ONNXRUNTIME_LIB", lib)
	if got, err := FindLibrary(""); got != lib || err != nil {
		t.Errorf("FindLibrary with $ONNXRUNTIME_LIB = %q, %v; want %q", got, err, lib)
	}
	if _, err := FindLibrary(dir + "/missing.so"); err == nil || !strings.Contains(err.Error(), "--ort-lib") {
		t.Errorf("FindLibrary(missing) error = %v, want one naming --ort-lib", err)
	}
	if !strings.Contains(ErrNoRuntime.Error(), "scripts/setup-ort.sh") || !strings.Contains(ErrNoRuntime.Error(), "--model sim") ||
		strings.Contains(ErrNoRuntime.Error(), "\n") {
		t.Errorf("ErrNoRuntime = %q, want one line naming scripts/setup-ort.sh and --model sim", ErrNoRuntime)
	}
}

func TestSHA256(t *testing.T) {
	path := toyGraph{outputs: []string{"embedding"}}.build(t, t.TempDir(), "embed")
	f := newFactory(t, Config{Path: path})
	got, err := f.SHA256()
	if err != nil || len(got) != 64 {
		t.Errorf("SHA256() = %q, %v; want 64 hex digits", got, err)
	}
	if v := RuntimeVersion(); !strings.HasPrefix(v, "1.") {
		t.Errorf("RuntimeVersion() = %q", v)
	}
}

// assertClose compares two outputs: fill-mask results by positions, ids and
// scores, vectors element by element.
func assertClose(t testing.TB, got, want models.Output, tol float64) {
	t.Helper()
	switch w := want.(type) {
	case []float32:
		g := got.([]float32)
		if len(g) != len(w) {
			t.Fatalf("vector of %d values, want %d", len(g), len(w))
		}
		for i := range w {
			if math.Abs(float64(g[i]-w[i])) > tol {
				t.Fatalf("value %d = %v, want %v (±%g)", i, g[i], w[i], tol)
			}
		}
	case *FillMask:
		g := got.(*FillMask)
		if len(g.Masks) != len(w.Masks) {
			t.Fatalf("%d masks, want %d", len(g.Masks), len(w.Masks))
		}
		for i, wm := range w.Masks {
			gm := g.Masks[i]
			if gm.Position != wm.Position || len(gm.Candidates) != len(wm.Candidates) {
				t.Fatalf("mask %d = %+v, want %+v", i, gm, wm)
			}
			for j, wc := range wm.Candidates {
				gc := gm.Candidates[j]
				if gc.ID != wc.ID || gc.Token != wc.Token || math.Abs(float64(gc.Score-wc.Score)) > tol {
					t.Fatalf("mask %d candidate %d = %+v, want %+v (±%g)", i, j, gc, wc, tol)
				}
			}
		}
	default:
		t.Fatalf("unexpected output type %T", want)
	}
}

func TestTopSoftmax(t *testing.T) {
	e := math.E
	for _, tc := range []struct {
		logits    []float32
		k         int
		wantIDs   []int
		wantFirst float64
	}{
		{[]float32{1, 3, 2, 3, 0}, 2, []int{1, 3}, e * e * e / (e + 2*e*e*e + e*e + 1)},
		{[]float32{0, 0}, 5, []int{0, 1}, 0.5},
		{[]float32{-1000, 1000}, 1, []int{1}, 1},
		{nil, 5, nil, 0},
	} {
		ids, scores := topSoftmax(tc.logits, tc.k)
		if fmt.Sprint(ids) != fmt.Sprint(tc.wantIDs) {
			t.Errorf("topSoftmax(%v, %d) ids = %v, want %v", tc.logits, tc.k, ids, tc.wantIDs)
			continue
		}
		if len(scores) > 0 && math.Abs(float64(scores[0])-tc.wantFirst) > 1e-6 {
			t.Errorf("topSoftmax(%v, %d) first score = %v, want %v", tc.logits, tc.k, scores[0], tc.wantFirst)
		}
	}
}
