package onnx

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/inferhq/infer/models"
)

// CalibrateKV returns scales for an int8 KV cache of f's model, static ones
// (gpt2.KVScales): for each layer, keys and values, head and channel, the
// largest |key| or |value| that f's graph computes for text, / 127 (at least
// the smallest normal float32, so that a channel of zeros stays zeros),
// Layers × 2 × heads·head_dim of them, layer 0's keys head by head and
// channel by channel, then its values, then layer 1's. The text is
// prefilled in pieces of the context, each on its own, so that a text of a
// context or more covers every position. f's cache must be float32, and its
// graph's rows left-aligned (an in-place or GroupQueryAttention graph, as
// the built-in GPT-2 models have).
func CalibrateKV(ctx context.Context, f *DecoderFactory, text []int32) ([]float32, error) {
	if f.sig.kvElem != elemFloat32 || !(f.sig.inPlace || f.sig.gqa) {
		return nil, errors.New("onnx: calibrate a KV cache: want a graph whose float32 cache is in place")
	}
	if len(text) == 0 {
		return nil, errors.New("onnx: calibrate a KV cache: no text")
	}
	m, err := f.New(ctx, 0)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	d := m.(*Decoder)
	dm := d.dims
	width := dm.heads * dm.headDim
	absMax := make([]float32, dm.layers*2*width)
	next := make([]int32, 1)
	for len(text) > 0 {
		piece := text[:min(len(text), d.info.Context)]
		text = text[len(piece):]
		if err := d.Step(ctx, []models.StepSeq{{ID: 1, Tokens: piece, PromptLen: len(piece)}}, next); err != nil {
			return nil, fmt.Errorf("onnx: calibrate a KV cache: %w", err)
		}
		st := d.seqs[1]
		for ti := range dm.tensors() { // layer ti/2's keys (even) or values (odd)
			data := view[float32](dm.tensor(st.kv, ti))
			out := absMax[ti*width : (ti+1)*width]
			for h := range dm.heads {
				row := data[(st.row*dm.heads+h)*st.kv.t*dm.headDim:]
				for p := range st.n {
					for c, x := range row[p*dm.headDim : (p+1)*dm.headDim] {
						out[h*dm.headDim+c] = max(out[h*dm.headDim+c], float32(math.Abs(float64(x))))
					}
				}
			}
		}
		d.Free(1)
	}
	for i, m := range absMax {
		absMax[i] = max(m/127, 0x1p-126)
	}
	return absMax, nil
}
