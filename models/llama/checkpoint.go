package llama

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"sync"
)

// A llama2.c checkpoint in the legacy (version 0) format is a header of 7
// little-endian int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads,
// vocab_size, seq_len), then float32 arrays in this order (matrices
// row-major [out, in]): token_embedding [vocab, dim]; rms_att [layers, dim];
// wq [layers, dim, dim]; wk, wv [layers, kv_dim, dim]; wo [layers, dim,
// dim]; rms_ffn [layers, dim]; w1 [layers, hidden, dim]; w2 [layers, dim,
// hidden]; w3 [layers, hidden, dim]; rms_final [dim]; two legacy RoPE tables
// [seq_len, head_size/2] (unused); and, when vocab_size is negative, the
// classifier wcls [vocab, dim]. kv_dim = dim · n_kv_heads / n_heads.

// HeaderSize is the size of a checkpoint's header in bytes.
const HeaderSize = 7 * 4

// Bounds on a checkpoint's header, checked before anything is allocated
// for it: Llama 2 70B has dim 8192, hidden 28672, 80 layers, 64 heads and
// a vocabulary of 32,000.
const (
	MaxDim     = 1 << 15
	MaxHidden  = 1 << 17
	MaxLayers  = 1 << 10
	MaxVocab   = 1 << 20
	MaxContext = 1 << 20
)

// versionMagic starts the files of llama2.c's newer export formats
// (version 1 and 2): "ak42" as a little-endian uint32.
const versionMagic = 0x616b3432

// Arch is a checkpoint's header: the shape of the model.
type Arch struct {
	Dim     int // width of the residual stream
	Hidden  int // width of the feed-forward layer
	Layers  int
	Heads   int // query heads
	KVHeads int // key and value heads; each serves Heads/KVHeads query heads
	Vocab   int
	Context int // seq_len: the most positions of one sequence
	// Shared says the classifier is the token embedding table (a positive
	// vocab_size in the header).
	Shared bool
}

// HeadSize is the width of one attention head.
func (c Arch) HeadSize() int { return c.Dim / c.Heads }

// KVDim is the width of the keys (and of the values) of one position.
func (c Arch) KVDim() int { return c.Dim / c.Heads * c.KVHeads }

// Shape returns the configuration as "L5/H64/A8/KV4/F172/V512/C512".
func (c Arch) Shape() string {
	return "L" + strconv.Itoa(c.Layers) + "/H" + strconv.Itoa(c.Dim) + "/A" + strconv.Itoa(c.Heads) +
		"/KV" + strconv.Itoa(c.KVHeads) + "/F" + strconv.Itoa(c.Hidden) + "/V" + strconv.Itoa(c.Vocab) +
		"/C" + strconv.Itoa(c.Context)
}

// Params returns the number of weights the model computes with: the
// embedding table, the blocks, the final norm and, unless shared, the
// classifier (not the unused RoPE tables).
func (c Arch) Params() int64 {
	d, h, kv, l, v := int64(c.Dim), int64(c.Hidden), int64(c.KVDim()), int64(c.Layers), int64(c.Vocab)
	n := v*d + l*(2*d+2*d*d+2*kv*d+3*h*d) + d
	if !c.Shared {
		n += v * d
	}
	return n
}

// KVBytesPerToken is the size of one token's keys and values over all
// layers, in float32.
func (c Arch) KVBytesPerToken() int64 { return int64(2*c.Layers*c.KVDim()) * 4 }

// floats returns the number of float32 that follow the header.
func (c Arch) floats() int64 {
	return c.Params() + int64(c.Context)*int64(c.HeadSize()) // and the two RoPE tables of [seq_len, head_size/2]
}

// FileSize returns the size of a checkpoint with this header.
func (c Arch) FileSize() int64 { return HeaderSize + 4*c.floats() }

// ParseHeader reads a checkpoint's header from its first HeaderSize bytes
// and checks it against the file's size. The error says what is wrong and
// what to do.
func ParseHeader(b []byte, size int64) (Arch, error) {
	if len(b) < HeaderSize || size < HeaderSize {
		return Arch{}, fmt.Errorf("%d bytes: too short for a llama2.c checkpoint (a header of %d bytes, then the weights)", size, HeaderSize)
	}
	if binary.LittleEndian.Uint32(b) == versionMagic {
		v := binary.LittleEndian.Uint32(b[4:])
		return Arch{}, fmt.Errorf("llama2.c's version %d export format: infer reads the legacy (version 0) format; "+
			"export the model again with llama2.c's export.py --version 0", v)
	}
	var h [7]int64
	for i := range h {
		h[i] = int64(int32(binary.LittleEndian.Uint32(b[4*i:])))
	}
	c := Arch{Dim: int(h[0]), Hidden: int(h[1]), Layers: int(h[2]), Heads: int(h[3]), KVHeads: int(h[4]),
		Vocab: int(h[5]), Context: int(h[6]), Shared: h[5] > 0}
	if h[5] < 0 {
		c.Vocab = int(-h[5])
	}
	if err := c.check(); err != nil {
		return Arch{}, fmt.Errorf("header (dim %d, hidden_dim %d, n_layers %d, n_heads %d, n_kv_heads %d, vocab_size %d, seq_len %d): %w; "+
			"is this a llama2.c checkpoint?", h[0], h[1], h[2], h[3], h[4], h[5], h[6], err)
	}
	switch want := c.FileSize(); {
	case size < want:
		return Arch{}, fmt.Errorf("the header (%s) needs %d bytes and the file has %d: the checkpoint is truncated; download or export it again",
			c.Shape(), want, size)
	case size > want:
		return Arch{}, fmt.Errorf("the header (%s, classifier %s) needs %d bytes and the file has %d: the header does not match the file "+
			"(not a legacy llama2.c checkpoint, or a damaged one)", c.Shape(), c.classifier(), want, size)
	}
	return c, nil
}

