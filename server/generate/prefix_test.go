package generate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/inferhq/infer/models"
)

// groupTok is token pos of the prompts of group g: prompts of one group
// share their prefixes.
func groupTok(g uint64, pos int) int32 { return int32(1 + (g*131+uint64(pos)*7)%900) }

// grouped is a request of group g with an n-token prompt and an answer of
// L tokens. Its seed carries both, for the fake.
func grouped(g uint64, n, L int) Request {
	p := make([]int32, n)
	for i := range p {
		p[i] = groupTok(g, i)
	}
	return Request{Prompt: p, Sampling: models.Sampling{Seed: uint64(L) + 1000*g}}
}

// checkingFake is a fake that reads back every sequence's KV (see fake).
func checkingFake() *fake {
	f := newFake()
	f.prompt = func(seed uint64, pos int) int32 { return groupTok(seed/1000, pos) }
	return f
}

// kvAudit checks, after every step (on the engine's goroutine), that the
// block manager's books balance: each block's reference count is the number
// of running sequences whose table holds it, the free blocks are the empty
// ones and the idle cached ones, and the blocks in use are those the
// decoder's live sequences hold.
type kvAudit struct {
	t       *testing.T
	e       *Engine
	f       *fake
	on      func(StepInfo)
	steps   atomic.Int64
	evicted atomic.Int64
	queries atomic.Int64
	hits    atomic.Int64
	failed  atomic.Bool
}

func (a *kvAudit) step(si StepInfo) {
	a.steps.Add(1)
	a.queries.Add(int64(si.PrefixQueries))
	a.hits.Add(int64(si.PrefixHits))
	p := a.e.pool
	a.evicted.Store(int64(p.evicted))
	if err := a.check(si); err != nil && !a.failed.Swap(true) {
		a.t.Errorf("after step %d: %v", a.steps.Load(), err)
	}
	if a.on != nil {
		a.on(si)
	}
}

func (a *kvAudit) check(si StepInfo) error {
	p := a.e.pool
	refs := make(map[int32]int32)
	for _, s := range a.e.running {
		for _, b := range s.blocks {
			refs[b]++
		}
		if want := p.blocksFor(s.computed); len(s.blocks) != want {
			return fmt.Errorf("seq %d holds %d blocks for %d tokens", s.id, len(s.blocks), s.computed)
		}
	}
	idle := 0
	for b := range p.blocks {
		k := &p.blocks[b]
		if k.ref != refs[int32(b)] {
			return fmt.Errorf("block %d: ref %d, held by %d sequences", b, k.ref, refs[int32(b)])
		}
		if k.ref == 0 && k.cached {
			idle++
		}
		if k.cached && p.index[k.hash] != int32(b) {
			return fmt.Errorf("block %d cached but not indexed", b)
		}
	}
	n := 0
	for b := p.head; b != noBlock; b = p.blocks[b].next {
		n++
	}
	if idle != p.idle || n != p.idle || len(p.empty)+p.idle+len(refs) != p.total() {
		return fmt.Errorf("%d idle cached blocks, %d listed, count %d; %d empty + %d idle + %d used != %d", idle, n, p.idle, len(p.empty), p.idle, len(refs), p.total())
	}
	if si.KVUsed != len(refs)*p.size {
		return fmt.Errorf("StepInfo.KVUsed %d, want %d", si.KVUsed, len(refs)*p.size)
	}
	a.f.mu.Lock()
	held := len(a.f.refs)
	a.f.mu.Unlock()
	if held != len(refs) {
		return fmt.Errorf("the decoder's sequences hold %d blocks, the engine's %d", held, len(refs))
	}
	return nil
}

// startAudited runs an engine over f with info, auditing its KV after every
// step.
func startAudited(t *testing.T, cfg Config, f *fake, info models.DecoderInfo) (*Engine, *kvAudit) {
	t.Helper()
	a := &kvAudit{t: t, f: f, on: cfg.OnStep}
	cfg.OnStep = a.step
	e, err := New(cfg, f, info, letters{})
	if err != nil {
		t.Fatal(err)
	}
	a.e = e // before Run, whose goroutine alone calls OnStep
	runUntilCleanup(t, e)
	return e, a
}

