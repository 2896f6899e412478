package generate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/inferhq/infer/models"
)

const ms = time.Millisecond

// start runs an engine over f until the test ends.
func start(t *testing.T, cfg Config, f *fake) *Engine {
	t.Helper()
	return startWith(t, cfg, f, letters{})
}

// startWith runs an engine over f with the tokenizer tok until the test
// ends.
func startWith(t *testing.T, cfg Config, f *fake, tok models.Tokenizer) *Engine {
	t.Helper()
	e, err := New(cfg, f, fakeInfo, tok)
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, e)
	return e
}

// runUntilCleanup runs e until the test ends.
func runUntilCleanup(t *testing.T, e *Engine) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v", err)
		}
	})
}

// answer is a request whose answer has L tokens (EOS last) after a prompt
// of n tokens.
func answer(L, n int) Request {
	p := make([]int32, n)
	for i := range p {
		p[i] = 1
	}
	return Request{Prompt: p, Sampling: models.Sampling{Seed: uint64(L)}}
}

type outcome struct {
	text  string
	res   Result
	err   error
	ended time.Time
}

// run generates req and collects it on a goroutine.
func run(t *testing.T, ctx context.Context, e *Engine, req Request) <-chan outcome {
	t.Helper()
	ch := make(chan outcome, 1)
	s, err := e.Generate(ctx, req)
	if err != nil {
		ch <- outcome{err: err}
		return ch
	}
	go func() {
		text, res, err := Collect(context.Background(), s)
		ch <- outcome{text, res, err, time.Now()}
	}()
	return ch
}

// stepsOf returns, per step, whether id was in it.
func inStep(step []stepRec, id models.SeqID) bool {
	return slices.ContainsFunc(step, func(r stepRec) bool { return r.ID == id })
}

func TestRequestJoinsAtTheNextStep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		f.fixed = 10 * ms
		e := start(t, Config{}, f)
		t0 := time.Now()
		a := run(t, t.Context(), e, answer(8, 4))
		time.Sleep(35 * ms) // mid-step: steps start at 0, 10, 20, 30, 40 ms
		b := run(t, t.Context(), e, answer(3, 4))
		ob, oa := <-b, <-a
		if oa.err != nil || ob.err != nil {
			t.Fatal(oa.err, ob.err)
		}
		steps := f.Steps()
		if got := steps[4][0].At.Sub(t0); got != 40*ms {
			t.Fatalf("step 4 started at %v, want 40ms", got)
		}
		if len(steps[3]) != 1 || len(steps[4]) != 2 || steps[4][1].Past != 0 || steps[4][1].N != 4 || !steps[4][1].Sample {
			t.Errorf("steps 3, 4 = %+v, %+v; want b to prefill (4 tokens, sampled) in step 4 alongside a's decode", steps[3], steps[4])
		}
		if ob.res.Queue != 5*ms || ob.res.FirstToken != 15*ms || ob.res.Batch != 2 {
			t.Errorf("b's timing = %+v; want queue 5ms, first token 15ms, batch 2", ob.res.Timing)
		}
	})
}

func TestFinishedSequenceLeavesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		f.fixed = 10 * ms
		e := start(t, Config{}, f)
		t0 := time.Now()
		a := run(t, t.Context(), e, answer(3, 2))
		b := run(t, t.Context(), e, answer(10, 2))
		oa := <-a
		if oa.err != nil || oa.res.Finish != Stop || oa.res.CompletionTokens != 3 {
			t.Fatalf("a = %+v, want 3 tokens ending in EOS", oa)
		}
		<-b
		// b may have joined a's first step or the next one.
		steps := f.Steps()
		if got := oa.ended.Sub(t0); got != 30*ms {
			t.Errorf("a ended at %v, want 30ms (the end of its third step)", got)
		}
		for i, st := range steps {
			if want := i < 3; inStep(st, 1) != want {
				t.Errorf("step %d: a in it = %v, want %v", i, !want, want)
			}
		}
		if n := len(steps); n != 10 && n != 11 {
			t.Errorf("%d steps, want 10 or 11 (b's answer)", n)
		}
		if f.Held() != 0 {
			t.Errorf("decoder holds %d tokens after both finished", f.Held())
		}
	})
}

