package bert

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"testing"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/onnx"
	"github.com/inferhq/infer/models/wordpiece"
)

// The generated models are checked by running them in the real ONNX
// Runtime, through models/onnx as the server runs them. Locally the tests
// skip when the library is absent; in CI (INFER_REQUIRE_ORT=1) they fail
// instead.

// session is an instance of a generated model.
type session struct {
	m    models.Model
	task Task
}

// newSession loads the model at path, or skips the test when the ONNX
// Runtime cannot be found (see onnx.FindLibrary).
func newSession(tb testing.TB, path string, task Task, threads int) *session {
	tb.Helper()
	f, err := onnx.New(onnx.Config{Path: path, Tokenizer: wordpiece.BertBaseUncased(), Runtime: onnx.Runtime{Threads: threads}})
	if errors.Is(err, onnx.ErrNoRuntime) && os.Getenv("INFER_REQUIRE_ORT") != "1" {
		tb.Skipf("no ONNX Runtime (run scripts/setup-ort.sh): %v", err)
	}
	if err != nil {
		tb.Fatalf("load %s in ONNX Runtime: %v", path, err)
	}
	tb.Cleanup(func() { f.Close() })
	if got := f.Task(); got != string(task) {
		tb.Fatalf("%s serves as %s, want %s", path, got, task)
	}
	m, err := f.New(context.Background(), 0)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { m.Close() })
	return &session{m: m, task: task}
}

// result is a model's output for a batch, in the layout of the graph's
// outputs.
type result struct {
	positions []int64   // FillMask: [masks, 2]
	scores    []float32 // FillMask: [masks, TopK]
	ids       []int64   // FillMask: [masks, TopK]
	masks     int
	embedding []float32 // Embed: [batch, hidden]
}

// run runs a batch of token id sequences, which the instance pads with id 0
// to the longest.
func (s *session) run(tb testing.TB, batch [][]int64) result {
	tb.Helper()
	in := make([]models.Input, len(batch))
	for i, ids := range batch {
		in[i].Tokens = make([]int32, len(ids))
		for j, id := range ids {
			in[i].Tokens[j] = int32(id)
		}
	}
	out := make([]models.Output, len(batch))
	if err := s.m.Predict(context.Background(), in, out); err != nil {
		tb.Fatalf("run batch of %d: %v", len(batch), err)
	}
	var r result
	r.positions = []int64{}
	for i, o := range out {
		switch v := o.(type) {
		case *onnx.FillMask:
			for _, m := range v.Masks {
				if len(m.Candidates) != TopK {
					tb.Fatalf("item %d, mask at %d: %d candidates, want %d", i, m.Position, len(m.Candidates), TopK)
				}
				r.positions = append(r.positions, int64(i), int64(m.Position))
				for _, c := range m.Candidates {
					r.ids, r.scores = append(r.ids, c.ID), append(r.scores, c.Score)
				}
				r.masks++
			}
		case []float32:
			r.embedding = append(r.embedding, v...)
		default:
			tb.Fatalf("item %d: output %T", i, o)
		}
	}
	return r
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
