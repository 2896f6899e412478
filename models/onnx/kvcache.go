package onnx

import (
	"cmp"
	"slices"

	"github.com/inferhq/infer/models"
)

// The KV cache of a Decoder lives in shared buffers, each the past of one
// run: for every layer a key and a value tensor [rows, heads, positions,
// head_dim], and an attention mask [rows, positions] saying which positions
// hold tokens of the row's sequence. The keys and values are float32, or
// int8 (the int8 twins of the built-in GPT-2 models, whose scales are in
// the graph); the decoder copies a position's bytes alike, whatever they
// hold. Two layouts, by the graph:
//
// An in-place graph (models/gpt2's built-in graphs, gpt2.Spec.InPlaceKV)
// outputs only the fed tokens' keys and values, and the decoder writes them
// into the past's buffer after each row's tokens: rows are left-aligned, row
// r's tokens at positions 0..n-1 and the positions after them masked room
// to grow. A decode step reads each row's keys and values once (in
// attention) and copies a token's worth per row; a buffer whose longest row
// has no room left is widened by room (1/16, at least 16 positions), in its
// own memory while that has the capacity and otherwise assembled anew, so
// that decoding widens it at most every 16 steps. Masked
// positions get exactly zero weight and a row's tokens keep their places
// whatever the buffer's size, so a row's logits differ between buffers by
// the order of summation only (the tests hold them within 1e-5 of the row
// decoded alone).
//
// A GroupQueryAttention graph (gpt2.Spec.GQA, the int8 twins') has the
// in-place layout, but ONNX Runtime's operator writes the fed tokens' keys
// and values itself: the decoder binds each past tensor as the present
// too, gives each row's length instead of a mask (the operator reads a
// row's own positions only), and widens the buffer before the run when a
// row lacks room, not after.
//
// A standard graph (exports) outputs the present, past and new tokens
// concatenated, into a new buffer that ONNX Runtime writes, and when the
// next run has the same rows that buffer is its past as it is: a decode
// step over an unchanged batch copies nothing outside the graph, but the
// graph copies the whole past into the present, and attention reads it
// again. Rows are right-aligned: a row's tokens end at the buffer's last
// position, padded on the left.
//
// In both, a sequence that leaves leaves its row empty, and one that joins
// the decode run moves into an empty row, its own tokens copied (to the
// right end of the row, or the left in place): in continuous batching,
// where a join follows each leave, the batch's buffer carries on with one
// sequence's cache copied. Empty rows are fed as holes; when more than one
// in eight would stay empty, when a joining sequence is longer than the
// buffer, when positions no row uses waste too much of it (see fits), or
// when a standard buffer has reached the context, the next run's past is
// assembled instead: each row's tokens are gathered from wherever they
// are, packed to the right of its row (the left in place) and padded on
// the other side, a copy of the whole cache (at gpt2-tiny's batch 32, a
// quarter to a half of a standard step; see BenchmarkKVLayout). Keeping
// each sequence's cache on its own would cost that copy at every step.
// Sequences that sit a step out keep their rows: a standard graph's gets a
// masked hole, an in-place graph's is left as it is.

// kvBuf is one buffer of the KV cache.
type kvBuf struct {
	data []byte  // the tensors of dims.tensor, one after the other
	mask []int64 // [rows][t]: 1 where the position holds a token of the row's sequence
	rows int
	t    int         // positions
	seqs []*seqState // by row: the sequence whose cache this row is, nil once it moved or left
	live int         // non-nil seqs
}

// seqState is one sequence of a Decoder.
type seqState struct {
	id  models.SeqID
	n   int    // tokens in the cache
	kv  *kvBuf // where they are: row row of kv; nil while n is 0
	row int
	// table is the sequence's block table, the blocks it holds in the
	// block store (kvstore.go); nil for a sequence without one.
	table []int32
}

// dims are the sizes of the cache tensors, and their layout: left says
// rows hold their tokens at their first positions (an in-place or
// GroupQueryAttention graph's cache), rather than at their last.
type dims struct {
	layers, heads, headDim int
	left                   bool
	// elem is the element type of every cache tensor: float32, or int8
	// (a GroupQueryAttention graph's, whose scales are in the graph).
	elem elemType
}

// elemType is the element type of a cache tensor.
type elemType uint8