func TestStopRulesPerSequence(t *testing.T) {
	// The fake spells letters by position: after a prompt of 1 token the
	// answer is "bcdefgh…" (token k is letter k+1).
	stop := func(r Request, s ...string) Request { r.Stop = s; return r }
	maxT := func(r Request, n int) Request { r.MaxTokens = n; return r }
	for _, tc := range []struct {
		name   string
		req    Request
		text   string
		tokens int
		finish FinishReason
	}{
		{"eos", answer(5, 1), "bcde", 5, Stop},
		{"max tokens", maxT(answer(50, 1), 4), "bcde", 4, Length},
		{"stop across tokens", stop(answer(50, 1), "zz", "ef"), "bcd", 5, Stop},
		{"earliest stop wins", stop(answer(50, 1), "gh", "cd"), "b", 3, Stop},
		{"stop after eos never seen", stop(answer(3, 1), "ef"), "bc", 3, Stop},
		{"ignore eos", func() Request { r := maxT(answer(3, 1), 6); r.IgnoreEOS = true; return r }(), "bcefg", 6, Length},
		{"min tokens", func() Request { r := maxT(answer(3, 1), 6); r.MinTokens = 5; return r }(), "bcefg", 6, Length},
		{"stops before min tokens ignored", func() Request { r := stop(maxT(answer(50, 1), 8), "c", "f"); r.MinTokens = 4; return r }(), "bcde", 5, Stop},
		{"context", answer(500, fakeInfo.Context-3), "", 3, Length},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFake()
				f.fixed = ms
				e := start(t, Config{}, f)
				// Run a neighbour alongside: stop rules are per sequence.
				other := run(t, t.Context(), e, answer(20, 3))
				o := <-run(t, t.Context(), e, tc.req)
				if o.err != nil {
					t.Fatal(o.err)
				}
				if tc.name == "context" {
					tc.text, _ = expected(500, fakeInfo.Context-3, 3)
				}
				if o.text != tc.text || o.res.CompletionTokens != tc.tokens || o.res.Finish != tc.finish {
					t.Errorf("got %q, %d tokens, %s; want %q, %d, %s", o.text, o.res.CompletionTokens, o.res.Finish, tc.text, tc.tokens, tc.finish)
				}
				on := <-other
				if want, _ := expected(20, 3, 0); on.text != want || on.res.Finish != Stop {
					t.Errorf("neighbour got %q (%s), want %q", on.text, on.res.Finish, want)
				}
			})
		})
	}
}

// pairs is a models.ContextTokenizer: a token after another reads as the
// two letters.
type pairs struct{ letters }

func (p pairs) TokenBytesAfter(prev, id int32) []byte {
	return append(slices.Clone(p.TokenBytes(prev)), p.TokenBytes(id)...)
}

// TestContextTokenizerSeesTheTokenBefore: with a tokenizer whose bytes
// depend on the token before (SentencePiece's space after BOS), each
// generated token's text is read after the one before it, the first after
// the prompt's last.
func TestContextTokenizerSeesTheTokenBefore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := startWith(t, Config{}, newFake(), pairs{})
		o := <-run(t, t.Context(), e, answer(5, 1)) // "bcde" after "a", then EOS
		if o.err != nil || o.text != "abbccdde" {
			t.Errorf("got %q (%v), want \"abbccdde\"", o.text, o.err)
		}
	})
}

