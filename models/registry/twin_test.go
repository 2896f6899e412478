package registry

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/bert"
	"github.com/inferhq/infer/models/gpt2"
	"github.com/inferhq/infer/models/onnx"
	"github.com/inferhq/infer/models/onnx/onnxtest"
	"github.com/inferhq/infer/models/onnxgraph"
	"github.com/inferhq/infer/models/quant"
	"github.com/inferhq/infer/models/sim"
)

// Every built-in with weights has an -int8 twin, and every such decoder an
// -int4 one, derived from the table; the simulated models have none.
func TestTwinsOfEveryBuiltin(t *testing.T) {
	for _, e := range entries {
		if e.Name == "" || e.Of != "" {
			continue
		}
		for _, ts := range TwinSuffixes {
			m, err := Lookup(e.Name + ts.Suffix)
			want := !e.Simulated && (ts.Suffix == "-int8" || e.Kind == Decoder)
			switch {
			case want && (err != nil || m.Of != e.Name || m.Kind != e.Kind || m.Context != e.Context || m.Engine != e.Engine):
				t.Errorf("Lookup(%s%s) = %+v, %v; want the twin of %s", e.Name, ts.Suffix, m.Entry, err, e.Name)
			case !want && err == nil:
				t.Errorf("Lookup(%s%s) = %s; want no such model", e.Name, ts.Suffix, m)
			}
		}
	}
	if m, err := Lookup("BERT-Mini-INT8"); err != nil || m.Name != "bert-mini-int8" {
		t.Errorf("Lookup(BERT-Mini-INT8) = %v, %v", m, err)
	}
}

// A twin is quantised into the cache on first use, once, under the twin's
// name; Graph gives a built-in's float32 graph without loading it.
func TestOpenTwins(t *testing.T) {
	cache := t.TempDir()
	var logs bytes.Buffer
	s := Settings{CacheDir: cache, Task: "embed", Logger: slogTo(&logs)}
	m, _ := Lookup("bert-tiny-int8")
	f, err := m.Encoder(s)
	onnxtest.SkipWithoutRuntime(t, err)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if info := f.Info(); info.Name != "bert-tiny-int8" || info.Task != "embed" {
		t.Errorf("bert-tiny-int8 = %+v", info)
	}
	path := f.(*onnx.Factory).Path()
	info, err := onnxgraph.Inspect(path)
	if err != nil || !strings.HasPrefix(info.Metadata[quant.MetaQuantization], "int8") || filepath.Dir(path) != cache {
		t.Errorf("bert-tiny-int8 loaded %s (%v): want a quantised graph in the cache", path, err)
	}
	if !strings.Contains(logs.String(), "name=bert-tiny-int8") {
		t.Errorf("log = %s", logs.String())
	}
	before, _ := os.Stat(path)
	f2, err := m.Encoder(s)
	if err != nil {
		t.Fatal(err)
	}
	f2.Close()
	if after, _ := os.Stat(path); f2.(*onnx.Factory).Path() != path || !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("a second open made %s anew", f2.(*onnx.Factory).Path())
	}

	g, _ := Lookup("gpt2-tiny-int4")
	d, err := g.Decoder(Settings{CacheDir: cache, KVTokens: 2048})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	dinfo, err := onnxgraph.Inspect(d.(*onnx.DecoderFactory).Path())
	if d.Info().Name != "gpt2-tiny-int4" || d.Decoder().KVTokens != 2048 || err != nil ||
		!strings.HasPrefix(dinfo.Metadata[quant.MetaQuantization], "int4") {
		t.Errorf("gpt2-tiny-int4 = %s %+v, %v %v", d.Info().Name, d.Decoder(), dinfo.Metadata, err)
	}

	base, _ := Lookup("bert-tiny")
	arch, _ := bert.Lookup("bert-tiny")
	graph, err := base.Graph(s)
	if err != nil || graph != filepath.Join(cache, bert.Spec{Arch: arch, Task: bert.Embed}.FileName()) {
		t.Errorf("Graph(bert-tiny embed) = %s, %v", graph, err)
	}
	if _, err := m.Graph(s); !errors.Is(err, quant.ErrQuantized) {
		t.Errorf("Graph(bert-tiny-int8) = %v, want ErrQuantized", err)
	}
}

