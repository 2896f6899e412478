package llama

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/llama/stories260k"
	"github.com/inferhq/infer/models/llama/tokenizer"
	"github.com/inferhq/infer/models/onnx"
	"github.com/inferhq/infer/models/onnxgraph"
)

// testCache is where the tests' generated graphs are kept, each generated
// once per test binary.
var testCache string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "infer-llama-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testCache = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// requireRuntime skips when err says the ONNX Runtime is missing, unless
// INFER_REQUIRE_ORT=1 (CI); it fails on any other error.
func requireRuntime(t testing.TB, err error) {
	t.Helper()
	switch {
	case err == nil:
	case errors.Is(err, onnx.ErrNoRuntime) && os.Getenv("INFER_REQUIRE_ORT") != "1":
		t.Skipf("no ONNX Runtime (run scripts/setup-ort.sh): %v", err)
	default:
		t.Fatal(err)
	}
}

// testModel is a checkpoint of the tests: the built-in, or a random one.
type testModel struct {
	name string
	ck   []byte
}

func testModels() []testModel {
	return []testModel{
		{"stories260k", stories260k.Checkpoint},
		{"gqa", randomCheckpoint(gqa, 1)},
		{"mha", randomCheckpoint(mha, 2)},
		{"mqa", randomCheckpoint(mqa, 3)},
	}
}

// openDecoder opens m's graph on ONNX Runtime with a KV bound of kv tokens
// (0: the default) and returns an instance.
func openDecoder(t testing.TB, m testModel, kv int) (*onnx.DecoderFactory, *onnx.Decoder) {
	t.Helper()
	ck := readBytes(t, m.ck)
	path, err := Ensure(testCache, ck, m.name)
	if err != nil {
		t.Fatal(err)
	}
	var tok models.Tokenizer
	if m.name == "stories260k" {
		tok, err = tokenizer.Parse(stories260k.Tokenizer)
		if err != nil {
			t.Fatal(err)
		}
	} else {
		tok = fakeTokenizer{}
	}
	f, err := onnx.OpenDecoder(onnx.DecoderConfig{Path: path, KVTokens: kv, Tokenizer: tok, Runtime: onnx.Runtime{Threads: 1}})
	requireRuntime(t, err)
	t.Cleanup(func() { f.Close() })
	d, err := f.New(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return f, d.(*onnx.Decoder)
}

// fakeTokenizer stands for the random checkpoints' tokenizer, which they
// have none of: models/onnx needs one, and the tests feed ids.
type fakeTokenizer struct{}

func (fakeTokenizer) Encode(string) []int32   { return nil }
func (fakeTokenizer) TokenBytes(int32) []byte { return nil }

func TestGenerate(t *testing.T) {
	ck := readBytes(t, stories260k.Checkpoint)
	var a, b bytes.Buffer
	if err := errors.Join(Generate(&a, ck, "stories260k"), Generate(&b, ck, "stories260k")); err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(a.Bytes()) != sha256.Sum256(b.Bytes()) {
		t.Error("two writes of the same checkpoint differ")
	}
	hash, _ := ck.Hash()
	names := map[string]bool{FileName("stories260k", hash): true, FileName("other", hash): true, FileName("stories260k", "0"+hash[1:]): true}
	if len(names) != 3 {
		t.Errorf("FileName gives the same name to different graphs: %v", names)
	}
	if got := FileName("Stories 15M/x", hash); !strings.HasPrefix(got, "stories-15m-x-") {
		t.Errorf("FileName(\"Stories 15M/x\") = %s", got)
	}
	// A checkpoint whose reads fail writes nothing into the cache.
	broken := &Checkpoint{Arch: ck.Arch, r: failingReader{}, size: ck.size}
	broken.hash = hash
	broken.hashOnce.Do(func() {})
	if err := Generate(&a, broken, "x"); err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Errorf("Generate with failing reads: %v", err)
	}
	dir := t.TempDir()
	if _, err := Ensure(dir, broken, "x"); err == nil {
		t.Error("Ensure with failing reads succeeded")
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("a failed Ensure left %v", left)
	}
}

type failingReader struct{}

func (failingReader) ReadAt([]byte, int64) (int, error) { return 0, errors.New("disk on fire") }

