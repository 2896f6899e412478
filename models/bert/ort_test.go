package bert

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	ort "github.com/yalue/onnxruntime_go"
)

// The generated models are checked by running them in the real ONNX
// Runtime. Locally the tests skip when the library is absent; in CI
// (INFER_REQUIRE_ORT=1) they fail instead.

var (
	ortOnce sync.Once
	ortErr  error
)

// requireORT initialises ONNX Runtime from $ONNXRUNTIME_LIB, else from the
// project's set-up folder, or skips the test when neither has it.
func requireORT(tb testing.TB) {
	tb.Helper()
	lib := os.Getenv("ONNXRUNTIME_LIB")
	if lib == "" {
		lib = filepath.Join("..", "..", ".cache", "onnxruntime", "lib", "libonnxruntime.so.1")
		if _, err := os.Stat(lib); err != nil {
			msg := fmt.Sprintf("ONNX Runtime not found at %s: run scripts/setup-ort.sh or set ONNXRUNTIME_LIB", lib)
			if os.Getenv("INFER_REQUIRE_ORT") == "1" {
				tb.Fatal(msg)
			}
			tb.Skip(msg)
		}
	}
	ortOnce.Do(func() {
		ort.SetSharedLibraryPath(lib)
		ortErr = ort.InitializeEnvironment()
	})
	if ortErr != nil {
		tb.Fatalf("initialise ONNX Runtime from %s: %v", lib, ortErr)
	}
}

// outputs returns the output names of a task's graph.
func outputs(task Task) []string {
	if task == FillMask {
		return []string{MaskPositions, TopScores, TopIDs}
	}
	return []string{Embedding}
}

// session is an ONNX Runtime session over a generated model.
type session struct {
	s    *ort.DynamicAdvancedSession
	task Task
}

func newSession(tb testing.TB, path string, task Task, threads int) *session {
	tb.Helper()
	opts, err := ort.NewSessionOptions()
	if err != nil {
		tb.Fatal(err)
	}
	defer opts.Destroy()
	if err := opts.SetIntraOpNumThreads(threads); err != nil {
		tb.Fatal(err)
	}
	if err := opts.SetInterOpNumThreads(1); err != nil {
		tb.Fatal(err)
	}
	s, err := ort.NewDynamicAdvancedSession(path, []string{InputIDs, AttentionMask, TokenTypeIDs}, outputs(task), opts)
	if err != nil {
		tb.Fatalf("load %s in ONNX Runtime: %v", path, err)
	}
	tb.Cleanup(func() { s.Destroy() })
	return &session{s: s, task: task}
}

// result is a model's output for a batch, copied out of ONNX Runtime.
type result struct {
	positions []int64   // FillMask: [masks, 2]
	scores    []float32 // FillMask: [masks, TopK]
	ids       []int64   // FillMask: [masks, TopK]
	masks     int
	embedding []float32 // Embed: [batch, hidden]
}

// run runs a batch of token id sequences, padded with id 0 to the longest.
func (s *session) run(tb testing.TB, batch [][]int64) result {
	tb.Helper()
	seq := 0
	for _, ids := range batch {
		seq = max(seq, len(ids))
	}
	n := len(batch) * seq
	ids, mask, types := make([]int64, n), make([]int64, n), make([]int64, n)
	for i, item := range batch {
		for j, id := range item {
			ids[i*seq+j], mask[i*seq+j] = id, 1
		}
	}
	shape := ort.NewShape(int64(len(batch)), int64(seq))
	var inputs []ort.Value
	for _, data := range [][]int64{ids, mask, types} {
		t, err := ort.NewTensor(shape, data)
		if err != nil {
			tb.Fatal(err)
		}
		defer t.Destroy()
		inputs = append(inputs, t)
	}
	outs := make([]ort.Value, len(outputs(s.task)))
	if err := s.s.Run(inputs, outs); err != nil {
		tb.Fatalf("run batch of %d×%d: %v", len(batch), seq, err)
	}
	for _, o := range outs {
		defer o.Destroy()
	}
	var r result
	if s.task == FillMask {
		// onnxruntime_go copies outputs into Go memory: GetData outlives
		// Destroy.
		checkShape(tb, MaskPositions, outs[0].GetShape(), -1, 2)
		r.masks = int(outs[0].GetShape()[0])
		checkShape(tb, TopScores, outs[1].GetShape(), int64(r.masks), TopK)
		checkShape(tb, TopIDs, outs[2].GetShape(), int64(r.masks), TopK)
		r.positions = outs[0].(*ort.Tensor[int64]).GetData()
		r.scores = outs[1].(*ort.Tensor[float32]).GetData()
		r.ids = outs[2].(*ort.Tensor[int64]).GetData()
	} else {
		checkShape(tb, Embedding, outs[0].GetShape(), int64(len(batch)), -1)
		r.embedding = outs[0].(*ort.Tensor[float32]).GetData()
	}
	return r
}

