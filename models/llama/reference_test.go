package llama

import (
	"math"
	"testing"
)

// reference is a plain Go implementation of llama2.c's forward pass (run.c:
// one token at a time, with a KV cache), written from the model's
// definition rather than from the graph, in float64, for checking that the
// generated graph computes it.
type reference struct {
	c Arch
	// By llama2.c's names, each matrix row-major [out, in]; per-layer
	// arrays indexed by layer.
	embed, rmsFinal, wcls                      []float64
	rmsAtt, wq, wk, wv, wo, rmsFFN, w1, w2, w3 [][]float64
}

func loadReference(t testing.TB, ck *Checkpoint) *reference {
	t.Helper()
	lay := ck.layout()
	one := func(tn tensor, l int) []float64 {
		v, err := ck.read(tn, l)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]float64, len(v))
		for i, x := range v {
			out[i] = float64(x)
		}
		return out
	}
	layers := func(tn tensor) [][]float64 {
		out := make([][]float64, ck.Layers)
		for l := range out {
			out[l] = one(tn, l)
		}
		return out
	}
	return &reference{
		c: ck.Arch, embed: one(lay.tokenEmbedding, 0), rmsFinal: one(lay.rmsFinal, 0), wcls: one(lay.wcls, 0),
		rmsAtt: layers(lay.rmsAtt), wq: layers(lay.wq), wk: layers(lay.wk), wv: layers(lay.wv), wo: layers(lay.wo),
		rmsFFN: layers(lay.rmsFFN), w1: layers(lay.w1), w2: layers(lay.w2), w3: layers(lay.w3),
	}
}

// refState is one sequence's KV cache: per layer, the keys and values of
// each position so far.
type refState struct {
	keys, values [][][]float64 // [layer][position][kv_dim]
}

// forward feeds token at position len(cache) and returns the logits of the
// next token.
func (r *reference) forward(s *refState, token int32) []float64 {
	c := r.c
	d, hs, kvMul := c.Dim, c.HeadSize(), c.Heads/c.KVHeads
	if s.keys == nil {
		s.keys, s.values = make([][][]float64, c.Layers), make([][][]float64, c.Layers)
	}
	pos := len(s.keys[0])
	x := append([]float64(nil), r.embed[int(token)*d:(int(token)+1)*d]...)
	for l := range c.Layers {
		h := rmsNorm(x, r.rmsAtt[l])
		q, k, v := matVec(r.wq[l], h), matVec(r.wk[l], h), matVec(r.wv[l], h)
		rope(q, pos, hs)
		rope(k, pos, hs)
		s.keys[l] = append(s.keys[l], k)
		s.values[l] = append(s.values[l], v)
		att := make([]float64, d)
		for head := range c.Heads {
			kvh := head / kvMul
			qh := q[head*hs : (head+1)*hs]
			scores := make([]float64, pos+1)
			top := math.Inf(-1)
			for p := range scores {
				scores[p] = dot(qh, s.keys[l][p][kvh*hs:(kvh+1)*hs]) / math.Sqrt(float64(hs))
				top = max(top, scores[p])
			}
			var sum float64
			for p := range scores {
				scores[p] = math.Exp(scores[p] - top)
				sum += scores[p]
			}
			for p := range scores {
				vp := s.values[l][p][kvh*hs : (kvh+1)*hs]
				for i := range hs {
					att[head*hs+i] += scores[p] / sum * vp[i]
				}
			}
		}
		addTo(x, matVec(r.wo[l], att))
		h = rmsNorm(x, r.rmsFFN[l])
		gate, up := matVec(r.w1[l], h), matVec(r.w3[l], h)
		for i, g := range gate {
			gate[i] = g / (1 + math.Exp(-g)) * up[i]
		}
		addTo(x, matVec(r.w2[l], gate))
	}
	return matVec(r.wcls, rmsNorm(x, r.rmsFinal))
}

// logits returns the logits after each token of tokens.
func (r *reference) logits(tokens []int32) [][]float64 {
	var s refState
	out := make([][]float64, len(tokens))
	for p, t := range tokens {
		out[p] = r.forward(&s, t)
	}
	return out
}

// greedy returns n tokens drawn greedily after prompt, stopping after EOS
// unless ignoreEOS.
func (r *reference) greedy(prompt []int32, n int, ignoreEOS bool) []int32 {
	var s refState
	var logits []float64
	for _, t := range prompt {
		logits = r.forward(&s, t)
	}
	var out []int32
	for len(out) < n && len(prompt)+len(out) < r.c.Context {
		next := int32(argmax(logits))
		out = append(out, next)
		if next == EOS && !ignoreEOS {
			break
		}
		logits = r.forward(&s, next)
	}
	return out
}

// rope turns each pair (i, i+1) of each head of v by pos ·
// 10000^(-(i mod head_size)/head_size), as llama2.c does.
func rope(v []float64, pos, hs int) {
	for i := 0; i < len(v); i += 2 {
		freq := 1 / math.Pow(10000, float64(i%hs)/float64(hs))
		cos, sin := math.Cos(float64(pos)*freq), math.Sin(float64(pos)*freq)
		v0, v1 := v[i], v[i+1]
		v[i], v[i+1] = v0*cos-v1*sin, v0*sin+v1*cos
	}
}

func rmsNorm(x, w []float64) []float64 {
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	scale := 1 / math.Sqrt(ss/float64(len(x))+1e-5)
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = w[i] * v * scale
	}
	return out
}

// matVec returns W·x for W row-major [len(W)/len(x), len(x)].
func matVec(w, x []float64) []float64 {
	out := make([]float64, len(w)/len(x))
	for i := range out {
		out[i] = dot(w[i*len(x):(i+1)*len(x)], x)
	}
	return out
}

func dot(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

func addTo(x, y []float64) {
	for i := range x {
		x[i] += y[i]
	}
}

func argmax[T float32 | float64](v []T) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}
