package quant

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/inferhq/infer/models/onnxgraph"
)

// File quantises the model at in and writes it to out, atomically: a reader
// of out never sees a partial file, and on error nothing is left there. in
// and out must differ.
func File(in, out string, opts Options) (*Report, error) {
	if err := opts.Check(); err != nil {
		return nil, err
	}
	if same(in, out) {
		return nil, inputErrorf("the output %s is the input: write the quantised model to another file", out)
	}
	f, err := onnxgraph.Open(in)
	if err != nil {
		return nil, &InputError{err}
	}
	defer f.Close()
	rep, err := Rewrite(f, opts)
	if err != nil {
		return nil, fmt.Errorf("quantise %s: %w", in, err)
	}
	err = onnxgraph.WriteFile(out, func(w io.Writer) error {
		_, err := f.WriteTo(w)
		return err
	})
	if err != nil {
		return nil, err
	}
	return rep, nil
}

// same reports whether two paths name one file.
func same(a, b string) bool {
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	if err1 != nil || err2 != nil {
		return filepath.Clean(a) == filepath.Clean(b)
	}
	return os.SameFile(sa, sb)
}

// Ensure returns the path of src's quantised twin in cacheDir, quantising
// src into it first if it is not there: the model registry calls it to make
// a built-in's -int8 model on first use. The file is named after src and a
// hash of what determines its content (src's bytes, opts and the quantizer's
// Version), so an existing file is never stale and a changed src gets a new
// one; it is written atomically, so concurrent callers, in one process or
// several, are safe. Hashing src reads it once per call (a fraction of a
// second for BERT-base).
func Ensure(cacheDir, src string, opts Options) (string, error) {
	if err := opts.Check(); err != nil {
		return "", err
	}
	name, err := cacheName(src, opts)
	if err != nil {
		return "", err
	}
	return onnxgraph.EnsureFile(cacheDir, name, func(w io.Writer) error {
		f, err := onnxgraph.Open(src)
		if err != nil {
			return &InputError{err}
		}
		defer f.Close()
		if _, err := Rewrite(f, opts); err != nil {
			return fmt.Errorf("quantise %s: %w", src, err)
		}
		_, err = f.WriteTo(w)
		return err
	})
}

// cacheName returns the name Ensure gives src's quantised twin:
// "<src's name>-int8-<hash>.onnx" (int4 for 4-bit weights).
func cacheName(src string, opts Options) (string, error) {
	file, err := os.Open(src)
	if err != nil {
		return "", &InputError{fmt.Errorf("quantise: %w", err)}
	}
	defer file.Close()
	h := sha256.New()
	fmt.Fprintf(h, "quantizer=%s activations=%s per-tensor=%v bits=%d block=%d keep-head=%v keep-embeddings=%v exclude=%q\n",
		Version, opts.Activations, opts.PerTensor, opts.Bits, opts.Block, opts.KeepHead, opts.KeepEmbeddings, opts.Exclude)
	if _, err := io.Copy(h, file); err != nil {
		return "", fmt.Errorf("quantise: hash %s: %w", src, err)
	}
	base := strings.TrimSuffix(filepath.Base(src), ".onnx")
	return fmt.Sprintf("%s-int%d-%s.onnx", base, cmp.Or(opts.Bits, DefaultBits), hex.EncodeToString(h.Sum(nil)[:6])), nil
}

// Twins are the suffixes of built-in models' quantised twins and how each
// is made: bert-base-int8 is bert-base with the default options (int8);
// gpt2-small-int4 has 4-bit weights in blocks of 32.
var Twins = map[string]Options{
	"-int8": {},
	"-int4": {Bits: 4, Block: 32},
}

// Twin splits the name of a quantised twin ("gpt2-small-int8") into its
// original's name and the options that make it. ok is false for a name
// without a twin's suffix.
func Twin(name string) (base string, opts Options, ok bool) {
	for suffix, o := range Twins {
		if b, found := strings.CutSuffix(name, suffix); found && b != "" {
			return b, o, true
		}
	}
	return name, Options{}, false
}