func TestCachedPrefixIsNotComputedAgain(t *testing.T) {
	for _, off := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoPrefixCache=%v", off), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := checkingFake()
				f.fixed, f.perToken = ms, 10*time.Microsecond
				e, a := startAudited(t, Config{NoPrefixCache: off}, f, fakeInfo)
				first := <-run(t, t.Context(), e, grouped(1, 100, 5))
				// The same first 100 tokens: 6 full blocks cached (the
				// first request's seventh held 4 prompt tokens and 4 of
				// its answer).
				second := <-run(t, t.Context(), e, grouped(1, 120, 5))
				whole := <-run(t, t.Context(), e, grouped(1, 96, 5)) // cached through its last block
				for _, o := range []outcome{first, second, whole} {
					if o.err != nil {
						t.Fatal(o.err)
					}
				}
				steps := f.Steps()
				var starts []string
				for _, st := range steps {
					for _, r := range st {
						if r.N > 1 {
							starts = append(starts, fmt.Sprintf("%d@%d", r.N, r.Past))
						}
					}
				}
				want := "100@0 24@96 16@80"
				wantCached := [3]int{0, 96, 80}
				if off {
					want, wantCached = "100@0 120@0 96@0", [3]int{}
				}
				if got := strings.Join(starts, " "); got != want {
					t.Errorf("prefills (tokens@past) = %s, want %s", got, want)
				}
				for i, o := range []outcome{first, second, whole} {
					if o.res.CachedTokens != wantCached[i] {
						t.Errorf("request %d: %d cached tokens, want %d", i, o.res.CachedTokens, wantCached[i])
					}
				}
				// 1ms a step plus 10µs a computed prompt token.
				if got, want := second.res.FirstToken, ms+time.Duration(120-wantCached[1])*10*time.Microsecond; got != want {
					t.Errorf("second request's time to first token %v, want %v", got, want)
				}
				wantQ, wantH := int64(100+120+96), int64(96+80)
				if off {
					wantQ, wantH = 0, 0
				}
				if a.queries.Load() != wantQ || a.hits.Load() != wantH {
					t.Errorf("prefix cache queries %d, hits %d; want %d, %d", a.queries.Load(), a.hits.Load(), wantQ, wantH)
				}
			})
		})
	}
}

// Under KV pressure a request evicts the idle cached blocks least recently
// used first, and never a block a running sequence holds.
func TestKVPressureEvictsLeastRecentlyUsedIdleBlocks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := checkingFake()
		f.fixed = ms
		info := models.DecoderInfo{Context: 64, EOS: fakeEOS, Vocab: 1000, KVTokens: 8 * 16, BlockKV: true}
		f.kv = info.KVTokens
		e, a := startAudited(t, Config{}, f, info)
		cached := func(g uint64, n, L int) int {
			t.Helper()
			o := <-run(t, t.Context(), e, grouped(g, n, L))
			if o.err != nil {
				t.Fatal(o.err)
			}
			return o.res.CachedTokens
		}
		// C, A, B each leave two full blocks cached (6 of the 8); A again
		// makes its blocks the most recently used: C's are now the oldest.
		for _, g := range []uint64{3, 1, 2} {
			if got := cached(g, 33, 1); got != 0 {
				t.Fatalf("group %d: %d cached tokens on first sight", g, got)
			}
		}
		if got := cached(1, 33, 1); got != 32 {
			t.Fatalf("A again: %d cached tokens, want 32", got)
		}
		// D holds C's blocks while E needs room: E and D's growth evict
		// B's two blocks (the least recently used idle ones), not C's
		// (older, but held) nor A's.
		d := run(t, t.Context(), e, grouped(3, 48, 3))
		ee := run(t, t.Context(), e, grouped(4, 32, 1))
		od, oe := <-d, <-ee
		if od.err != nil || oe.err != nil {
			t.Fatal(od.err, oe.err)
		}
		if od.res.CachedTokens != 32 || oe.res.CachedTokens != 0 {
			t.Errorf("D %d, E %d cached tokens; want 32, 0", od.res.CachedTokens, oe.res.CachedTokens)
		}
		if got := a.evicted.Load(); got != 2 {
			t.Errorf("%d blocks evicted, want 2", got)
		}
		for _, tc := range []struct {
			name string
			g    uint64
			want int
		}{{"A", 1, 32}, {"C", 3, 32}, {"B", 2, 0}} {
			if got := cached(tc.g, 33, 1); got != tc.want {
				t.Errorf("%s afterwards: %d cached tokens, want %d", tc.name, got, tc.want)
			}
		}
	})
}