// TestInspect reads a generated graph back: optimum's names, the KV heads
// of grouped-query attention, the metadata models/onnx reads, the weights.
func TestInspect(t *testing.T) {
	for _, m := range []testModel{{"stories260k", stories260k.Checkpoint}, {"gqa", randomCheckpoint(gqa, 1)}} {
		ck := readBytes(t, m.ck)
		dir := t.TempDir()
		path, err := Ensure(dir, ck, m.name)
		if err != nil {
			t.Fatal(err)
		}
		if again, err := Ensure(dir, ck, m.name); err != nil || again != path {
			t.Errorf("second Ensure = %s, %v; want the cached %s", again, err, path)
		}
		info, err := onnxgraph.Inspect(path)
		if err != nil {
			t.Fatal(err)
		}
		var ins, outs []string
		for _, x := range info.Inputs {
			ins = append(ins, x.String())
		}
		for _, x := range info.Outputs {
			outs = append(outs, x.String())
		}
		kv, hs := ck.KVHeads, ck.HeadSize()
		wantIns := []string{
			"input_ids int64 [batch_size, sequence_length]",
			"attention_mask int64 [batch_size, past_sequence_length + sequence_length]",
			"position_ids int64 [batch_size, sequence_length]",
		}
		wantOuts := []string{fmt.Sprintf("logits float32 [batch_size, kept_length, %d]", ck.Vocab)}
		for i := range ck.Layers {
			for _, kind := range []string{"key", "value"} {
				wantIns = append(wantIns, fmt.Sprintf("past_key_values.%d.%s float32 [batch_size, %d, past_sequence_length, %d]", i, kind, kv, hs))
				wantOuts = append(wantOuts, fmt.Sprintf("present.%d.%s float32 [batch_size, %d, past_sequence_length + sequence_length, %d]", i, kind, kv, hs))
			}
		}
		wantIns = append(wantIns, "logits_to_keep int64 [1]")
		if !slices.Equal(ins, wantIns) || !slices.Equal(outs, wantOuts) {
			t.Errorf("%s: inputs:\n%s\noutputs:\n%s", m.name, strings.Join(ins, "\n"), strings.Join(outs, "\n"))
		}
		hash, _ := ck.Hash()
		if info.Opset != 17 || info.Params != ck.Params() || info.Metadata[MetaArch] != m.name || info.Metadata[MetaContext] != fmt.Sprint(ck.Context) ||
			info.Metadata[MetaEOS] != "1" || info.Metadata[MetaTask] != Task || info.Metadata[MetaSource] != hash || info.Metadata[MetaShape] != ck.Shape() {
			t.Errorf("%s: opset %d, %d params (want %d), metadata %v", m.name, info.Opset, info.Params, ck.Params(), info.Metadata)
		}
		shape, err := onnx.DecoderShapeOf(*info)
		if err != nil || shape.Layers != ck.Layers || shape.Heads != kv || shape.HeadDim != hs || shape.Vocab != ck.Vocab ||
			shape.KVBytesPerToken() != ck.KVBytesPerToken() {
			t.Errorf("%s: models/onnx reads %+v, %v", m.name, shape, err)
		}
	}
}

