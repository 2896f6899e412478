package onnx

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/gpt2"
	"github.com/inferhq/infer/models/onnxgraph"
)

// tinySpec is the model of the decoder tests: gpt2-tiny's shape, whose
// 50,257-token head is what makes a step cost what GPT-2's costs, as
// served (its KV cache in place), with the variants of the graph that real
// exports have, each of which has the standard KV cache.
func tinySpec(variant ...func(*gpt2.Spec)) gpt2.Spec {
	a, err := gpt2.Lookup("gpt2-tiny")
	if err != nil {
		panic(err)
	}
	s := gpt2.Spec{Arch: a, InPlaceKV: true}
	for _, v := range variant {
		v(&s)
	}
	return s
}

// standard makes the graph's KV cache the standard one, past in and
// present out, as in exports.
func standard(s *gpt2.Spec) { s.InPlaceKV = false }

// gqa makes the graph's attention ONNX Runtime's GroupQueryAttention, the
// KV cache in place in the operator; gqaInt8 with the cache in int8, as
// the int8 twins of the built-in GPT-2 models have it, at testScales.
func gqa(s *gpt2.Spec)     { s.GQA, s.InPlaceKV = true, false }
func gqaInt8(s *gpt2.Spec) { gqa(s); s.KVInt8, s.KVScales = true, testScales(s.Arch) }

// testScales are scales of an int8 KV cache for tests of exactness under
// batching, which any scales serve: 8/127 for every channel, about a
// channel's largest |key| or |value| over a text in gpt2-tiny (their
// standard deviation is about 2).
func testScales(a gpt2.Arch) *gpt2.KVScales {
	return &gpt2.KVScales{ID: "test-8/127", Compute: func() ([]float32, error) {
		return slices.Repeat([]float32{8.0 / 127}, a.Layers*2*a.Hidden), nil
	}}
}

func noPositionIDs(s *gpt2.Spec) { s.NoPositionIDs, s.InPlaceKV = true, false }
func merged(s *gpt2.Spec)        { s.CacheBranch, s.InPlaceKV = true, false }

// allLogits leaves out logits_to_keep, as optimum's exports do: logits at
// every position, rows padded on the right.
func allLogits(s *gpt2.Spec) { s.AllLogits, s.InPlaceKV = true, false }

// testModels is where the tests' generated models are kept, each generated
// once per test binary (gpt2-tiny takes seconds under the race detector),
// or, when INFER_BENCH_MODELS names a directory, once there and kept for
// the next process (benchmarks of gpt2-small, whose graphs take a minute to
// generate and quantise, run in several processes A B A B).
var testModels string

