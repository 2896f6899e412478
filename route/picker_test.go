package route

import (
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"
	"time"
)

// replicas returns n ready replicas named r0, r1, … with the weights
// given (1 for those not given).
func replicas(n int, weights ...int) []*Replica {
	rs := make([]*Replica, n)
	for i := range rs {
		w := 1
		if i < len(weights) {
			w = weights[i]
		}
		u, _ := url.Parse(fmt.Sprintf("http://r%d", i))
		rs[i] = newReplica(fmt.Sprintf("r%d", i), u, w)
		rs[i].state.Store(int32(StateReady))
	}
	return rs
}

// seeded returns a deterministic rng.
func seeded(seed uint64) rng {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return func(n int) int { return r.IntN(n) }
}

func names(rs []*Replica) string {
	var b strings.Builder
	for _, r := range rs {
		b.WriteString(r.name[1:])
	}
	return b.String()
}

func TestRoundRobinIsSmoothAndWeighted(t *testing.T) {
	rs := replicas(3, 5, 1, 1)
	p := newRoundRobin()
	p.SetReplicas(rs)
	var got []*Replica
	for range 14 {
		r, reason := p.Pick(&Request{}, rs)
		if reason != ReasonPolicy {
			t.Fatalf("reason %v, want policy", reason)
		}
		got = append(got, r)
	}
	// nginx's smooth weighted round-robin over 5, 1, 1: a a b a c a a.
	if want := "00102000010200"; names(got) != want {
		t.Errorf("picks %s, want %s", names(got), want)
	}
	// Equal weights take turns, also over a changing candidate set.
	rs = replicas(3)
	p = newRoundRobin()
	got = got[:0]
	for range 6 {
		r, _ := p.Pick(&Request{}, rs)
		got = append(got, r)
	}
	if want := "012012"; names(got) != want {
		t.Errorf("picks %s, want %s", names(got), want)
	}
}

// counts picks n times and returns the picks per replica.
func counts(p Picker, req *Request, rs []*Replica, n int) map[*Replica]int {
	c := map[*Replica]int{}
	for range n {
		r, _ := p.Pick(req, rs)
		c[r]++
	}
	return c
}

func TestRandomFollowsWeights(t *testing.T) {
	rs := replicas(3, 2, 1, 1)
	c := counts(random{seeded(1)}, &Request{}, rs, 40000)
	for i, want := range []float64{0.5, 0.25, 0.25} {
		if got := float64(c[rs[i]]) / 40000; got < want-0.02 || got > want+0.02 {
			t.Errorf("replica %d got %.3f of picks, want %.2f", i, got, want)
		}
	}
}

func TestLeastRequestPicksTheLeastLoadedPerWeight(t *testing.T) {
	rs := replicas(3, 1, 1, 4)
	rs[0].inFlight.Store(3)
	rs[1].inFlight.Store(2)
	rs[2].inFlight.Store(7) // 7/4 per weight: the least
	p := leastRequest{seeded(2)}
	if r, _ := p.Pick(&Request{}, rs); r != rs[2] {
		t.Errorf("picked %s, want r2 (7 in flight over weight 4)", r.name)
	}
	rs[2].inFlight.Store(12) // 3 per weight; r1 has 2
	if r, _ := p.Pick(&Request{}, rs); r != rs[1] {
		t.Errorf("picked %s, want r1", r.name)
	}
	// Ties are broken at random, so that all tied replicas get picks.
	rs = replicas(4)
	if c := counts(p, &Request{}, rs, 4000); len(c) != 4 {
		t.Errorf("ties went to %d of 4 replicas", len(c))
	}
}

func TestPowerOfTwoNeverPicksTheMostLoaded(t *testing.T) {
	rs := replicas(3)
	rs[0].inFlight.Store(10)
	rs[1].inFlight.Store(5)
	c := counts(powerOfTwo{seeded(3)}, &Request{}, rs, 3000)
	if c[rs[0]] != 0 {
		t.Errorf("the most loaded replica got %d picks, want 0", c[rs[0]])
	}
	// r2 (idle) wins every draw it is in: 2/3 of them.
	if got := float64(c[rs[2]]) / 3000; got < 0.62 || got > 0.71 {
		t.Errorf("the idle replica got %.3f of picks, want about 2/3", got)
	}
	if r, _ := (powerOfTwo{seeded(4)}).Pick(&Request{}, rs[:1]); r != rs[0] {
		t.Error("one candidate: not picked")
	}
}

