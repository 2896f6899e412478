// Package tfjs reads a TensorFlow.js GraphModel: model.json, which holds the
// graph's nodes and a manifest of its weights (name, shape, data type, in the
// order they are stored), and the binary shards the weights are stored in,
// raw little-endian, each group's weights back to back across its shards.
//
// Everything read is checked against bounds before anything is allocated
// from it, so that a hostile or corrupt model.json cannot make the reader
// allocate without limit, read outside its directory, or return a weight
// whose data disagrees with its shape.
package tfjs

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ManifestFile is the name of a GraphModel's graph and manifest.
const ManifestFile = "model.json"

// Defaults of Limits.
const (
	DefaultMaxManifestBytes = 64 << 20
	DefaultMaxWeightBytes   = 1 << 30
	DefaultMaxTensors       = 1 << 16
	maxRank                 = 8
)

// Limits bound what Read accepts. The zero value takes the defaults.
type Limits struct {
	// MaxManifestBytes bounds model.json. Default 64 MiB.
	MaxManifestBytes int64
	// MaxWeightBytes bounds the weights in all, as the manifest declares
	// them and as the shards hold them. Default 1 GiB.
	MaxWeightBytes int64
	// MaxTensors bounds the number of weights. Default 65536.
	MaxTensors int
}

func (l Limits) withDefaults() Limits {
	if l.MaxManifestBytes <= 0 {
		l.MaxManifestBytes = DefaultMaxManifestBytes
	}
	if l.MaxWeightBytes <= 0 {
		l.MaxWeightBytes = DefaultMaxWeightBytes
	}
	if l.MaxTensors <= 0 {
		l.MaxTensors = DefaultMaxTensors
	}
	return l
}

// DType is a weight's element type.
type DType string

// The element types Read supports: 4 bytes each, as TensorFlow.js stores
// them unquantized.
const (
	Float32 DType = "float32"
	Int32   DType = "int32"
)

// Tensor is one weight. Exactly one of F32 and I32 holds its data, by
// DType, in row-major order.
type Tensor struct {
	Name  string
	Shape []int
	DType DType
	F32   []float32
	I32   []int32
}

// Size returns the number of elements.
func (t *Tensor) Size() int { return elements(t.Shape) }

// Node is one node of the graph, with its attributes undecoded.
type Node struct {
	Name  string                     `json:"name"`
	Op    string                     `json:"op"`
	Input []string                   `json:"input"`
	Attr  map[string]json.RawMessage `json:"attr"`
}

// Model is a GraphModel's graph and weights.
type Model struct {
	Nodes   []Node
	Tensors []Tensor // in the manifest's order
	byName  map[string]int
}

// manifest is model.json's layout, as far as it is read.
type manifest struct {
	ModelTopology *struct {
		Node []Node `json:"node"`
	} `json:"modelTopology"`
	WeightsManifest []group `json:"weightsManifest"`
}

type group struct {
	Paths   []string `json:"paths"`
	Weights []spec   `json:"weights"`
}

type spec struct {
	Name         string          `json:"name"`
	Shape        []int64         `json:"shape"`
	DType        DType           `json:"dtype"`
	Quantization json.RawMessage `json:"quantization"`
}

// Open reads the GraphModel in dir: dir/model.json and the shards it names,
// which must lie in dir.
func Open(dir string, lim Limits) (*Model, error) {
	lim = lim.withDefaults()
	data, err := readAtMost(filepath.Join(dir, ManifestFile), lim.MaxManifestBytes)
	if err != nil {
		return nil, err
	}
	return Read(data, func(path string) (io.ReadCloser, error) {
		return os.Open(filepath.Join(dir, filepath.FromSlash(path)))
	}, lim)
}

// readAtMost reads the file at path, refusing one larger than limit bytes.
func readAtMost(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tfjs: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("tfjs: read %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("tfjs: %s is larger than %d bytes", path, limit)
	}
	return data, nil
}

