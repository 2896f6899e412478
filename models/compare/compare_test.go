package compare

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// naiveTau is tau-b by its definition, O(n²).
func naiveTau(x, y []float64) float64 {
	var conc, disc, tx, ty float64
	n := len(x)
	for i := range n {
		for j := i + 1; j < n; j++ {
			dx, dy := x[i]-x[j], y[i]-y[j]
			switch {
			case dx == 0 && dy == 0:
			case dx == 0:
				tx++
			case dy == 0:
				ty++
			case dx*dy > 0:
				conc++
			default:
				disc++
			}
		}
	}
	den := math.Sqrt((conc + disc + tx) * (conc + disc + ty))
	if den == 0 {
		return 0
	}
	return (conc - disc) / den
}

func TestKendallTau(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		n := 2 + r.IntN(60)
		levels := 1 + r.IntN(8) // few levels: many ties
		if trial%2 == 0 {
			levels = 1 << 20
		}
		x, y := make([]float64, n), make([]float64, n)
		for i := range n {
			x[i] = float64(r.IntN(levels))
			y[i] = float64(r.IntN(levels))
			if trial%3 == 0 {
				y[i] = x[i] + float64(r.IntN(2)) // correlated
			}
		}
		got, want := KendallTau(x, y), naiveTau(x, y)
		if math.Abs(got-want) > 1e-12 {
			t.Fatalf("trial %d: KendallTau(%v, %v) = %v, want %v", trial, x, y, got, want)
		}
	}
	for _, c := range []struct {
		x, y []float64
		want float64
	}{
		{[]float64{1, 2, 3}, []float64{10, 20, 30}, 1},
		{[]float64{1, 2, 3}, []float64{3, 2, 1}, -1},
		{[]float64{1, 1, 1}, []float64{1, 2, 3}, 0},
		{[]float64{1}, []float64{1}, 0},
	} {
		if got := KendallTau(c.x, c.y); got != c.want {
			t.Errorf("KendallTau(%v, %v) = %v, want %v", c.x, c.y, got, c.want)
		}
	}
}

func randomVectors(r *rand.Rand, n, dim int) [][]float32 {
	vs := make([][]float32, n)
	for i := range vs {
		vs[i] = make([]float32, dim)
		for j := range vs[i] {
			vs[i][j] = float32(r.NormFloat64())
		}
	}
	return vs
}