func (c Arch) classifier() string {
	if c.Shared {
		return "shared"
	}
	return "separate"
}

// check reports a shape out of bounds or one the model cannot have.
func (c Arch) check() error {
	for _, f := range []struct {
		name    string
		v, most int
	}{
		{"dim", c.Dim, MaxDim}, {"hidden_dim", c.Hidden, MaxHidden}, {"n_layers", c.Layers, MaxLayers},
		{"n_heads", c.Heads, c.Dim}, {"n_kv_heads", c.KVHeads, c.Heads}, {"vocab_size", c.Vocab, MaxVocab},
		{"seq_len", c.Context, MaxContext},
	} {
		if f.v < 1 || f.v > f.most {
			return fmt.Errorf("%s %d: want 1 to %d", f.name, f.v, f.most)
		}
	}
	switch {
	case c.Dim%c.Heads != 0:
		return fmt.Errorf("%d heads do not divide dim %d", c.Heads, c.Dim)
	case c.Heads%c.KVHeads != 0:
		return fmt.Errorf("%d key/value heads do not divide %d query heads", c.KVHeads, c.Heads)
	case c.HeadSize()%2 != 0:
		return fmt.Errorf("head size %d is odd: rotary positions rotate pairs", c.HeadSize())
	case c.Context < 2:
		return fmt.Errorf("seq_len %d: want at least 2", c.Context)
	}
	return nil
}

// Checkpoint is an open llama2.c checkpoint: its header, and its weights
// read from the file when they are needed.
type Checkpoint struct {
	Arch
	r    io.ReaderAt
	size int64
	c    io.Closer // the file, if Open opened one

	hashOnce sync.Once
	hash     string
	hashErr  error
}

// Read returns the checkpoint held by r, of size bytes. It reads the
// header only.
func Read(r io.ReaderAt, size int64) (*Checkpoint, error) {
	var b [HeaderSize]byte
	if size >= HeaderSize {
		if _, err := r.ReadAt(b[:], 0); err != nil {
			return nil, err
		}
	}
	c, err := ParseHeader(b[:], size)
	if err != nil {
		return nil, err
	}
	return &Checkpoint{Arch: c, r: r, size: size}, nil
}

// OpenFile opens the checkpoint at path. It reads the header only; Close
// closes the file.
func OpenFile(path string) (*Checkpoint, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	if st.IsDir() {
		f.Close()
		return nil, fmt.Errorf("checkpoint %s is a directory: name the .bin file", path)
	}
	ck, err := Read(f, st.Size())
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	ck.c = f
	return ck, nil
}

// Close closes the checkpoint's file, if OpenFile opened one.
func (ck *Checkpoint) Close() error {
	if ck.c == nil {
		return nil
	}
	return ck.c.Close()
}

// Hash returns the hex SHA-256 of the whole checkpoint, computed on the
// first call.
func (ck *Checkpoint) Hash() (string, error) {
	ck.hashOnce.Do(func() {
		h := sha256.New()
		if _, err := io.Copy(h, io.NewSectionReader(ck.r, 0, ck.size)); err != nil {
			ck.hashErr = fmt.Errorf("checkpoint: %w", err)
			return
		}
		ck.hash = hex.EncodeToString(h.Sum(nil))
	})
	return ck.hash, ck.hashErr
}

// tensor is one of the checkpoint's arrays: layers of rows × cols floats
// (layers 1 for the arrays that are not per layer).
type tensor struct {
	off                int64 // in bytes, from the start of the file
	layers, rows, cols int
}

// layerSize is the floats of one layer of t.
func (t tensor) layerSize() int { return t.rows * t.cols }

// tensors are the arrays of a checkpoint, by llama2.c's names.
type tensors struct {
	tokenEmbedding, rmsAtt, wq, wk, wv, wo, rmsFFN, w1, w2, w3, rmsFinal, wcls tensor
}

// layout returns where each array lies in the file.
func (c Arch) layout() tensors {
	off := int64(HeaderSize)
	next := func(layers, rows, cols int) tensor {
		t := tensor{off: off, layers: layers, rows: rows, cols: cols}
		off += 4 * int64(layers) * int64(rows) * int64(cols)
		return t
	}
	d, l := c.Dim, c.Layers
	var t tensors
	t.tokenEmbedding = next(1, c.Vocab, d)
	t.rmsAtt = next(l, 1, d)
	t.wq = next(l, d, d)
	t.wk = next(l, c.KVDim(), d)
	t.wv = next(l, c.KVDim(), d)
	t.wo = next(l, d, d)
	t.rmsFFN = next(l, 1, d)
	t.w1 = next(l, c.Hidden, d)
	t.w2 = next(l, d, c.Hidden)
	t.w3 = next(l, c.Hidden, d)
	t.rmsFinal = next(1, 1, d)
	next(2, c.Context, c.HeadSize()/2) // the legacy RoPE tables
	t.wcls = t.tokenEmbedding
	if !c.Shared {
		t.wcls = next(1, c.Vocab, d)
	}
	return t
}

// read returns layer l of t.
func (ck *Checkpoint) read(t tensor, l int) ([]float32, error) {
	n := t.layerSize()
	b := make([]byte, 4*n)
	if _, err := ck.r.ReadAt(b, t.off+4*int64(l)*int64(n)); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	v := make([]float32, n)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v, nil
}
