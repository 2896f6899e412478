package llama

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inferhq/infer/models/llama/stories260k"
)

// stories is the built-in checkpoint's header.
var stories = Arch{Dim: 64, Hidden: 172, Layers: 5, Heads: 8, KVHeads: 4, Vocab: 512, Context: 512, Shared: true}

// Small random checkpoints with the shapes stories260k lacks.
var (
	// gqa has grouped-query attention and a classifier of its own.
	gqa = Arch{Dim: 32, Hidden: 48, Layers: 2, Heads: 4, KVHeads: 2, Vocab: 300, Context: 64}
	// mha has as many key/value heads as query heads, and a shared
	// classifier.
	mha = Arch{Dim: 24, Hidden: 40, Layers: 2, Heads: 3, KVHeads: 3, Vocab: 280, Context: 48, Shared: true}
	// mqa has one key/value head for all eight query heads.
	mqa = Arch{Dim: 32, Hidden: 64, Layers: 1, Heads: 8, KVHeads: 1, Vocab: 259, Context: 40}
)

// header returns the 7 int32 of c's header.
func header(c Arch) []byte {
	vocab := int32(c.Vocab)
	if !c.Shared {
		vocab = -vocab
	}
	var b bytes.Buffer
	for _, v := range []int32{int32(c.Dim), int32(c.Hidden), int32(c.Layers), int32(c.Heads), int32(c.KVHeads), vocab, int32(c.Context)} {
		binary.Write(&b, binary.LittleEndian, v)
	}
	return b.Bytes()
}

// randomCheckpoint returns a checkpoint of shape c with weights drawn from
// seed: norms near 1, matrices N(0, 1/in), so that activations stay in the
// range a trained model's have.
func randomCheckpoint(c Arch, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := bytes.NewBuffer(header(c))
	put := func(n int, f func() float64) {
		for range n {
			binary.Write(b, binary.LittleEndian, float32(f()))
		}
	}
	normal := func(std float64) func() float64 { return func() float64 { return r.NormFloat64() * std } }
	norm := func() float64 { return 1 + 0.2*r.NormFloat64() }
	d, h, kv, l := c.Dim, c.Hidden, c.KVDim(), c.Layers
	put(c.Vocab*d, normal(1))
	put(l*d, norm)
	put(l*d*d, normal(1/math.Sqrt(float64(d))))
	put(2*l*kv*d, normal(1/math.Sqrt(float64(d))))
	put(l*d*d, normal(1/math.Sqrt(float64(d))))
	put(l*d, norm)
	put(l*h*d, normal(1/math.Sqrt(float64(d))))
	put(l*d*h, normal(1/math.Sqrt(float64(h))))
	put(l*h*d, normal(1/math.Sqrt(float64(d))))
	put(d, norm)
	put(c.Context*c.HeadSize(), normal(1)) // the unused RoPE tables
	if !c.Shared {
		put(c.Vocab*d, normal(1/math.Sqrt(float64(d))))
	}
	return b.Bytes()
}

