package route

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// prefixIndex is an approximate record of which replica recently served
// which prompt blocks (SGLang's router keeps an approximate radix tree; the
// endpoint picker, an LRU of block hashes per server; this is the latter).
// A prompt is cut into blocks of blockSize bytes; block i is known by a
// hash chained over blocks 0..i, so one hash stands for the whole prefix up
// to its end. Each replica has an LRU of at most capacity hashes: memory is
// bounded by capacity × replicas (about 50 bytes a hash). A prompt's blocks
// are recorded last to first, so that a prefix's first blocks are always
// the freshest and eviction cuts chains from their tails. Safe for
// concurrent use.
type prefixIndex struct {
	blockSize int
	maxBlocks int
	capacity  int
	seed      maphash.Seed

	mu        sync.Mutex
	lrus      map[*Replica]*blockLRU
	evictions atomic.Int64
}

func newPrefixIndex(c PrefixConfig) *prefixIndex {
	return &prefixIndex{blockSize: c.BlockBytes, maxBlocks: c.MaxBlocks, capacity: c.Capacity,
		seed: maphash.MakeSeed(), lrus: map[*Replica]*blockLRU{}}
}

// blocks returns the chained hashes of req's full blocks (at most
// maxBlocks), computed once per request. The chain starts from the route,
// since each route of a replica has a cache of its own.
func (x *prefixIndex) blocks(req *Request) []uint64 {
	if req.hashedFor == x.blockSize {
		return req.blocks
	}
	n := min(len(req.Prompt)/x.blockSize, x.maxBlocks)
	bs := make([]uint64, n)
	h := maphash.String(x.seed, req.Route)
	for i := range n {
		h = mix64(h ^ maphash.Bytes(x.seed, req.Prompt[i*x.blockSize:(i+1)*x.blockSize]))
		bs[i] = h
	}
	req.blocks, req.hashedFor = bs, x.blockSize
	return bs
}

// match sets matched[i] to how many leading blocks cands[i] holds.
func (x *prefixIndex) match(blocks []uint64, cands []*Replica, matched []int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for i, c := range cands {
		matched[i] = 0
		if l := x.lrus[c]; l != nil {
			for matched[i] < len(blocks) && l.has(blocks[matched[i]]) {
				matched[i]++
			}
		}
	}
}

// record notes that r serves blocks.
func (x *prefixIndex) record(blocks []uint64, r *Replica) {
	if len(blocks) == 0 {
		return
	}
	blocks = blocks[:min(len(blocks), x.capacity)]
	x.mu.Lock()
	defer x.mu.Unlock()
	l := x.lrus[r]
	if l == nil {
		l = newBlockLRU(x.capacity)
		x.lrus[r] = l
	}
	evicted := 0
	for i := len(blocks) - 1; i >= 0; i-- {
		if l.touch(blocks[i]) {
			evicted++
		}
	}
	if evicted > 0 {
		x.evictions.Add(int64(evicted))
	}
}

// SetReplicas forgets replicas no longer in the set.
func (x *prefixIndex) SetReplicas(all []*Replica) {
	keep := make(map[*Replica]bool, len(all))
	for _, r := range all {
		keep[r] = true
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for r := range x.lrus {
		if !keep[r] {
			delete(x.lrus, r)
		}
	}
}

// size returns how many blocks r's LRU holds.
func (x *prefixIndex) size(r *Replica) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	if l := x.lrus[r]; l != nil {
		return len(l.pos)
	}
	return 0
}

// blockLRU is a set of at most cap hashes, the least recently touched
// evicted first. Its nodes live in one slice, linked by index.
type blockLRU struct {
	pos        map[uint64]int32
	nodes      []lruNode
	head, tail int32 // most and least recent; -1 when empty
	cap        int
}

type lruNode struct {
	key        uint64
	prev, next int32
}

func newBlockLRU(capacity int) *blockLRU {
	return &blockLRU{pos: map[uint64]int32{}, head: -1, tail: -1, cap: capacity}
}

func (l *blockLRU) has(k uint64) bool {
	_, ok := l.pos[k]
	return ok
}

// touch makes k the most recent, adding it if absent; it reports whether
// that evicted another.
func (l *blockLRU) touch(k uint64) bool {
	if i, ok := l.pos[k]; ok {
		l.unlink(i)
		l.pushFront(i)
		return false
	}
	evicted := false
	var i int32
	if len(l.nodes) < l.cap {
		i = int32(len(l.nodes))
		l.nodes = append(l.nodes, lruNode{})
	} else {
		i = l.tail
		l.unlink(i)
		delete(l.pos, l.nodes[i].key)
		evicted = true
	}
	l.nodes[i].key = k
	l.pos[k] = i
	l.pushFront(i)
	return evicted
}

func (l *blockLRU) unlink(i int32) {
	n := &l.nodes[i]
	if n.prev >= 0 {
		l.nodes[n.prev].next = n.next
	} else {
		l.head = n.next
	}
	if n.next >= 0 {
		l.nodes[n.next].prev = n.prev
	} else {
		l.tail = n.prev
	}
}

func (l *blockLRU) pushFront(i int32) {
	l.nodes[i].prev, l.nodes[i].next = -1, l.head
	if l.head >= 0 {
		l.nodes[l.head].prev = i
	}
	l.head = i
	if l.tail < 0 {
		l.tail = i
	}
}