func TestMain(m *testing.M) {
	if dir := os.Getenv("INFER_BENCH_MODELS"); dir != "" {
		testModels = dir
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "infer-onnx-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testModels = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// testModel returns the path of spec's model, generated once.
func testModel(t testing.TB, spec gpt2.Spec) string {
	t.Helper()
	path, err := gpt2.Ensure(testModels, spec)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// openTestDecoder returns an instance of spec's model; cfg overrides the
// defaults (Path is set here).
func openTestDecoder(t testing.TB, spec gpt2.Spec, cfg DecoderConfig) (*DecoderFactory, *Decoder) {
	t.Helper()
	cfg.Path = testModel(t, spec)
	return openDecoderConfig(t, cfg)
}

// openDecoderConfig returns an instance of the decoder cfg opens, with its
// factory.
func openDecoderConfig(t testing.TB, cfg DecoderConfig) (*DecoderFactory, *Decoder) {
	t.Helper()
	requireRuntime(t)
	f, err := OpenDecoder(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	m, err := f.New(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return f, m.(*Decoder)
}

// prompt returns n token ids drawn from seed.
func prompt(seed uint64, n int) []int32 {
	r := rand.New(rand.NewPCG(seed, 7))
	p := make([]int32, n)
	for i := range p {
		p[i] = int32(r.IntN(50000))
	}
	return p
}

// step runs one Step and returns the next tokens and copies of the logits
// they were drawn from.
func step(t testing.TB, d *Decoder, seqs ...models.StepSeq) ([]int32, [][]float32) {
	t.Helper()
	next := make([]int32, len(seqs))
	if err := d.Step(context.Background(), seqs, next); err != nil {
		t.Fatalf("Step(%s): %v", describeSeqs(seqs), err)
	}
	logits := make([][]float32, len(seqs))
	for i := range seqs {
		logits[i] = slices.Clone(d.Logits(i))
	}
	return next, logits
}

func describeSeqs(seqs []models.StepSeq) string {
	s := make([]string, len(seqs))
	for i, q := range seqs {
		s[i] = fmt.Sprintf("%d:past=%d+%d", q.ID, q.Past, len(q.Tokens))
	}
	return strings.Join(s, " ")
}

// maxDiff returns the largest absolute difference of two logit rows.
func maxDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var d float64
	for i := range a {
		d = max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

// trace is what decoding one sequence alone gives: the tokens and, per
// token, the logits it was drawn from.
type trace struct {
	tokens []int32
	logits [][]float32
}

// decodeAlone prefills p and decodes steps more tokens, one sequence alone.
func decodeAlone(t testing.TB, d *Decoder, id models.SeqID, p []int32, steps int, s models.Sampling) trace {
	t.Helper()
	var tr trace
	next, logits := step(t, d, models.StepSeq{ID: id, Tokens: p, PromptLen: len(p), Sample: true, Sampling: s})
	for {
		tr.tokens, tr.logits = append(tr.tokens, next[0]), append(tr.logits, logits[0])
		if len(tr.tokens) == steps+1 {
			break
		}
		past := len(p) + len(tr.tokens) - 1
		next, logits = step(t, d, models.StepSeq{ID: id, Past: past, Tokens: next[:1], PromptLen: len(p), Sample: true, Sampling: s})
	}
	d.Free(id)
	return tr
}

func TestDecoderSignature(t *testing.T) {
	for _, tc := range []struct {
		name                           string
		spec                           gpt2.Spec
		positions, cach, keep, inPlace bool
	}{
		{"gpt2-tiny", tinySpec(), true, false, true, true},
		{"standard", tinySpec(standard), true, false, true, false},
		{"no position_ids", tinySpec(noPositionIDs, allLogits), false, false, false, false},
		{"merged", tinySpec(merged, allLogits), true, true, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, _ := openTestDecoder(t, tc.spec, DecoderConfig{})
			if f.sig.layers != 2 || f.sig.heads != 2 || f.sig.headDim != 64 || f.sig.vocab != 50257 ||
				f.sig.positions != tc.positions || f.sig.cacheBranch != tc.cach || f.sig.keepLast != tc.keep ||
				f.sig.inPlace != tc.inPlace {
				t.Errorf("signature = %+v", f.sig)
			}
			want := models.DecoderInfo{Context: 1024, EOS: 50256, Vocab: 50257, KVTokens: 16 * 1024, BlockKV: true,
				Engine: models.EngineDefaults{MaxSeqs: 16, MaxBatchedTokens: 256}}
			if got := f.Decoder(); got != want {
				t.Errorf("Decoder() = %+v, want %+v", got, want)
			}
			if info := f.Info(); info.Name != "gpt2-tiny" || info.Task != TaskTextGeneration || info.Backend != "onnx" {
				t.Errorf("Info() = %+v", info)
			}
			if got := f.KVBytesPerToken(); got != 2*2*128*4 {
				t.Errorf("KVBytesPerToken() = %d, want %d", got, 2*2*128*4)
			}
			if ok, err := IsDecoder(f.Path()); !ok || err != nil {
				t.Errorf("IsDecoder(%s) = %v, %v", f.Path(), ok, err)
			}
		})
	}
}

func TestDecoderRefusesOtherGraphs(t *testing.T) {
	requireRuntime(t)
	dir := t.TempDir()
	bertLike := toyGraph{outputs: []string{"logits"}}.build(t, dir, "masked_lm")
	if ok, err := IsDecoder(bertLike); ok || err != nil {
		t.Errorf("IsDecoder(a masked-LM graph) = %v, %v; want false", ok, err)
	}
	_, err := OpenDecoder(DecoderConfig{Path: bertLike})
	if err == nil || !strings.Contains(err.Error(), "no past_key_values inputs") || !strings.Contains(err.Error(), "text-generation-with-past") {
		t.Errorf("OpenDecoder(a masked-LM graph) = %v, want an error naming the export to make", err)
	}
	if _, err := OpenDecoder(DecoderConfig{Path: dir}); err == nil || !strings.Contains(err.Error(), "decoder_model_merged.onnx") {
		t.Errorf("OpenDecoder(a directory without an export) = %v, want one naming the files looked for", err)
	}
	// A small vocabulary needs a tokenizer of its own.
	micro := tinySpec()
	micro.Arch.Vocab = 300
	if _, err := OpenDecoder(DecoderConfig{Path: testModel(t, micro)}); err == nil || !strings.Contains(err.Error(), "tokenizer is GPT-2's") {
		t.Errorf("OpenDecoder(vocabulary 300) = %v, want a tokenizer error", err)
	}
}

// TestDecoderExportDir opens an export directory as optimum writes it: the
// merged decoder and a config.json.
func TestDecoderExportDir(t *testing.T) {
	requireRuntime(t)
	export := t.TempDir() + "/gpt2-export"
	config := `{"model_type": "gpt2", "n_positions": 512, "eos_token_id": [50256], "vocab_size": 50257}`
	if err := errors.Join(os.Mkdir(export, 0o755), os.Symlink(testModel(t, tinySpec(merged, allLogits)), export+"/decoder_model_merged.onnx"),
		os.WriteFile(export+"/config.json", []byte(config), 0o644)); err != nil {
		t.Fatal(err)
	}
	// The graph's infer.context metadata wins over config.json's 512.
	f, err := OpenDecoder(DecoderConfig{Path: export, KVTokens: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if info := f.Decoder(); info.Context != 1024 || info.KVTokens != 4096 || info.EOS != 50256 {
		t.Errorf("Decoder() = %+v", info)
	}
	if got := f.Info().Name; got != "gpt2-tiny" {
		t.Errorf("name = %q, want the graph's infer.arch gpt2-tiny", got)
	}
	if !strings.HasSuffix(f.Path(), "decoder_model_merged.onnx") {
		t.Errorf("Path() = %s", f.Path())
	}
	hf, err := readHFConfig(export + "/config.json")
	if err != nil || hf.NPositions != 512 {
		t.Errorf("config.json = %+v, %v", hf, err)
	}
	if eos, ok := hf.eos(); !ok || eos != 50256 {
		t.Errorf("config.json eos = %d, %v", eos, ok)
	}
}

// TestDecoderIncremental checks that decoding with the KV cache computes
// what a full recompute without it does: at each of 32 steps the logits of
// the cached step equal those of prefilling the whole sequence so far.
func TestDecoderIncremental(t *testing.T) {
	for _, variant := range []struct {
		name string
		spec gpt2.Spec
	}{{"in place", tinySpec()}, {"GQA", tinySpec(gqa)}, {"GQA int8 KV", tinySpec(gqaInt8)}, {"position_ids", tinySpec(standard)}, {"all logits", tinySpec(allLogits)}, {"no position_ids", tinySpec(noPositionIDs, allLogits)},
		{"merged", tinySpec(merged, allLogits)}} {
		t.Run(variant.name, func(t *testing.T) {
			_, d := openTestDecoder(t, variant.spec, DecoderConfig{})
			p := prompt(1, 9)
			cached := decodeAlone(t, d, 1, p, 32, models.Sampling{})
			seq := slices.Clone(p)
			worst := 0.0
			for k, tok := range cached.tokens {
				// Recompute from scratch: the prompt and the k tokens
				// generated before this one, as one prefill.
				next, logits := step(t, d, models.StepSeq{ID: 2, Tokens: seq, PromptLen: len(p), Sample: true})
				d.Free(2)
				diff := maxDiff(cached.logits[k], logits[0])
				worst = max(worst, diff)
				if diff > 1e-4 || next[0] != tok {
					t.Fatalf("token %d: cached decoding drew %d, recompute %d; logits differ by %g", k, tok, next[0], diff)
				}
				seq = append(seq, tok)
			}
			if d.Used() != 0 {
				t.Errorf("Used() = %d after freeing every sequence, want 0", d.Used())
			}
			t.Logf("33 steps: logits within %.2g of a full recompute", worst)
		})
	}
}

// blockPlan gives the sequences of a schedule block tables of size tokens a
// block, as the engine would: new blocks from a counter (never reused, so
// that what a block held stays), and a cached prefix to start after.
type blockPlan struct {
	size int
	next int32 // the next new block
	// cached is a prefix whose blocks a sequence already filled: the
	// target starts after it, and so does every third other sequence,
	// its prompt that prefix and tokens of its own.
	cached []int32 // tokens, whole blocks
	table  []int32 // their blocks
}

// extend grows table to cover n positions.
func (b *blockPlan) extend(table []int32, n int) []int32 {
	for len(table)*b.size < n {
		table = append(table, b.next)
		b.next++
	}
	return table
}

// fillPrefix makes a sequence of its own compute the prefix p (whole
// blocks) and a token more, in blocks of plan, and frees it: p's blocks are
// then cached.
func (b *blockPlan) fillPrefix(t *testing.T, d *Decoder, id models.SeqID, p []int32) {
	t.Helper()
	tokens := append(slices.Clone(p), 7)
	table := b.extend(nil, len(tokens))
	step(t, d, models.StepSeq{ID: id, Tokens: tokens, PromptLen: len(tokens), Sample: true, BlockSize: b.size, Blocks: table})
	d.Free(id)
	b.cached, b.table = p, table[:len(p)/b.size]
}

// mixedSchedule decodes target (sequence 0) while 15 other sequences of
// different prompt lengths join and leave its batches: they start at
// different steps, some prefill in chunks, some sit steps out, and each
// leaves after its own number of tokens, or is preempted and recomputed. It
// returns target's trace. With blocks, every sequence has a block table;
// the target and every third other start after blocks.cached, and a
// preempted sequence restarts after the full blocks of its earlier life.
func mixedSchedule(t *testing.T, d *Decoder, target []int32, steps int, s models.Sampling, seed uint64, blocks *blockPlan) trace {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 3))
	type seq struct {
		id      models.SeqID
		tokens  []int32 // prompt, then generated
		prompt  int
		fed     int // tokens in the cache
		start   int // step it joins at
		leave   int // tokens it generates before leaving
		done    bool
		pending int32   // the token drawn, not yet fed
		table   []int32 // its blocks, with blocks
	}
	all := []*seq{{id: 100, tokens: slices.Clone(target), prompt: len(target), start: 0, leave: steps + 1}}
	for i := 1; i < 16; i++ {
		n := 1 + r.IntN(120)
		all = append(all, &seq{id: models.SeqID(100 + i), tokens: prompt(seed*100+uint64(i), n), prompt: n,
			start: r.IntN(steps), leave: 1 + r.IntN(40)})
	}
	if blocks != nil && len(blocks.cached) > 0 {
		for i, q := range all {
			if i%3 != 0 {
				continue
			}
			if i > 0 {
				q.tokens = append(slices.Clone(blocks.cached), q.tokens...)
				q.prompt = len(q.tokens)
			}
			if !slices.Equal(q.tokens[:len(blocks.cached)], blocks.cached) {
				t.Fatalf("sequence %d does not start with the cached prefix", q.id)
			}
			q.fed, q.table = len(blocks.cached), slices.Clone(blocks.table)
		}
	}
	var tr trace
	for k := 0; len(tr.tokens) < steps+1; k++ {
		var batch []models.StepSeq
		var members []*seq
		for _, q := range all {
			if q.done || q.start > k {
				continue
			}
			// Others sit out a step now and then (target never does, so
			// that its trace has one token per step).
			if q.id != 100 && q.fed > 0 && r.IntN(6) == 0 {
				continue
			}
			// Preemption: drop the cache and recompute everything, or
			// what its full blocks do not hold.
			if q.id != 100 && q.fed > q.prompt && r.IntN(25) == 0 {
				d.Free(q.id)
				q.fed = 0
				if blocks != nil {
					q.fed = (len(q.tokens) - 1) / blocks.size * blocks.size
					q.table = q.table[:q.fed/blocks.size]
				}
			}
			ss := models.StepSeq{ID: q.id, Past: q.fed, PromptLen: q.prompt, Sampling: s}
			if q.fed < len(q.tokens) {
				// Prefill, in chunks of up to 48 tokens.
				ss.Tokens = q.tokens[q.fed:min(len(q.tokens), q.fed+48)]
			} else {
				ss.Tokens = []int32{q.pending}
			}
			ss.Sample = q.fed+len(ss.Tokens) >= len(q.tokens)
			if blocks != nil {
				q.table = blocks.extend(q.table, q.fed+len(ss.Tokens))
				ss.BlockSize, ss.Blocks = blocks.size, slices.Clone(q.table)
			}
			batch = append(batch, ss)
			members = append(members, q)
		}
		next, logits := step(t, d, batch...)
		for i, q := range members {
			fedPending := q.fed == len(q.tokens)
			q.fed += len(batch[i].Tokens)
			if fedPending {
				q.tokens = append(q.tokens, q.pending)
			}
			if !batch[i].Sample {
				continue
			}
			q.pending = next[i]
			if q.id == 100 {
				tr.tokens, tr.logits = append(tr.tokens, next[i]), append(tr.logits, logits[i])
			}
			if len(q.tokens)-q.prompt >= q.leave {
				d.Free(q.id)
				q.done = true
			}
		}
	}
	for _, q := range all {
		d.Free(q.id)
	}
	return tr
}

// TestDecoderBatchComposition checks that a prompt decoded alone equals the
// same prompt decoded while 15 others of different lengths join and leave
// its batches: the same greedy tokens, logits within 1e-4.
func TestDecoderBatchComposition(t *testing.T) {
	for _, variant := range []struct {
		name      string
		spec      gpt2.Spec
		schedules uint64
	}{{"in place", tinySpec(), 2}, {"GQA", tinySpec(gqa), 2}, {"GQA int8 KV", tinySpec(gqaInt8), 2}, {"position_ids", tinySpec(standard), 2}, {"all logits", tinySpec(allLogits), 1}, {"no position_ids", tinySpec(noPositionIDs), 1},
		{"no position_ids, all logits", tinySpec(noPositionIDs, allLogits), 1}} {
		t.Run(variant.name, func(t *testing.T) {
			_, d := openTestDecoder(t, variant.spec, DecoderConfig{})
			target := prompt(5, 23)
			const steps = 32
			alone := decodeAlone(t, d, 1, target, steps, models.Sampling{})
			if slices.Equal(alone.tokens[:8], slices.Repeat(alone.tokens[:1], 8)) {
				t.Fatalf("greedy tokens %v repeat one token: a weak test", alone.tokens)
			}
			for seed := uint64(1); seed <= variant.schedules; seed++ {
				mixed := mixedSchedule(t, d, target, steps, models.Sampling{}, seed, nil)
				worst := 0.0
				for k := range alone.tokens {
					diff := maxDiff(alone.logits[k], mixed.logits[k])
					worst = max(worst, diff)
					if diff > 1e-4 || alone.tokens[k] != mixed.tokens[k] {
						t.Fatalf("schedule %d, token %d: alone %d, in company %d; logits differ by %g",
							seed, k, alone.tokens[k], mixed.tokens[k], diff)
					}
				}
				t.Logf("schedule %d: %d greedy tokens equal, logits within %.2g", seed, len(alone.tokens), worst)
			}
			if d.Used() != 0 {
				t.Errorf("Used() = %d after freeing every sequence, want 0", d.Used())
			}
		})
	}
}

// TestDecoderLogitsToKeep checks the rows of a prefill run that
// logits_to_keep pads on the left: a prompt, and a prompt's second chunk,
// each prefilled in one run with a longer prompt, give the logits they give
// alone, and feeding logits_to_keep 0 (every position) gives the same
// logits at the last one.
func TestDecoderLogitsToKeep(t *testing.T) {
	_, d := openTestDecoder(t, tinySpec(), DecoderConfig{})
	target, long := prompt(11, 9), prompt(12, 16)
	_, alone := step(t, d, models.StepSeq{ID: 1, Tokens: target, Sample: true})
	d.Free(1)
	for _, keep := range []int{1, 0} {
		d.keepLogits = keep
		// The whole prompt beside a longer one: two rows of one run.
		_, got := step(t, d, models.StepSeq{ID: 1, Tokens: target, Sample: true}, models.StepSeq{ID: 2, Tokens: long, Sample: true})
		if diff := maxDiff(alone[0], got[0]); diff > 1e-4 {
			t.Errorf("logits_to_keep %d: a prompt beside a longer one: logits differ by %g from alone", keep, diff)
		}
		d.Free(1)
		d.Free(2)
		// Its last 5 tokens as a second chunk, beside a new longer prompt.
		step(t, d, models.StepSeq{ID: 1, Tokens: target[:4]})
		_, got = step(t, d, models.StepSeq{ID: 1, Past: 4, Tokens: target[4:], Sample: true}, models.StepSeq{ID: 2, Tokens: long, Sample: true})
		if diff := maxDiff(alone[0], got[0]); diff > 1e-4 {
			t.Errorf("logits_to_keep %d: a second chunk beside a longer prompt: logits differ by %g from alone", keep, diff)
		}
		d.Free(1)
		d.Free(2)
	}
}

// TestDecoderJoinInPlace checks that in a batch of 16, a sequence that joins
// takes the row of one that left without assembling the batch's cache anew,
// and decodes what it decodes alone; and that the batch is assembled again
// once more than one row in eight would stay empty.
func TestDecoderJoinInPlace(t *testing.T) {
	t.Run("in place", func(t *testing.T) { testJoinInPlace(t, tinySpec()) })
	t.Run("GQA", func(t *testing.T) { testJoinInPlace(t, tinySpec(gqa)) })
	t.Run("standard", func(t *testing.T) { testJoinInPlace(t, tinySpec(standard)) })
}

func testJoinInPlace(t *testing.T, spec gpt2.Spec) {
	_, d := openTestDecoder(t, spec, DecoderConfig{})
	target := prompt(3, 20)
	const steps = 6
	alone := decodeAlone(t, d, 100, target, steps, models.Sampling{})
	d.Free(100)

	seqs := fill(t, d, 16, 30)
	decodeStep := func(seqs []models.StepSeq) []int32 {
		next, _ := step(t, d, seqs...)
		for i := range seqs {
			seqs[i].Past += len(seqs[i].Tokens)
			seqs[i].Tokens = next[i : i+1]
		}
		return next
	}
	decodeStep(seqs) // the batch's buffer, assembled from the 16 prefills
	before := d.pool.assembled

	// Sequence 3 leaves as the target joins: its prefill runs alone, then
	// it takes row 3 of the batch.
	d.Free(seqs[3].ID)
	seqs = slices.Delete(seqs, 3, 4)
	seqs = append(seqs, models.StepSeq{ID: 100, Tokens: target, PromptLen: len(target), Sample: true})
	var got trace
	for k := 0; k <= steps; k++ {
		next, logits := step(t, d, seqs...)
		got.tokens, got.logits = append(got.tokens, next[15]), append(got.logits, logits[15])
		for i := range seqs {
			seqs[i].Past += len(seqs[i].Tokens)
			seqs[i].Tokens = next[i : i+1]
		}
	}
	if n := d.pool.assembled - before; n != 0 {
		t.Errorf("a leave and a join assembled the batch %d times, want 0 (in place)", n)
	}
	for k := range alone.tokens {
		if diff := maxDiff(alone.logits[k], got.logits[k]); diff > 1e-4 || alone.tokens[k] != got.tokens[k] {
			t.Fatalf("token %d: alone %d, joined in place %d; logits differ by %g", k, alone.tokens[k], got.tokens[k], diff)
		}
	}
	if st := d.seqs[100]; st.kv.rows != 16 || st.row != 3 {
		t.Errorf("the target is in row %d of %d, want row 3 of 16", st.row, st.kv.rows)
	}

	// Two rows may stay empty (16/8); a third leave assembles the 13 left.
	for _, n := range []int{1, 2, 3} {
		d.Free(seqs[0].ID)
		seqs = seqs[1:]
		decodeStep(seqs)
		want := 0
		if n == 3 {
			want = 1
		}
		if got := d.pool.assembled - before; got != want {
			t.Errorf("after %d leaves: assembled %d times, want %d", n, got, want)
		}
	}
	if rows := d.seqs[100].kv.rows; rows != 13 {
		t.Errorf("the batch has %d rows after compaction, want 13", rows)
	}
}

// TestDecoderRoomInPlace: an in-place graph's batch decodes in its buffer,
// which is widened with room only when a row has none left (every 16 steps
// for rows of 30 or so tokens), never larger than room makes it, and in its
// own memory while that has the capacity: nothing is allocated. (That the
// widened buffer decodes exactly, the recompute tests check: their rows
// grow through widenings.)
func TestDecoderRoomInPlace(t *testing.T) {
	t.Run("in place", func(t *testing.T) { testRoomInPlace(t, tinySpec()) })
	t.Run("GQA", func(t *testing.T) { testRoomInPlace(t, tinySpec(gqa)) })
}

func testRoomInPlace(t *testing.T, spec gpt2.Spec) {
	_, d := openTestDecoder(t, spec, DecoderConfig{})
	seqs := fill(t, d, 4, 30)
	assembled, widened, allocated := 0, 0, 0
	const steps = 40
	for k := range steps + 1 {
		if k == 1 { // after the batch's buffer was assembled from the 4 prefills
			assembled, widened, allocated = d.pool.assembled, d.pool.widened, d.pool.allocated
		}
		next, _ := step(t, d, seqs...)
		for i := range seqs {
			seqs[i].Past++
			seqs[i].Tokens = next[i : i+1]
			if st := d.seqs[seqs[i].ID]; st.kv.t > room(st.n) {
				t.Fatalf("a buffer of %d positions for rows of %d tokens, more than room(%d) = %d", st.kv.t, st.n, st.n, room(st.n))
			}
		}
	}
	if n := d.pool.assembled - assembled; n != 0 {
		t.Errorf("%d steps of an unchanged batch assembled it %d times, want 0", steps, n)
	}
	if n := d.pool.widened - widened; n < 1 || n > steps/16+1 {
		t.Errorf("%d steps widened the batch's buffer %d times, want 1..%d", steps, n, steps/16+1)
	}
	if n := d.pool.allocated - allocated; n != 0 {
		t.Errorf("%d steps allocated %d bytes, want the buffer widened in its own memory", steps, n)
	}
}

// TestDecoderPrefillLeavesTheBatchBuffer: in a step where a new sequence
// prefills while a batch decodes, the prefill gets a buffer of its own size
// and leaves the pool's free buffer, the batch's size, to the decode run's
// present. Taking it made the decode run allocate a new one at every join
// and fault its pages in: a 12 ms step of stories260k took 139 ms on the
// 2-core dev VM.
func TestDecoderPrefillLeavesTheBatchBuffer(t *testing.T) {
	_, d := openTestDecoder(t, tinySpec(), DecoderConfig{})
	seqs := fill(t, d, 16, 30)
	for range 3 { // the past and the present of steady decoding take turns
		next, _ := step(t, d, seqs...)
		for i := range seqs {
			seqs[i].Past++
			seqs[i].Tokens = next[i : i+1]
		}
	}
	before := d.pool.allocated
	d.Free(seqs[3].ID)
	seqs = slices.Delete(seqs, 3, 4)
	seqs = append(seqs, models.StepSeq{ID: 100, Tokens: prompt(3, 20), Sample: true})
	step(t, d, seqs...)
	b := d.seqs[seqs[0].ID].kv
	batch := d.dims.bytes(b.rows, b.t)
	if got := d.pool.allocated - before; got >= batch/4 {
		t.Errorf("the step allocated %d bytes; the batch's buffer holds %d: the decode run allocated its present anew", got, batch)
	}
}

// TestDecoderSamplingDeterminism checks that a seed fixes the tokens drawn,
// whatever the company of the sequence and preemptions, and that another
// seed draws others.
func TestDecoderSamplingDeterminism(t *testing.T) {
	_, d := openTestDecoder(t, tinySpec(), DecoderConfig{})
	target := prompt(8, 17)
	s := models.Sampling{Temperature: 0.9, TopP: 0.95, Seed: 1234}
	alone := decodeAlone(t, d, 1, target, 24, s)
	mixed := mixedSchedule(t, d, target, 24, s, 3, nil)
	if !slices.Equal(alone.tokens, mixed.tokens) {
		t.Fatalf("seed %d: alone %v, in company %v", s.Seed, alone.tokens, mixed.tokens)
	}
	// Preempted after 10 tokens and recomputed: prompt and generated
	// tokens prefilled together, then decoding carries on.
	seq := append(slices.Clone(target), alone.tokens[:10]...)
	next, _ := step(t, d, models.StepSeq{ID: 2, Tokens: seq, PromptLen: len(target), Sample: true, Sampling: s})
	if next[0] != alone.tokens[10] {
		t.Errorf("after a recompute: token %d, want %d", next[0], alone.tokens[10])
	}
	d.Free(2)
	other := s
	other.Seed = 99
	if o := decodeAlone(t, d, 3, target, 24, other); slices.Equal(o.tokens, alone.tokens) {
		t.Errorf("seeds %d and %d drew the same %d tokens", s.Seed, other.Seed, len(o.tokens))
	}
	if greedy := decodeAlone(t, d, 4, target, 24, models.Sampling{}); slices.Equal(greedy.tokens, alone.tokens) {
		t.Error("sampling at temperature 0.9 drew the greedy tokens")
	}
}

// TestDecoderErrors checks that bad steps are refused before anything runs,
// with errors that say what is wrong, and leave the cache as it was.
func TestDecoderErrors(t *testing.T) {
	_, d := openTestDecoder(t, tinySpec(), DecoderConfig{KVTokens: 64})
	p := prompt(2, 20)
	want := decodeAlone(t, d, 1, p, 3, models.Sampling{})

	next, _ := step(t, d, models.StepSeq{ID: 1, Tokens: p, Sample: true})
	for _, tc := range []struct {
		name    string
		seqs    []models.StepSeq
		wantErr string
		is      error
	}{
		{"kv bound", []models.StepSeq{{ID: 2, Tokens: prompt(3, 45), Sample: true}}, "the bound (--kv-tokens) is 64", ErrKVFull},
		{"wrong past", []models.StepSeq{{ID: 1, Past: 19, Tokens: next[:1]}}, "past 19, but the instance holds 20", nil},
		{"unknown sequence", []models.StepSeq{{ID: 7, Past: 3, Tokens: next[:1]}}, "holds no cache for it", nil},
		{"no tokens", []models.StepSeq{{ID: 2}}, "no tokens", models.ErrInvalidInput},
		{"negative past", []models.StepSeq{{ID: 2, Past: -1, Tokens: next[:1]}}, "past -1", models.ErrInvalidInput},
		{"token outside vocabulary", []models.StepSeq{{ID: 2, Tokens: []int32{5, 50257}}}, "token 50257 outside", models.ErrInvalidInput},
		{"negative token", []models.StepSeq{{ID: 2, Tokens: []int32{-3}}}, "token -3 outside", models.ErrInvalidInput},
		{"over the context", []models.StepSeq{{ID: 2, Tokens: make([]int32, 1025)}}, "more than the context of 1024", models.ErrInputTooLong},
		{"twice in a step", []models.StepSeq{{ID: 1, Past: 20, Tokens: next[:1]}, {ID: 1, Past: 20, Tokens: next[:1]}}, "appears twice", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := make([]int32, len(tc.seqs))
			err := d.Step(context.Background(), tc.seqs, out)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || (tc.is != nil && !errors.Is(err, tc.is)) {
				t.Fatalf("Step = %v, want an error containing %q (is %v)", err, tc.wantErr, tc.is)
			}
		})
	}
	if err := d.Step(context.Background(), []models.StepSeq{{ID: 1, Past: 20, Tokens: next[:1]}}, nil); err == nil {
		t.Error("Step with no room for the next tokens succeeded")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := d.Step(ctx, []models.StepSeq{{ID: 1, Past: 20, Tokens: next[:1]}}, make([]int32, 1)); !errors.Is(err, context.Canceled) {
		t.Errorf("Step with a cancelled context = %v", err)
	}
	// The refused steps changed nothing: decoding carries on as alone.
	if d.Used() != 20 {
		t.Errorf("Used() = %d after refused steps, want 20", d.Used())
	}
	got := []int32{next[0]}
	for k := 1; k < len(want.tokens); k++ {
		n, _ := step(t, d, models.StepSeq{ID: 1, Past: 20 + k - 1, Tokens: got[k-1:], Sample: true})
		got = append(got, n[0])
	}
	if !slices.Equal(got, want.tokens) {
		t.Errorf("after refused steps: %v, want %v", got, want.tokens)
	}
	// Filling the bound exactly is allowed; one more token is not.
	d.Free(1)
	step(t, d, models.StepSeq{ID: 3, Tokens: prompt(4, 63), Sample: true})
	n, _ := step(t, d, models.StepSeq{ID: 3, Past: 63, Tokens: []int32{1}, Sample: true})
	if err := d.Step(context.Background(), []models.StepSeq{{ID: 3, Past: 64, Tokens: n}}, n); !errors.Is(err, ErrKVFull) {
		t.Errorf("a step past the bound = %v, want ErrKVFull", err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Step(context.Background(), []models.StepSeq{{ID: 5, Tokens: n}}, n); err == nil {
		t.Error("Step after Close succeeded")
	}
}

// TestDecoderLongPrefill feeds a prompt longer than one run's logits allow,
// which the decoder splits into pieces, against prefilling it in chunks.
func TestDecoderLongPrefill(t *testing.T) {
	_, d := openTestDecoder(t, tinySpec(), DecoderConfig{})
	p := prompt(6, maxRunLogits/50257+100)
	whole, wl := step(t, d, models.StepSeq{ID: 1, Tokens: p, Sample: true})
	var cn []int32
	var cl [][]float32
	for at := 0; at < len(p); at += 200 {
		end := min(len(p), at+200)
		cn, cl = step(t, d, models.StepSeq{ID: 2, Past: at, Tokens: p[at:end], Sample: end == len(p)})
	}
	if diff := maxDiff(wl[0], cl[0]); diff > 1e-4 || whole[0] != cn[0] {
		t.Errorf("a %d-token prompt whole: %d, in chunks: %d; logits differ by %g", len(p), whole[0], cn[0], diff)
	}
}

// exportInfo describes a two-layer decoder graph as optimum exports it;
// edit changes it for a case.
func exportInfo(edit func(ins, outs map[string]*onnxgraph.Tensor)) onnxgraph.Info {
	return decoderInfo([]onnxgraph.Tensor{tensorOf("input_ids", "int64", -1, -1), tensorOf("attention_mask", "int64", -1, -1),
		tensorOf("position_ids", "int64", -1, -1)}, "float32", tensorOf("use_cache_branch", "bool", 1), edit)
}

// tensorOf describes a graph input or output.
func tensorOf(name, typ string, shape ...int64) onnxgraph.Tensor {
	return onnxgraph.Tensor{Name: name, Type: typ, Shape: shape}
}

// decoderInfo describes a two-layer decoder graph of 12 heads of 64: inputs
// first, the past of cacheType, then last; outputs logits and the present;
// edit changes it for a case.
func decoderInfo(first []onnxgraph.Tensor, cacheType string, last onnxgraph.Tensor, edit func(ins, outs map[string]*onnxgraph.Tensor)) onnxgraph.Info {
	ins := first
	outs := []onnxgraph.Tensor{tensorOf("logits", "float32", -1, -1, 50257)}
	for i := range 2 {
		for _, kind := range []string{"key", "value"} {
			ins = append(ins, tensorOf(fmt.Sprintf("past_key_values.%d.%s", i, kind), cacheType, -1, 12, -1, 64))
			outs = append(outs, tensorOf(fmt.Sprintf("present.%d.%s", i, kind), cacheType, -1, 12, -1, 64))
		}
	}
	return describe(append(ins, last), outs, edit)
}

// describe is the Info of a graph with inputs ins and outputs outs, after
// edit.
func describe(ins, outs []onnxgraph.Tensor, edit func(ins, outs map[string]*onnxgraph.Tensor)) onnxgraph.Info {
	index := func(ts []onnxgraph.Tensor) (map[string]*onnxgraph.Tensor, []string) {
		m, names := map[string]*onnxgraph.Tensor{}, []string{}
		for i := range ts {
			m[ts[i].Name] = &ts[i]
			names = append(names, ts[i].Name)
		}
		return m, names
	}
	in, inNames := index(ins)
	out, outNames := index(outs)
	if edit != nil {
		edit(in, out)
	}
	var info onnxgraph.Info
	for _, n := range inNames {
		if in[n] != nil {
			info.Inputs = append(info.Inputs, *in[n])
		}
	}
	for _, n := range outNames {
		if out[n] != nil {
			info.Outputs = append(info.Outputs, *out[n])
		}
	}
	return info
}

func TestReadDecoderSig(t *testing.T) {
	sig, err := readDecoderSig(exportInfo(nil))
	if err != nil {
		t.Fatal(err)
	}
	if sig.layers != 2 || sig.heads != 12 || sig.headDim != 64 || sig.vocab != 50257 || !sig.positions || !sig.cacheBranch ||
		strings.Join(sig.inputs, ",") != "input_ids,attention_mask,position_ids,past_key_values.0.key,past_key_values.0.value,"+
			"past_key_values.1.key,past_key_values.1.value,use_cache_branch" ||
		strings.Join(sig.outputs, ",") != "logits,present.0.key,present.0.value,present.1.key,present.1.value" {
		t.Errorf("signature = %+v", sig)
	}
	if got := sig.shape().KVBytesPerToken(); got != 2*2*12*64*4 {
		t.Errorf("KVBytesPerToken() = %d", got)
	}
	for _, tc := range []struct {
		name    string
		edit    func(ins, outs map[string]*onnxgraph.Tensor)
		wantErr string
	}{
		{"no KV cache", func(ins, _ map[string]*onnxgraph.Tensor) {
			for n := range ins {
				if strings.HasPrefix(n, "past_") {
					delete(ins, n)
				}
			}
		}, "no past_key_values inputs"},
		{"float16 cache", func(ins, _ map[string]*onnxgraph.Tensor) { ins["past_key_values.1.key"].Type = "float16" },
			"past_key_values.1.key float16 [?, 12, ?, 64]: want float32"},
		{"dynamic heads", func(ins, _ map[string]*onnxgraph.Tensor) { ins["past_key_values.0.value"].Shape[1] = -1 }, "fixed heads and head_dim"},
		{"layers disagree", func(ins, _ map[string]*onnxgraph.Tensor) { ins["past_key_values.1.value"].Shape[3] = 32 }, "every layer must have 12 heads of 64"},
		{"a value missing", func(ins, _ map[string]*onnxgraph.Tensor) { delete(ins, "past_key_values.0.value") }, "layer 0 lacks"},
		{"no attention mask", func(ins, _ map[string]*onnxgraph.Tensor) { delete(ins, "attention_mask") }, "no attention_mask input"},
		{"int32 ids", func(ins, _ map[string]*onnxgraph.Tensor) { ins["input_ids"].Type = "int32" }, "want int64 [batch, sequence]"},
		{"other input", func(ins, _ map[string]*onnxgraph.Tensor) { ins["position_ids"].Name = "token_type_ids" },
			"unsupported graph input token_type_ids int64 [?, ?]; a decoder takes"},
		{"no logits", func(_, outs map[string]*onnxgraph.Tensor) { delete(outs, "logits") }, "want a float32 output logits"},
		{"logits_to_keep a list", func(ins, _ map[string]*onnxgraph.Tensor) {
			*ins["use_cache_branch"] = onnxgraph.Tensor{Name: "logits_to_keep", Type: "int64", Shape: []int64{4}}
		}, "graph input logits_to_keep int64 [4]: want int64 [1]"},
		{"dynamic vocabulary", func(_, outs map[string]*onnxgraph.Tensor) { outs["logits"].Shape[2] = -1 }, "with a fixed vocab"},
		{"no present", func(_, outs map[string]*onnxgraph.Tensor) { delete(outs, "present.1.value") }, "no float32 output present.1.value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readDecoderSig(exportInfo(tc.edit))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("readDecoderSig = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
	testReadGQASig(t)
	if _, err := DecoderShapeOf(onnxgraph.Info{}); !errors.Is(err, ErrNotDecoder) {
		t.Errorf("DecoderShapeOf(no inputs) = %v, want ErrNotDecoder", err)
	}
}

// gqaInfo describes a two-layer GroupQueryAttention graph with an int8 KV
// cache, as models/gpt2 writes the int8 twins'; edit changes it for a case.
func gqaInfo(edit func(ins, outs map[string]*onnxgraph.Tensor)) onnxgraph.Info {
	return decoderInfo([]onnxgraph.Tensor{tensorOf("input_ids", "int64", -1, -1), tensorOf("seqlens_k", "int32", -1),
		tensorOf("total_sequence_length", "int32", 1), tensorOf("position_ids", "int64", -1, -1)}, "int8",
		tensorOf("logits_to_keep", "int64", 1), edit)
}

// testReadGQASig is TestReadDecoderSig for a GroupQueryAttention graph.
func testReadGQASig(t *testing.T) {
	sig, err := readDecoderSig(gqaInfo(nil))
	if err != nil {
		t.Fatal(err)
	}
	if !sig.gqa || sig.inPlace || sig.kvElem != elemInt8 ||
		strings.Join(sig.inputs, ",") != "input_ids,seqlens_k,total_sequence_length,position_ids,"+
			"past_key_values.0.key,past_key_values.0.value,past_key_values.1.key,past_key_values.1.value,logits_to_keep" ||
		strings.Join(sig.outputs, ",") != "logits,present.0.key,present.0.value,present.1.key,present.1.value" {
		t.Errorf("GQA signature = %+v", sig)
	}
	if got := sig.shape().KVBytesPerToken(); got != 2*2*12*64 {
		t.Errorf("GQA KVBytesPerToken() = %d", got)
	}
	for _, tc := range []struct {
		name    string
		edit    func(ins, outs map[string]*onnxgraph.Tensor)
		wantErr string
	}{
		{"no total", func(ins, _ map[string]*onnxgraph.Tensor) { delete(ins, "total_sequence_length") },
			"graph takes one of seqlens_k and total_sequence_length: GroupQueryAttention takes both"},
		{"no seqlens_k", func(ins, _ map[string]*onnxgraph.Tensor) { delete(ins, "seqlens_k") },
			"graph takes one of seqlens_k and total_sequence_length: GroupQueryAttention takes both"},
		{"int64 seqlens_k", func(ins, _ map[string]*onnxgraph.Tensor) { ins["seqlens_k"].Type = "int64" }, "want int32 [batch] or [1]"},
		{"a mask too", func(ins, _ map[string]*onnxgraph.Tensor) {
			*ins["logits_to_keep"] = onnxgraph.Tensor{Name: "attention_mask", Type: "int64", Shape: []int64{-1, -1}}
		},
			"graph takes seqlens_k, so no attention_mask or use_cache_branch"},
		{"no position_ids", func(ins, _ map[string]*onnxgraph.Tensor) { delete(ins, "position_ids") }, "graph has no position_ids input"},
		{"uint8", func(ins, outs map[string]*onnxgraph.Tensor) {
			for _, m := range []map[string]*onnxgraph.Tensor{ins, outs} {
				for _, t := range m {
					if t.Type == "int8" {
						t.Type = "uint8"
					}
				}
			}
		}, "want float32 (or int8, with seqlens_k)"},
		{"int8 without GQA", func(ins, _ map[string]*onnxgraph.Tensor) {
			*ins["seqlens_k"] = onnxgraph.Tensor{Name: "attention_mask", Type: "int64", Shape: []int64{-1, -1}}
			delete(ins, "total_sequence_length")
		}, "an int8 KV cache is served in graphs that take seqlens_k (GroupQueryAttention) only"},
		{"a float32 layer", func(ins, _ map[string]*onnxgraph.Tensor) { ins["past_key_values.1.value"].Type = "float32" },
			"past_key_values.1.value float32 [?, 12, ?, 64]: every layer's keys and values must be int8"},
		{"scales", func(ins, _ map[string]*onnxgraph.Tensor) {
			ins["logits_to_keep"].Name, ins["logits_to_keep"].Type = "past_key_values.0.key_scale", "float32"
		}, "unsupported graph input past_key_values.0.key_scale"},
		{"new keys too", func(_, outs map[string]*onnxgraph.Tensor) { outs["present.0.key"].Name = "new.0.key" },
			"one of the two layouts of a cache in place, not both"},
		{"a fixed capacity", func(ins, _ map[string]*onnxgraph.Tensor) { ins["past_key_values.0.key"].Shape[2] = 2048 },
			"graph output present.0.key int8 [?, 12, ?, 64]: want int8 [batch, 12, capacity, 64] with a dynamic capacity"},
		{"a present of other heads", func(_, outs map[string]*onnxgraph.Tensor) { outs["present.1.key"].Shape[1] = 6 },
			"graph output present.1.key int8 [?, 6, ?, 64]: want int8 [batch, 12, capacity, 64]"},
		{"a float32 present", func(_, outs map[string]*onnxgraph.Tensor) { outs["present.1.value"].Type = "float32" },
			"no int8 output present.1.value [batch, heads, capacity, 64]"},
	} {
		t.Run("gqa/"+tc.name, func(t *testing.T) {
			_, err := readDecoderSig(gqaInfo(tc.edit))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("readDecoderSig = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestDecoderReusesPrefillBuffers: requests that come and go one after the
// other, each prefilled in its own runs, reuse the buffers the previous ones
// left (pages resident) instead of mapping new ones; and the buffers the
// pool keeps stay within maxFree and its spare bytes besides the largest.
func TestDecoderReusesPrefillBuffers(t *testing.T) {
	t.Run("in place", func(t *testing.T) { testReusesPrefillBuffers(t, tinySpec(), 1) })
	t.Run("GQA", func(t *testing.T) { testReusesPrefillBuffers(t, tinySpec(gqa), 1) })
	t.Run("standard", func(t *testing.T) { testReusesPrefillBuffers(t, tinySpec(standard), 2) })
}

// testReusesPrefillBuffers is TestDecoderReusesPrefillBuffers for one
// graph, whose request leaves at least least buffers: an in-place graph's
// sequence keeps one, a standard graph's run takes a past and a present.
func testReusesPrefillBuffers(t *testing.T, spec gpt2.Spec, least int) {
	_, d := openTestDecoder(t, spec, DecoderConfig{})
	request := func(id models.SeqID) {
		s := models.StepSeq{ID: id, Tokens: prompt(uint64(id), 40), Sample: true}
		next, _ := step(t, d, s)
		step(t, d, models.StepSeq{ID: id, Past: 40, Tokens: next[:1], Sample: true})
		d.Free(id)
	}
	request(1)
	request(2)
	before := d.pool.allocated
	for id := models.SeqID(3); id < 10; id++ {
		request(id)
	}
	if got := d.pool.allocated - before; got != 0 {
		t.Errorf("7 more requests of the same shape allocated %d bytes; want the kept buffers reused", got)
	}
	if n := len(d.pool.free); n < least || n > maxFree {
		t.Errorf("the pool keeps %d free buffers, want %d..%d", n, least, maxFree)
	}
	spare := 0
	for _, b := range d.pool.free[1:] {
		spare += cap(b.data)
		if cap(b.data) > cap(d.pool.free[0].data) {
			t.Errorf("a kept buffer of %d bytes is larger than the first, %d", cap(b.data), cap(d.pool.free[0].data))
		}
	}
	if spare > d.pool.spare {
		t.Errorf("the pool keeps %d bytes besides its largest buffer, more than its spare %d", spare, d.pool.spare)
	}
}
