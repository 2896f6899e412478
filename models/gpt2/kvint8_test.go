package gpt2

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/inferhq/infer/models/onnxgraph"
	"github.com/inferhq/infer/models/quant"
)

// kvForms are the integer forms of KVInt8's attention (kvint8.go), the
// default first.
var kvForms = []kvForm{
	{},
	{key: onnxgraph.Int8, value: onnxgraph.Int8},
	{key: onnxgraph.Uint8, value: onnxgraph.Int8},
	{key: onnxgraph.Int8, value: onnxgraph.Uint8},
	{key: onnxgraph.Uint8, value: onnxgraph.Uint8, queryUint8: true},
	{key: onnxgraph.Uint8, value: onnxgraph.Int8, queryUint8: true},
	{key: onnxgraph.Int8, value: onnxgraph.Int8, queryFirst: true},
	{key: onnxgraph.Uint8, value: onnxgraph.Int8, queryFirst: true},
}

func (f kvForm) name() string {
	f = f.resolve()
	name := fmt.Sprintf("k%s-v%s", f.key, f.value)
	if f.queryUint8 {
		name += "-quint8"
	}
	if f.queryFirst {
		name += "-query-first"
	}
	return name
}

// ones returns a row of mask: holes 0s, then n 1s.
func ones(holes, n int) []int64 {
	m := make([]int64, holes+n)
	for i := holes; i < len(m); i++ {
		m[i] = 1
	}
	return m
}

func span(from, to int) []int64 {
	var p []int64
	for i := from; i < to; i++ {
		p = append(p, int64(i))
	}
	return p
}

func TestKVInt8Spec(t *testing.T) {
	s := Spec{Arch: micro, InPlaceKV: true, KVInt8: true}
	if s.FileName() == (Spec{Arch: micro, InPlaceKV: true}).FileName() {
		t.Error("KVInt8 does not change the file name")
	}
	if err := (Spec{Arch: micro, KVInt8: true}).validate(); err == nil {
		t.Error("KVInt8 without InPlaceKV validated")
	}
	small, _ := Lookup("gpt2-small")
	// 2 (key, value) · 12 layers · 12 heads · (64 bytes + a float32 scale).
	if got := (Spec{Arch: small, InPlaceKV: true, KVInt8: true}).KVBytesPerToken(); got != 2*12*12*68 {
		t.Errorf("gpt2-small with an int8 KV cache: %d bytes a token, want %d", got, 2*12*12*68)
	}
	if got := (Spec{Arch: small, InPlaceKV: true}).KVBytesPerToken(); got != small.KVBytesPerToken() {
		t.Errorf("gpt2-small: %d bytes a token, want %d", got, small.KVBytesPerToken())
	}
}