// checkShape fails unless got is want; -1 in want matches any size.
func checkShape(tb testing.TB, name string, got ort.Shape, want ...int64) {
	tb.Helper()
	ok := len(got) == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = want[i] < 0 || got[i] == want[i]
	}
	if !ok {
		tb.Fatalf("%s has shape %v, want %v", name, got, want)
	}
}

// Token id sequences of bert-base-uncased, [CLS] … [SEP].
var (
	oneMask   = []int64{101, 7592, 103, 2088, 1012, 102}                   // hello [MASK] world .
	longer    = []int64{101, 3000, 2003, 1996, 103, 1997, 2605, 1012, 102} // paris is the [MASK] of france .
	twoMasks  = []int64{101, 103, 2003, 103, 102}                          // [MASK] is [MASK]
	noMask    = []int64{101, 7592, 2088, 1012, 102}                        // hello world .
	shortNone = []int64{101, 102}
)

// ensure generates a model into dir, or finds it there.
func ensure(tb testing.TB, dir string, a Arch, task Task) string {
	tb.Helper()
	path, err := Ensure(dir, Spec{Arch: a, Task: task})
	if err != nil {
		tb.Fatal(err)
	}
	return path
}

// ortArchs returns the architectures run in ONNX Runtime by every test run:
// micro (four heads), tiny and mini. The Go reference, slow for big
// vocabularies under the race detector, checks those up to tiny's size.
func ortArchs() []Arch {
	tiny, _ := Lookup("tiny")
	mini, _ := Lookup("mini")
	return []Arch{micro, tiny, mini}
}

// checkReference reports whether a is small enough to compare against the Go
// reference.
func checkReference(a Arch) bool { return a.Hidden <= 128 }

func TestORTFillMask(t *testing.T) {
	requireORT(t)
	dir := t.TempDir()
	for _, a := range ortArchs() {
		t.Run(a.Name, func(t *testing.T) {
			s := newSession(t, ensure(t, dir, a, FillMask), FillMask, 2)
			ref := newReference(a, DefaultSeed)
			tests := []struct {
				name          string
				batch         [][]int64
				wantPositions []int64
			}{
				{"two lengths", [][]int64{oneMask, longer}, []int64{0, 2, 1, 4}},
				{"padded first item", [][]int64{longer, oneMask}, []int64{0, 4, 1, 2}},
				{"several masks", [][]int64{twoMasks, oneMask}, []int64{0, 1, 0, 3, 1, 2}},
				{"no mask", [][]int64{noMask, shortNone}, []int64{}},
			}
			for _, tt := range tests {
				got := s.run(t, tt.batch)
				if !slices.Equal(got.positions, tt.wantPositions) {
					t.Fatalf("%s: mask_positions %v, want %v", tt.name, got.positions, tt.wantPositions)
				}
				for m := range got.masks {
					scores := got.scores[m*TopK : (m+1)*TopK]
					ids := got.ids[m*TopK : (m+1)*TopK]
					var sum float32
					for k, p := range scores {
						sum += p
						if p <= 0 || (k > 0 && p > scores[k-1]) || ids[k] < 0 || ids[k] >= int64(a.Vocab) {
							t.Fatalf("%s: mask %d: scores %v ids %v; want positive descending scores and ids in the vocabulary",
								tt.name, m, scores, ids)
						}
					}
					if sum > 1 {
						t.Errorf("%s: mask %d: scores sum to %g, want at most 1", tt.name, m, sum)
					}
				}
				// Each item alone, unpadded, and the Go reference agree with
				// its rows of the batch.
				row := 0
				for _, item := range tt.batch {
					alone := s.run(t, [][]int64{item})
					var wantIDs [][]int64
					var wantScores [][]float64
					if checkReference(a) {
						wantIDs, wantScores = ref.fillMask(item)
					}
					for m := range alone.masks {
						compareTop(t, tt.name+": batched vs alone", got.ids[row*TopK:(row+1)*TopK], got.scores[row*TopK:(row+1)*TopK],
							alone.ids[m*TopK:(m+1)*TopK], toFloat64(alone.scores[m*TopK:(m+1)*TopK]), 1e-4)
						if wantIDs != nil {
							compareTop(t, tt.name+": ONNX Runtime vs reference", alone.ids[m*TopK:(m+1)*TopK],
								alone.scores[m*TopK:(m+1)*TopK], wantIDs[m], wantScores[m], 1e-3)
						}
						row++
					}
				}
			}
		})
	}
}

