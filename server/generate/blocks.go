package generate

import (
	"encoding/binary"
	"hash/maphash"
	"slices"
)

// The block manager: the engine holds the decoder instance's KV in blocks of
// blockSize tokens (see "KV blocks and prefix reuse" in models/decoder.go).
// It owns the block ids; a sequence holds a table of them, one block per
// blockSize positions.
//
// A full block of computed tokens is cached: it is known by a hash of its
// tokens chained with its parent's (the block before it in the sequence),
// so that equal tokens after a different prefix are a different block. A
// cached block is shared by reference count: a request whose prompt begins
// with cached blocks takes references to them instead of computing them.
// A block nobody references stays cached, in a list ordered by when it was
// last released, until a new block is needed and no empty one is left: then
// the least recently used is evicted. A referenced block is never evicted.

// blockPool is the block manager of one engine. Owned by Run's goroutine.
type blockPool struct {
	size   int // tokens per block
	blocks []kvBlock
	tokens []int32 // block b's tokens are tokens[b·size:(b+1)·size]; kept for cached blocks
	empty  []int32 // free blocks caching nothing (a stack)
	// The cached blocks nobody references, least recently released first
	// (evicted from the head).
	head, tail int32
	idle       int
	index      map[uint64]int32 // hash → cached block
	seed       maphash.Seed
	buf        []byte
	evicted    int // blocks evicted, for tests
}

// kvBlock is one block's state.
type kvBlock struct {
	ref        int32 // sequences holding the block in their table
	prev, next int32 // links in the list of idle cached blocks
	cached     bool  // full, computed, and in the index under hash
	pos        int32 // its index in the table of the sequence that computed it
	hash       uint64
	parent     uint64 // the parent block's hash (for a first block: rootHash, or its salt's hash)
}

const (
	noBlock  = -1
	rootHash = 0 // the parent hash of a sequence's first block without a cache salt
)

func newBlockPool(size, kvTokens int, seed maphash.Seed) *blockPool {
	n := kvTokens / size
	p := &blockPool{size: size, blocks: make([]kvBlock, n), tokens: make([]int32, n*size), empty: make([]int32, n),
		head: noBlock, tail: noBlock, index: make(map[uint64]int32), seed: seed}
	for i := range p.empty {
		p.empty[i] = int32(n - 1 - i) // block 0 is taken first
	}
	return p
}

// blocksFor is the number of blocks n tokens take.
func (p *blockPool) blocksFor(n int) int { return (n + p.size - 1) / p.size }

// total is the number of blocks.
func (p *blockPool) total() int { return len(p.blocks) }

// free is the number of blocks nobody references: empty, or cached and
// evictable.
func (p *blockPool) free() int { return len(p.empty) + p.idle }

// used is the number of referenced blocks.
func (p *blockPool) used() int { return len(p.blocks) - p.free() }

// hash is the hash of a block of toks after a block whose hash is parent.
func (p *blockPool) hash(parent uint64, toks []int32) uint64 {
	b := binary.LittleEndian.AppendUint64(p.buf[:0], parent)
	for _, t := range toks {
		b = binary.LittleEndian.AppendUint32(b, uint32(t))
	}
	p.buf = b
	return maphash.Bytes(p.seed, b)
}

// lookup returns the cached block at position pos of a sequence, holding
// toks after a parent whose hash is parent. The block's own record is
// checked, not only its hash, so a hash collision can only miss.
func (p *blockPool) lookup(pos int, parent, h uint64, toks []int32) (int32, bool) {
	b, ok := p.index[h]
	if !ok {
		return noBlock, false
	}
	k := &p.blocks[b]
	if int(k.pos) != pos || k.parent != parent || !slices.Equal(p.content(b), toks) {
		return noBlock, false
	}
	return b, true
}

func (p *blockPool) content(b int32) []int32 {
	return p.tokens[int(b)*p.size : (int(b)+1)*p.size]
}

// ref takes a reference to block b (a cache hit): an idle cached block
// leaves the eviction list.
func (p *blockPool) ref(b int32) {
	k := &p.blocks[b]
	if k.ref == 0 {
		p.unlink(b)
	}
	k.ref++
}

// alloc returns a new block referenced once: an empty one, or else the least
// recently used idle cached block, evicted. The caller has checked free() >
// 0.
func (p *blockPool) alloc() int32 {
	var b int32
	if n := len(p.empty); n > 0 {
		b = p.empty[n-1]
		p.empty = p.empty[:n-1]
	} else {
		b = p.head
		p.unlink(b)
		p.uncache(b)
		p.evicted++
	}
	p.blocks[b].ref = 1
	return b
}

// unref drops a reference to block b. A cached block nobody references goes
// to the tail of the eviction list (most recently used); any other becomes
// empty.
func (p *blockPool) unref(b int32) {
	k := &p.blocks[b]
	k.ref--
	if k.ref > 0 {
		return
	}
	if !k.cached {
		p.empty = append(p.empty, b)
		return
	}
	k.prev, k.next = p.tail, noBlock
	if p.tail != noBlock {
		p.blocks[p.tail].next = b
	} else {
		p.head = b
	}
	p.tail = b
	p.idle++
}