// keys returns n distinct routing keys.
func keys(n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = fmt.Sprintf("tenant-%d", i)
	}
	return ks
}

func TestHashIsStickyAndRemovingAReplicaMovesOnlyItsKeys(t *testing.T) {
	for _, n := range []int{2, 4} {
		rs := replicas(n)
		p := newHashPicker(DefaultBalance, seeded(5))
		p.SetReplicas(rs)
		ks := keys(10000)
		home := map[string]*Replica{}
		share := map[*Replica]int{}
		for _, k := range ks {
			r, reason := p.Pick(&Request{Key: k}, rs)
			if reason != ReasonAffinity {
				t.Fatalf("key %s: reason %v, want affinity", k, reason)
			}
			if again, _ := p.Pick(&Request{Key: k}, rs); again != r {
				t.Fatalf("key %s went to %s, then to %s", k, r.name, again.name)
			}
			home[k] = r
			share[r]++
		}
		for _, r := range rs {
			if f := float64(share[r]) / float64(len(ks)); f < 0.7/float64(n) || f > 1.3/float64(n) {
				t.Errorf("N=%d: %s owns %.3f of the keys, want about %.3f", n, r.name, f, 1/float64(n))
			}
		}
		// The last replica leaves: only its keys move.
		gone := rs[n-1]
		moved := 0
		for _, k := range ks {
			r, _ := p.Pick(&Request{Key: k}, rs[:n-1])
			if r != home[k] {
				moved++
				if home[k] != gone {
					t.Fatalf("N=%d: key %s moved from %s, which stayed", n, k, home[k].name)
				}
			}
		}
		if limit := len(ks)/n + len(ks)/20; moved > limit {
			t.Errorf("N=%d: %d keys moved, want at most %d (1/N + 5%%)", n, moved, limit)
		}
		// Rebuilding the ring without it gives the same answer.
		p.SetReplicas(rs[:n-1])
		for _, k := range ks[:500] {
			if r, _ := p.Pick(&Request{Key: k}, rs[:n-1]); home[k] != gone && r != home[k] {
				t.Fatalf("N=%d: after the ring was rebuilt, key %s moved", n, k)
			}
		}
	}
}

func TestHashBoundsTheLoad(t *testing.T) {
	rs := replicas(2)
	p := newHashPicker(1.25, seeded(6))
	p.SetReplicas(rs)
	var key string
	for _, k := range keys(100) { // a key whose home is r0
		if r, _ := p.Pick(&Request{Key: k}, rs); r == rs[0] {
			key = k
			break
		}
	}
	// r0 holds 2, r1 none: the bound is ceil(1.25 × 3 / 2) = 2, so r0
	// is full and the request goes on along the ring.
	rs[0].inFlight.Store(2)
	if r, reason := p.Pick(&Request{Key: key}, rs); r != rs[1] || reason != ReasonFallback {
		t.Errorf("over the bound: picked %s (%v), want r1 (fallback)", r.name, reason)
	}
	rs[0].inFlight.Store(1) // 2 ≤ ceil(1.25 × 2 / 2) = 2
	if r, reason := p.Pick(&Request{Key: key}, rs); r != rs[0] || reason != ReasonAffinity {
		t.Errorf("within the bound: picked %s (%v), want r0 (affinity)", r.name, reason)
	}
	rs[0].inFlight.Store(8) // the bound grows with the load: 9 ≤ ceil(1.25 × 16 / 2)
	rs[1].inFlight.Store(7)
	if r, reason := p.Pick(&Request{Key: key}, rs); r != rs[0] || reason != ReasonAffinity {
		t.Errorf("within the bound at 8 and 7: picked %s (%v), want r0 (affinity)", r.name, reason)
	}
	rs[1].inFlight.Store(0)
	// The home replica out of the candidates (not ready, or tried).
	if r, reason := p.Pick(&Request{Key: key}, rs[1:]); r != rs[1] || reason != ReasonFallback {
		t.Errorf("home not a candidate: picked %s (%v), want r1 (fallback)", r.name, reason)
	}
	// No key: the least loaded.
	if r, reason := p.Pick(&Request{}, rs); r != rs[1] || reason != ReasonFallback {
		t.Errorf("no key: picked %s (%v), want r1, the least loaded (fallback)", r.name, reason)
	}
}