func TestStopStringIsHeldBackUntilDecided(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := start(t, Config{}, newFake())
		req := answer(50, 1)
		req.Stop = []string{"dx"} // "d" may start it: held until "e" decides
		req.MaxTokens = 5
		s, err := e.Generate(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		var toks []Token
		for {
			toks, err = s.Next(t.Context(), toks)
			if err != nil {
				break
			}
		}
		var got []string
		for _, tk := range toks {
			got = append(got, tk.Text)
		}
		if want := []string{"b", "c", "", "de", "f"}; !slices.Equal(got, want) {
			t.Errorf("released %q, want %q", got, want)
		}
		if toks[len(toks)-1].Finish != Length || toks[0].Finish != "" {
			t.Errorf("finish on tokens: first %q, last %q", toks[0].Finish, toks[len(toks)-1].Finish)
		}
	})
}

func TestTextHoldsBackPartialCharactersAndStops(t *testing.T) {
	euro := []byte("€")
	for _, tc := range []struct {
		name  string
		stops []string
		parts [][]byte
		want  []string
		stop  bool
	}{
		{"utf-8 split over tokens", nil, [][]byte{euro[:1], euro[1:2], euro[2:], []byte("x")}, []string{"", "", "€", "x"}, false},
		{"stop over three tokens", []string{"world"}, [][]byte{[]byte("hello wo"), []byte("r"), []byte("ld!")}, []string{"hello ", "", ""}, true},
		{"false start released", []string{"world"}, [][]byte{[]byte("hello wo"), []byte("rk")}, []string{"hello ", "work"}, false},
		{"stop inside a character's bytes", []string{"€"}, [][]byte{[]byte("a"), euro[:2], euro[2:]}, []string{"a", "", ""}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tx text
			for _, s := range tc.stops {
				tx.stops = append(tx.stops, []byte(s))
			}
			var got []string
			stopped := false
			for _, p := range tc.parts {
				out, hit := tx.add(p, true)
				got = append(got, out)
				if hit {
					stopped = true
					break
				}
			}
			if !slices.Equal(got, tc.want) || stopped != tc.stop {
				t.Errorf("released %q, stop %v; want %q, %v", got, stopped, tc.want, tc.stop)
			}
		})
	}
}

func TestStaticAdmitsNothingMidBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		f.fixed = 10 * ms
		e := start(t, Config{Policy: Static, MaxSeqs: 4, MaxLatency: 5 * ms}, f)
		t0 := time.Now()
		a := run(t, t.Context(), e, answer(3, 2))
		b := run(t, t.Context(), e, answer(10, 2))
		time.Sleep(12 * ms)
		c := run(t, t.Context(), e, answer(2, 2))
		oa, ob, oc := <-a, <-b, <-c
		for _, o := range []outcome{oa, ob, oc} {
			if o.err != nil {
				t.Fatal(o.err)
			}
		}
		steps := f.Steps()
		if got := steps[0][0].At.Sub(t0); got != 5*ms {
			t.Errorf("batch started at %v, want 5ms (max latency after the first arrival)", got)
		}
		for i := range 10 {
			if len(steps[i]) != 2 || !inStep(steps[i], 1) || !inStep(steps[i], 2) {
				t.Errorf("step %d = %+v, want rows a and b (a finished, still computed)", i, steps[i])
			}
		}
		if len(steps) != 12 || len(steps[10]) != 1 || steps[10][0].ID != 3 {
			t.Errorf("steps after the batch = %+v, want c alone", steps[10:])
		}
		// a is answered when it finishes, not when the batch does.
		if got := oa.ended.Sub(t0); got != 35*ms {
			t.Errorf("a answered at %v, want 35ms", got)
		}
		if got := oc.res.Queue; got != 105*ms-12*ms {
			t.Errorf("c queued %v, want 93ms (until the batch ended)", got)
		}
	})
}

