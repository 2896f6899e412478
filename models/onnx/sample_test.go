package onnx

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/inferhq/infer/models"
)

func randomLogits(r *rand.Rand, n int, scale float64) []float32 {
	l := make([]float32, n)
	for i := range l {
		l[i] = float32(r.NormFloat64() * scale)
	}
	return l
}

func TestArgmax(t *testing.T) {
	for _, tc := range []struct {
		logits []float32
		want   int32
	}{
		{[]float32{0, 3, 1}, 1},
		{[]float32{2, 2, 1}, 0}, // ties: the lower id
		{[]float32{-5, -1, -1}, 1},
		{[]float32{7}, 0},
	} {
		var s sampler
		if got := s.draw(tc.logits, models.Sampling{}, 0); got != tc.want {
			t.Errorf("draw(%v, greedy) = %d, want %d", tc.logits, got, tc.want)
		}
	}
}

// TestArgmaxChains checks the chained scan against one plain scan: every
// length around the chains' width, the largest value at each index and in
// several places (of either sign of zero), NaNs first, in the middle and
// alone.
func TestArgmaxChains(t *testing.T) {
	plain := func(l []float32) int32 {
		best := 0
		for i, v := range l {
			if v > l[best] {
				best = i
			}
		}
		return int32(best)
	}
	check := func(l []float32) {
		t.Helper()
		if got, want := argmax(l), plain(l); got != want {
			t.Errorf("argmax(%v) = %d, want %d", l, got, want)
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	nan, negZero := float32(math.NaN()), float32(math.Copysign(0, -1))
	for n := 1; n <= 40; n++ {
		for top := range n {
			l := make([]float32, n)
			for i := range l {
				l[i] = -1 - float32(r.IntN(3))
			}
			l[top] = 5
			check(l)
			l[r.IntN(n)] = 5 // a tie, before or after
			check(l)
			l[r.IntN(n)] = nan
			check(l)
			clear(l) // all zeros, some negative
			l[r.IntN(n)], l[top] = negZero, negZero
			check(l)
			l[0] = nan
			check(l)
		}
	}
	for range 20 {
		l := randomLogits(r, 50257, 3)
		check(l)
		l[r.IntN(len(l))] = 100
		l[r.IntN(len(l))] = 100
		check(l)
	}
	check([]float32{nan})
	check([]float32{nan, nan, 1})
}

func TestExpNeg(t *testing.T) {
	for x := 0.0; x > -700; x -= 0.0137 {
		want := math.Exp(x)
		if got := expNeg(x); math.Abs(got-want) > 1e-8*want {
			t.Fatalf("expNeg(%g) = %g, want %g", x, got, want)
		}
	}
	if got := expNeg(-2000); got != 0 {
		t.Errorf("expNeg(-2000) = %g, want 0", got)
	}
}

func TestUniform(t *testing.T) {
	seen := map[float64]bool{}
	var sum float64
	const n = 10000
	for p := range n {
		u := uniform(42, p)
		if u < 0 || u >= 1 {
			t.Fatalf("uniform(42, %d) = %g, want [0, 1)", p, u)
		}
		if seen[u] {
			t.Fatalf("uniform(42, %d) = %g repeats an earlier position's draw", p, u)
		}
		seen[u] = true
		sum += u
	}
	if mean := sum / n; math.Abs(mean-0.5) > 0.01 {
		t.Errorf("mean of %d draws = %g, want 0.5", n, mean)
	}
	if uniform(1, 7) == uniform(2, 7) {
		t.Error("seeds 1 and 2 draw the same number at position 7")
	}
}

// nucleusRef is the nucleus by its definition: sort by probability, keep the
// smallest prefix reaching topP.
func nucleusRef(logits []float32, temp, topP float64) map[int32]bool {
	idx := make([]int32, len(logits))
	for i := range idx {
		idx[i] = int32(i)
	}
	slices.SortStableFunc(idx, func(a, b int32) int {
		switch {
		case logits[a] > logits[b]:
			return -1
		case logits[a] < logits[b]:
			return 1
		}
		return 0
	})
	top := float64(logits[idx[0]])
	var total float64
	for _, v := range logits {
		total += math.Exp((float64(v) - top) / temp)
	}
	keep := map[int32]bool{}
	var cum float64
	for _, i := range idx {
		keep[i] = true
		if cum += math.Exp((float64(logits[i])-top)/temp) / total; cum >= topP {
			break
		}
	}
	return keep
}

func TestNucleus(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var s sampler
	for trial := range 16 {
		n := []int{2, 10, 1000, 50257}[trial%4]
		logits := randomLogits(r, n, []float64{0.3, 2, 8}[trial%3])
		temp := []float64{0.5, 1, 1.7}[trial%3]
		topP := []float64{0.05, 0.5, 0.9, 0.99}[trial%4]
		keep := nucleusRef(logits, temp, topP)
		p := models.Sampling{Temperature: float32(temp), TopP: float32(topP), Seed: uint64(trial)}
		drawn := map[int32]bool{}
		draws := 300
		if n > 1000 {
			draws = 10 // a full vocabulary costs milliseconds a draw under the race detector
		}
		for pos := range draws {
			tok := s.draw(logits, p, pos)
			if !keep[tok] {
				t.Fatalf("trial %d (%d tokens, T=%g, top-p %g): drew %d outside the nucleus of %d tokens",
					trial, n, temp, topP, tok, len(keep))
			}
			drawn[tok] = true
			if again := s.draw(logits, p, pos); again != tok {
				t.Fatalf("trial %d: position %d drew %d, then %d", trial, pos, tok, again)
			}
		}
		if len(keep) >= 5 && len(drawn) < 3 {
			t.Errorf("trial %d: %d draws from a nucleus of %d tokens gave only %d distinct", trial, draws, len(keep), len(drawn))
		}
	}
}

// TestSampleDistribution checks that draws follow the softmax of
// logits/temperature, and its nucleus renormalised.
func TestSampleDistribution(t *testing.T) {
	logits := []float32{2, 1, 0.5, 0, -1, -3}
	const draws = 60000
	for _, tc := range []struct {
		temp, topP float64
	}{{1, 0}, {0.7, 1}, {2, 0}, {1, 0.8}} {
		var s sampler
		counts := make([]int, len(logits))
		p := models.Sampling{Temperature: float32(tc.temp), TopP: float32(tc.topP), Seed: 9}
		for pos := range draws {
			counts[s.draw(logits, p, pos)]++
		}
		keep := map[int32]bool{}
		for i := range logits {
			keep[int32(i)] = true
		}
		if tc.topP > 0 && tc.topP < 1 {
			keep = nucleusRef(logits, tc.temp, tc.topP)
		}
		var z float64
		for i, v := range logits {
			if keep[int32(i)] {
				z += math.Exp(float64(v) / tc.temp)
			}
		}
		for i, v := range logits {
			want := 0.0
			if keep[int32(i)] {
				want = math.Exp(float64(v)/tc.temp) / z
			}
			got := float64(counts[i]) / draws
			// Four standard deviations of a binomial proportion.
			if tol := 4*math.Sqrt(want*(1-want)/draws) + 1e-9; math.Abs(got-want) > tol {
				t.Errorf("T=%g top-p %g: token %d drawn %.4f of the time, want %.4f ± %.4f", tc.temp, tc.topP, i, got, want, tol)
			}
		}
	}
}

func BenchmarkSample(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	logits := randomLogits(r, 50257, 3)
	for _, tc := range []struct {
		name string
		p    models.Sampling
	}{
		{"greedy", models.Sampling{}},
		{"temperature", models.Sampling{Temperature: 0.8}},
		{"top-p", models.Sampling{Temperature: 0.8, TopP: 0.9}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var s sampler
			for i := 0; b.Loop(); i++ {
				s.draw(logits, tc.p, i)
			}
		})
	}
}
