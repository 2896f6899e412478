package bert

import (
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/inferhq/infer/models/onnxgraph"
)

// reference is a plain Go implementation of BERT, written from the model's
// definition rather than from the graph, for checking that the generated
// graph computes it. It runs one unpadded sequence at a time in float64.
type reference struct {
	a       Arch
	seed    uint64
	weights map[string][]float64
}

func newReference(a Arch, seed uint64) *reference {
	return &reference{a: a, seed: seed, weights: map[string][]float64{}}
}

// weight returns the named weight as BERT's initialisation draws it.
func (r *reference) weight(name string, n int) []float64 {
	if w, ok := r.weights[name]; ok {
		return w
	}
	v := make([]float32, n)
	switch {
	case strings.HasSuffix(name, "LayerNorm.weight"):
		for i := range v {
			v[i] = 1
		}
	case strings.HasSuffix(name, ".bias"): // zeros
	default:
		onnxgraph.Normal(r.seed, name, initStd)()(v)
	}
	out := make([]float64, n)
	for i, f := range v {
		out[i] = float64(f)
	}
	r.weights[name] = out
	return out
}

// matrix is a row-major [rows][cols] matrix.
type matrix struct {
	rows, cols int
	v          []float64
}

func (m matrix) row(i int) []float64 { return m.v[i*m.cols : (i+1)*m.cols] }

// dense returns x·W + b for the weights called prefix.weight ([in, out])
// and prefix.bias.
func (r *reference) dense(prefix string, x matrix, out int) matrix {
	w := r.weight(prefix+".weight", x.cols*out)
	b := r.weight(prefix+".bias", out)
	y := matrix{x.rows, out, make([]float64, x.rows*out)}
	for i := range x.rows {
		yi := y.row(i)
		copy(yi, b)
		for k, xk := range x.row(i) {
			for j := range out {
				yi[j] += xk * w[k*out+j]
			}
		}
	}
	return y
}

func (r *reference) layerNorm(prefix string, x matrix) matrix {
	g := r.weight(prefix+".weight", x.cols)
	b := r.weight(prefix+".bias", x.cols)
	y := matrix{x.rows, x.cols, make([]float64, len(x.v))}
	for i := range x.rows {
		var mean, variance float64
		for _, v := range x.row(i) {
			mean += v
		}
		mean /= float64(x.cols)
		for _, v := range x.row(i) {
			variance += (v - mean) * (v - mean)
		}
		variance /= float64(x.cols)
		for j, v := range x.row(i) {
			y.row(i)[j] = (v-mean)/math.Sqrt(variance+layerNorm)*g[j] + b[j]
		}
	}
	return y
}

func gelu(x matrix) matrix {
	for i, v := range x.v {
		x.v[i] = 0.5 * v * (1 + math.Erf(v/math.Sqrt2))
	}
	return x
}

func addTo(x, y matrix) matrix {
	for i := range x.v {
		x.v[i] += y.v[i]
	}
	return x
}

func softmax(v []float64) {
	m := math.Inf(-1)
	for _, x := range v {
		m = max(m, x)
	}
	var sum float64
	for i, x := range v {
		v[i] = math.Exp(x - m)
		sum += v[i]
	}
	for i := range v {
		v[i] /= sum
	}
}

// encode returns the last hidden states of one sequence, all token type 0.
func (r *reference) encode(ids []int64) matrix {
	a := r.a
	h, s := a.Hidden, len(ids)
	words := r.weight("embeddings.word_embeddings.weight", a.Vocab*h)
	positions := r.weight("embeddings.position_embeddings.weight", a.MaxPositions*h)
	types := r.weight("embeddings.token_type_embeddings.weight", a.TypeVocab*h)
	x := matrix{s, h, make([]float64, s*h)}
	for i, id := range ids {
		for j := range h {
			x.row(i)[j] = words[int(id)*h+j] + positions[i*h+j] + types[j]
		}
	}
	x = r.layerNorm("embeddings.LayerNorm", x)

	d := h / a.Heads
	for l := range a.Layers {
		p := "encoder.layer." + strconv.Itoa(l)
		q := r.dense(p+".attention.self.query", x, h)
		k := r.dense(p+".attention.self.key", x, h)
		v := r.dense(p+".attention.self.value", x, h)
		ctx := matrix{s, h, make([]float64, s*h)}
		scores := make([]float64, s)
		for head := range a.Heads {
			lo := head * d
			for i := range s {
				for j := range s {
					var dot float64
					for c := lo; c < lo+d; c++ {
						dot += q.row(i)[c] * k.row(j)[c]
					}
					scores[j] = dot / math.Sqrt(float64(d))
				}
				softmax(scores)
				for j, w := range scores {
					for c := lo; c < lo+d; c++ {
						ctx.row(i)[c] += w * v.row(j)[c]
					}
				}
			}
		}
		x = r.layerNorm(p+".attention.output.LayerNorm", addTo(r.dense(p+".attention.output.dense", ctx, h), x))
		inner := gelu(r.dense(p+".intermediate.dense", x, a.Intermediate))
		x = r.layerNorm(p+".output.LayerNorm", addTo(r.dense(p+".output.dense", inner, h), x))
	}
	return x
}

// fillMask returns the top TopK token ids and probabilities of each [MASK]
// of one sequence.
func (r *reference) fillMask(ids []int64) (topIDs [][]int64, topScores [][]float64) {
	a := r.a
	x := r.encode(ids)
	words := r.weight("embeddings.word_embeddings.weight", a.Vocab*a.Hidden)
	bias := r.weight("cls.predictions.bias", a.Vocab)
	for i, id := range ids {
		if id != MaskTokenID {
			continue
		}
		t := matrix{1, a.Hidden, append([]float64(nil), x.row(i)...)}
		t = r.layerNorm("cls.predictions.transform.LayerNorm", gelu(r.dense("cls.predictions.transform.dense", t, a.Hidden)))
		probs := make([]float64, a.Vocab)
		for v := range probs {
			probs[v] = bias[v]
			for j, tj := range t.v {
				probs[v] += tj * words[v*a.Hidden+j]
			}
		}
		softmax(probs)
		order := make([]int64, a.Vocab)
		for v := range order {
			order[v] = int64(v)
		}
		sort.SliceStable(order, func(p, q int) bool { return probs[order[p]] > probs[order[q]] })
		scores := make([]float64, TopK)
		for k := range scores {
			scores[k] = probs[order[k]]
		}
		topIDs = append(topIDs, order[:TopK])
		topScores = append(topScores, scores)
	}
	return topIDs, topScores
}

// embed returns the L2-normalised mean of one sequence's hidden states.
func (r *reference) embed(ids []int64) []float64 {
	x := r.encode(ids)
	mean := make([]float64, x.cols)
	for i := range x.rows {
		for j, v := range x.row(i) {
			mean[j] += v / float64(x.rows)
		}
	}
	var norm float64
	for _, v := range mean {
		norm += v * v
	}
	for j := range mean {
		mean[j] /= math.Sqrt(norm)
	}
	return mean
}
