// Package compare measures how closely one model's outputs follow
// another's for the same inputs: a quantised model against its original,
// or any two models of one task. It holds pure functions over outputs
// already computed (vectors, fill-mask candidates, logits), so it needs no
// runtime and tests run anywhere; the command infer models compare feeds it.
//
// Embeddings are compared by the cosine of the two models' vectors for each
// item and by whether item pairs ranked by similarity keep their order;
// fill-mask heads by top-1 agreement and top-5 overlap; decoders by top-1
// agreement under teacher forcing, the length of a greedy run before the
// two first disagree, and the mean log-probability each gives the text.
package compare

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// Summary describes a set of values: their mean, first percentile and
// minimum.
type Summary struct {
	Mean float64 `json:"mean"`
	P1   float64 `json:"p1"`
	Min  float64 `json:"min"`
}

// summarize returns the Summary of v, which must not be empty.
func summarize(v []float64) Summary {
	s := slices.Clone(v)
	slices.Sort(s)
	var sum float64
	for _, x := range s {
		sum += x
	}
	// The first percentile by the nearest-rank method.
	rank := int(math.Ceil(0.01*float64(len(s)))) - 1
	return Summary{Mean: sum / float64(len(s)), P1: s[max(rank, 0)], Min: s[0]}
}

// Cosine returns the cosine similarity of a and b, which have the same
// length; 0 when either is all zeros.
func Cosine(a, b []float32) float64 {
	var dot, na, nb float64
	for i := range a {
		x, y := float64(a[i]), float64(b[i])
		dot += x * y
		na += x * x
		nb += y * y
	}
	if na == 0 || nb == 0 {
		return 0
	}
	return dot / math.Sqrt(na*nb)
}

// EmbeddingReport compares two models' vectors for the same items.
type EmbeddingReport struct {
	Items int `json:"items"`
	// Cosine is of A's and B's vectors for the same item.
	Cosine Summary `json:"cosine"`
	// Pairs is the number of item pairs ranked by similarity: every pair
	// of the first MaxRankItems items.
	Pairs int `json:"pairs"`
	// KendallTau is the rank correlation (tau-b) of the pairs' similarities
	// under A and under B: 1 when B ranks every pair as A does.
	KendallTau float64 `json:"kendall_tau"`
	// Swapped is the fraction of pairs of pairs that B orders the other
	// way round from A, (1 - tau)/2 without ties.
	Swapped float64 `json:"swapped"`
	// Neighbours is the fraction of items whose most similar other item
	// is the same under A and B.
	Neighbours float64 `json:"neighbours"`
}

// MaxRankItems bounds the items whose pairs Embeddings ranks: n items make
// n(n-1)/2 pairs (499,500 for 1,000).
const MaxRankItems = 1000

// Embeddings compares A's vectors a[i] with B's b[i] for the same items.
// Vectors of one model have one width; the two widths must match.
func Embeddings(a, b [][]float32) (EmbeddingReport, error) {
	if len(a) != len(b) || len(a) == 0 {
		return EmbeddingReport{}, fmt.Errorf("%d vectors of A and %d of B: want the same number, at least one", len(a), len(b))
	}
	for i := range a {
		if len(a[i]) != len(b[i]) || len(a[i]) != len(a[0]) {
			return EmbeddingReport{}, fmt.Errorf("item %d: A's vector has %d dimensions and B's %d; want %d for both", i, len(a[i]), len(b[i]), len(a[0]))
		}
	}
	r := EmbeddingReport{Items: len(a)}
	cos := make([]float64, len(a))
	for i := range a {
		cos[i] = Cosine(a[i], b[i])
	}
	r.Cosine = summarize(cos)

	n := min(len(a), MaxRankItems)
	if n < 2 {
		r.KendallTau, r.Neighbours = 1, 1
		return r, nil
	}
	simA, simB := similarities(a[:n]), similarities(b[:n])
	r.Pairs = len(simA)
	r.KendallTau = KendallTau(simA, simB)
	r.Swapped = (1 - r.KendallTau) / 2
	same := 0
	for i := range n {
		if nearest(simA, n, i) == nearest(simB, n, i) {
			same++
		}
	}
	r.Neighbours = float64(same) / float64(n)
	return r, nil
}