// prompt returns a prompt of a tenant's context (ctx bytes) and a question.
func prompt(tenant, question, ctx int) []byte {
	b := []byte(strings.Repeat(fmt.Sprintf("tenant %d says hello. ", tenant), ctx/20+1))[:ctx]
	return append(b, fmt.Sprintf(" question %d?", question)...)
}

func TestPrefixKeepsATenantOnOneReplica(t *testing.T) {
	rs := replicas(4)
	cfg := PrefixConfig{}.withDefaults()
	p := &prefixPicker{cfg: cfg, index: newPrefixIndex(cfg), rnd: seeded(7)}
	home := map[int]*Replica{}
	for q := range 20 {
		for tenant := range 8 {
			req := &Request{Route: "/v1", Prompt: prompt(tenant, q, 3000)}
			r, reason := p.Pick(req, rs)
			r.inFlight.Add(1) // loads stay in balance: 8 over 4
			switch h := home[tenant]; {
			case h == nil:
				home[tenant] = r
				if reason != ReasonFallback {
					t.Errorf("tenant %d's first request: %v, want fallback (no match)", tenant, reason)
				}
			case r != h || reason != ReasonAffinity:
				t.Fatalf("tenant %d, question %d: %s (%v), want %s (affinity)", tenant, q, r.name, reason, h.name)
			}
		}
	}
	per := map[*Replica]int{}
	for _, r := range home {
		per[r]++
	}
	if len(per) != 4 {
		t.Errorf("8 tenants' first requests went to %d replicas, want all 4 (least loaded)", len(per))
	}
	// Another route has caches of its own: no affinity there.
	if _, reason := p.Pick(&Request{Route: "/static/v1", Prompt: prompt(0, 99, 3000)}, rs); reason != ReasonFallback {
		t.Errorf("another route: %v, want fallback", reason)
	}
}

func TestPrefixFallsBackWhenLoadsAreOutOfBalance(t *testing.T) {
	rs := replicas(2)
	cfg := PrefixConfig{BalanceAbs: 4, BalanceRel: 1.5}.withDefaults()
	p := &prefixPicker{cfg: cfg, index: newPrefixIndex(cfg), rnd: seeded(8)}
	first, _ := p.Pick(&Request{Prompt: prompt(1, 0, 2000)}, rs)
	other := rs[0]
	if first == rs[0] {
		other = rs[1]
	}
	first.inFlight.Store(4) // 4 − 0 is not > 4: in balance
	if r, reason := p.Pick(&Request{Prompt: prompt(1, 1, 2000)}, rs); r != first || reason != ReasonAffinity {
		t.Errorf("in balance: %s (%v), want %s (affinity)", r.name, reason, first.name)
	}
	first.inFlight.Store(5) // 5 − 0 > 4 and 5 > 1.5 × 0
	if r, reason := p.Pick(&Request{Prompt: prompt(1, 2, 2000)}, rs); r != other || reason != ReasonFallback {
		t.Errorf("out of balance: %s (%v), want %s (fallback)", r.name, reason, other.name)
	}
	first.inFlight.Store(0)
	// Below the threshold: a prompt sharing a quarter of its blocks.
	short := append(prompt(1, 3, 2000)[:512], strings.Repeat("x", 1536)...)
	if _, reason := p.Pick(&Request{Prompt: short}, rs); reason != ReasonFallback {
		t.Errorf("a quarter matched: %v, want fallback (threshold 0.5)", reason)
	}
	// No prompt: the least loaded.
	first.inFlight.Store(1)
	if r, reason := p.Pick(&Request{}, rs); r != other || reason != ReasonFallback {
		t.Errorf("no prompt: %s (%v), want %s (fallback)", r.name, reason, other.name)
	}
}