// A twin whose original does not load through models/onnx is refused,
// not opened as the original under the twin's name.
func TestTwinNeedsRewrite(t *testing.T) {
	e := Entry{Name: "plain", Kind: Encoder, OpenEncoder: func(string, Settings) (models.Factory, error) {
		return encoder(sim.New(sim.Config{}))
	}}
	tw := twin(e, "-int8")
	if f, err := tw.OpenEncoder("", Settings{}); f != nil || !errors.Is(err, errNoRewrite) {
		t.Errorf("twin of a model without Rewrite = %v, %v", f, err)
	}
}

// The -int8 twins of GPT-2 keep their KV cache in int8: they are quantised
// from the graph with gpt2.Spec.KVInt8, and list its size; the -int4 twins
// keep float32's.
func TestTwinKVInt8(t *testing.T) {
	small, _ := gpt2.Lookup("gpt2-small")
	for _, c := range []struct {
		name string
		want int64
	}{
		{"gpt2-small", small.KVBytesPerToken()},
		{"gpt2-small-int8", 2 * 12 * 12 * 64}, // a byte an element, the scales in the graph
		{"gpt2-small-int4", small.KVBytesPerToken()},
		{"stories260k-int8", 0}, // models/llama has no int8 KV graph: float32's
	} {
		m, err := Lookup(c.name)
		if err != nil {
			t.Fatal(err)
		}
		if c.want == 0 {
			base, _ := Lookup(m.Of)
			c.want = base.Listing.KVBytesPerToken
		}
		if got := m.Listing.KVBytesPerToken; got != c.want {
			t.Errorf("%s lists %d bytes of KV cache a token, want %d", c.name, got, c.want)
		}
	}

	cache := t.TempDir()
	var logs bytes.Buffer
	m, _ := Lookup("gpt2-tiny-int8")
	d, err := m.Decoder(Settings{CacheDir: cache, Logger: slogTo(&logs)})
	onnxtest.SkipWithoutRuntime(t, err)
	if err != nil {
		t.Fatalf("open gpt2-tiny-int8: %v", err)
	}
	d.Close()
	tiny, _ := gpt2.Lookup("gpt2-tiny")
	src := filepath.Join(cache, kvInt8Spec(tiny, nil, Settings{}).FileName())
	var path string
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "name=gpt2-tiny-int8") && strings.Contains(line, "from="+src) {
			_, path, _ = strings.Cut(line, " path=")
			path, _, _ = strings.Cut(path, " ")
		}
	}
	info, err := onnxgraph.Inspect(path)
	if err != nil {
		t.Fatalf("gpt2-tiny-int8 was not quantised from %s: %v; log:\n%s", src, err, logs.String())
	}
	if !strings.HasPrefix(info.Metadata[quant.MetaQuantization], "int8") || !slices.ContainsFunc(info.Inputs, func(x onnxgraph.Tensor) bool {
		return x.Name == gpt2.SeqLensK
	}) || !slices.ContainsFunc(info.Inputs, func(x onnxgraph.Tensor) bool {
		return x.Name == gpt2.PastKey(0) && x.Type == "int8"
	}) {
		t.Errorf("gpt2-tiny-int8's graph %s: metadata %v, inputs %v", path, info.Metadata, info.Inputs)
	}

	// Once the twin is made, the float32 graph it was calibrated on is not
	// needed: a cache without it opens the twin and leaves it out.
	float32Graph := filepath.Join(cache, gpt2.Spec{Arch: tiny, InPlaceKV: true}.FileName())
	if err := os.Remove(float32Graph); err != nil {
		t.Fatalf("the float32 graph %s was not made: %v", float32Graph, err)
	}
	if d, err = m.Decoder(Settings{CacheDir: cache}); err != nil {
		t.Fatalf("open gpt2-tiny-int8 again: %v", err)
	}
	d.Close()
	if _, err := os.Stat(float32Graph); err == nil {
		t.Error("opening the made twin again made the float32 graph again")
	}
}