const (
	elemFloat32 elemType = iota
	elemInt8
)

func (e elemType) String() string { return [...]string{"float32", "int8"}[e] }

// size returns the bytes of an element.
func (e elemType) size() int {
	if e == elemFloat32 {
		return 4
	}
	return 1
}

// tensors returns the cache tensors of a run: each layer's key and value,
// [rows, heads, positions, head_dim], in the graph's input order.
func (d dims) tensors() int { return 2 * d.layers }

// posBytes returns the bytes of one position of one head of a tensor.
func (d dims) posBytes() int { return d.headDim * d.elem.size() }

// tensorBytes returns the bytes a tensor takes in a buffer of rows × t
// positions.
func (d dims) tensorBytes(rows, t int) int { return rows * d.heads * t * d.posBytes() }

// bytes returns the size of a buffer of rows × t positions.
func (d dims) bytes(rows, t int) int { return d.tensors() * d.tensorBytes(rows, t) }

// tensorIn returns the bytes of tensor i (layer i/2's key or value) of
// data, a buffer of rows × t positions.
func (d dims) tensorIn(data []byte, i, rows, t int) []byte {
	if len(data) == 0 {
		return nil
	}
	n := d.tensorBytes(rows, t)
	return data[i*n : (i+1)*n]
}

// tensor returns the bytes of tensor i of b.
func (d dims) tensor(b *kvBuf, i int) []byte { return d.tensorIn(b.data, i, b.rows, b.t) }

// bufPool keeps buffers for reuse: in steady decoding each run's past
// becomes free as its present is made, so two buffers take turns, one of
// them in the pool.
type bufPool struct {
	free      []*kvBuf
	spare     int             // bytes of free buffers kept besides the largest (see put)
	all       map[*kvBuf]bool // every buffer allocated and not yet freed
	assembled int             // buffers assembled (see assemble), for tests
	widened   int             // left-layout buffers widened, in place or assembled anew (see Decoder.withRoom), for tests
	allocated int             // bytes allocated, for tests
}

// maxFree bounds the buffers a pool keeps for reuse; see put.
const maxFree = 8

// maxOversize is how much larger than a prefill run's buffer a free buffer
// may be and still be taken for it. A larger one is left for the decode
// run: a new sequence's prefill would otherwise take the decode batch's
// buffer, and the decode run of the same step would allocate its present
// anew and fault its pages in (stories260k, 29 rows at 209 positions:
// 1,906 page faults, a 12 ms step taking 139 ms on the 2-core dev VM).
const maxOversize = 4

// get returns a buffer of rows × t positions, its mask and seqs sized but
// not cleared. For a prefill run (prefill true) it takes no free buffer
// more than maxOversize times the size.
func (p *bufPool) get(d dims, rows, t int, prefill bool) (*kvBuf, error) {
	need := d.bytes(rows, t)
	best := -1
	for i, b := range p.free {
		if cap(b.data) >= need && (!prefill || cap(b.data) <= maxOversize*need) && (best < 0 || cap(b.data) < cap(p.free[best].data)) {
			best = i
		}
	}
	var b *kvBuf
	if best >= 0 {
		b = p.free[best]
		p.free = append(p.free[:best], p.free[best+1:]...)
	} else {
		// Room for growth, so that the buffers of steady decoding, one
		// position longer at each step, are reused for a while; unused, it
		// costs address space only.
		data, err := allocBytes(need + need/4 + d.bytes(rows, 64))
		if err != nil {
			return nil, err
		}
		b = &kvBuf{data: data}
		p.allocated += len(data)
		if p.all == nil {
			p.all = map[*kvBuf]bool{}
		}
		p.all[b] = true
	}
	b.data = b.data[:need]
	b.mask = grow(b.mask, rows*t)
	b.seqs = grow(b.seqs, rows)
	clear(b.seqs)
	b.rows, b.t, b.live = rows, t, 0
	return b, nil
}

