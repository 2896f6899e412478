package llm

import (
	"container/list"
	"fmt"
)

// The hit rate a trace allows: its requests replayed in order, one at a
// time, through a model of a server's prefix cache (infer serve's, which
// is vLLM's): KV in blocks of a server's block size; a request reuses the
// longest run of cached full blocks its prompt begins with, leaving at
// least its last prompt token to compute; then all its full prompt blocks
// are cached, and with a bounded capacity the least recently used blocks
// are evicted (of one request, its later blocks before its earlier ones,
// as the engine releases them). Answers are not modelled: a server also
// caches the blocks its answers fill, which take room but, in a replay
// whose prompts do not carry earlier answers, are not hit again.

// TraceHitRates are the prompt tokens of a replay's measured window and the
// share of them that a prefix cache would find.
type TraceHitRates struct {
	// Queries is the prompt tokens of the window's requests (after
	// scaling), as a server's prefix_cache_queries counts them.
	Queries int64
	// Unbounded is the share found with a cache that never evicts;
	// LRU with Capacity blocks of BlockSize tokens (0 when no capacity
	// was given).
	Unbounded, LRU      float64
	Capacity, BlockSize int
}

func (h TraceHitRates) String() string {
	s := fmt.Sprintf("%.1f %% of %d prompt tokens cached with an unbounded cache", 100*h.Unbounded, h.Queries)
	if h.Capacity > 0 {
		s += fmt.Sprintf(", %.1f %% with LRU at %d blocks of %d tokens", 100*h.LRU, h.Capacity, h.BlockSize)
	}
	return s
}

// HitRates replays t's requests (warm-up part, then window) through a model
// of a prefix cache of blocks of blockSize tokens: unbounded, and LRU with
// capacity blocks (when capacity > 0). The rates are over the window's
// requests.
func (t *TraceReplay) HitRates(blockSize, capacity int) (TraceHitRates, error) {
	if blockSize < 1 || capacity < 0 {
		return TraceHitRates{}, fmt.Errorf("block size %d, capacity %d: want at least 1 and 0 or more", blockSize, capacity)
	}
	out := TraceHitRates{Capacity: capacity, BlockSize: blockSize}
	from, win, to := t.bounds()
	unbounded := newCacheSim(0)
	var lru *cacheSim
	if capacity > 0 {
		lru = newCacheSim(capacity)
	}
	var hitsU, hitsL int64
	var keys []blockKey
	for i := from; i < to; i++ {
		rec := &t.Records[i]
		in, _ := t.Lengths(rec)
		keys = t.blockKeys(rec, in, blockSize, keys[:0])
		hittable := (in - 1) / blockSize
		u := unbounded.access(keys, hittable)
		var l int
		if lru != nil {
			l = lru.access(keys, hittable)
		}
		if i >= win {
			out.Queries += int64(in)
			hitsU += int64(u * blockSize)
			hitsL += int64(l * blockSize)
		}
	}
	if out.Queries > 0 {
		out.Unbounded = float64(hitsU) / float64(out.Queries)
		if lru != nil {
			out.LRU = float64(hitsL) / float64(out.Queries)
		}
	}
	return out, nil
}

// blockKey names a server block of a replayed prompt: block b (tokens
// [b·size, (b+1)·size)) holds what the trace's id of its last token
// stands for, up to that position.
type blockKey struct {
	id int64
	b  int
}

// blockKeys appends the keys of a record's full server blocks.
func (t *TraceReplay) blockKeys(rec *TraceRecord, in, size int, keys []blockKey) []blockKey {
	bt := t.BlockTokens()
	for b := range in / size {
		last := (b+1)*size - 1
		keys = append(keys, blockKey{id: rec.HashIDs[last/bt], b: b})
	}
	return keys
}

// cacheSim is a prefix cache of blocks, LRU, capacity 0 unbounded.
type cacheSim struct {
	capacity int
	index    map[blockKey]*list.Element
	lru      list.List // of blockKey, least recently used first
}

func newCacheSim(capacity int) *cacheSim {
	return &cacheSim{capacity: capacity, index: make(map[blockKey]*list.Element)}
}

// access serves a request of the blocks keys: it returns the number of
// blocks of the longest cached run at their start, within the first
// hittable; then caches them all, the first most recently used.
func (c *cacheSim) access(keys []blockKey, hittable int) int {
	n := 0
	for n < min(hittable, len(keys)) {
		if _, ok := c.index[keys[n]]; !ok {
			break
		}
		n++
	}
	for i := len(keys) - 1; i >= 0; i-- {
		if e, ok := c.index[keys[i]]; ok {
			c.lru.MoveToBack(e)
		} else {
			c.index[keys[i]] = c.lru.PushBack(keys[i])
		}
	}
	for c.capacity > 0 && c.lru.Len() > c.capacity {
		e := c.lru.Front()
		delete(c.index, e.Value.(blockKey))
		c.lru.Remove(e)
	}
	return n
}
