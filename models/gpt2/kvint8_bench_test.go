package gpt2

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/inferhq/infer/models/quant"
)

// Timings of the graph alone in ONNX Runtime: decode steps (one token a
// row) of 16 rows after a past of 256 positions, the alternatives taking
// turns step by step (A B C A B C …) in one process so that a shared
// machine's drift weighs on all alike; the metrics are median times and
// their ratios. gpt2-tiny, and the architectures INFER_BENCH_ARCHS names
// (e.g. "gpt2-small"); models are generated into INFER_BENCH_MODELS (kept
// between runs) or a temporary directory.

const benchRows, benchPast = 16, 256

func benchArchs(b *testing.B) []Arch {
	names := cmpOr(os.Getenv("INFER_BENCH_ARCHS"), "gpt2-tiny")
	var archs []Arch
	for _, n := range strings.Split(names, ",") {
		a, err := Lookup(strings.TrimSpace(n))
		if err != nil {
			b.Fatal(err)
		}
		archs = append(archs, a)
	}
	return archs
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func benchModels(b *testing.B) string {
	if dir := os.Getenv("INFER_BENCH_MODELS"); dir != "" {
		return dir
	}
	return b.TempDir()
}

// benchGraph generates s into dir, with its weights quantised as the -int8
// twins' if int8, and opens it.
func benchGraph(b *testing.B, dir string, s Spec, int8 bool) *graphRun {
	b.Helper()
	path, err := Ensure(dir, s)
	if err != nil {
		b.Fatal(err)
	}
	if int8 {
		if path, err = quant.Ensure(dir, path, quant.Options{}); err != nil {
			b.Fatal(err)
		}
	}
	return openGraph(b, path, s)
}

// decodeStep returns a step of benchRows rows of one token after a past
// of benchPast positions of random contents: the session's run alone, its
// inputs made once.
func decodeStep(b *testing.B, g *graphRun) func(b *testing.B) {
	c := garbageCache(g.s, benchRows, benchPast, 3)
	var mask [][]int64
	var tokens [][]int32
	var positions [][]int64
	for r := range benchRows {
		mask = append(mask, ones(0, benchPast+1))
		tokens = append(tokens, []int32{int32(100 + r)})
		positions = append(positions, []int64{benchPast})
	}
	inputs, free := g.inputs(b, c, mask, tokens, positions, 1)
	b.Cleanup(free)
	return func(b *testing.B) { destroy(g.exec(b, inputs)) }
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// rotate runs steps in turn, one per iteration, and reports the median
// time of each, and each one's ratio to the first's.
func rotate(b *testing.B, names []string, steps []func(*testing.B)) {
	for _, s := range steps {
		s(b) // warm up: the first run of a session plans its memory
	}
	times := make([][]time.Duration, len(steps))
	b.Logf("load average before: %s", loadAvg())
	for i := 0; b.Loop(); i++ {
		k := i % len(steps)
		t0 := time.Now()
		steps[k](b)
		times[k] = append(times[k], time.Since(t0))
	}
	b.Logf("load average after: %s", loadAvg())
	medians := make([]float64, len(steps))
	for k, ts := range times {
		if len(ts) == 0 {
			return
		}
		slices.Sort(ts)
		medians[k] = float64(ts[len(ts)/2].Microseconds()) / 1000
		b.ReportMetric(medians[k], "ms/"+names[k])
	}
	var line []string
	for k := range steps {
		line = append(line, fmt.Sprintf("%s %.2f ms (%.2f×)", names[k], medians[k], medians[0]/medians[k]))
		if k > 0 {
			b.ReportMetric(medians[0]/medians[k], names[0]+"/"+names[k])
		}
	}
	b.Log(strings.Join(line, ", "))
}

// BenchmarkKVInt8Forms times a decode step of every form of the int8 KV
// attention (or those INFER_KV_FORMS names), weights int8 as the twins'.
func BenchmarkKVInt8Forms(b *testing.B) {
	dir := benchModels(b)
	for _, a := range benchArchs(b) {
		b.Run(fmt.Sprintf("%s/batch=%d/past=%d", a, benchRows, benchPast), func(b *testing.B) {
			var names []string
			var steps []func(*testing.B)
			only := os.Getenv("INFER_KV_FORMS") // names to time, e.g. "kuint8-vint8,kuint8-vuint8"
			for _, f := range kvForms {
				if only != "" && !slices.Contains(strings.Split(only, ","), f.name()) {
					continue
				}
				names = append(names, f.name())
				steps = append(steps, decodeStep(b, benchGraph(b, dir, Spec{Arch: a, InPlaceKV: true, KVInt8: true, kv: f}, true)))
			}
			rotate(b, names, steps)
		})
	}
}

// BenchmarkKVInt8Decode times a decode step of the in-place graph in
// float32, its -int8 twin as it was (weights int8, the KV cache float32),
// and the twin with the KV cache int8.
func BenchmarkKVInt8Decode(b *testing.B) {
	dir := benchModels(b)
	for _, a := range benchArchs(b) {
		b.Run(fmt.Sprintf("%s/batch=%d/past=%d", a, benchRows, benchPast), func(b *testing.B) {
			float := Spec{Arch: a, InPlaceKV: true}
			kv := Spec{Arch: a, InPlaceKV: true, KVInt8: true}
			rotate(b, []string{"fp32", "int8", "int8-kv8"}, []func(*testing.B){
				decodeStep(b, benchGraph(b, dir, float, false)),
				decodeStep(b, benchGraph(b, dir, float, true)),
				decodeStep(b, benchGraph(b, dir, kv, true)),
			})
		})
	}
}

// TestKVInt8Agreement compares greedy decoding of the -int8 twin with its
// KV cache in int8 and in float32, and of the float32 model, for scale
// (INFER_KV_AGREEMENT=N steps, e.g. 200, on gpt2-tiny and
// INFER_BENCH_ARCHS' architectures): the float32 cache's greedy tokens
// are fed to all three, and at each step the top-1 tokens are compared
// and the largest difference of a logit taken.
func TestKVInt8Agreement(t *testing.T) {
	n := 0
	fmt.Sscan(os.Getenv("INFER_KV_AGREEMENT"), &n)
	if n == 0 {
		t.Skip("set INFER_KV_AGREEMENT=steps")
	}
	names := cmpOr(os.Getenv("INFER_BENCH_ARCHS"), "gpt2-tiny")
	dir := cmpOr(os.Getenv("INFER_BENCH_MODELS"), t.TempDir())
	for _, name := range strings.Split(names, ",") {
		a, err := Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(a.Name, func(t *testing.T) {
			// The -int8 twin as it was (float32 cache), as it is (int8
			// cache), and float32.
			var gs [3]*graphRun
			for i, s := range []Spec{{Arch: a, InPlaceKV: true}, {Arch: a, InPlaceKV: true, KVInt8: true}, {Arch: a, InPlaceKV: true}} {
				path, err := Ensure(dir, s)
				if err == nil && i < 2 {
					path, err = quant.Ensure(dir, path, quant.Options{})
				}
				if err != nil {
					t.Fatal(err)
				}
				gs[i] = openGraph(t, path, s)
			}
			prompt := []int32{464, 2068, 7586, 21831, 18045, 625, 262, 16931} // "The quick brown fox jumps over the lazy"
			var caches [3]*kvCache
			var logits [3][]float32
			for i, g := range gs {
				caches[i] = garbageCache(g.s, 1, 1, 5) // one hole: ONNX Runtime takes no empty tensor
				res := g.run(t, caches[i], [][]int64{ones(1, len(prompt))}, [][]int32{prompt}, [][]int64{span(0, len(prompt))}, 1)
				caches[i], logits[i] = caches[i].concat(a, res.fresh), res.logits
			}
			type pair struct {
				x, y         int
				agree, first int
				worst, sum   float64
			}
			pairs := []*pair{{x: 0, y: 1, first: -1}, {x: 2, y: 0, first: -1}, {x: 2, y: 1, first: -1}}
			for step := range n {
				for _, p := range pairs {
					if argmax(logits[p.x]) == argmax(logits[p.y]) {
						p.agree++
					} else if p.first < 0 {
						p.first = step
					}
					var w float64
					for v := range logits[p.x] {
						w = max(w, math.Abs(float64(logits[p.x][v]-logits[p.y][v])))
					}
					p.worst, p.sum = max(p.worst, w), p.sum+w
				}
				tok := argmax(logits[0])
				pos := len(prompt) + step
				for i, g := range gs {
					res := g.run(t, caches[i], [][]int64{ones(1, pos+1)}, [][]int32{{int32(tok)}}, [][]int64{{int64(pos)}}, 1)
					caches[i], logits[i] = caches[i].concat(a, res.fresh), res.logits
				}
			}
			label := []string{a.String() + "-int8 (float32 KV)", a.String() + "-int8 (int8 KV)", a.String()}
			for _, p := range pairs {
				t.Logf("%s against %s, %d greedy steps: top-1 the same at %d (%.1f %%), first differing at step %d (-1: none); "+
					"largest |logit difference| %.3g, mean of the steps' largest %.3g",
					label[p.y], label[p.x], n, p.agree, 100*float64(p.agree)/float64(n), p.first, p.worst, p.sum/float64(n))
			}
		})
	}
}

func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}