// unlink removes an idle cached block from the eviction list.
func (p *blockPool) unlink(b int32) {
	k := &p.blocks[b]
	if k.prev != noBlock {
		p.blocks[k.prev].next = k.next
	} else {
		p.head = k.next
	}
	if k.next != noBlock {
		p.blocks[k.next].prev = k.prev
	} else {
		p.tail = k.prev
	}
	k.prev, k.next = noBlock, noBlock
	p.idle--
}

// uncache removes block b from the index.
func (p *blockPool) uncache(b int32) {
	k := &p.blocks[b]
	if !k.cached {
		return
	}
	if p.index[k.hash] == b {
		delete(p.index, k.hash)
	}
	k.cached = false
}

// cache enters block b, just computed full at position pos of a sequence
// with toks after a parent whose hash is parent, into the index under h.
// When an equal block is already cached (two sequences computed the same
// prefix at once) or, with odds of 2⁻⁶⁴, another block has the same hash, b
// stays uncached.
func (p *blockPool) cache(b int32, pos int, parent, h uint64, toks []int32) {
	k := &p.blocks[b]
	if k.cached {
		return
	}
	if _, taken := p.index[h]; taken {
		return
	}
	k.cached, k.pos, k.hash, k.parent = true, int32(pos), h, parent
	copy(p.content(b), toks)
	p.index[h] = b
}

// clear uncaches every block (prefix caching turned off): the idle ones
// become empty.
func (p *blockPool) clear() {
	for b := p.head; b != noBlock; {
		next := p.blocks[b].next
		p.blocks[b].prev, p.blocks[b].next = noBlock, noBlock
		p.blocks[b].cached = false
		p.empty = append(p.empty, b)
		b = next
	}
	p.head, p.tail, p.idle = noBlock, noBlock, 0
	for i := range p.blocks {
		p.blocks[i].cached = false
	}
	clear(p.index)
}

// The sequence's side.

// root is the parent hash of s's first block: rootHash, or with a cache
// salt a hash of it, so that requests with different salts share nothing.
func (p *blockPool) root(s *seq) uint64 {
	if s.req.CacheSalt == "" {
		return rootHash
	}
	return maphash.String(p.seed, s.req.CacheSalt)
}

// blockHashes extends s.hashes to the hashes of its first n full blocks
// (n ≤ len(s.tokens)/size).
func (p *blockPool) blockHashes(s *seq, n int) []uint64 {
	if s.hashSize != p.size {
		s.hashes, s.hashSize = s.hashes[:0], p.size
	}
	for i := len(s.hashes); i < n; i++ {
		parent := p.root(s)
		if i > 0 {
			parent = s.hashes[i-1]
		}
		s.hashes = append(s.hashes, p.hash(parent, s.tokens[i*p.size:(i+1)*p.size]))
	}
	return s.hashes[:n]
}

// match finds the longest cached prefix of s that leaves at least its last
// token to compute (its logits are needed), and appends the blocks to
// hits. It also returns how many of them nobody references (taking them
// uses free blocks).
func (p *blockPool) match(s *seq, hits []int32) ([]int32, int) {
	hashes := p.blockHashes(s, (len(s.tokens)-1)/p.size)
	idle := 0
	parent := p.root(s)
	for i, h := range hashes {
		b, ok := p.lookup(i, parent, h, s.tokens[i*p.size:(i+1)*p.size])
		if !ok {
			break
		}
		if p.blocks[b].ref == 0 {
			idle++
		}
		hits = append(hits, b)
		parent = h
	}
	return hits, idle
}

// grow appends n new blocks to s's table.
func (p *blockPool) grow(s *seq, n int) {
	for range n {
		s.blocks = append(s.blocks, p.alloc())
	}
}

// cacheFull caches the blocks of s that its computed tokens have filled
// since it last looked (up to its first n tokens).
func (p *blockPool) cacheFull(s *seq, n int) {
	full := n / p.size
	if full <= s.cachedBlocks {
		return
	}
	hashes := p.blockHashes(s, full)
	for i := s.cachedBlocks; i < full; i++ {
		parent := p.root(s)
		if i > 0 {
			parent = hashes[i-1]
		}
		p.cache(s.blocks[i], i, parent, hashes[i], s.tokens[i*p.size:(i+1)*p.size])
	}
	s.cachedBlocks = full
}

// drop releases s's table, last block first: a sequence's later blocks are
// evicted before its earlier ones, which more requests share.
func (p *blockPool) drop(s *seq) {
	for i := len(s.blocks) - 1; i >= 0; i-- {
		p.unref(s.blocks[i])
	}
	s.blocks = s.blocks[:0]
	s.cachedBlocks = 0
}
