package onnx

import (
	"cmp"
	"math"
	"slices"

	"github.com/inferhq/infer/models"
)

// Nucleus (top-p) sampling needs the most likely tokens in order, but sorting
// a 50,257-token vocabulary costs milliseconds per token. So tokens are first
// put in buckets by log-probability, bucketsPerNat buckets per unit of
// log-probability below the most likely token (the last bucket holds
// everything further down), and only the bucket where the cumulative
// probability crosses TopP is sorted.
const (
	bucketsPerNat = 16
	buckets       = 64 * bucketsPerNat
)

// sampler draws tokens from logits. Its scratch space is reused from token to
// token, so a sampler must not be used by two goroutines at once.
type sampler struct {
	weights []float64 // exp((logit - max)/temperature), by token
	bucket  []uint16  // each token's bucket (top-p only)
	mass    [buckets]float64
	edge    []int32 // tokens of the bucket that crosses TopP
}

// uniform returns the random number in [0, 1) of position pos of a sequence
// sampled with seed: a hash of the two (SplitMix64's finaliser), so that the
// draw depends on nothing else (not on the other sequences of a step, nor on
// the draws before it).
func uniform(seed uint64, pos int) float64 {
	x := seed ^ mix64(uint64(pos)+0x9e3779b97f4a7c15)
	return float64(mix64(x)>>11) / (1 << 53)
}

func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// expNeg returns e^x for x ≤ 0, within a relative 1e-8 of math.Exp at a
// fraction of its cost (a draw computes one per token of the vocabulary):
// e^x = 2^k · 2^f with k = round(x·log₂e) and |f| ≤ ½, 2^f = e^(f·ln 2) by
// its Taylor series to degree 8.
func expNeg(x float64) float64 {
	y := x * math.Log2E
	if y < -1020 {
		return 0
	}
	k := math.Floor(y + 0.5)
	g := (y - k) * math.Ln2 // |g| ≤ ln2/2
	p := 1 + g*(1+g*(1.0/2+g*(1.0/6+g*(1.0/24+g*(1.0/120+g*(1.0/720+g*(1.0/5040+g*(1.0/40320))))))))
	return p * math.Float64frombits(uint64(int64(k)+1023)<<52)
}

// argmax returns the first index of the largest logit (0 when the first is
// NaN; later NaNs are passed over). A greedy draw scans the whole vocabulary
// for every row of every step (32 rows of GPT-2's 50,257 logits are 1.6
// million floats a step, about a tenth of gpt2-tiny's decode step with a
// single scan), so the scan runs eight independent chains, each comparing
// with its own best: twice as fast as one chain comparing every logit with
// the best so far (BenchmarkSample/greedy: 40 against 81 µs a row on the
// 2-core dev VM).
func argmax(logits []float32) int32 {
	if len(logits) == 0 {
		return 0
	}
	// Chain j holds the largest of logits[j], logits[j+8], … (and the
	// first logit) and where it first is.
	m0 := logits[0]
	m1, m2, m3, m4, m5, m6, m7 := m0, m0, m0, m0, m0, m0, m0
	var k0, k1, k2, k3, k4, k5, k6, k7 int
	i := 0
	for ; i+8 <= len(logits); i += 8 {
		v := logits[i : i+8 : i+8]
		if v[0] > m0 {
			m0, k0 = v[0], i
		}
		if v[1] > m1 {
			m1, k1 = v[1], i+1
		}
		if v[2] > m2 {
			m2, k2 = v[2], i+2
		}
		if v[3] > m3 {
			m3, k3 = v[3], i+3
		}
		if v[4] > m4 {
			m4, k4 = v[4], i+4
		}
		if v[5] > m5 {
			m5, k5 = v[5], i+5
		}
		if v[6] > m6 {
			m6, k6 = v[6], i+6
		}
		if v[7] > m7 {
			m7, k7 = v[7], i+7
		}
	}
	for ; i < len(logits); i++ {
		if logits[i] > m0 {
			m0, k0 = logits[i], i
		}
	}
	m := [...]float32{m0, m1, m2, m3, m4, m5, m6, m7}
	at := [...]int{k0, k1, k2, k3, k4, k5, k6, k7}
	// The largest of the chains', at its first index.
	best := 0
	for j := 1; j < len(m); j++ {
		if m[j] > m[best] || (m[j] == m[best] && at[j] < at[best]) {
			best = j
		}
	}
	return int32(at[best])
}

// draw returns the token at position pos of a sequence, drawn from logits as
// p says: the argmax at temperature 0; else from the softmax of
// logits/temperature, restricted to the nucleus of probability TopP when
// TopP is in (0, 1), with the random number uniform(p.Seed, pos).
func (s *sampler) draw(logits []float32, p models.Sampling, pos int) int32 {
	if p.Temperature <= 0 {
		return argmax(logits)
	}
	top := logits[argmax(logits)]
	inv := 1 / float64(p.Temperature)
	if len(s.weights) < len(logits) {
		s.weights = make([]float64, len(logits))
	}
	w := s.weights[:len(logits)]
	var total float64
	for i, v := range logits {
		w[i] = expNeg(float64(v-top) * inv)
		total += w[i]
	}
	u := uniform(p.Seed, pos)
	if p.TopP <= 0 || p.TopP >= 1 {
		target := u * total
		var c float64
		for i, x := range w {
			if c += x; c > target {
				return int32(i)
			}
		}
		return argmax(logits) // u·total rounded up to total
	}
	return s.nucleus(logits, top, inv, float64(p.TopP)*total, u)
}

// nucleus draws from the smallest set of most likely tokens whose weight
// reaches need (TopP times the total weight), with s.weights filled by draw.
// Ties at the set's edge are broken by the lower token id.
func (s *sampler) nucleus(logits []float32, top float32, inv, need, u float64) int32 {
	w := s.weights[:len(logits)]
	if len(s.bucket) < len(logits) {
		s.bucket = make([]uint16, len(logits))
	}
	clear(s.mass[:])
	for i, v := range logits {
		b := min(int(float64(top-v)*inv*bucketsPerNat), buckets-1)
		s.bucket[i] = uint16(b)
		s.mass[b] += w[i]
	}
	// The buckets before edge are wholly in the nucleus; edge holds its
	// last tokens, taken in order of weight.
	var mass float64
	edge := 0
	for ; edge < buckets-1 && mass+s.mass[edge] < need; edge++ {
		mass += s.mass[edge]
	}
	s.edge = s.edge[:0]
	for i := range logits {
		if int(s.bucket[i]) == edge {
			s.edge = append(s.edge, int32(i))
		}
	}
	slices.SortFunc(s.edge, func(a, b int32) int {
		return cmp.Or(cmp.Compare(w[b], w[a]), cmp.Compare(a, b))
	})
	n := 0
	for n < len(s.edge) && (n == 0 || mass < need) {
		mass += w[s.edge[n]]
		n++
	}
	// Draw over the nucleus: the whole buckets in index order, then the
	// edge's tokens.
	target := u * mass
	var c float64
	for i, x := range w {
		if int(s.bucket[i]) < edge {
			if c += x; c > target {
				return int32(i)
			}
		}
	}
	for _, i := range s.edge[:n] {
		if c += w[i]; c > target {
			return i
		}
	}
	return argmax(logits) // u·mass rounded up to mass
}