func TestIndexIsBoundedAndForgetsChainTailsFirst(t *testing.T) {
	cfg := PrefixConfig{BlockBytes: 8, Capacity: 10}.withDefaults()
	x := newPrefixIndex(cfg)
	r := replicas(1)
	a := &Request{Prompt: []byte(strings.Repeat("a", 8*8))} // 8 blocks
	b := &Request{Prompt: []byte(strings.Repeat("b", 8*4))} // 4 blocks
	x.record(x.blocks(a), r[0])
	x.record(x.blocks(b), r[0])
	if got := x.size(r[0]); got != 10 {
		t.Fatalf("index holds %d blocks, want its capacity 10", got)
	}
	m := make([]int, 1)
	x.match(x.blocks(a), r, m)
	if m[0] != 6 {
		t.Errorf("a's first %d blocks matched, want 6: its 2 last blocks were evicted", m[0])
	}
	x.match(x.blocks(b), r, m)
	if m[0] != 4 {
		t.Errorf("b's first %d blocks matched, want 4", m[0])
	}
	if got := x.evictions.Load(); got != 2 {
		t.Errorf("%d evictions, want 2", got)
	}
	// A prompt longer than the capacity keeps its first blocks.
	long := &Request{Prompt: []byte(strings.Repeat("c", 8*30))}
	x.record(x.blocks(long), r[0])
	x.match(x.blocks(long), r, m)
	if m[0] != 10 {
		t.Errorf("a 30-block prompt: %d leading blocks matched, want 10", m[0])
	}
	// A departed replica's LRU is dropped.
	x.SetReplicas(nil)
	if x.size(r[0]) != 0 {
		t.Error("a removed replica's blocks are kept")
	}
}

func TestScoredWeighsQueueKVAndPrefix(t *testing.T) {
	now := time.Unix(1000, 0)
	rs := replicas(3)
	cfg := ScoreConfig{}.withDefaults()
	icfg := PrefixConfig{}.withDefaults()
	p := &scoredPicker{cfg: cfg, index: newPrefixIndex(icfg), rnd: seeded(9), now: func() time.Time { return now }}
	sample := func(r *Replica, waiting, kv float64, age time.Duration) {
		r.sample.Store(&Sample{At: now.Add(-age), InFlight: r.InFlight(), Waiting: waiting, KV: kv, HasQueue: true, HasKV: true})
	}
	sample(rs[0], 10, 0.9, 0)
	sample(rs[1], 2, 0.5, 0)
	sample(rs[2], 0, 0.2, 0)
	if r, reason := p.Pick(&Request{}, rs); r != rs[2] || reason != ReasonPolicy {
		t.Errorf("picked %s (%v), want r2: shortest queue, most KV free", r.name, reason)
	}
	// Requests sent since the sample count toward the queue.
	rs[2].inFlight.Store(12)
	if r, _ := p.Pick(&Request{}, rs); r != rs[1] {
		t.Errorf("picked %s, want r1: r2 was sent 12 since its sample", r.name)
	}
	// A stale sample is not used: r1's in-flight count stands for its
	// queue, and its KV use is unknown.
	rs[2].inFlight.Store(0)
	sample(rs[2], 0, 0.2, time.Second)
	rs[2].inFlight.Store(30)
	if r, _ := p.Pick(&Request{}, rs); r != rs[1] {
		t.Errorf("picked %s, want r1: r2's sample is stale and it has 30 in flight", r.name)
	}
	// Prefix affinity outweighs a short queue (weights 1, 1, 3).
	rs[2].inFlight.Store(0)
	sample(rs[2], 0, 0.2, 0)
	req := &Request{Prompt: prompt(3, 0, 3000)}
	p.index.record(p.index.blocks(req), rs[1])
	if r, reason := p.Pick(&Request{Prompt: prompt(3, 1, 3000)}, rs); r != rs[1] || reason != ReasonAffinity {
		t.Errorf("picked %s (%v), want r1 (affinity): it holds the prompt's prefix", r.name, reason)
	}
	// Queue only: the prefix is ignored.
	p.cfg = ScoreConfig{Queue: 1}.withDefaults()
	if r, _ := p.Pick(&Request{Prompt: prompt(3, 2, 3000)}, rs); r != rs[2] {
		t.Errorf("queue only: picked %s, want r2", r.name)
	}
}