// compareTop fails unless two top-k lists hold the same ids and scores
// within a relative tolerance (the probabilities of random weights are all
// near 1/vocabulary, so an absolute one would not test anything).
func compareTop(t *testing.T, what string, gotIDs []int64, gotScores []float32, wantIDs []int64, wantScores []float64, rel float64) {
	t.Helper()
	for k := range gotIDs {
		if gotIDs[k] != wantIDs[k] || math.Abs(float64(gotScores[k])-wantScores[k]) > rel*wantScores[k] {
			t.Fatalf("%s: top ids %v scores %v, want %v %v", what, gotIDs, gotScores, wantIDs, wantScores)
		}
	}
}

// length returns the Euclidean length of v.
func length(v []float32) float64 {
	var sum float64
	for _, x := range v {
		sum += float64(x) * float64(x)
	}
	return math.Sqrt(sum)
}

func toFloat64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, f := range v {
		out[i] = float64(f)
	}
	return out
}

func TestORTEmbed(t *testing.T) {
	requireORT(t)
	dir := t.TempDir()
	for _, a := range ortArchs() {
		t.Run(a.Name, func(t *testing.T) {
			h := a.Hidden
			s := newSession(t, ensure(t, dir, a, Embed), Embed, 2)
			ref := newReference(a, DefaultSeed)
			batch := [][]int64{oneMask, longer, noMask}
			got := s.run(t, batch)
			for i, item := range batch {
				vec := got.embedding[i*h : (i+1)*h]
				if l := length(vec); math.Abs(l-1) > 1e-5 {
					t.Errorf("item %d: embedding length %g, want 1", i, l)
				}
				alone := s.run(t, [][]int64{item}).embedding
				for j := range vec {
					if d := math.Abs(float64(vec[j] - alone[j])); d > 1e-4 {
						t.Fatalf("item %d: embedding[%d] = %g batched with padding, %g alone", i, j, vec[j], alone[j])
					}
				}
				if !checkReference(a) {
					continue
				}
				want := ref.embed(item)
				for j := range vec {
					if d := math.Abs(float64(alone[j]) - want[j]); d > 1e-4 {
						t.Fatalf("item %d: embedding[%d] = %g, reference %g", i, j, alone[j], want[j])
					}
				}
			}
		})
	}
}

// TestORTAllArchs loads every built-in architecture with both heads. BERT-base
// writes 440 MB per head, so it runs only with INFER_TEST_ALL_ARCHS=1.
func TestORTAllArchs(t *testing.T) {
	if os.Getenv("INFER_TEST_ALL_ARCHS") != "1" {
		t.Skip("set INFER_TEST_ALL_ARCHS=1 to generate and run all five architectures (about 1.5 GB of files)")
	}
	requireORT(t)
	for _, a := range Archs() {
		for _, task := range Tasks() {
			t.Run(a.Name+"/"+string(task), func(t *testing.T) {
				dir := t.TempDir() // removed after each model, to bound disk use
				path := ensure(t, dir, a, task)
				s := newSession(t, path, task, 2)
				got := s.run(t, [][]int64{oneMask, longer})
				switch task {
				case FillMask:
					if got.masks != 2 {
						t.Errorf("%d masks found, want 2", got.masks)
					}
				case Embed:
					for i := range 2 {
						if l := length(got.embedding[i*a.Hidden : (i+1)*a.Hidden]); math.Abs(l-1) > 1e-5 {
							t.Errorf("item %d: embedding length %g, want 1", i, l)
						}
					}
				}
			})
		}
	}
}

// BenchmarkORTFillMask measures ONNX Runtime on bert-mini fill-mask with two
// intra-op threads: batches of 16-token sequences with one [MASK] each.
func BenchmarkORTFillMask(b *testing.B) {
	requireORT(b)
	mini, _ := Lookup("mini")
	s := newSession(b, ensure(b, b.TempDir(), mini, FillMask), FillMask, 2)
	item := []int64{101, 1996, 3007, 1997, 2605, 2003, 103, 1012, 2009, 2003, 2036, 1037, 2312, 2103, 1012, 102}
	for _, n := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("batch=%d", n), func(b *testing.B) {
			batch := make([][]int64, n)
			for i := range batch {
				batch[i] = item
			}
			for b.Loop() {
				s.run(b, batch)
			}
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "items/s")
		})
	}
}
