package onnx

import (
	"fmt"
	"math"
)

// TopK is the number of candidates reported for each [MASK].
const TopK = 5

// FillMask is the output of a fill-mask model for one input: one entry per
// [MASK] token, in the order they appear.
type FillMask struct {
	Masks []Mask `json:"masks"`
}

// Mask is one [MASK] of an input and its best candidates.
type Mask struct {
	// Position is the mask's index in the token sequence ([CLS] is 0).
	Position int `json:"position"`
	// Candidates are the TopK most likely tokens, most likely first.
	Candidates []Candidate `json:"candidates"`
}

// Candidate is one token proposed for a mask, with its softmax probability.
type Candidate struct {
	Token string  `json:"token"`
	ID    int64   `json:"id"`
	Score float32 `json:"score"`
}

// decoder turns a batch's output tensors into per-item outputs.
type decoder struct {
	tok    Tokenizer
	maskID int32
}

func (d decoder) candidate(id int64, score float32) Candidate {
	return Candidate{Token: d.tok.Token(int32(id)), ID: id, Score: score}
}

// topK decodes the fill-mask head computed inside the graph: positions
// [m,2] of (batch index, sequence position) in row-major order, and scores
// and ids [m,k], descending. Each of out[0:n] gets a *FillMask.
func (d decoder) topK(out []any, positions []int64, scores []float32, ids []int64, k int) error {
	m := len(positions) / 2
	if len(scores) != m*k || len(ids) != m*k {
		return fmt.Errorf("fill-mask outputs disagree: %d mask positions, %d scores, %d ids for top %d", m, len(scores), len(ids), k)
	}
	res := make([]FillMask, len(out))
	for i := range res {
		res[i].Masks = []Mask{}
	}
	for r := range m {
		b, pos := positions[2*r], positions[2*r+1]
		if b < 0 || int(b) >= len(out) {
			return fmt.Errorf("mask position %d names batch item %d of %d", r, b, len(out))
		}
		cands := make([]Candidate, k)
		for j := range cands {
			cands[j] = d.candidate(ids[r*k+j], scores[r*k+j])
		}
		res[b].Masks = append(res[b].Masks, Mask{Position: int(pos), Candidates: cands})
	}
	for i := range out {
		out[i] = &res[i]
	}
	return nil
}

// logits decodes a masked-LM head's logits [n, seqLen, vocab]: at each
// [MASK] of each item, the TopK tokens of the softmax.
func (d decoder) logits(out []any, tokens [][]int32, logits []float32, seqLen, vocab int) {
	res := make([]FillMask, len(out))
	for i, toks := range tokens {
		res[i].Masks = []Mask{}
		for p, id := range toks {
			if id != d.maskID {
				continue
			}
			row := logits[(i*seqLen+p)*vocab:][:vocab]
			ids, scores := topSoftmax(row, TopK)
			cands := make([]Candidate, len(ids))
			for j := range cands {
				cands[j] = d.candidate(int64(ids[j]), scores[j])
			}
			res[i].Masks = append(res[i].Masks, Mask{Position: p, Candidates: cands})
		}
		out[i] = &res[i]
	}
}

// topSoftmax returns the indices of the k largest values of logits, largest
// first, with their softmax probabilities over the whole row.
func topSoftmax(logits []float32, k int) ([]int, []float32) {
	k = min(k, len(logits))
	idx := make([]int, 0, k)
	for i, v := range logits {
		if len(idx) == k && v <= logits[idx[k-1]] {
			continue
		}
		if len(idx) < k {
			idx = append(idx, i)
		} else {
			idx[k-1] = i
		}
		for j := len(idx) - 1; j > 0 && logits[idx[j]] > logits[idx[j-1]]; j-- {
			idx[j], idx[j-1] = idx[j-1], idx[j]
		}
	}
	if len(idx) == 0 {
		return nil, nil
	}
	top := float64(logits[idx[0]])
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v) - top)
	}
	scores := make([]float32, len(idx))
	for j, i := range idx {
		scores[j] = float32(math.Exp(float64(logits[i])-top) / sum)
	}
	return idx, scores
}

// vectors copies row i of x [n, width] into out[i] as a []float32.
func vectors(out []any, x []float32, width int) {
	for i := range out {
		out[i] = append([]float32(nil), x[i*width:(i+1)*width]...)
	}
}

// meanPooled sets out[i] to the mean of hidden [n, seqLen, width] over the
// positions of item i's tokens (not its padding), L2-normalised.
func meanPooled(out []any, hidden []float32, tokens [][]int32, seqLen, width int) {
	for i := range out {
		v := make([]float32, width)
		acc := make([]float64, width)
		for p := range tokens[i] {
			row := hidden[(i*seqLen+p)*width:][:width]
			for j, x := range row {
				acc[j] += float64(x)
			}
		}
		var norm float64
		for _, a := range acc {
			norm += a * a
		}
		if norm = math.Sqrt(norm); norm > 0 {
			for j, a := range acc {
				v[j] = float32(a / norm)
			}
		}
		out[i] = v
	}
}
