package onnx

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/bert"
	"github.com/inferhq/infer/models/gpt2"
	"github.com/inferhq/infer/models/onnxgraph"
	"github.com/inferhq/infer/models/quant"
)

// Speed of the quantised models against float32, measured side by side:
// the two take turns batch by batch (A B B A), so that a machine whose
// speed drifts weighs on both alike; the metrics are median times and their
// ratio (int8/fp32 < 1: int8 is faster).

// BenchmarkQuantizedEncoder runs batches of 32 items of 128 tokens through
// a BERT model in float32 and quantised (activations per tensor): bert-mini
// and the ones INFER_BENCH_ENCODERS names (e.g. "bert-small,bert-base").
func BenchmarkQuantizedEncoder(b *testing.B) {
	names := os.Getenv("INFER_BENCH_ENCODERS")
	if names == "" {
		names = "bert-mini"
	}
	const batch, tokens = 32, 128
	for _, name := range splitComma(names) {
		arch, err := bert.Lookup(name)
		if err != nil {
			b.Fatal(err)
		}
		src, err := bert.Ensure(testModels, bert.Spec{Arch: arch, Task: bert.FillMask})
		if err != nil {
			b.Fatal(err)
		}
		fp32, int8 := encoderInstance(b, src), encoderInstance(b, quantized(b, src, quant.Options{}))
		// "word" is one token; [CLS], [MASK] and [SEP] make 128.
		in, err := fp32.f.Prepare(strings.Repeat("word ", tokens-3) + MaskToken)
		if err != nil || len(in.Tokens) != tokens {
			b.Fatalf("item of %d tokens, %v; want %d", len(in.Tokens), err, tokens)
		}
		ins := make([]models.Input, batch)
		for i := range ins {
			ins[i] = in
		}
		out := make([]models.Output, batch)
		b.Run(fmt.Sprintf("%s/batch=%d/tokens=%d", name, batch, tokens), func(b *testing.B) {
			var times abTimes
			for i := 0; b.Loop(); i++ {
				m := abba(i, fp32, int8)
				t0 := time.Now()
				if err := m.Predict(context.Background(), ins, out); err != nil {
					b.Fatal(err)
				}
				times.add(m == int8, time.Since(t0))
			}
			times.report(b, "fp32", "int8")
		})
	}
}