// similarities returns the cosine of every pair i < j of vs, in the order
// (0,1), (0,2), …, (1,2), ….
func similarities(vs [][]float32) []float64 {
	n := len(vs)
	s := make([]float64, 0, n*(n-1)/2)
	for i := range n {
		for j := i + 1; j < n; j++ {
			s = append(s, Cosine(vs[i], vs[j]))
		}
	}
	return s
}

// pairIndex returns the index of pair (i, j), i < j, of n items in the
// order of similarities.
func pairIndex(n, i, j int) int { return i*(2*n-i-1)/2 + j - i - 1 }

// nearest returns the item most similar to item i (the first on ties).
func nearest(sim []float64, n, i int) int {
	best, at := math.Inf(-1), -1
	for j := range n {
		if j == i {
			continue
		}
		p := pairIndex(n, min(i, j), max(i, j))
		if sim[p] > best {
			best, at = sim[p], j
		}
	}
	return at
}

// KendallTau returns Kendall's tau-b rank correlation of x and y, which
// have the same length: 1 when they order every pair alike, -1 when
// opposite. Ties count as tau-b counts them; with fewer than two distinct
// values in x or y it is 0. It takes O(n log n) time (Knight's algorithm).
func KendallTau(x, y []float64) float64 {
	n := len(x)
	if n < 2 || len(y) != n {
		return 0
	}
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(i, j int) int {
		if c := cmpFloat(x[i], x[j]); c != 0 {
			return c
		}
		return cmpFloat(y[i], y[j])
	})
	// Ties in x, and joint ties in x and y.
	tiesX, tiesXY := 0.0, 0.0
	for i := 0; i < n; {
		j := i
		for j < n && x[idx[j]] == x[idx[i]] {
			j++
		}
		tiesX += pairs(j - i)
		for k := i; k < j; {
			l := k
			for l < j && y[idx[l]] == y[idx[k]] {
				l++
			}
			tiesXY += pairs(l - k)
			k = l
		}
		i = j
	}
	// Sorting y in x's order by merge sort counts the discordant pairs as
	// the swaps it makes.
	ys := make([]float64, n)
	for i, k := range idx {
		ys[i] = y[k]
	}
	swaps := mergeCount(ys, make([]float64, n))
	tiesY := 0.0
	for i := 0; i < n; {
		j := i
		for j < n && ys[j] == ys[i] {
			j++
		}
		tiesY += pairs(j - i)
		i = j
	}
	total := pairs(n)
	den := math.Sqrt((total - tiesX) * (total - tiesY))
	if den == 0 {
		return 0
	}
	return (total - tiesX - tiesY + tiesXY - 2*swaps) / den
}

func pairs(k int) float64 { return float64(k) * float64(k-1) / 2 }

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// mergeCount sorts v ascending and returns the number of pairs it had out
// of order (strictly greater before smaller); tmp has v's length.
func mergeCount(v, tmp []float64) float64 {
	n := len(v)
	if n < 2 {
		return 0
	}
	mid := n / 2
	swaps := mergeCount(v[:mid], tmp[:mid]) + mergeCount(v[mid:], tmp[mid:])
	i, j, k := 0, mid, 0
	for i < mid && j < n {
		if v[j] < v[i] {
			tmp[k] = v[j]
			swaps += float64(mid - i)
			j++
		} else {
			tmp[k] = v[i]
			i++
		}
		k++
	}
	k += copy(tmp[k:], v[i:mid])
	copy(tmp[k:], v[j:n])
	copy(v, tmp[:n])
	return swaps
}

// FillMaskReport compares two fill-mask models' candidates for the same
// masks.
type FillMaskReport struct {
	Masks int `json:"masks"`
	// Top1 is the fraction of masks whose best candidate is the same.
	Top1 float64 `json:"top1"`
	// Top5 is the mean share of A's first five candidates that are among
	// B's first five.
	Top5 float64 `json:"top5_overlap"`
}