// put returns b to the pool. The pool keeps its largest free buffer (in
// steady decoding, the decode run's other half) and, besides it, its
// smallest ones, at most maxFree buffers in all and spare bytes besides the
// largest; it unmaps the others. The small ones are the buffers of prefill
// runs, which come back at every request: a kept one is reused with its
// pages resident, where a new one costs an mmap and a page fault for every
// 4 KiB written (a prefix hit on gpt2-tiny, 12 tokens after 528 cached:
// 6.8 ms with a new buffer for each run, 2.5–3.5 ms with kept ones).
func (p *bufPool) put(b *kvBuf) {
	clear(b.seqs)
	p.free = append(p.free, b)
	slices.SortFunc(p.free, func(a, b *kvBuf) int { return cmp.Compare(cap(b.data), cap(a.data)) })
	small, sum := len(p.free), 0 // p.free[small:] are kept besides p.free[0]
	for small > 1 && len(p.free)-small+1 < maxFree && sum+cap(p.free[small-1].data) <= p.spare {
		small--
		sum += cap(p.free[small].data)
	}
	for _, drop := range p.free[1:small] {
		freeBytes(drop.data)
		delete(p.all, drop)
	}
	p.free = append(p.free[:1], p.free[small:]...)
}

// close frees every buffer of the pool, those in use too.
func (p *bufPool) close() {
	for b := range p.all {
		freeBytes(b.data)
		b.data = nil
	}
	p.all, p.free = nil, nil
}

// leave takes st out of its buffer, returning the buffer to the pool when
// no sequence is left in it.
func (p *bufPool) leave(st *seqState) {
	b := st.kv
	if b == nil {
		return
	}
	b.seqs[st.row] = nil
	b.live--
	if b.live == 0 {
		p.put(b)
	}
	st.kv = nil
}

// segment is a run of consecutive positions of a row.
type segment struct{ start, n int }

// assemble returns a new buffer whose row r holds the cache of states[r]:
// its n tokens at the right end of the row, positions t-n..t-1, with t the
// largest n, and zeros before them (at the left end, positions 0..n-1, in
// a left layout, with t = room(largest n)). The states move to it, and
// their old buffers go back to the pool as they empty. prefill says it is
// the past of a prefill run (see get).
func (p *bufPool) assemble(d dims, states []*seqState, prefill bool) (*kvBuf, error) {
	t := 0
	for _, st := range states {
		t = max(t, st.n)
	}
	if d.left {
		t = room(t)
	}
	p.assembled++
	return p.assembleAt(d, states, t, prefill)
}

// assembleAt is assemble into a buffer of t positions (at least the largest
// n). A nil state leaves its row empty.
func (p *bufPool) assembleAt(d dims, states []*seqState, t int, prefill bool) (*kvBuf, error) {
	b, err := p.get(d, len(states), t, prefill)
	if err != nil {
		return nil, err
	}
	var segs []segment
	for r, st := range states {
		if st == nil {
			clear(b.mask[r*t : (r+1)*t])
			continue
		}
		segs = copyRow(d, b, r, st, segs)
	}
	for r, st := range states {
		if st != nil {
			p.moveTo(st, b, r)
		}
	}
	return b, nil
}

// room is the positions of a left-layout buffer assembled for rows of at
// most n tokens: 1/16 more, at least 16, so that decoding, a position a
// row at each step, widens it (a copy of the cache) at most every 16
// steps, while a step reads at most 1/16 more than its longest row until
// that row leaves (see Decoder.fits). Tighter room (1/32, at least 8) was
// no faster in BenchmarkStaggered: staggered/aligned 0.92, 0.83, 0.88
// against 1.03, 1.00, 0.88 with this room, the two builds taking turns
// (2-core dev VM, load average 8, 2 December 2026).
func room(n int) int { return n + max(16, n/16) }