// Read parses model.json's content and reads the weights from the shards
// that open returns by their manifest path. A path must be local (relative,
// without ".."), so that a manifest cannot name a file outside the model's
// directory.
func Read(manifestJSON []byte, open func(path string) (io.ReadCloser, error), lim Limits) (*Model, error) {
	lim = lim.withDefaults()
	if int64(len(manifestJSON)) > lim.MaxManifestBytes {
		return nil, fmt.Errorf("tfjs: %s is larger than %d bytes", ManifestFile, lim.MaxManifestBytes)
	}
	var mf manifest
	if err := json.Unmarshal(manifestJSON, &mf); err != nil {
		return nil, fmt.Errorf("tfjs: %s: %w", ManifestFile, err)
	}
	if mf.ModelTopology == nil {
		return nil, fmt.Errorf("tfjs: %s has no modelTopology: not a GraphModel", ManifestFile)
	}
	m := &Model{Nodes: mf.ModelTopology.Node, byName: map[string]int{}}
	// Check the whole manifest before reading or allocating anything.
	var total int64
	count := 0
	for gi, g := range mf.WeightsManifest {
		if len(g.Weights) > 0 && len(g.Paths) == 0 {
			return nil, fmt.Errorf("tfjs: weight group %d has weights and no shards", gi)
		}
		for _, p := range g.Paths {
			if !filepath.IsLocal(filepath.FromSlash(p)) || strings.Contains(p, "\\") {
				return nil, fmt.Errorf("tfjs: weight group %d: shard path %q is not a file inside the model's directory", gi, p)
			}
		}
		for _, w := range g.Weights {
			if count++; count > lim.MaxTensors {
				return nil, fmt.Errorf("tfjs: more than %d weights", lim.MaxTensors)
			}
			if _, dup := m.byName[w.Name]; dup {
				return nil, fmt.Errorf("tfjs: weight %q is declared twice", w.Name)
			}
			n, err := w.check(lim.MaxWeightBytes - total)
			if err != nil {
				return nil, err
			}
			total += n * 4
			m.byName[w.Name] = -1
		}
	}
	for gi, g := range mf.WeightsManifest {
		if err := m.readGroup(gi, g, open); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// check validates a weight's declaration and returns its element count,
// whose bytes must fit in budget.
func (w spec) check(budget int64) (int64, error) {
	switch {
	case w.Name == "":
		return 0, errors.New("tfjs: a weight has no name")
	case len(w.Quantization) > 0 && string(w.Quantization) != "null":
		return 0, fmt.Errorf("tfjs: weight %q is quantized, which this reader does not support", w.Name)
	case w.DType != Float32 && w.DType != Int32:
		return 0, fmt.Errorf("tfjs: weight %q has data type %q; supported: %s, %s", w.Name, w.DType, Float32, Int32)
	case len(w.Shape) > maxRank:
		return 0, fmt.Errorf("tfjs: weight %q has rank %d; at most %d", w.Name, len(w.Shape), maxRank)
	}
	n := int64(1)
	for _, d := range w.Shape {
		if d < 0 {
			return 0, fmt.Errorf("tfjs: weight %q has shape %v: a negative dimension", w.Name, w.Shape)
		}
		if d > 0 && n > budget/4/d {
			return 0, fmt.Errorf("tfjs: weight %q of shape %v exceeds the limit on weight bytes", w.Name, w.Shape)
		}
		n *= d
	}
	if n*4 > budget {
		return 0, fmt.Errorf("tfjs: weight %q of shape %v exceeds the limit on weight bytes", w.Name, w.Shape)
	}
	return n, nil
}

// readGroup reads a group's weights from its shards, read back to back,
// which must hold exactly the weights' bytes.
func (m *Model) readGroup(gi int, g group, open func(string) (io.ReadCloser, error)) error {
	r := &shards{paths: g.Paths, open: open}
	defer r.close()
	buf := make([]byte, 64<<10)
	var offset int64
	for _, w := range g.Weights {
		t := Tensor{Name: w.Name, DType: w.DType, Shape: make([]int, len(w.Shape))}
		for i, d := range w.Shape {
			t.Shape[i] = int(d)
		}
		n := t.Size()
		switch w.DType {
		case Float32:
			t.F32 = make([]float32, n)
		case Int32:
			t.I32 = make([]int32, n)
		}
		for done := 0; done < n; {
			c := min(n-done, len(buf)/4)
			if _, err := io.ReadFull(r, buf[:4*c]); err != nil {
				if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
					return fmt.Errorf("tfjs: weight group %d: its shards end within weight %q (at byte %d of the group; the weight ends at byte %d): a truncated or mismatched download",
						gi, w.Name, offset, offset+4*int64(n-done))
				}
				return fmt.Errorf("tfjs: weight group %d: %w", gi, err)
			}
			for i := range c {
				v := binary.LittleEndian.Uint32(buf[4*i:])
				if t.F32 != nil {
					t.F32[done+i] = math.Float32frombits(v)
				} else {
					t.I32[done+i] = int32(v)
				}
			}
			done += c
			offset += 4 * int64(c)
		}
		m.byName[w.Name] = len(m.Tensors)
		m.Tensors = append(m.Tensors, t)
	}
	var extra [1]byte
	switch n, err := io.ReadFull(r, extra[:]); {
	case n > 0:
		return fmt.Errorf("tfjs: weight group %d: its shards hold more than the %d bytes of its weights", gi, offset)
	case err != nil && !errors.Is(err, io.EOF):
		return fmt.Errorf("tfjs: weight group %d: %w", gi, err)
	}
	return nil
}

// shards reads a group's shard files back to back, opening each in turn.
type shards struct {
	paths []string
	open  func(string) (io.ReadCloser, error)
	cur   io.ReadCloser
}

func (s *shards) Read(p []byte) (int, error) {
	for {
		if s.cur == nil {
			if len(s.paths) == 0 {
				return 0, io.EOF
			}
			f, err := s.open(s.paths[0])
			if err != nil {
				return 0, fmt.Errorf("shard %s: %w", s.paths[0], err)
			}
			s.cur, s.paths = f, s.paths[1:]
		}
		n, err := s.cur.Read(p)
		if errors.Is(err, io.EOF) {
			s.cur.Close()
			s.cur = nil
			if n == 0 {
				continue
			}
			err = nil
		}
		return n, err
	}
}

func (s *shards) close() {
	if s.cur != nil {
		s.cur.Close()
	}
}

// Tensor returns the weight called name.
func (m *Model) Tensor(name string) (*Tensor, bool) {
	i, ok := m.byName[name]
	if !ok || i < 0 {
		return nil, false
	}
	return &m.Tensors[i], true
}

// Float32 returns the data of the float32 weight called name, which must
// have the given shape.
func (m *Model) Float32(name string, shape ...int) ([]float32, error) {
	t, err := m.want(name, Float32, shape)
	if err != nil {
		return nil, err
	}
	return t.F32, nil
}

// Int32 returns the data of the int32 weight called name, which must have
// the given shape.
func (m *Model) Int32(name string, shape ...int) ([]int32, error) {
	t, err := m.want(name, Int32, shape)
	if err != nil {
		return nil, err
	}
	return t.I32, nil
}

func (m *Model) want(name string, dtype DType, shape []int) (*Tensor, error) {
	t, ok := m.Tensor(name)
	switch {
	case !ok:
		return nil, fmt.Errorf("tfjs: no weight %q", name)
	case t.DType != dtype:
		return nil, fmt.Errorf("tfjs: weight %q is %s, want %s", name, t.DType, dtype)
	case !slices.Equal(t.Shape, shape):
		return nil, fmt.Errorf("tfjs: weight %q has shape %v, want %v", name, t.Shape, shape)
	}
	return t, nil
}

func elements(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}