// A preempted sequence drops its references; its blocks stay cached, so its
// recompute starts after them. A cancelled one drops them too. The audit
// checks the counts after every step.
func TestRefCountsAcrossPreemptionAndCancellation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := checkingFake()
		f.fixed = ms
		info := models.DecoderInfo{Context: 256, EOS: fakeEOS, Vocab: 1000, KVTokens: 256, BlockKV: true}
		f.kv = info.KVTokens
		var preempted atomic.Int64
		e, _ := startAudited(t, Config{OnStep: func(si StepInfo) { preempted.Add(int64(si.Preempted)) }}, f, info)
		// a and b share a 64-token prefix; together they outgrow the 16
		// blocks, so b (the newest) is preempted and recomputed.
		ctx, cancel := context.WithCancel(t.Context())
		c := run(t, ctx, e, grouped(7, 40, 200))
		a := run(t, t.Context(), e, grouped(5, 100, 90))
		time.Sleep(5 * ms) // a's prompt is computed: b finds it cached
		b := run(t, t.Context(), e, grouped(5, 80, 90))
		time.Sleep(20 * ms)
		cancel()
		if o := <-c; !errors.Is(o.err, context.Canceled) {
			t.Errorf("c: %v, want context.Canceled", o.err)
		}
		oa, ob := <-a, <-b
		if oa.err != nil || ob.err != nil {
			t.Fatal(oa.err, ob.err)
		}
		wa, _ := expected(90, 100, 0)
		wb, _ := expected(90, 80, 0)
		if oa.text != wa || ob.text != wb {
			t.Errorf("texts after preemption differ:\na %q\nwant %q\nb %q\nwant %q", oa.text, wa, ob.text, wb)
		}
		if ob.res.Preemptions < 1 || preempted.Load() < 1 {
			t.Fatalf("b preempted %d times, want at least once", ob.res.Preemptions)
		}
		if ob.res.CachedTokens != 64 {
			t.Errorf("b found %d cached tokens at its start, want a's 64 shared ones", ob.res.CachedTokens)
		}
		// b's recompute started after cached blocks: no step fed it from 0
		// after its first.
		recomputes := 0
		for _, st := range f.Steps() {
			for _, r := range st {
				if r.ID > 3 && r.N > 1 {
					recomputes++
					if r.Past == 0 {
						t.Errorf("a recompute fed %d tokens from position 0: its cached blocks were lost", r.N)
					}
				}
			}
		}
		if recomputes == 0 {
			t.Error("no recompute seen")
		}
		if f.HeldBlocks() != 0 || e.KVUsage() != 0 {
			t.Errorf("%d blocks held, usage %v after all left", f.HeldBlocks(), e.KVUsage())
		}
	})
}

// 200 streams in groups sharing prefixes, on a KV small enough to preempt
// and evict: every stream gets exactly its own tokens, and the decoder reads
// back every sequence's exact KV at every step (checkingFake).
func TestManyConcurrentStreamsSharingPrefixes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := checkingFake()
		f.fixed, f.perSeq, f.perToken = ms, 10*time.Microsecond, time.Microsecond
		info := fakeInfo
		info.KVTokens = 1024
		f.kv = info.KVTokens
		var preempted atomic.Int64
		e, a := startAudited(t, Config{MaxSeqs: 32, QueueCap: 256, MaxBatchedTokens: 256,
			OnStep: func(si StepInfo) { preempted.Add(int64(si.Preempted)) }}, f, info)
		var wg sync.WaitGroup
		for i := range 200 {
			g, n, L := uint64(i%5), 20+(i*37)%60, 1+i%41
			wg.Go(func() { checkStream(t, e, i, grouped(g, n, L), L, 0) })
		}
		wg.Wait()
		if f.Held() != 0 || f.HeldBlocks() != 0 {
			t.Errorf("decoder holds %d tokens in %d blocks after all finished", f.Held(), f.HeldBlocks())
		}
		t.Logf("%d steps, %d preemptions, %d blocks evicted, %d of %d prompt tokens cached", a.steps.Load(), preempted.Load(), a.evicted.Load(), a.hits.Load(), a.queries.Load())
		if preempted.Load() == 0 || a.evicted.Load() == 0 || a.hits.Load() == 0 {
			t.Error("the load did not preempt, evict and hit: it tests less than it should")
		}
	})
}