// FillMask compares A's candidates a[i] with B's b[i] for mask i: token
// ids, most likely first.
func FillMask(a, b [][]int64) (FillMaskReport, error) {
	if len(a) != len(b) || len(a) == 0 {
		return FillMaskReport{}, fmt.Errorf("%d masks of A and %d of B: want the same number, at least one", len(a), len(b))
	}
	r := FillMaskReport{Masks: len(a)}
	var top1, overlap float64
	for i := range a {
		if len(a[i]) == 0 || len(b[i]) == 0 {
			return FillMaskReport{}, fmt.Errorf("mask %d has no candidates", i)
		}
		if a[i][0] == b[i][0] {
			top1++
		}
		k := min(5, len(a[i]), len(b[i]))
		common := 0
		for _, id := range a[i][:k] {
			if slices.Contains(b[i][:k], id) {
				common++
			}
		}
		overlap += float64(common) / float64(k)
	}
	r.Top1 = top1 / float64(len(a))
	r.Top5 = overlap / float64(len(a))
	return r, nil
}

// Decoding compares two decoders position by position along a text fed to
// both (teacher forcing). The zero value is ready to use.
type Decoding struct {
	positions, agree int
	logProbA         float64
	logProbB         float64
	runs             []int
	full             int
}

// DecodingReport is what Decoding found.
type DecodingReport struct {
	// Positions is the number of positions compared.
	Positions int `json:"positions"`
	// Top1 is the fraction of positions where A's and B's most likely next
	// token is the same.
	Top1 float64 `json:"top1"`
	// LogProbA and LogProbB are the mean natural log-probability each model
	// gives the text's next token.
	LogProbA float64 `json:"logprob_a"`
	LogProbB float64 `json:"logprob_b"`
	// Runs is the number of greedy runs; Diverge summarises their lengths
	// (tokens) before A and B first chose differently, and Full is the number
	// that never did.
	Runs    int     `json:"runs"`
	Diverge Summary `json:"diverge"`
	Full    int     `json:"full"`
}

// ErrVocab means two logit vectors of different lengths, or a token outside
// them.
var ErrVocab = errors.New("logits of different vocabularies")

// Add compares A's logits a and B's logits b at one position, where the
// text's next token is next.
func (d *Decoding) Add(a, b []float32, next int32) error {
	if len(a) != len(b) || len(a) == 0 || next < 0 || int(next) >= len(a) {
		return fmt.Errorf("%w: %d and %d logits, next token %d", ErrVocab, len(a), len(b), next)
	}
	d.positions++
	if Argmax(a) == Argmax(b) {
		d.agree++
	}
	d.logProbA += LogProb(a, next)
	d.logProbB += LogProb(b, next)
	return nil
}

// Run records a greedy run of length tokens, of which the first diverged
// were chosen alike by A and B (diverged == length: they never differed).
func (d *Decoding) Run(diverged, length int) {
	d.runs = append(d.runs, diverged)
	if diverged >= length {
		d.full++
	}
}

// Report returns what was compared so far.
func (d *Decoding) Report() DecodingReport {
	r := DecodingReport{Positions: d.positions, Runs: len(d.runs), Full: d.full}
	if d.positions > 0 {
		n := float64(d.positions)
		r.Top1, r.LogProbA, r.LogProbB = float64(d.agree)/n, d.logProbA/n, d.logProbB/n
	}
	if len(d.runs) > 0 {
		v := make([]float64, len(d.runs))
		for i, k := range d.runs {
			v[i] = float64(k)
		}
		r.Diverge = summarize(v)
	}
	return r
}

// Argmax returns the index of the largest logit, the first on ties: the
// greedy choice.
func Argmax(logits []float32) int32 {
	best := 0
	for i, v := range logits {
		if v > logits[best] {
			best = i
		}
	}
	return int32(best)
}

// LogProb returns the natural log of the softmax probability of token in
// logits.
func LogProb(logits []float32, token int32) float64 {
	m := float64(logits[Argmax(logits)])
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v) - m)
	}
	return float64(logits[token]) - m - math.Log(sum)
}