// widenInPlace makes b, a left-layout buffer whose rows are states' (nil
// rows empty), a buffer of t positions in its own memory, when it has
// the capacity: each head's row of positions moves to its wider place,
// the last first, so that no move overwrites one still to come, and the
// new positions are masked. It reports whether it could. Assembling a
// new buffer instead would fault in the pages of a fresh one and copy
// every row: for 16 rows of gpt2-small at 256 tokens (300 MB), 1.1 to
// 1.6 s on the 2-core dev VM, where a step takes 37 ms.
func widenInPlace(d dims, b *kvBuf, states []*seqState, t int) bool {
	if !d.left || b.data == nil || t <= b.t || cap(b.data) < d.bytes(b.rows, t) || len(states) != b.rows {
		return false
	}
	for r, st := range states {
		if b.seqs[r] != st {
			return false
		}
	}
	old, w := b.t, d.posBytes()
	data := b.data[:d.bytes(b.rows, t)]
	// Rows of positions in the order of the data: tensor, row, head.
	for k := d.tensors()*b.rows*d.heads - 1; k >= 0; k-- {
		copy(data[k*t*w:][:old*w], data[k*old*w:][:old*w])
	}
	mask := b.mask
	if cap(mask) < b.rows*t {
		mask = make([]int64, b.rows*t, b.rows*t+b.rows*t/4)
	}
	mask = mask[:b.rows*t]
	for r := b.rows - 1; r >= 0; r-- {
		copy(mask[r*t:][:old], b.mask[r*old:][:old])
		clear(mask[r*t+old : (r+1)*t])
	}
	b.data, b.mask, b.t = data, mask, t
	return true
}

// joinInPlace moves st into row r of b, a row no sequence holds, its
// tokens at the right end of the row: the cost of one sequence's cache,
// where assembling the batch anew costs every row's. st.n must be at most
// b.t.
func (p *bufPool) joinInPlace(d dims, b *kvBuf, r int, st *seqState) {
	copyRow(d, b, r, st, nil)
	p.moveTo(st, b, r)
}

// moveTo makes row r of b st's cache, leaving its old buffer.
func (p *bufPool) moveTo(st *seqState, b *kvBuf, r int) {
	p.leave(st)
	st.kv, st.row = b, r
	b.seqs[r] = st
	b.live++
}

// copyRow writes st's cache into row r of b: its n tokens at positions
// t-n..t-1 of the row, zeros and a masked position before them (in a left
// layout, at positions 0..n-1 and masked after them, the positions after
// left as they were).
// segs is scratch space, returned for reuse.
func copyRow(d dims, b *kvBuf, r int, st *seqState, segs []segment) []segment {
	t := b.t
	mask := b.mask[r*t : (r+1)*t]
	pad := t - st.n // where the tokens start
	if d.left {
		pad = 0
	}
	clear(mask)
	for i := pad; i < pad+st.n; i++ {
		mask[i] = 1
	}
	// The source row's tokens, as runs of positions: one run, unless the
	// row had holes (steps it sat out).
	segs = segs[:0]
	if src := st.kv; src != nil {
		m := src.mask[st.row*src.t : (st.row+1)*src.t]
		for i := 0; i < len(m); i++ {
			if m[i] == 0 {
				continue
			}
			j := i
			for j < len(m) && m[j] != 0 {
				j++
			}
			segs = append(segs, segment{i, j - i})
			i = j
		}
	}
	for ti := range d.tensors() {
		dst, w := d.tensor(b, ti), d.posBytes()
		var src []byte
		if st.kv != nil {
			src = d.tensor(st.kv, ti)
		}
		for h := range d.heads {
			row := dst[((r*d.heads+h)*t)*w:][:t*w]
			if !d.left {
				clear(row[:pad*w])
			}
			at := pad * w
			for _, s := range segs {
				from := ((st.row*d.heads+h)*st.kv.t + s.start) * w
				at += copy(row[at:], src[from:from+s.n*w])
			}
		}
	}
	return segs
}

// writeNew writes the keys and values of k tokens a run of an in-place
// graph computed for row r (fresh: its outputs, the tensors of a buffer of
// rows × s positions, the row's tokens at positions from..from+k-1 of s)
// into row r of b, a left-layout buffer, after its n tokens, and marks them
// in the mask. b must have room: n+k ≤ b.t.
func writeNew(d dims, b *kvBuf, r, n int, fresh []byte, s, from, k int) {
	for ti := range d.tensors() {
		dst, w := d.tensor(b, ti), d.posBytes()
		src := d.tensorIn(fresh, ti, b.rows, s)
		for h := range d.heads {
			copy(dst[((r*d.heads+h)*b.t+n)*w:][:k*w], src[((r*d.heads+h)*s+from)*w:][:k*w])
		}
	}
	mark(b, r, n, k)
}

// mark marks positions n..n+k-1 of row r of b as holding the row's tokens.
func mark(b *kvBuf, r, n, k int) {
	mask := b.mask[r*b.t : (r+1)*b.t]
	for i := n; i < n+k; i++ {
		mask[i] = 1
	}
}