// encoderInstance returns an instance of the encoder at path.
func encoderInstance(b *testing.B, path string) *Model {
	f := newFactory(b, Config{Path: path})
	m, err := f.New(context.Background(), 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	return m.(*Model)
}

// BenchmarkQuantizedDecode runs decode steps of 16 sequences at a context
// of 256 tokens on a GPT-2 model in float32 against: int8 as the -int8
// twins are (weights int8 with activations per row, the LM head quantised,
// and the KV cache int8 in GroupQueryAttention, twinSpec); the same with a
// float32 KV cache, and with the LM head kept in float32 too; int8 per block (MatMulNBits); and int4 (per
// block, as the -int4 twins): gpt2-tiny and the ones INFER_BENCH_ARCHS
// names (e.g. "gpt2-small").
func BenchmarkQuantizedDecode(b *testing.B) {
	const batch, ctxLen = 16, 256
	for _, a := range benchArchs(b) {
		src := testModel(b, gpt2.Spec{Arch: a, InPlaceKV: true}) // as the registry serves them
		kv8 := testModel(b, twinSpec(b, a))
		fp32 := openDecoderFile(b, src)
		for _, q := range []struct {
			name string
			src  string
			opts quant.Options
		}{{"int8", kv8, quant.Options{}}, {"int8-float-kv", src, quant.Options{}}, {"int8-float-kv-keep-head", src, quant.Options{KeepHead: true}},
			{"int8-block", src, quant.Options{Activations: quant.ActivationsBlock}}, {"int4", src, quant.Options{Bits: 4, Block: 32}}} {
			b.Run(fmt.Sprintf("%s/%s/batch=%d/context=%d", a, q.name, batch, ctxLen), func(b *testing.B) {
				benchDecodePair(b, fp32, openDecoderFile(b, quantized(b, q.src, q.opts)), batch, ctxLen, "fp32", q.name)
			})
		}
	}
}

// BenchmarkQuantizedDecodeGQA is BenchmarkQuantizedDecode's int8 against
// float32 in the twin's own layout: GroupQueryAttention over a float32
// cache, which the float32 built-ins are not served with (BenchmarkKVGQA
// measures it against theirs).
func BenchmarkQuantizedDecodeGQA(b *testing.B) {
	const batch, ctxLen = 16, 256
	for _, a := range benchArchs(b) {
		fp32 := openDecoderFile(b, testModel(b, gpt2.Spec{Arch: a, GQA: true}))
		d := openDecoderFile(b, quantized(b, testModel(b, twinSpec(b, a)), quant.Options{}))
		b.Run(fmt.Sprintf("%s/int8/batch=%d/context=%d", a, batch, ctxLen), func(b *testing.B) {
			benchDecodePair(b, fp32, d, batch, ctxLen, "fp32-gqa", "int8")
		})
	}
}

// benchDecodePair runs decode steps of batch sequences at a context of
// ctxLen to ctxLen+64 on two decoders, A B B A, and reports their median
// step times and ratio as nameA and nameB.
func benchDecodePair(b *testing.B, da, db *Decoder, batch, ctxLen int, nameA, nameB string) {
	seqs := map[*Decoder][]models.StepSeq{da: fill(b, da, batch, ctxLen), db: fill(b, db, batch, ctxLen)}
	next := make([]int32, batch)
	var times abTimes
	for i := 0; b.Loop(); i++ {
		m := abba(i, da, db)
		if i > 0 && i%128 < 2 {
			// The sequences start anew every 64 steps of each, so that
			// the context stays within 256..320.
			b.StopTimer()
			for _, s := range seqs[m] {
				m.Free(s.ID)
			}
			seqs[m] = fill(b, m, batch, ctxLen)
			b.StartTimer()
		}
		t0 := time.Now()
		if err := m.Step(context.Background(), seqs[m], next); err != nil {
			b.Fatal(err)
		}
		times.add(m == db, time.Since(t0))
		for k := range seqs[m] {
			seqs[m][k].Past++
		}
	}
	times.report(b, nameA, nameB)
	for m, ss := range seqs {
		for _, s := range ss {
			m.Free(s.ID)
		}
	}
}

// BenchmarkQuantizedLookup measures the forms an int8 embedding table can
// be read in, on bert-base's word embeddings (30522×768) and a batch of
// 32×128 token ids: float32's Gather; the form models/quant writes (a
// Gather of int8 rows and one of their scales, Cast, Mul, standard
// operators); and ONNX Runtime's com.microsoft GatherBlockQuantized on
// the same rows stored as uint8 (v+128) with one block per row (block
// 1024, a power of two, as it requires). The three take turns; the metrics
// are their median times and the ratios to float32's.
func BenchmarkQuantizedLookup(b *testing.B) {
	requireRuntime(b)
	const vocab, width, ids = 30522, 768, 32 * 128
	dir := b.TempDir()
	src := filepath.Join(dir, "lookup.onnx")
	err := onnxgraph.WriteFile(src, func(w io.Writer) error {
		g := onnxgraph.NewGraph("lookup")
		in := g.Input("ids", onnxgraph.Int64, onnxgraph.Sym("n"))
		g.NodeOut("Gather", []string{g.Weight("table", []int64{vocab, width}, onnxgraph.Normal(1, "table", 0.02)), in}, []string{"y"})
		g.Output("y", onnxgraph.Float32, onnxgraph.Sym("n"), onnxgraph.Fixed(width))
		_, err := (&onnxgraph.Model{Graph: g}).WriteTo(w)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	rows := filepath.Join(dir, "rows.onnx")
	if _, err := quant.File(src, rows, quant.Options{}); err != nil {
		b.Fatal(err)
	}
	// GatherBlockQuantized on the same rows and scales.
	f, err := onnxgraph.Open(src)
	if err != nil {
		b.Fatal(err)
	}
	v, err := f.Float32s("table")
	if err != nil {
		b.Fatal(err)
	}
	q, sc, err := quant.Rows(v, vocab, width)
	if err != nil {
		b.Fatal(err)
	}
	raw := make([]byte, len(q))
	for i, x := range q {
		raw[i] = byte(int(x) + 128) // uint8 v+128: the default zero point of 8 bits
	}
	scaleRaw := make([]byte, 0, 4*len(sc))
	for _, x := range sc {
		scaleRaw = binary.LittleEndian.AppendUint32(scaleRaw, math.Float32bits(x))
	}
	f.RemoveInitializer("table")
	if err := f.SetInitializer("table_uint8", onnxgraph.Uint8, []int64{vocab, width}, raw); err != nil {
		b.Fatal(err)
	}
	if err := f.SetInitializer("scales", onnxgraph.Float32, []int64{vocab, 1}, scaleRaw); err != nil {
		b.Fatal(err)
	}
	f.Scopes()[0].SetNodes([]onnxgraph.Node{onnxgraph.NewNode("lookup", "GatherBlockQuantized", "com.microsoft",
		[]string{"table_uint8", "ids", "scales"}, []string{"y"},
		onnxgraph.Int("bits", 8), onnxgraph.Int("block_size", 1024), onnxgraph.Int("gather_axis", 0), onnxgraph.Int("quantize_axis", 1))})
	f.SetOpset("com.microsoft", 1)
	blocks := filepath.Join(dir, "blocks.onnx")
	err = onnxgraph.WriteFile(blocks, func(w io.Writer) error { _, err := f.WriteTo(w); return err })
	f.Close()
	if err != nil {
		b.Fatal(err)
	}

	opts, err := sessionOptions(models.Device{Kind: "cpu"}, 0, false)
	if err != nil {
		b.Fatal(err)
	}
	defer opts.Destroy()
	idv := make([]int64, ids)
	for i := range idv {
		idv[i] = int64(i*7919) % vocab
	}
	in, err := ort.NewTensor(ort.NewShape(ids), idv)
	if err != nil {
		b.Fatal(err)
	}
	defer in.Destroy()
	names := []string{"fp32", "rows", "blocks"}
	var sessions []*ort.DynamicAdvancedSession
	var outs [][]float32
	for _, path := range []string{src, rows, blocks} {
		s, err := ort.NewDynamicAdvancedSession(path, []string{"ids"}, []string{"y"}, opts)
		if err != nil {
			b.Fatal(err)
		}
		defer s.Destroy()
		sessions = append(sessions, s)
		out := []ort.Value{nil}
		if err := s.Run([]ort.Value{in}, out); err != nil {
			b.Fatal(err)
		}
		outs = append(outs, slices.Clone(out[0].(*ort.Tensor[float32]).GetData()))
		out[0].Destroy()
	}
	if !slices.Equal(outs[1], outs[2]) {
		b.Fatal("GatherBlockQuantized's rows differ from the int8 rows times their scales")
	}
	times := make([][]time.Duration, len(sessions))
	for i := 0; b.Loop(); i++ {
		for k := range sessions {
			k := (k + i) % len(sessions)
			out := []ort.Value{nil}
			t0 := time.Now()
			if err := sessions[k].Run([]ort.Value{in}, out); err != nil {
				b.Fatal(err)
			}
			times[k] = append(times[k], time.Since(t0))
			out[0].Destroy()
		}
	}
	base := medianMs(times[0])
	for k, name := range names {
		m := medianMs(times[k])
		b.ReportMetric(m, name+"-ms")
		if k > 0 && base > 0 {
			b.ReportMetric(m/base, name+"/fp32")
		}
	}
}
