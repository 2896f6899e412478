package registry

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/onnx"
	"github.com/inferhq/infer/models/quant"
)

// Quantised twins: every built-in that runs on ONNX Runtime has an -int8
// twin (bert-base-int8, gpt2-small-int8), and every such decoder an -int4
// one (4-bit weights in blocks of 32, ONNX Runtime's MatMulNBits). A twin
// opens its original with a Runtime.Rewrite that quantises the original's
// graph into the cache on first use (models/quant.Ensure, written
// atomically and named by a hash of the graph and the options), so a model
// added to the table gets its twins with no change here, provided its open
// passes Settings' runtime to models/onnx, as every ONNX-backed entry does.

// TwinSuffixes are the suffixes of the twins, in the order they are
// listed, with the kinds of model that have them, and whether the twin of
// a decoder that has a graph with an int8 KV cache (Entry.KVInt8BytesPerToken)
// is made from that graph: gpt2-small-int8 keeps its KV cache in int8 (a
// quarter of the bytes, in GroupQueryAttention, kvInt8Spec), and its decode
// step at 16 sequences of 256 tokens ran 1.78–2.05 times as fast as
// gpt2-small's through the decoder (median 1.94 of twelve quiet runs),
// against 1.49–1.65 with the twins' earlier int8 cache (a scale per token)
// and about 1.4 with a float32 one (docs/quantization.md). The int4 twins
// keep float32's.
var TwinSuffixes = []struct {
	Suffix string
	Kinds  []Kind
	KVInt8 bool
}{
	{"-int8", []Kind{Encoder, Decoder}, true},
	{"-int4", []Kind{Decoder}, false},
}

// twins returns the twins of the built-ins in es, in table order: each
// original's after it.
func twins(es []Entry) []Entry {
	var out []Entry
	for _, e := range es {
		out = append(out, e)
		if e.Name == "" || e.Simulated {
			continue
		}
		for _, t := range TwinSuffixes {
			if slices.Contains(t.Kinds, e.Kind) {
				out = append(out, twin(e, t.Suffix))
			}
		}
	}
	return out
}

// errNoRewrite is a twin's error when its original loaded without the
// runtime's Rewrite: it would be the original under the twin's name.
var errNoRewrite = errors.New("its original does not load through models/onnx with the registry's runtime: it has no quantised twin")

// twin returns the twin of e named with suffix, one of quant.Twins.
func twin(e Entry, suffix string) Entry {
	opts := quant.Twins[suffix]
	t := e
	t.Name, t.Aliases, t.Of = e.Name+suffix, nil, e.Name
	t.Cached, t.Write = nil, nil
	kvInt8 := false
	for _, ts := range TwinSuffixes {
		if ts.Suffix == suffix && ts.KVInt8 && e.KVInt8BytesPerToken > 0 {
			kvInt8 = true
			t.Listing.KVBytesPerToken = e.KVInt8BytesPerToken
		}
	}
	rewrite := func(s Settings, used *bool) Settings {
		s.kvInt8 = kvInt8
		s.rewrite = &onnx.Rewrite{Suffix: suffix, File: func(src string) (string, error) {
			*used = true
			start := time.Now()
			path, err := quant.Ensure(s.cacheDir(), src, opts)
			if err != nil {
				return "", fmt.Errorf("built-in model %s: %w", t.Name, err)
			}
			s.logger().Info("built-in model", "name", t.Name, "from", src, "path", path, "took", time.Since(start).Round(time.Millisecond))
			settle()
			return path, nil
		}}
		return s
	}
	if e.OpenEncoder != nil {
		t.OpenEncoder = func(path string, s Settings) (models.Factory, error) {
			var used bool
			f, err := e.OpenEncoder(path, rewrite(s, &used))
			if err == nil && !used {
				f.Close()
				return nil, fmt.Errorf("%s: %w", t.Name, errNoRewrite)
			}
			return f, err
		}
	}
	if e.OpenDecoder != nil {
		t.OpenDecoder = func(path string, s Settings) (models.DecoderFactory, error) {
			var used bool
			f, err := e.OpenDecoder(path, rewrite(s, &used))
			if err == nil && !used {
				f.Close()
				return nil, fmt.Errorf("%s: %w", t.Name, errNoRewrite)
			}
			return f, err
		}
	}
	return t
}

// errGraph stops the open of Graph once the graph's file is known.
var errGraph = errors.New("graph found")

// Graph returns the ONNX graph file of m for s.Task: a path as it is, a
// built-in's generated into the cache on first use (a twin's quantised
// too). It opens the model as far as its graph's file and no further: no
// ONNX Runtime session, and the library is not loaded. infer models
// quantize takes a built-in's graph so.
func (m Model) Graph(s Settings) (string, error) {
	if m.Of != "" {
		return "", fmt.Errorf("%s is a quantised twin of %s: %w", m.Name, m.Of, quant.ErrQuantized)
	}
	var graph string
	s.rewrite = &onnx.Rewrite{File: func(path string) (string, error) {
		graph = path
		return "", errGraph
	}}
	var err error
	switch m.Kind {
	case Encoder:
		_, err = m.Encoder(s)
	case Decoder:
		_, err = m.Decoder(s)
	}
	switch {
	case errors.Is(err, errGraph):
		return graph, nil
	case err != nil:
		return "", err
	}
	return "", fmt.Errorf("%s: %w", m, errNoRewrite)
}