func TestPreemptionResumesCorrectly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		f.fixed = ms
		f.kv = fakeInfo.Context
		var preempted atomic.Int64
		e := start(t, Config{KVTokens: fakeInfo.Context, OnStep: func(si StepInfo) { preempted.Add(int64(si.Preempted)) }}, f)
		a := run(t, t.Context(), e, answer(120, 100))
		b := run(t, t.Context(), e, answer(120, 20))
		oa, ob := <-a, <-b
		if oa.err != nil || ob.err != nil {
			t.Fatal(oa.err, ob.err)
		}
		wa, _ := expected(120, 100, 0)
		wb, _ := expected(120, 20, 0)
		if oa.text != wa || ob.text != wb {
			t.Errorf("texts after preemption differ:\na %q\nwant %q\nb %q\nwant %q", oa.text, wa, ob.text, wb)
		}
		if ob.res.Preemptions < 1 || oa.res.Preemptions != 0 || preempted.Load() < 1 {
			t.Errorf("preemptions: a %d, b %d, steps %d; want b (the newest) preempted", oa.res.Preemptions, ob.res.Preemptions, preempted.Load())
		}
		if ob.res.CompletionTokens != 120 {
			t.Errorf("b has %d completion tokens, want 120", ob.res.CompletionTokens)
		}
		// b was recomputed: a step fed it prompt and generated tokens at once.
		recomputed := false
		for _, st := range f.Steps() {
			for _, r := range st {
				if r.Past == 0 && r.N > 20 {
					recomputed = true
				}
			}
		}
		if !recomputed {
			t.Error("no step recomputed b's prompt and generated tokens")
		}
	})
}

func TestManyConcurrentStreamsGetTheirOwnTokens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		f.fixed, f.perSeq, f.perToken = ms, 10*time.Microsecond, time.Microsecond
		e := start(t, Config{MaxSeqs: 32, QueueCap: 256, MaxBatchedTokens: 256}, f)
		var wg sync.WaitGroup
		for i := range 200 {
			L, n, m := 1+i%37, 1+i%23, 0
			if i%3 == 0 {
				m = 1 + i%11
			}
			wg.Go(func() {
				req := answer(L, n)
				req.MaxTokens = m
				checkStream(t, e, i, req, L, m)
			})
		}
		wg.Wait()
		if f.Held() != 0 {
			t.Errorf("decoder holds %d tokens after all finished", f.Held())
		}
	})
}

// checkStream generates req, stream number i, and checks that it gets
// exactly the fake's answer of L tokens (at most m; 0: no cap), token by
// token.
func checkStream(t *testing.T, e *Engine, i int, req Request, L, m int) {
	n := len(req.Prompt)
	s, err := e.Generate(t.Context(), req)
	if err != nil {
		t.Error(err)
		return
	}
	var toks []Token
	for err == nil {
		toks, err = s.Next(t.Context(), toks)
	}
	if err != io.EOF {
		t.Errorf("stream %d: %v", i, err)
		return
	}
	want, k := expected(L, n, m)
	var got strings.Builder
	for j, tk := range toks {
		got.WriteString(tk.Text)
		if wantID := fakeToken(L, n, n+j); tk.ID != wantID {
			t.Errorf("stream %d token %d = %d, want %d", i, j, tk.ID, wantID)
			return
		}
	}
	if got.String() != want || len(toks) != k || s.Result().CompletionTokens != k {
		t.Errorf("stream %d: %q (%d tokens), want %q (%d)", i, got.String(), len(toks), want, k)
	}
}

func TestDisconnectAndDeadlineFreeKVAtTheNextStep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		f.fixed = 10 * ms
		e := start(t, Config{}, f)
		t0 := time.Now()
		ctx, cancel := context.WithCancel(t.Context())
		a := run(t, ctx, e, answer(100, 5))
		dctx, dcancel := context.WithTimeout(t.Context(), 45*ms)
		defer dcancel()
		b := run(t, dctx, e, answer(100, 5))
		keep := run(t, t.Context(), e, answer(10, 5))
		time.Sleep(25 * ms)
		cancel()
		oa := <-a
		if !errors.Is(oa.err, context.Canceled) {
			t.Errorf("a ended with %v, want context.Canceled", oa.err)
		}
		ob := <-b
		if !errors.Is(ob.err, context.DeadlineExceeded) {
			t.Errorf("b ended with %v, want context.DeadlineExceeded", ob.err)
		}
		ok := <-keep
		if ok.err != nil || ok.res.CompletionTokens != 10 {
			t.Errorf("the other sequence: %+v", ok)
		}
		for i, st := range f.Steps() {
			at := st[0].At.Sub(t0)
			if (inStep(st, 1) && at >= 25*ms) || (inStep(st, 2) && at >= 45*ms) || (at >= 10*ms && at < 25*ms && !inStep(st, 1)) {
				t.Errorf("step %d at %v: a in it %v, b in it %v", i, at, inStep(st, 1), inStep(st, 2))
			}
		}
		if f.Held() != 0 || e.KVUsage() != 0 { // Held waits for the engine's step
			t.Errorf("KV held %d, usage %v after all left", f.Held(), e.KVUsage())
		}
	})
}

func TestAdmissionIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		f.fixed = 10 * ms
		e := start(t, Config{Policy: Naive, QueueCap: 2}, f)
		// Teach the engine how long a sequence runs: 5 steps, 50ms.
		if o := <-run(t, t.Context(), e, answer(5, 1)); o.err != nil {
			t.Fatal(o.err)
		}
		a := run(t, t.Context(), e, answer(5, 1))
		synctest.Wait()
		w1 := run(t, t.Context(), e, answer(5, 1))
		w2 := run(t, t.Context(), e, answer(5, 1))
		if o := <-run(t, t.Context(), e, answer(5, 1)); !errors.Is(o.err, ErrQueueFull) || errors.Is(o.err, ErrWouldMissDeadline) {
			t.Errorf("third waiting request: %v, want ErrQueueFull", o.err)
		}
		<-a
		<-w1
		synctest.Wait()
		// w2 runs, w3 waits: the next one would start ~100ms from now.
		w3 := run(t, t.Context(), e, answer(5, 1))
		if got := e.Backlog(); got != 50*ms {
			t.Errorf("Backlog() = %v, want 50ms (one waiting request)", got)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 60*ms)
		defer cancel()
		if o := <-run(t, ctx, e, answer(5, 1)); !errors.Is(o.err, ErrWouldMissDeadline) {
			t.Errorf("request with a 60ms deadline behind 100ms of backlog: %v, want ErrWouldMissDeadline", o.err)
		}
		<-w2
		<-w3
	})
}

func TestValidation(t *testing.T) {
	e, err := New(Config{}, newFake(), fakeInfo, letters{})
	if err != nil {
		t.Fatal(err)
	}
	long := answer(1, fakeInfo.Context)
	tooMany := answer(1, 10)
	tooMany.MaxTokens = fakeInfo.Context
	manyStops := answer(1, 1)
	manyStops.Stop = make([]string, MaxStops+1)
	for i := range manyStops.Stop {
		manyStops.Stop[i] = "x"
	}
	minOver := answer(1, 1)
	minOver.MaxTokens, minOver.MinTokens = 2, 3
	for _, tc := range []struct {
		name string
		req  Request
		want error
	}{
		{"empty", Request{}, ErrInvalidRequest},
		{"prompt fills the context", long, ErrPromptTooLong},
		{"max tokens past the context", tooMany, ErrMaxTokensTooLarge},
		{"negative max tokens", Request{Prompt: []int32{1}, MaxTokens: -1}, ErrInvalidRequest},
		{"too many stops", manyStops, ErrInvalidRequest},
		{"empty stop", Request{Prompt: []int32{1}, Stop: []string{""}}, ErrInvalidRequest},
		{"min over max", minOver, ErrInvalidRequest},
		{"token outside the vocabulary", Request{Prompt: []int32{5000}}, ErrInvalidRequest},
	} {
		if _, err := e.Generate(context.Background(), tc.req); !errors.Is(err, tc.want) {
			t.Errorf("%s: Generate() = %v, want %v", tc.name, err, tc.want)
		}
	}
	if _, err := New(Config{MaxSeqs: 64, MaxBatchedTokens: 32}, newFake(), fakeInfo, letters{}); err == nil {
		t.Error("New accepted a token budget below max seqs")
	}
	if _, err := New(Config{KVTokens: fakeInfo.KVTokens + 1}, newFake(), fakeInfo, letters{}); err == nil {
		t.Error("New accepted more KV than the instance has")
	}
}

func TestSlowReaderIsCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		f.fixed = 10 * ms
		e := start(t, Config{StreamBuffer: 4}, f)
		s, err := e.Generate(t.Context(), answer(100, 2))
		if err != nil {
			t.Fatal(err)
		}
		other := run(t, t.Context(), e, answer(20, 2))
		time.Sleep(100 * ms) // nobody reads s
		toks, err := s.Next(t.Context(), nil)
		if err != nil || len(toks) != 4 {
			t.Fatalf("Next() = %d tokens, %v; want the 4 buffered", len(toks), err)
		}
		if _, err := s.Next(t.Context(), nil); !errors.Is(err, ErrSlowReader) {
			t.Errorf("then Next() = %v, want ErrSlowReader", err)
		}
		for i, st := range f.Steps() {
			if i >= 5 && inStep(st, 1) {
				t.Errorf("step %d still computes the cut sequence", i)
			}
		}
		if o := <-other; o.err != nil || o.res.CompletionTokens != 20 {
			t.Errorf("the other sequence: %+v", o)
		}
	})
}

func TestDecoderFailureFailsItsStepOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		f.fixed = 10 * ms
		e := start(t, Config{}, f)
		a := run(t, t.Context(), e, answer(50, 2))
		time.Sleep(15 * ms)
		f.mu.Lock()
		f.fail = errors.New("device lost")
		f.mu.Unlock()
		if o := <-a; !errors.Is(o.err, ErrDecoder) || !strings.Contains(o.err.Error(), "device lost") {
			t.Errorf("a ended with %v, want ErrDecoder", o.err)
		}
		if o := <-run(t, t.Context(), e, answer(3, 2)); o.err != nil || o.res.CompletionTokens != 3 {
			t.Errorf("a later request: %+v", o)
		}
		if f.Held() != 0 {
			t.Errorf("decoder holds %d tokens", f.Held())
		}
	})
}

func TestChunkedPrefillKeepsDecoding(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		f.fixed = 10 * ms
		e := start(t, Config{MaxSeqs: 4, MaxBatchedTokens: 40}, f)
		a := run(t, t.Context(), e, answer(20, 2))
		time.Sleep(15 * ms)
		b := run(t, t.Context(), e, answer(3, 100))
		if oa, ob := <-a, <-b; oa.err != nil || ob.err != nil {
			t.Fatal(oa.err, ob.err)
		}
		var chunks []string
		for _, st := range f.Steps()[2:5] {
			if !inStep(st, 1) {
				t.Errorf("a did not decode during b's prefill: %+v", st)
			}
			for _, r := range st {
				if r.ID == 2 {
					chunks = append(chunks, fmt.Sprintf("%d@%d/%v", r.N, r.Past, r.Sample))
				}
			}
		}
		if want := []string{"39@0/false", "39@39/false", "22@78/true"}; !slices.Equal(chunks, want) {
			t.Errorf("b's prefill chunks = %v, want %v (budget 40 less a's decode)", chunks, want)
		}
	})
}

func TestDrainFinishesAdmittedWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		f.fixed = 10 * ms
		e, _ := New(Config{MaxSeqs: 2}, f, fakeInfo, letters{})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- e.Run(ctx) }()
		var outs []<-chan outcome
		for range 5 {
			outs = append(outs, run(t, t.Context(), e, answer(4, 2)))
		}
		synctest.Wait()
		cancel()
		synctest.Wait()
		if _, err := e.Generate(t.Context(), answer(4, 2)); !errors.Is(err, ErrClosed) {
			t.Errorf("Generate while draining = %v, want ErrClosed", err)
		}
		for i, o := range outs {
			if r := <-o; r.err != nil || r.res.CompletionTokens != 4 {
				t.Errorf("request %d: %+v", i, r)
			}
		}
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

func TestReconfigureToStaticAndBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		f.fixed = 10 * ms
		e := start(t, Config{}, f)
		a := run(t, t.Context(), e, answer(3, 2))
		b := run(t, t.Context(), e, answer(30, 2))
		// b joins a's first step or its second (the goroutines that send
		// them race the engine's first admission): both run by 15ms.
		time.Sleep(15 * ms)
		if err := e.Reconfigure(Config{Policy: Static, MaxSeqs: 8}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * ms) // a finished at 30ms; its row is still computed
		if got := len(f.Steps()[len(f.Steps())-1]); got != 2 {
			t.Errorf("static step has %d rows, want 2 (a's finished row kept)", got)
		}
		c := run(t, t.Context(), e, answer(3, 2))
		time.Sleep(20 * ms)
		if inStep(f.Steps()[len(f.Steps())-1], 3) {
			t.Error("c joined a static batch")
		}
		if err := e.Reconfigure(Config{Policy: Continuous}); err != nil {
			t.Fatal(err)
		}
		for _, o := range []outcome{<-a, <-b, <-c} {
			if o.err != nil {
				t.Fatal(o.err)
			}
		}
		if got := e.Config(); got.Policy != Continuous || got.MaxSeqs != 32 {
			t.Errorf("Config() = %+v", got)
		}
	})
}

// A static batch whose unfinished rows all leave (their clients went away)
// ends: the next batch forms instead of the finished rows running on.
func TestStaticBatchEndsWhenItsLastLiveRowLeaves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		f.fixed = 10 * ms
		e := start(t, Config{Policy: Static, MaxSeqs: 2}, f)
		ctx, cancel := context.WithCancel(t.Context())
		a := run(t, t.Context(), e, answer(2, 2))
		b := run(t, ctx, e, answer(200, 2))
		time.Sleep(45 * ms)
		c := run(t, t.Context(), e, answer(3, 2))
		cancel()
		if o := <-a; o.err != nil {
			t.Fatal(o.err)
		}
		if o := <-b; !errors.Is(o.err, context.Canceled) {
			t.Errorf("b: %v", o.err)
		}
		if o := <-c; o.err != nil || o.res.CompletionTokens != 3 || o.res.Queue > 10*ms {
			t.Errorf("c after the batch emptied: %+v", o)
		}
		if f.Held() != 0 {
			t.Errorf("decoder holds %d tokens", f.Held())
		}
	})
}

// Before any sequence finished, the deadline admission estimates a
// sequence's life from ColdStep × its max tokens: a cold burst is refused
// at once beyond what can start within its deadline, rather than admitted
// to time out.
func TestColdAdmissionUsesTheModelsStepCost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		f.fixed = 10 * ms
		e := start(t, Config{Policy: Naive, QueueCap: 100, ColdStep: 10 * ms}, f)
		// Each lives 5 steps, 50ms: within 200ms, 5 start in time (the
		// first at once), the fifth just at the deadline.
		ctx, cancel := context.WithTimeout(t.Context(), 200*ms)
		defer cancel()
		var outs []<-chan outcome
		for range 10 {
			req := answer(5, 5)
			req.MaxTokens = 5
			outs = append(outs, run(t, ctx, e, req))
			synctest.Wait()
		}
		refused, late := 0, 0
		for _, o := range outs {
			r := <-o
			switch {
			case errors.Is(r.err, ErrWouldMissDeadline):
				refused++
			case errors.Is(r.err, context.DeadlineExceeded):
				late++
			case r.err != nil:
				t.Errorf("unexpected %v", r.err)
			}
		}
		if refused != 5 || late != 1 {
			t.Errorf("cold burst of 10 (50ms each) within 200ms: %d refused, %d timed out; want 5 refused at once, 1 timed out (it starts at its deadline)", refused, late)
		}
	})
}