func TestReconfigureBlockSizeAndPrefixCache(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := checkingFake()
		f.fixed = ms
		e, a := startAudited(t, Config{}, f, fakeInfo)
		long := run(t, t.Context(), e, grouped(2, 50, 60))
		if o := <-run(t, t.Context(), e, grouped(1, 40, 3)); o.err != nil {
			t.Fatal(o.err)
		}
		if o := <-run(t, t.Context(), e, grouped(1, 40, 3)); o.res.CachedTokens != 32 {
			t.Errorf("blocks of 16: %d cached tokens, want 32", o.res.CachedTokens)
		}
		// A new block size empties the KV: the running sequence is
		// recomputed on the new blocks; the cache starts empty.
		if err := e.Reconfigure(Config{BlockSize: 8}); err != nil {
			t.Fatal(err)
		}
		if o := <-run(t, t.Context(), e, grouped(1, 40, 3)); o.err != nil || o.res.CachedTokens != 0 {
			t.Errorf("after the new block size: %+v, want no cached tokens", o)
		}
		if o := <-run(t, t.Context(), e, grouped(1, 40, 3)); o.res.CachedTokens != 32 {
			t.Errorf("blocks of 8: %d cached tokens, want 32 (39 tokens: 4 blocks)", o.res.CachedTokens)
		}
		if err := e.Reconfigure(Config{BlockSize: 8, NoPrefixCache: true}); err != nil {
			t.Fatal(err)
		}
		if o := <-run(t, t.Context(), e, grouped(1, 40, 3)); o.res.CachedTokens != 0 {
			t.Errorf("cache off: %d cached tokens", o.res.CachedTokens)
		}
		if err := e.Reconfigure(Config{BlockSize: 8}); err != nil {
			t.Fatal(err)
		}
		if o := <-run(t, t.Context(), e, grouped(1, 40, 3)); o.res.CachedTokens != 0 {
			t.Errorf("cache on again: %d cached tokens, want 0 (turning it off forgot them)", o.res.CachedTokens)
		}
		ol := <-long
		if want, _ := expected(60, 50, 0); ol.err != nil || ol.text != want || ol.res.Preemptions != 1 {
			t.Errorf("the sequence running across the change: %+v, want %q after one preemption", ol, want)
		}
		if got := e.Config(); got.BlockSize != 8 || got.NoPrefixCache {
			t.Errorf("Config() = %+v", got)
		}
		_ = a
	})
}

// A cache salt confines sharing to requests with the same salt.
func TestCacheSaltSeparatesTenants(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := checkingFake()
		f.fixed = ms
		e, _ := startAudited(t, Config{}, f, fakeInfo)
		salted := func(salt string) int {
			t.Helper()
			req := grouped(1, 40, 3)
			req.CacheSalt = salt
			o := <-run(t, t.Context(), e, req)
			if o.err != nil {
				t.Fatal(o.err)
			}
			return o.res.CachedTokens
		}
		for i, tc := range []struct {
			salt string
			want int
		}{{"", 0}, {"", 32}, {"tenant a", 0}, {"tenant a", 32}, {"tenant b", 0}, {"", 32}} {
			if got := salted(tc.salt); got != tc.want {
				t.Errorf("request %d, salt %q: %d cached tokens, want %d", i, tc.salt, got, tc.want)
			}
		}
		req := grouped(1, 40, 3)
		req.CacheSalt = strings.Repeat("x", MaxCacheSalt+1)
		if _, err := e.Generate(t.Context(), req); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("a salt of %d bytes: %v, want ErrInvalidRequest", MaxCacheSalt+1, err)
		}
	})
}

func TestBlockSizeValidation(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		info models.DecoderInfo
		want string
	}{
		{Config{BlockSize: -1}, fakeInfo, "block size -1: want 1 to 1024"},
		{Config{BlockSize: MaxBlockSize + 1}, fakeInfo, "block size 1025"},
		{Config{BlockSize: 100, KVTokens: 256}, fakeInfo, "make 2 blocks, and a sequence of the model's context (256 tokens) needs 3"},
	} {
		if _, err := New(tc.cfg, newFake(), tc.info, letters{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
	e, err := New(Config{}, newFake(), fakeInfo, letters{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Reconfigure(Config{BlockSize: 2000}); err == nil {
		t.Error("Reconfigure accepted a block size of 2000")
	}
	// A decoder that cannot reuse KV keeps the prefix cache off.
	info := fakeInfo
	info.BlockKV = false
	e, err = New(Config{}, newFake(), info, letters{})
	if err != nil {
		t.Fatal(err)
	}
	if !e.Config().NoPrefixCache {
		t.Error("prefix cache on for a decoder without BlockKV")
	}
	if err := e.Reconfigure(Config{}); err != nil || !e.Config().NoPrefixCache {
		t.Errorf("Reconfigure: %v, prefix cache off %v; want it kept off", err, e.Config().NoPrefixCache)
	}
}

// What a failed step wrote is never reused: its blocks are not cached.
func TestFailedStepCachesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := checkingFake()
		f.fixed = ms
		f.fail = errors.New("device lost")
		e, _ := startAudited(t, Config{}, f, fakeInfo)
		if o := <-run(t, t.Context(), e, grouped(1, 40, 3)); !errors.Is(o.err, ErrDecoder) {
			t.Fatalf("first request: %v, want ErrDecoder", o.err)
		}
		o := <-run(t, t.Context(), e, grouped(1, 40, 3))
		if want, _ := expected(3, 40, 0); o.err != nil || o.text != want || o.res.CachedTokens != 0 {
			t.Errorf("the same prompt after the failure: %+v, want %q computed anew", o, want)
		}
	})
}
