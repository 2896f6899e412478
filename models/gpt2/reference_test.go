package gpt2

import (
	"math"
	"strconv"

	"github.com/inferhq/infer/models/onnxgraph"
)

// reference is a plain Go implementation of GPT-2, written from the model's
// definition (Radford et al., 2019; Hugging Face's modeling_gpt2.py) rather
// than from the graph, for checking that the generated graph computes it. It
// runs one sequence in float64, without a cache.
//
// With kvInt8 its attention is that of a graph with Spec.KVInt8
// (kvint8.go), written from that file's description: keys, values and
// queries quantised per position and head, the probabilities times the
// values' scales per row, and the products of the integers.
type reference struct {
	a      Arch
	seed   uint64
	kvInt8 bool
}

// quantize returns x as the integers of a symmetric quantisation to
// ±levels (held in float64) and its scale.
func quantize(x []float64, levels float64) ([]float64, float64) {
	var top float64
	for _, v := range x {
		top = max(top, math.Abs(v))
	}
	s := max(top/levels, 0x1p-126)
	q := make([]float64, len(x))
	for i, v := range x {
		q[i] = math.RoundToEven(v / s)
	}
	return q, s
}

// weight returns the weight Generate writes under name: N(0, std²) from its
// own seeded stream, or the constant of a bias or LayerNorm.
func (r reference) weight(name string, n int, std float64) []float64 {
	v := make([]float32, n)
	onnxgraph.Normal(r.seed, name, std)()(v)
	out := make([]float64, n)
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// logits returns the logits after each token of tokens.
func (r reference) logits(tokens []int32) [][]float64 {
	a := r.a
	h, d, n := a.Hidden, a.HeadDim(), len(tokens)
	std := blockGain / math.Sqrt(float64(h))
	wte := r.weight("transformer.wte.weight", a.Vocab*h, initStd)
	wpe := r.weight("transformer.wpe.weight", a.Context*h, initStd)
	x := make([][]float64, n)
	for p, t := range tokens {
		x[p] = make([]float64, h)
		for i := range h {
			x[p][i] = wte[int(t)*h+i] + wpe[p*h+i]
		}
	}
	for l := range a.Layers {
		prefix := "transformer.h." + strconv.Itoa(l)
		// Biases are zero and LayerNorms the identity scale, as generated.
		qkv := matmul(normalize(x), r.weight(prefix+".attn.c_attn.weight", h*3*h, std), 3*h)
		ctx := make([][]float64, n)
		for p := range n {
			ctx[p] = make([]float64, h)
			for head := range a.Heads {
				q := qkv[p][head*d : (head+1)*d]
				if r.kvInt8 {
					r.int8Head(qkv, p, head, ctx[p][head*d:(head+1)*d])
					continue
				}
				scores := make([]float64, p+1) // causal: positions 0..p
				top := math.Inf(-1)
				for j := range scores {
					k := qkv[j][h+head*d : h+(head+1)*d]
					scores[j] = dot(q, k) / math.Sqrt(float64(d))
					top = max(top, scores[j])
				}
				var sum float64
				for j := range scores {
					scores[j] = math.Exp(scores[j] - top)
					sum += scores[j]
				}
				for j := range scores {
					v := qkv[j][2*h+head*d : 2*h+(head+1)*d]
					for i := range d {
						ctx[p][head*d+i] += scores[j] / sum * v[i]
					}
				}
			}
		}
		addTo(x, matmul(ctx, r.weight(prefix+".attn.c_proj.weight", h*h, std), h))
		inner := matmul(normalize(x), r.weight(prefix+".mlp.c_fc.weight", h*4*h, std), 4*h)
		for _, row := range inner {
			for i, v := range row {
				row[i] = 0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v)))
			}
		}
		addTo(x, matmul(inner, r.weight(prefix+".mlp.c_proj.weight", 4*h*h, std), h))
	}
	out := make([][]float64, n)
	for p, row := range normalize(x) {
		out[p] = make([]float64, a.Vocab)
		for t := range a.Vocab {
			out[p][t] = dot(row, wte[t*h:(t+1)*h]) // the LM head is tied to wte
		}
	}
	return out
}

// int8Head adds to ctx the attention of head at position p with an int8
// KV cache, from qkv, the positions' queries, keys and values.
func (r reference) int8Head(qkv [][]float64, p, head int, ctx []float64) {
	h, d := r.a.Hidden, r.a.HeadDim()
	part := func(j, which int) []float64 { return qkv[j][which*h+head*d : which*h+(head+1)*d] }
	qq, qs := quantize(part(p, 0), 127)
	qs /= math.Sqrt(float64(d))
	scores := make([]float64, p+1) // causal: positions 0..p
	top := math.Inf(-1)
	for j := range scores {
		kq, ks := quantize(part(j, 1), 127)
		scores[j] = dot(qq, kq) * ks * qs
		top = max(top, scores[j])
	}
	var sum float64
	for j := range scores {
		scores[j] = math.Exp(scores[j] - top)
		sum += scores[j]
	}
	vq := make([][]float64, p+1)
	for j := range scores {
		var vs float64
		vq[j], vs = quantize(part(j, 2), 127)
		scores[j] = scores[j] / sum * vs // ≥ 0
	}
	pq, ps := quantize(scores, 255)
	for j := range scores {
		for i := range d {
			ctx[i] += pq[j] * vq[j][i] * ps
		}
	}
}

func dot(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// matmul returns x·W for W of shape [len(x[0]), out], row-major.
func matmul(x [][]float64, w []float64, out int) [][]float64 {
	y := make([][]float64, len(x))
	for p, row := range x {
		y[p] = make([]float64, out)
		for i, v := range row {
			for j, wij := range w[i*out : (i+1)*out] {
				y[p][j] += v * wij
			}
		}
	}
	return y
}

func addTo(x, y [][]float64) {
	for p := range x {
		for i := range x[p] {
			x[p][i] += y[p][i]
		}
	}
}

func normalize(x [][]float64) [][]float64 {
	y := make([][]float64, len(x))
	for p, row := range x {
		var mean, variance float64
		for _, v := range row {
			mean += v
		}
		mean /= float64(len(row))
		for _, v := range row {
			variance += (v - mean) * (v - mean)
		}
		variance /= float64(len(row))
		y[p] = make([]float64, len(row))
		for i, v := range row {
			y[p][i] = (v - mean) / math.Sqrt(variance+layerNorm)
		}
	}
	return y
}
