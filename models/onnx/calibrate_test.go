package onnx

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/gpt2"
)

// twinSpec is the graph of a's -int8 twin before its weights are quantised,
// as models/registry makes it: GroupQueryAttention over an int8 KV cache
// whose scales CalibrateKV measures on a's float32 graph over
// gpt2.CalibrationText.
func twinSpec(t testing.TB, a gpt2.Arch) gpt2.Spec {
	return gpt2.Spec{Arch: a, GQA: true, KVInt8: true, KVScales: &gpt2.KVScales{ID: "calibrated " + gpt2.CalibrationID(),
		Compute: func() ([]float32, error) {
			f, _ := openTestDecoder(t, gpt2.Spec{Arch: a, InPlaceKV: true}, DecoderConfig{})
			return CalibrateKV(context.Background(), f, f.Tokenizer().Encode(gpt2.CalibrationText))
		}}}
}

// TestCalibrateKV checks CalibrateKV's scales against the keys and values
// of the standard graph (past in, present out, rows right-aligned), read
// here from its present: for a text of two pieces (longer than the
// context), each channel's largest |x| / 127, within float32's rounding of
// the two graphs' sums. The same from the GroupQueryAttention graph, and
// the graphs it refuses.
func TestCalibrateKV(t *testing.T) {
	spec := tinySpec()
	a := spec.Arch
	a.Context = 64 // two pieces of the text below
	text := prompt(21, 100)
	want := make([]float32, a.Layers*2*a.Hidden)
	_, std := openTestDecoder(t, gpt2.Spec{Arch: a}, DecoderConfig{})
	for _, piece := range [][]int32{text[:64], text[64:]} {
		step(t, std, models.StepSeq{ID: 1, Tokens: piece})
		st, dm := std.seqs[1], std.dims
		for ti := range dm.tensors() {
			data := view[float32](dm.tensor(st.kv, ti))
			for h := range dm.heads {
				for p := st.kv.t - st.n; p < st.kv.t; p++ { // right-aligned
					for c := range dm.headDim {
						x := data[((st.row*dm.heads+h)*st.kv.t+p)*dm.headDim+c]
						i := ti*a.Hidden + h*dm.headDim + c
						want[i] = max(want[i], float32(math.Abs(float64(x)))/127)
					}
				}
			}
		}
		std.Free(1)
	}
	for _, s := range []gpt2.Spec{{Arch: a, InPlaceKV: true}, {Arch: a, GQA: true}} {
		f, _ := openTestDecoder(t, s, DecoderConfig{})
		got, err := CalibrateKV(context.Background(), f, text)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("%d scales, want %d", len(got), len(want))
		}
		worst := 0.0
		for i := range got {
			worst = max(worst, math.Abs(float64(got[i]-want[i]))/float64(want[i]))
		}
		if worst > 1e-4 {
			t.Errorf("GQA %v: scales differ from the standard graph's by up to %.2g of theirs", s.GQA, worst)
		}
		t.Logf("GQA %v: %d scales within %.2g of the standard graph's", s.GQA, len(got), worst)
		if _, err := CalibrateKV(context.Background(), f, nil); err == nil {
			t.Error("no text: no error")
		}
	}
	for _, s := range []gpt2.Spec{{Arch: a}, {Arch: a, GQA: true, KVInt8: true, KVScales: testScales(a)}} {
		f, _ := openTestDecoder(t, s, DecoderConfig{})
		if _, err := CalibrateKV(context.Background(), f, text); err == nil || !strings.Contains(err.Error(), "float32 cache is in place") {
			t.Errorf("%+v: error %v", s, err)
		}
	}
}