// TestKVInt8Reference runs graphs with an int8 KV cache in ONNX Runtime,
// every form of the attention, against the Go reference with the same
// quantisation: a prompt after two holes of random bytes and scales, then
// one token a step after the outputs kept as the past.
func TestKVInt8Reference(t *testing.T) {
	tiny, _ := Lookup("gpt2-tiny")
	type tc struct {
		a    Arch
		form kvForm
	}
	var cases []tc
	for _, f := range kvForms {
		cases = append(cases, tc{micro, f})
	}
	cases = append(cases, tc{tiny, kvForm{}})
	for _, c := range cases {
		t.Run(c.a.Name+"/"+c.form.name(), func(t *testing.T) {
			s := Spec{Arch: c.a, Seed: DefaultSeed, InPlaceKV: true, KVInt8: true, kv: c.form}
			path, err := Ensure(t.TempDir(), s)
			if err != nil {
				t.Fatal(err)
			}
			g := openGraph(t, path, s)
			tokens := []int32{5, 17, 3, int32(c.a.Vocab - 1), 42, 8, 8, 1}
			want := reference{a: c.a, seed: DefaultSeed, kvInt8: true}.logits(tokens)
			float := reference{a: c.a, seed: DefaultSeed}.logits(tokens)
			const holes, prompt = 2, 3
			cache := garbageCache(s, 1, holes, 7)
			var worst, quantized float64
			check := func(p int, got []float32) {
				for v := range got {
					diff := math.Abs(float64(got[v]) - want[p][v])
					worst = max(worst, diff)
					quantized = max(quantized, math.Abs(want[p][v]-float[p][v]))
					if diff > 1e-4 {
						t.Fatalf("position %d, token %d: logit %g, reference %g", p, v, got[v], want[p][v])
					}
				}
			}
			res := g.run(t, cache, [][]int64{ones(holes, prompt)}, [][]int32{tokens[:prompt]}, [][]int64{span(0, prompt)}, 0)
			for p := range prompt {
				check(p, res.logits[p*c.a.Vocab:(p+1)*c.a.Vocab])
			}
			for p := prompt; p < len(tokens); p++ {
				cache = cache.concat(c.a, res.fresh)
				res = g.run(t, cache, [][]int64{ones(holes, p+1)}, [][]int32{tokens[p : p+1]}, [][]int64{{int64(p)}}, 1)
				check(p, res.logits)
			}
			t.Logf("%d positions of %d logits within %.2g of the int8 reference (which is within %.2g of float32's)",
				len(tokens), c.a.Vocab, worst, quantized)
		})
	}
}

// TestKVInt8Split: a row's logits do not depend on whether its earlier
// tokens came in as past (the outputs of an earlier run) or in the same
// run, nor on the rows beside it, nor on what the holes in its past hold;
// with the weights quantised too (activations per row), as the -int8
// twins are.
func TestKVInt8Split(t *testing.T) {
	tiny, _ := Lookup("gpt2-tiny")
	for _, c := range []struct {
		a       Arch
		weights bool // quantised too, as the -int8 twins
	}{{micro, false}, {tiny, false}, {micro, true}, {tiny, true}} {
		name := c.a.Name
		if c.weights {
			name += "/int8-weights"
		}
		t.Run(name, func(t *testing.T) {
			a := c.a
			s := Spec{Arch: a, InPlaceKV: true, KVInt8: true}
			path, err := Ensure(t.TempDir(), s)
			if err != nil {
				t.Fatal(err)
			}
			if c.weights {
				if path, err = quant.Ensure(t.TempDir(), path, quant.Options{}); err != nil {
					t.Fatal(err)
				}
			}
			g := openGraph(t, path, s)
			tokens := []int32{5, 17, 3, int32(a.Vocab - 1), 42, 8, 8, 1, 99, 4, 250, 2}
			n, v := len(tokens), a.Vocab
			// The whole prompt in one run after one hole.
			whole := g.run(t, garbageCache(s, 1, 1, 1), [][]int64{ones(1, n)}, [][]int32{tokens}, [][]int64{span(0, n)}, 0).logits
			var worst float64
			compare := func(what string, from int, got []float32, tol float64) {
				t.Helper()
				for i, x := range got {
					diff := math.Abs(float64(x) - float64(whole[from*v+i]))
					worst = max(worst, diff)
					if diff > tol {
						t.Fatalf("%s: position %d, token %d: logit %g, %g in one run", what, from+i/v, i%v, x, whole[from*v+i])
					}
				}
			}
			// 5 tokens, then 4 after them as past, then one a step; the
			// holes (3, with other bytes) come first.
			cache := garbageCache(s, 1, 3, 2)
			res := g.run(t, cache, [][]int64{ones(3, 5)}, [][]int32{tokens[:5]}, [][]int64{span(0, 5)}, 0)
			compare("first run", 0, res.logits, 1e-5)
			cache = cache.concat(a, res.fresh)
			res = g.run(t, cache, [][]int64{ones(3, 9)}, [][]int32{tokens[5:9]}, [][]int64{span(5, 9)}, 0)
			compare("second run", 5, res.logits, 1e-5)
			for p := 9; p < n; p++ {
				cache = cache.concat(a, res.fresh)
				res = g.run(t, cache, [][]int64{ones(3, p+1)}, [][]int32{tokens[p : p+1]}, [][]int64{{int64(p)}}, 1)
				compare("step", p, res.logits, 1e-5)
			}
			// The last step again beside another row (its own tokens,
			// past and holes).
			other := garbageCache(s, 1, 3+n-1, 9)
			both := &kvCache{rows: 2, past: cache.past}
			h, d := a.Heads, a.HeadDim()
			for l := range a.Layers {
				both.keys = append(both.keys, append(append([]byte(nil), cache.keys[l][:h*cache.past*d]...), other.keys[l]...))
				both.values = append(both.values, append(append([]byte(nil), cache.values[l][:h*cache.past*d]...), other.values[l]...))
				both.kScales = append(both.kScales, append(append([]float32(nil), cache.kScales[l]...), other.kScales[l]...))
				both.vScales = append(both.vScales, append(append([]float32(nil), cache.vScales[l]...), other.vScales[l]...))
			}
			otherMask := ones(0, 3+n)
			otherMask[4] = 0
			res = g.run(t, both, [][]int64{ones(3, n), otherMask}, [][]int32{tokens[n-1:], {77}}, [][]int64{{int64(n - 1)}, {30}}, 1)
			compare("beside another row", n-1, res.logits[:v], 1e-5)
			t.Logf("%d positions of %d logits within %.2g of one run", n, v, worst)
		})
	}
}

