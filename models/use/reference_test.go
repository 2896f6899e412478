package use

import (
	"math"
	"slices"
	"sync"
)

// reference is a plain Go implementation of the Universal Sentence Encoder
// lite, written from the TF.js graph's nodes (model.json) rather than from
// the ONNX graph Generate writes, for checking that the generated graph
// computes it. It runs one sequence of ids, unpadded, in float64, with the
// TF graph's own steps: the clip to MaxLen tokens, the embedding added
// twice with the timing signal, pre-norm layers with the residual projected
// where a layer widens, attention over all tokens, the mean over tokens,
// the tanh layer and x·rsqrt(max(Σx², NormFloor)).
func reference(w *Weights, ids []int32) []float64 {
	if len(ids) > w.MaxLen {
		ids = ids[:w.MaxLen]
	}
	n, half := len(ids), w.Embed/2
	x := make([][]float64, n)
	for p, id := range ids {
		row := w.Embeddings[int(id)*w.Embed:][:w.Embed]
		x[p] = make([]float64, w.Embed)
		for j := range half {
			angle := float64(p) * float64(w.InvTimescales[j])
			x[p][j] = 2*float64(row[j]) + math.Sin(angle)
			x[p][half+j] = 2*float64(row[half+j]) + math.Cos(angle)
		}
	}
	for _, l := range w.Layers {
		eps := float64(w.Epsilon)
		residual := x
		if l.Residual != nil {
			residual = dense(x, l.Residual, l.ResidualBias, l.Out)
		}
		qkv := dense(layerNorm(x, l.Norm1Scale, l.Norm1Bias, eps), l.QKV, l.QKVBias, 3*l.Attn)
		a, d := l.Attn, l.Attn/w.Heads
		ctx := make([][]float64, n)
		for p := range ctx {
			ctx[p] = make([]float64, a)
		}
		for h := range w.Heads {
			for p := range n {
				scores := make([]float64, n)
				top := math.Inf(-1)
				for j := range n {
					for i := range d {
						scores[j] += qkv[p][h*d+i] * float64(l.QScale) * qkv[j][a+h*d+i]
					}
					top = max(top, scores[j])
				}
				var sum float64
				for j := range scores {
					scores[j] = math.Exp(scores[j] - top)
					sum += scores[j]
				}
				for j := range n {
					for i := range d {
						ctx[p][h*d+i] += scores[j] / sum * qkv[j][2*a+h*d+i]
					}
				}
			}
		}
		h := add(dense(ctx, l.Output, l.OutputBias, l.Out), residual)
		inner := dense(layerNorm(h, l.Norm2Scale, l.Norm2Bias, eps), l.FFN1, l.FFN1Bias, l.FFN)
		for _, row := range inner {
			for i, v := range row {
				row[i] = max(v, 0)
			}
		}
		x = add(dense(inner, l.FFN2, l.FFN2Bias, l.Out), h)
	}
	width := len(x[0])
	mean := make([]float64, width)
	for _, row := range x {
		for i, v := range row {
			mean[i] += v / float64(n)
		}
	}
	t := dense([][]float64{mean}, w.Tanh, w.TanhBias, w.Width)[0]
	var squares float64
	for i, v := range t {
		t[i] = math.Tanh(v)
		squares += t[i] * t[i]
	}
	scale := 1 / math.Sqrt(max(squares, float64(w.NormFloor)))
	for i := range t {
		t[i] *= scale
	}
	return t
}

// dense returns x·W + b for W [len(x[0]), out] in row-major order. It is
// nearly all of the reference's time, and touches only memory of its own
// goroutine, so it is left out of the race detector's instrumentation,
// which would make CI's race-enabled run of the tests 20 times slower.
//
//go:norace
func dense(x [][]float64, w, b []float32, out int) [][]float64 {
	w64, b64 := wide(w), wide(b)
	y := make([][]float64, len(x))
	for p, row := range x {
		acc := slices.Clone(b64)
		for i, v := range row {
			wi := w64[i*out : (i+1)*out]
			acc := acc[:len(wi)]
			for j, wv := range wi {
				acc[j] += v * wv
			}
		}
		y[p] = acc
	}
	return y
}

// wide returns v in float64, converted once per weight: the reference runs
// under the race detector in CI, where every conversion in the inner loop
// would cost.
func wide(v []float32) []float64 {
	widened.Lock()
	defer widened.Unlock()
	if w, ok := widened.m[&v[0]]; ok {
		return w
	}
	w := make([]float64, len(v))
	for i, x := range v {
		w[i] = float64(x)
	}
	widened.m[&v[0]] = w
	return w
}

var widened = struct {
	sync.Mutex
	m map[*float32][]float64
}{m: map[*float32][]float64{}}

// layerNorm normalises each row to mean 0 and variance 1 (with eps), then
// scales and shifts it.
func layerNorm(x [][]float64, scale, bias []float32, eps float64) [][]float64 {
	y := make([][]float64, len(x))
	for p, row := range x {
		var mean, variance float64
		for _, v := range row {
			mean += v / float64(len(row))
		}
		for _, v := range row {
			variance += (v - mean) * (v - mean) / float64(len(row))
		}
		inv := 1 / math.Sqrt(variance+eps)
		y[p] = make([]float64, len(row))
		for i, v := range row {
			y[p][i] = float64(scale[i])*(v-mean)*inv + float64(bias[i])
		}
	}
	return y
}

func add(a, b [][]float64) [][]float64 {
	y := make([][]float64, len(a))
	for p := range a {
		y[p] = make([]float64, len(a[p]))
		for i := range a[p] {
			y[p][i] = a[p][i] + b[p][i]
		}
	}
	return y
}
