package tfjs

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writeModel writes a GraphModel into a new directory: model.json with the
// given manifest, and the shards with the given contents.
func writeModel(t *testing.T, weightsManifest string, shards map[string][]byte) string {
	t.Helper()
	dir := t.TempDir()
	mj := `{"modelTopology": {"node": [{"name": "x", "op": "Placeholder"}, {"name": "y", "op": "Relu", "input": ["x"]}]},
		"weightsManifest": ` + weightsManifest + `}`
	if err := os.WriteFile(filepath.Join(dir, ManifestFile), []byte(mj), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, data := range shards {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// le encodes values as 4-byte little-endian words.
func le(values ...any) []byte {
	var b bytes.Buffer
	for _, v := range values {
		if err := binary.Write(&b, binary.LittleEndian, v); err != nil {
			panic(err)
		}
	}
	return b.Bytes()
}

func TestOpen(t *testing.T) {
	// Group 0: a [2,3] float32 and an int32 scalar, across two shards that
	// split the float weight; group 1: a [0] weight and a [1] float.
	data := le(float32(1), float32(-2), float32(3.5), float32(math.Pi), float32(0), float32(-0.25), int32(-7))
	dir := writeModel(t, `[
		{"paths": ["s1", "s2"], "weights": [
			{"name": "w", "shape": [2, 3], "dtype": "float32"},
			{"name": "k", "shape": [], "dtype": "int32"}]},
		{"paths": ["g2"], "weights": [
			{"name": "empty", "shape": [0], "dtype": "float32"},
			{"name": "one", "shape": [1], "dtype": "float32"}]}]`,
		map[string][]byte{"s1": data[:10], "s2": data[10:], "g2": le(float32(42))})
	m, err := Open(dir, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Nodes) != 2 || m.Nodes[1].Op != "Relu" || !slices.Equal(m.Nodes[1].Input, []string{"x"}) {
		t.Errorf("Nodes = %+v", m.Nodes)
	}
	w, err := m.Float32("w", 2, 3)
	if want := []float32{1, -2, 3.5, math.Pi, 0, -0.25}; err != nil || !slices.Equal(w, want) {
		t.Errorf("Float32(w) = %v, %v; want %v", w, err, want)
	}
	if k, err := m.Int32("k"); err != nil || !slices.Equal(k, []int32{-7}) {
		t.Errorf("Int32(k) = %v, %v; want [-7]", k, err)
	}
	if e, err := m.Float32("empty", 0); err != nil || len(e) != 0 {
		t.Errorf("Float32(empty) = %v, %v", e, err)
	}
	if one, err := m.Float32("one", 1); err != nil || one[0] != 42 {
		t.Errorf("Float32(one) = %v, %v", one, err)
	}
	for _, tc := range []struct {
		name  string
		dtype DType
		shape []int
	}{
		{"w", Float32, []int{3, 2}},
		{"w", Int32, []int{2, 3}},
		{"k", Float32, nil},
		{"missing", Float32, nil},
	} {
		var err error
		if tc.dtype == Float32 {
			_, err = m.Float32(tc.name, tc.shape...)
		} else {
			_, err = m.Int32(tc.name, tc.shape...)
		}
		if err == nil {
			t.Errorf("%s %s %v: nil error", tc.name, tc.dtype, tc.shape)
		}
	}
}

// TestOpenRefuses: corrupt and hostile models are refused with an error
// naming the problem, before anything large is allocated.
func TestOpenRefuses(t *testing.T) {
	four := le(float32(1), float32(2), float32(3), float32(4))
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, four, 0o644); err != nil {
		t.Fatal(err)
	}
	w4 := `"weights": [{"name": "w", "shape": [4], "dtype": "float32"}]`
	for _, tc := range []struct {
		name, manifest string
		shards         map[string][]byte
		lim            Limits
		want           string
	}{
		{"parent path", `[{"paths": ["../secret"], ` + w4 + `}]`, nil, Limits{}, "not a file inside"},
		{"absolute path", `[{"paths": ["` + outside + `"], ` + w4 + `}]`, nil, Limits{}, "not a file inside"},
		{"backslash path", `[{"paths": ["..\\secret"], ` + w4 + `}]`, nil, Limits{}, "not a file inside"},
		{"empty path", `[{"paths": [""], ` + w4 + `}]`, nil, Limits{}, "not a file inside"},
		{"no shards", `[{"paths": [], ` + w4 + `}]`, nil, Limits{}, "no shards"},
		{"missing shard", `[{"paths": ["s"], ` + w4 + `}]`, nil, Limits{}, "shard s"},
		{"short shard", `[{"paths": ["s"], ` + w4 + `}]`, map[string][]byte{"s": four[:15]}, Limits{}, "truncated"},
		{"long shard", `[{"paths": ["s"], ` + w4 + `}]`, map[string][]byte{"s": append(four, 0)}, Limits{}, "more than the 16 bytes"},
		{"duplicate name", `[{"paths": ["s"], "weights": [{"name": "w", "shape": [2], "dtype": "float32"}, {"name": "w", "shape": [2], "dtype": "float32"}]}]`,
			map[string][]byte{"s": four}, Limits{}, "declared twice"},
		{"no name", `[{"paths": ["s"], "weights": [{"shape": [4], "dtype": "float32"}]}]`, map[string][]byte{"s": four}, Limits{}, "no name"},
		{"quantized", `[{"paths": ["s"], "weights": [{"name": "w", "shape": [4], "dtype": "float32", "quantization": {"dtype": "uint8", "min": 0, "scale": 1}}]}]`,
			map[string][]byte{"s": four}, Limits{}, "quantized"},
		{"string dtype", `[{"paths": ["s"], "weights": [{"name": "w", "shape": [4], "dtype": "string"}]}]`, map[string][]byte{"s": four}, Limits{}, "data type"},
		{"negative dimension", `[{"paths": ["s"], "weights": [{"name": "w", "shape": [-4], "dtype": "float32"}]}]`, map[string][]byte{"s": four}, Limits{}, "negative"},
		{"overflowing shape", `[{"paths": ["s"], "weights": [{"name": "w", "shape": [4294967296, 4294967296, 4294967296], "dtype": "float32"}]}]`,
			map[string][]byte{"s": four}, Limits{}, "exceeds the limit"},
		{"huge shape", `[{"paths": ["s"], "weights": [{"name": "w", "shape": [1073741824], "dtype": "float32"}]}]`,
			map[string][]byte{"s": four}, Limits{}, "exceeds the limit"},
		{"over the byte limit in all", `[{"paths": ["s"], "weights": [{"name": "a", "shape": [2], "dtype": "float32"}, {"name": "b", "shape": [2], "dtype": "float32"}]}]`,
			map[string][]byte{"s": four}, Limits{MaxWeightBytes: 12}, "exceeds the limit"},
		{"too many weights", `[{"paths": ["s"], "weights": [{"name": "a", "shape": [2], "dtype": "float32"}, {"name": "b", "shape": [2], "dtype": "float32"}]}]`,
			map[string][]byte{"s": four}, Limits{MaxTensors: 1}, "more than 1 weights"},
		{"rank", `[{"paths": ["s"], "weights": [{"name": "w", "shape": [1,1,1,1,1,1,1,1,4], "dtype": "float32"}]}]`,
			map[string][]byte{"s": four}, Limits{}, "rank"},
		{"not JSON", `[`, nil, Limits{}, "model.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeModel(t, tc.manifest, tc.shards)
			_, err := Open(dir, tc.lim)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Open = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestOpenRefusesLargeManifest(t *testing.T) {
	dir := writeModel(t, `[]`, nil)
	if _, err := Open(dir, Limits{MaxManifestBytes: 10}); err == nil || !strings.Contains(err.Error(), "larger than 10 bytes") {
		t.Errorf("Open = %v, want the manifest refused as too large", err)
	}
	if _, err := Read([]byte(`{"weightsManifest": []}`), nil, Limits{}); err == nil || !strings.Contains(err.Error(), "not a GraphModel") {
		t.Errorf("Read without modelTopology = %v", err)
	}
}

// FuzzRead: no manifest, however hostile, makes Read panic or return a
// weight whose data disagrees with its shape.
func FuzzRead(f *testing.F) {
	f.Add([]byte(`{"modelTopology": {}, "weightsManifest": [{"paths": ["s"], "weights": [{"name": "w", "shape": [2, 2], "dtype": "float32"}]}]}`), []byte("0123456789abcdef"))
	f.Add([]byte(`{"modelTopology": {"node": [{"name": "a", "op": "Const", "attr": {"value": {"tensor": {}}}}]}, "weightsManifest": []}`), []byte{})
	f.Fuzz(func(t *testing.T, manifestJSON, shard []byte) {
		if !json.Valid(manifestJSON) {
			return
		}
		m, err := Read(manifestJSON, func(string) (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(shard)), nil
		}, Limits{MaxWeightBytes: 1 << 16})
		if err != nil {
			return
		}
		for _, tn := range m.Tensors {
			if n := tn.Size(); len(tn.F32)+len(tn.I32) != n {
				t.Fatalf("weight %q of shape %v holds %d values", tn.Name, tn.Shape, len(tn.F32)+len(tn.I32))
			}
		}
	})
}
