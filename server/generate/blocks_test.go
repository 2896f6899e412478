package generate

import (
	"hash/maphash"
	"slices"
	"testing"
)

// seqOf is a sequence holding toks, for the pool's tests.
func seqOf(toks ...int32) *seq { return &seq{tokens: toks} }

// fill gives s blocks for all its tokens and caches the full ones, as if a
// step had computed them.
func fill(p *blockPool, s *seq) {
	p.grow(s, p.blocksFor(len(s.tokens))-len(s.blocks))
	p.cacheFull(s, len(s.tokens))
}

func repeat(t int32, n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = t
	}
	return out
}

func TestBlockHashIsChainedWithItsParent(t *testing.T) {
	p := newBlockPool(4, 64, maphash.MakeSeed())
	x, y, z := repeat(1, 4), repeat(2, 4), repeat(3, 4)
	if h1, h2 := p.hash(rootHash, y), p.hash(rootHash, slices.Clone(y)); h1 != h2 {
		t.Error("the same tokens after the same parent hash differently")
	}
	if p.hash(p.hash(rootHash, x), y) == p.hash(p.hash(rootHash, z), y) {
		t.Error("the same tokens after different parents hash alike")
	}

	// Through the cache: xy is cached; xy… hits both blocks, zy… neither,
	// although its second block holds the same tokens.
	a := seqOf(slices.Concat(x, y)...)
	fill(p, a)
	for _, tc := range []struct {
		name   string
		tokens []int32
		hits   int
	}{
		{"same blocks after the same parent", slices.Concat(x, y, []int32{9}), 2},
		{"same second block after another first", slices.Concat(z, y, []int32{9}), 0},
		{"same first block, another second", slices.Concat(x, z, []int32{9}), 1},
		{"the whole prompt cached: its last token is computed", slices.Concat(x, y), 1},
		{"same tokens one block later", slices.Concat(x, x, y, []int32{9}), 1},
	} {
		hits, _ := p.match(seqOf(tc.tokens...), nil)
		if len(hits) != tc.hits || (tc.hits > 0 && !slices.Equal(hits, a.blocks[:tc.hits])) {
			t.Errorf("%s: hits %v, want a's first %d of %v", tc.name, hits, tc.hits, a.blocks)
		}
	}
}

func TestEvictionIsLRUAndSparesReferencedBlocks(t *testing.T) {
	p := newBlockPool(2, 16, maphash.MakeSeed()) // 8 blocks
	a, b, c := seqOf(1, 1, 2, 2), seqOf(3, 3, 4, 4), seqOf(5, 5, 6, 6)
	for _, s := range []*seq{a, b, c} {
		fill(p, s)
	}
	held := seqOf(7, 7) // keeps its block referenced throughout
	fill(p, held)
	if p.free() != 1 || p.used() != 7 {
		t.Fatalf("free %d, used %d; want 1, 7", p.free(), p.used())
	}
	ab, bb, cb := slices.Clone(a.blocks), slices.Clone(b.blocks), slices.Clone(c.blocks)
	// Released a, b, c in turn, then a again after a hit: b is now the
	// least recently used, each sequence's last block before its first.
	p.drop(a)
	p.drop(b)
	p.drop(c)
	hits, idle := p.match(seqOf(1, 1, 2, 2, 9), nil)
	if len(hits) != 2 || idle != 2 {
		t.Fatalf("a's prompt: hits %v (%d idle), want its 2 blocks, idle", hits, idle)
	}
	a2 := seqOf(1, 1, 2, 2, 9)
	for _, h := range hits {
		p.ref(h)
	}
	a2.blocks = hits
	p.drop(a2)
	if p.free() != 7 {
		t.Fatalf("free %d, want 7", p.free())
	}
	var got []int32
	for range 7 {
		got = append(got, p.alloc())
	}
	want := []int32{bb[1], bb[0], cb[1], cb[0], ab[1], ab[0]}
	if slices.Contains(slices.Concat(ab, bb, cb, held.blocks), got[0]) || !slices.Equal(got[1:], want) {
		t.Errorf("allocated %v; want the empty block, then b's, c's and a's blocks, each last first, %v; never held's %d", got, want, held.blocks[0])
	}
	if p.evicted != 6 || len(p.index) != 1 {
		t.Errorf("evicted %d, %d still cached; want 6 evicted, held's block cached", p.evicted, len(p.index))
	}
}

func TestRefCountsAndClear(t *testing.T) {
	p := newBlockPool(2, 16, maphash.MakeSeed())
	a := seqOf(1, 1, 2, 2, 3)
	fill(p, a)
	b := seqOf(1, 1, 2, 2, 4)
	hits, idle := p.match(b, nil)
	if len(hits) != 2 || idle != 0 {
		t.Fatalf("hits %v, %d idle; want 2, none idle (a holds them)", hits, idle)
	}
	for _, h := range hits {
		p.ref(h)
	}
	b.blocks = append(b.blocks, hits...)
	fill(p, b)
	if r := p.blocks[hits[0]].ref; r != 2 {
		t.Errorf("shared block referenced %d times, want 2", r)
	}
	p.drop(a)
	if r := p.blocks[hits[0]].ref; r != 1 || p.idle != 0 {
		t.Errorf("after a left: ref %d, %d idle; want 1, 0", r, p.idle)
	}
	p.drop(b)
	if p.used() != 0 || p.idle != 2 || len(p.index) != 2 {
		t.Errorf("after both left: used %d, idle %d, cached %d; want 0, 2, 2", p.used(), p.idle, len(p.index))
	}
	p.clear()
	if p.idle != 0 || len(p.index) != 0 || p.free() != 8 {
		t.Errorf("after clear: idle %d, cached %d, free %d", p.idle, len(p.index), p.free())
	}
	if hits, _ := p.match(seqOf(1, 1, 2, 2, 3), nil); len(hits) != 0 {
		t.Errorf("hits %v after clear", hits)
	}
}