// TestKVInt8Inspect pins the graph's inputs and outputs: the contract with
// models/onnx's decoder.
func TestKVInt8Inspect(t *testing.T) {
	a := Arch{Name: "one", Layers: 1, Hidden: 32, Heads: 2, Vocab: 300, Context: 64}
	path, err := Ensure(t.TempDir(), Spec{Arch: a, InPlaceKV: true, KVInt8: true})
	if err != nil {
		t.Fatal(err)
	}
	info, err := onnxgraph.Inspect(path)
	if err != nil {
		t.Fatal(err)
	}
	ins, outs := tensorStrings(info.Inputs), tensorStrings(info.Outputs)
	wantIns := []string{
		"input_ids int64 [batch_size, sequence_length]",
		"attention_mask int64 [batch_size, past_sequence_length + sequence_length]",
		"position_ids int64 [batch_size, sequence_length]",
		"past_key_values.0.key uint8 [batch_size, 2, past_sequence_length, 16]",
		"past_key_values.0.value uint8 [batch_size, 2, past_sequence_length, 16]",
		"past_key_values.0.key_scale float32 [batch_size, 2, past_sequence_length, 1]",
		"past_key_values.0.value_scale float32 [batch_size, 2, past_sequence_length, 1]",
		"logits_to_keep int64 [1]",
	}
	wantOuts := []string{
		"logits float32 [batch_size, kept_length, 300]",
		"new.0.key uint8 [batch_size, 2, sequence_length, 16]",
		"new.0.value uint8 [batch_size, 2, sequence_length, 16]",
		"new.0.key_scale float32 [batch_size, 2, sequence_length, 1]",
		"new.0.value_scale float32 [batch_size, 2, sequence_length, 1]",
	}
	if strings.Join(ins, "\n") != strings.Join(wantIns, "\n") || strings.Join(outs, "\n") != strings.Join(wantOuts, "\n") {
		t.Errorf("inputs:\n%s\noutputs:\n%s", strings.Join(ins, "\n"), strings.Join(outs, "\n"))
	}
	if k, v := (Spec{Arch: a, InPlaceKV: true, KVInt8: true}).KVTypes(); k != onnxgraph.Uint8 || v != onnxgraph.Uint8 {
		t.Errorf("KVTypes() = %v, %v", k, v)
	}
}