func readBytes(t testing.TB, b []byte) *Checkpoint {
	t.Helper()
	ck, err := Read(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	return ck
}

func TestStories260kHeader(t *testing.T) {
	ck := readBytes(t, stories260k.Checkpoint)
	if ck.Arch != stories {
		t.Errorf("header %+v, want %+v", ck.Arch, stories)
	}
	// llama2.c's README: 260K parameters.
	if got := ck.Params(); got != 260_032 {
		t.Errorf("Params() = %d, want 260,032", got)
	}
	if ck.Shape() != "L5/H64/A8/KV4/F172/V512/C512" || ck.HeadSize() != 8 || ck.KVDim() != 32 || ck.KVBytesPerToken() != 1280 {
		t.Errorf("shape %s, head size %d, kv dim %d, KV bytes per token %d", ck.Shape(), ck.HeadSize(), ck.KVDim(), ck.KVBytesPerToken())
	}
	hash, err := ck.Hash()
	if err != nil || hash != "b0a507e7ad0f626624f17112325e66691f9076d622e1d3274d103d00299f2696" {
		t.Errorf("Hash() = %s, %v", hash, err)
	}
	for _, c := range []Arch{gqa, mha, mqa} {
		if b := randomCheckpoint(c, 1); int64(len(b)) != c.FileSize() {
			t.Errorf("%s: %d bytes, FileSize() = %d", c.Shape(), len(b), c.FileSize())
		}
	}
}

// TestParseHeaderHostile: a file that is not a checkpoint of the size its
// header says gets an error that says so and what to do, before anything is
// allocated for it.
func TestParseHeaderHostile(t *testing.T) {
	valid := header(stories)
	size := stories.FileSize()
	with := func(i int, v int32) []byte {
		b := bytes.Clone(valid)
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
		return b
	}
	for _, tc := range []struct {
		name string
		b    []byte
		size int64
		want string
	}{
		{"empty", nil, 0, "too short"},
		{"a truncated checkpoint", valid, size - 1000, "truncated; download or export it again"},
		{"a header larger than the file", with(2, 6), size, "truncated"},
		{"a file larger than the header says", valid, size + 4, "the header does not match the file"},
		{"a separate classifier the file lacks", with(5, -512), size, "truncated"},
		{"a version 1 export", []byte("24ka\x01\x00\x00\x00" + strings.Repeat("\x00", 20)), size, "export.py --version 0"},
		{"dim 0", with(0, 0), size, "dim 0: want 1 to 32768"},
		{"negative dim", with(0, -64), size, "dim -64"},
		{"absurd dim", with(0, 1<<30), size, "dim 1073741824: want 1 to 32768"},
		{"absurd hidden", with(1, math.MaxInt32), size, "hidden_dim 2147483647"},
		{"absurd layers", with(2, 1<<20), size, "n_layers 1048576"},
		{"absurd vocab", with(5, math.MinInt32), size, "vocab_size -2147483648"},
		{"absurd seq_len", with(6, math.MaxInt32), size, "seq_len 2147483647"},
		{"more heads than dim", with(3, 65), size, "n_heads 65: want 1 to 64"},
		{"heads not dividing dim", with(3, 7), size, "7 heads do not divide dim 64"},
		{"kv heads not dividing heads", with(4, 3), size, "3 key/value heads do not divide 8 query heads"},
		{"more kv heads than heads", with(4, 16), size, "n_kv_heads 16: want 1 to 8"},
		{"odd head size", with(3, 64), size, "head size 1 is odd"},
		{"seq_len 1", with(6, 1), size, "seq_len 1: want at least 2"},
		{"a tokenizer file", stories260k.Tokenizer[:HeaderSize], int64(len(stories260k.Tokenizer)), "is this a llama2.c checkpoint?"},
	} {
		_, err := ParseHeader(tc.b, tc.size)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

// FuzzParseHeader: any header and size either is refused or describes a
// model within the bounds whose file has exactly that size.
func FuzzParseHeader(f *testing.F) {
	f.Add(header(stories), stories.FileSize())
	f.Add(header(gqa), gqa.FileSize())
	f.Add(header(mqa), int64(7))
	f.Add([]byte("24ka\x01\x00\x00\x00"), int64(100))
	f.Fuzz(func(t *testing.T, b []byte, size int64) {
		c, err := ParseHeader(b, size)
		if err != nil {
			return
		}
		if c.check() != nil || c.FileSize() != size || c.Dim > MaxDim || c.Vocab > MaxVocab || c.Context > MaxContext {
			t.Fatalf("accepted %+v for a file of %d bytes", c, size)
		}
		lay := c.layout()
		end := lay.rmsFinal.off + 4*int64(c.Dim)
		if !c.Shared {
			end = lay.wcls.off + 4*int64(c.Vocab*c.Dim)
		} else {
			end += 4 * int64(c.Context*c.HeadSize())
		}
		if end != size {
			t.Fatalf("%+v: the arrays end at %d, the file at %d", c, end, size)
		}
	})
}

func TestOpenFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "model.bin")
	b := randomCheckpoint(gqa, 1)
	if err := os.WriteFile(path, b[:len(b)-4], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenFile(path); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("OpenFile of a truncated checkpoint: %v", err)
	}
	if _, err := OpenFile(dir); err == nil || !strings.Contains(err.Error(), "directory") {
		t.Errorf("OpenFile of a directory: %v", err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	ck, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if ck.Arch != gqa {
		t.Errorf("header %+v, want %+v", ck.Arch, gqa)
	}
	// The classifier is the last array.
	w, err := ck.read(ck.layout().wcls, 0)
	if err != nil || len(w) != gqa.Vocab*gqa.Dim {
		t.Fatalf("read wcls: %d floats, %v", len(w), err)
	}
	if last := math.Float32frombits(binary.LittleEndian.Uint32(b[len(b)-4:])); w[len(w)-1] != last {
		t.Errorf("wcls ends with %g, the file with %g", w[len(w)-1], last)
	}
}