func TestEmbeddings(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	a := randomVectors(r, 50, 16)

	// B = A scaled: the same directions.
	b := make([][]float32, len(a))
	for i := range a {
		b[i] = make([]float32, len(a[i]))
		for j, v := range a[i] {
			b[i][j] = 3 * v
		}
	}
	rep, err := Embeddings(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(rep.Cosine.Min-1) > 1e-9 || rep.KendallTau != 1 || rep.Swapped != 0 || rep.Neighbours != 1 || rep.Pairs != 50*49/2 {
		t.Errorf("Embeddings(A, 3A) = %+v, want cosines 1, tau 1, neighbours 1, 1225 pairs", rep)
	}

	// B = A plus noise: cosines below 1, the ranking partly kept.
	noisy := randomVectors(r, 50, 16)
	for i := range noisy {
		for j := range noisy[i] {
			noisy[i][j] = a[i][j] + 0.3*noisy[i][j]
		}
	}
	rep, err = Embeddings(a, noisy)
	if err != nil {
		t.Fatal(err)
	}
	if !(rep.Cosine.Min < rep.Cosine.P1+1e-12 && rep.Cosine.P1 <= rep.Cosine.Mean && rep.Cosine.Mean < 1 && rep.Cosine.Mean > 0.9) {
		t.Errorf("noisy cosines %+v: want min ≤ p1 ≤ mean in (0.9, 1)", rep.Cosine)
	}
	if !(rep.KendallTau > 0.5 && rep.KendallTau < 1) || math.Abs(rep.Swapped-(1-rep.KendallTau)/2) > 1e-12 {
		t.Errorf("noisy ranking: tau %v, swapped %v; want tau in (0.5, 1), swapped (1-tau)/2", rep.KendallTau, rep.Swapped)
	}

	// B unrelated to A: the ranking is lost.
	rep, err = Embeddings(a, randomVectors(r, 50, 16))
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(rep.KendallTau) > 0.1 {
		t.Errorf("unrelated vectors: tau %v, want about 0", rep.KendallTau)
	}

	for _, bad := range [][2][][]float32{
		{nil, nil},
		{a, a[:10]},
		{{{1, 2}}, {{1, 2, 3}}},
		{{{1, 2}, {1}}, {{1, 2}, {1}}},
	} {
		if _, err := Embeddings(bad[0], bad[1]); err == nil {
			t.Errorf("Embeddings(%d vectors, %d vectors) of mismatched shapes: no error", len(bad[0]), len(bad[1]))
		}
	}
}

func TestNearest(t *testing.T) {
	// Items 0 and 2 are alike; 1 is apart.
	vs := [][]float32{{1, 0}, {0, 1}, {0.9, 0.1}}
	sim := similarities(vs)
	for i, want := range []int{2, 2, 0} {
		if got := nearest(sim, 3, i); got != want {
			t.Errorf("nearest(%d) = %d, want %d", i, got, want)
		}
	}
}

func TestFillMask(t *testing.T) {
	a := [][]int64{{1, 2, 3, 4, 5}, {7, 8, 9, 10, 11}, {1, 2}}
	b := [][]int64{{1, 3, 2, 9, 9}, {8, 7, 9, 10, 11}, {2, 1}}
	rep, err := FillMask(a, b)
	if err != nil {
		t.Fatal(err)
	}
	want := FillMaskReport{Masks: 3, Top1: 1.0 / 3, Top5: (3.0/5 + 5.0/5 + 1) / 3}
	if math.Abs(rep.Top1-want.Top1) > 1e-12 || math.Abs(rep.Top5-want.Top5) > 1e-12 || rep.Masks != 3 {
		t.Errorf("FillMask = %+v, want %+v", rep, want)
	}
	if _, err := FillMask(a, b[:2]); err == nil {
		t.Error("FillMask of 3 and 2 masks: no error")
	}
	if _, err := FillMask([][]int64{{}}, [][]int64{{1}}); err == nil {
		t.Error("FillMask of a mask without candidates: no error")
	}
}

func TestLogProb(t *testing.T) {
	logits := []float32{1, 2, 3, 1000}
	var sum float64
	for _, v := range logits[:3] {
		sum += math.Exp(float64(v))
	}
	if got, want := LogProb(logits[:3], 1), 2-math.Log(sum); math.Abs(got-want) > 1e-12 {
		t.Errorf("LogProb = %v, want %v", got, want)
	}
	// Large logits do not overflow.
	if got := LogProb(logits, 3); math.Abs(got) > 1e-12 {
		t.Errorf("LogProb of a dominant logit = %v, want 0", got)
	}
	if got := Argmax([]float32{1, 5, 5, 2}); got != 1 {
		t.Errorf("Argmax with a tie = %d, want the first, 1", got)
	}
}

func TestDecoding(t *testing.T) {
	var d Decoding
	steps := []struct {
		a, b []float32
		next int32
	}{
		{[]float32{0, 1, 0}, []float32{0, 2, 0}, 1}, // agree
		{[]float32{3, 1, 0}, []float32{0, 1, 3}, 0}, // disagree
		{[]float32{0, 0, 5}, []float32{0, 0, 4}, 2}, // agree
		{[]float32{1, 1, 1}, []float32{1, 1, 1}, 0}, // ties: both the first
	}
	var lpA, lpB float64
	for _, s := range steps {
		if err := d.Add(s.a, s.b, s.next); err != nil {
			t.Fatal(err)
		}
		lpA += LogProb(s.a, s.next)
		lpB += LogProb(s.b, s.next)
	}
	d.Run(3, 10)
	d.Run(10, 10)
	rep := d.Report()
	if rep.Positions != 4 || rep.Top1 != 0.75 || math.Abs(rep.LogProbA-lpA/4) > 1e-12 || math.Abs(rep.LogProbB-lpB/4) > 1e-12 {
		t.Errorf("Report = %+v, want 4 positions, top-1 0.75, log-probs %v and %v", rep, lpA/4, lpB/4)
	}
	if rep.Runs != 2 || rep.Full != 1 || rep.Diverge.Min != 3 || rep.Diverge.Mean != 6.5 {
		t.Errorf("Report runs = %d, full %d, diverge %+v; want 2, 1, min 3 mean 6.5", rep.Runs, rep.Full, rep.Diverge)
	}
	for _, bad := range []struct {
		a, b []float32
		next int32
	}{
		{[]float32{1, 2}, []float32{1, 2, 3}, 0},
		{[]float32{1, 2}, []float32{1, 2}, 2},
		{[]float32{1, 2}, []float32{1, 2}, -1},
		{nil, nil, 0},
	} {
		if err := d.Add(bad.a, bad.b, bad.next); !errors.Is(err, ErrVocab) {
			t.Errorf("Add(%d, %d logits, next %d) = %v, want ErrVocab", len(bad.a), len(bad.b), bad.next, err)
		}
	}
	if (&Decoding{}).Report() != (DecodingReport{}) {
		t.Error("an empty Decoding reports something")
	}
}

func TestSummarize(t *testing.T) {
	v := make([]float64, 200)
	for i := range v {
		v[i] = float64(200 - i) // 200 … 1
	}
	s := summarize(v)
	if s.Min != 1 || s.P1 != 2 || s.Mean != 100.5 {
		t.Errorf("summarize(1..200) = %+v, want min 1, p1 2, mean 100.5", s)
	}
}