// TestORTReference runs each graph in ONNX Runtime through models/onnx's
// decoder against the Go reference at every position: token by token with
// the KV cache, and recomputed from scratch (each prefix prefilled as a new
// sequence); then greedy decoding gives the reference's tokens.
func TestORTReference(t *testing.T) {
	for _, m := range testModels() {
		t.Run(m.name, func(t *testing.T) {
			_, d := openDecoder(t, m, 0)
			ref := loadReference(t, readBytes(t, m.ck))
			vocab := int32(ref.c.Vocab)
			tokens := []int32{1, 403, 407, 261, 378, 432, 383, 286, vocab - 1, 0, 17, 17, 5, 300}
			for i := range tokens {
				tokens[i] %= vocab
			}
			want := ref.logits(tokens)
			next := make([]int32, 1)
			worstInc, worstFull := 0.0, 0.0
			// The first three as a prompt, then one token a step.
			for p := 2; p < len(tokens); p++ {
				seq := models.StepSeq{ID: 1, Past: p, Tokens: tokens[p : p+1], Sample: true}
				if p == 2 {
					seq = models.StepSeq{ID: 1, Tokens: tokens[:3], Sample: true}
				}
				if err := d.Step(context.Background(), []models.StepSeq{seq}, next); err != nil {
					t.Fatal(err)
				}
				worstInc = max(worstInc, compare(t, "incremental", p, d.Logits(0), want[p]))
				full := models.StepSeq{ID: 2, Tokens: tokens[:p+1], Sample: true}
				if err := d.Step(context.Background(), []models.StepSeq{full}, next); err != nil {
					t.Fatal(err)
				}
				worstFull = max(worstFull, compare(t, "recomputed", p, d.Logits(0), want[p]))
				d.Free(2)
			}
			d.Free(1)
			t.Logf("%d positions of %d logits within %.2g (incremental) and %.2g (recomputed) of the reference",
				len(tokens)-2, vocab, worstInc, worstFull)

			prompt := tokens[:4]
			n := min(ref.c.Context-len(prompt), 120)
			wantIDs := ref.greedy(prompt, n, true)
			gotIDs := greedy(t, d, 3, prompt, n)
			if !slices.Equal(gotIDs, wantIDs) {
				t.Errorf("greedy tokens:\n%v\nreference:\n%v", gotIDs, wantIDs)
			}
		})
	}
}

// compare fails the test if logits differ from the reference's by more
// than a tolerance relative to their spread, and returns the largest
// difference.
func compare(t *testing.T, what string, p int, got []float32, want []float64) float64 {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s position %d: %d logits, want %d", what, p, len(got), len(want))
	}
	lo, hi := slices.Min(want), slices.Max(want)
	tol := 1e-4 * max(1, hi-lo)
	worst := 0.0
	for v := range got {
		diff := math.Abs(float64(got[v]) - want[v])
		worst = max(worst, diff)
		if diff > tol {
			t.Fatalf("%s position %d, token %d: logit %g, reference %g (tolerance %.2g)", what, p, v, got[v], want[v], tol)
		}
	}
	return worst
}

// greedy decodes n tokens after prompt on d as sequence id, at temperature
// 0, ignoring EOS.
func greedy(t testing.TB, d models.Decoder, id models.SeqID, prompt []int32, n int) []int32 {
	t.Helper()
	next := make([]int32, 1)
	seq := models.StepSeq{ID: id, Tokens: prompt, PromptLen: len(prompt), Sample: true}
	var out []int32
	for len(out) < n {
		if err := d.Step(context.Background(), []models.StepSeq{seq}, next); err != nil {
			t.Fatal(err)
		}
		out = append(out, next[0])
		seq.Past += len(seq.Tokens)
		seq.Tokens = []int32{next[0]}
	}
	d.Free(id)
	return out
}

// TestStories260kTellsAStory: greedy decoding from BOS alone, llama2.c's
// run without a prompt, tells a TinyStories story in the reference and in
// ONNX Runtime alike, and ends it with BOS. A graph that computed anything
// but the trained model (rotary pairs or grouped heads mixed up) would
// write no English.
func TestStories260kTellsAStory(t *testing.T) {
	m := testModel{"stories260k", stories260k.Checkpoint}
	ref := loadReference(t, readBytes(t, m.ck))
	tok, err := tokenizer.Parse(stories260k.Tokenizer)
	if err != nil {
		t.Fatal(err)
	}
	ids := ref.greedy([]int32{tokenizer.BOS}, 400, false)
	story := tok.Decode(append([]int32{tokenizer.BOS}, ids...))
	t.Logf("%d tokens: %q", len(ids), story)
	if !strings.HasPrefix(story, "Once upon a time") {
		t.Errorf("the reference's story does not begin with \"Once upon a time\": %q", story)
	}
	if ids[len(ids)-1] != EOS {
		t.Errorf("the story did not end with BOS within %d tokens", len(ids))
	}
	_, d := openDecoder(t, m, 0)
	if got := greedy(t, d, 1, []int32{tokenizer.BOS}, len(ids)); !slices.Equal(got, ids) {
		t.Errorf("ONNX Runtime's story: %q\nthe reference's: %q", tok.Decode(append([]int32{tokenizer.BOS}, got...)), story)
	}
}
