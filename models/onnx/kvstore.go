package onnx

import (
	"fmt"
	"slices"

	"github.com/inferhq/infer/models"
)

// Prefix reuse (models.DecoderInfo.BlockKV, "KV blocks and prefix reuse" in
// models/decoder.go). The engine gives each sequence a block table and may
// start a sequence after blocks that other sequences computed. A Decoder
// keeps each sequence's keys and values together, in a row of a shared
// buffer where its graph reads them (kvcache.go), and keeps the engine's
// blocks in a block store beside them: when a run fills a block, the
// block's keys and values are copied from the sequence's row to the store,
// at the place the block's id names; a sequence that starts after cached
// blocks gets them copied from the store into a row of its own, and its
// first run computes only the rest of its tokens. Each token's keys and
// values are thus copied once more when its block is full, and once for each
// sequence that reuses them: a hit of 512 tokens of gpt2-tiny copies 1 MiB
// where computing them is a 512-token prefill.
//
// The store also checks the tables against the contract, as models/simlm
// does, so that an engine that broke it gets an error rather than another
// sequence's keys: a block is written by one sequence only, from its first
// position on, and a sequence starts only after blocks that are full and
// were stored under the step's block size.

// blockStore is the block store of one Decoder.
type blockStore struct {
	d     dims
	slots int    // token slots: DecoderInfo.KVTokens
	data  []byte // laid out as a buffer of one row of slots positions (dims.tensorIn); allocated at the first step with blocks
	size  int    // tokens a block of the tables held; 0 before the first
	// By block id at size: the sequences of the instance whose table holds
	// it, and the positions written since it was last begun (size once
	// full: its keys and values are then in the store).
	refs, filled []int32
	inUse        int             // blocks with refs > 0
	delta        map[int32]int32 // checkStep's scratch
	pos          []int           // wrote's scratch
	copied       int             // blocks copied out of rows and into them, for tests
}

// checkStep validates the block tables of a step against the sequences the
// instance holds, changing nothing. A sequence of the step with Past 0 that
// the instance holds starts anew: its old table is dropped first.
func (b *blockStore) checkStep(seqs []models.StepSeq, held map[models.SeqID]*seqState) error {
	size := seqs[0].BlockSize
	bad := func(id models.SeqID, format string, a ...any) error {
		return fmt.Errorf("%w: sequence %d: %s", models.ErrInvalidInput, id, fmt.Sprintf(format, a...))
	}
	for _, s := range seqs {
		st := held[s.ID]
		switch {
		case s.BlockSize != size:
			return bad(s.ID, "block size %d in a step whose first sequence has %d", s.BlockSize, size)
		case size < 0:
			return bad(s.ID, "block size %d", size)
		case size == 0 && len(s.Blocks) > 0:
			return bad(s.ID, "%d blocks of 0 tokens", len(s.Blocks))
		case size == 0 && s.Past > 0 && st == nil:
			return fmt.Errorf("onnx: sequence %d: past %d, but the instance holds no cache for it", s.ID, s.Past)
		case st != nil && s.Past > 0 && (size > 0) != (st.table != nil):
			return bad(s.ID, "a block table in some steps of the sequence, none in others")
		}
	}
	if size == 0 {
		return nil
	}
	// delta: how the step changes each block's holders. Restarts drop their
	// tables; blocks new to a table are taken.
	if b.delta == nil {
		b.delta = map[int32]int32{}
	}
	delta := b.delta
	clear(delta)
	for _, s := range seqs {
		if st := held[s.ID]; st != nil && s.Past == 0 {
			for _, id := range st.table {
				delta[id]--
			}
		}
	}
	if size != b.size && b.inUse > 0 {
		// A new size only once no sequence holds a table (the contract).
		return bad(seqs[0].ID, "block size %d while sequences hold blocks of %d", size, b.size)
	}
	pool := b.slots / size
	for _, s := range seqs {
		st := held[s.ID]
		if want := (s.Past + len(s.Tokens) + size - 1) / size; len(s.Blocks) != want {
			return bad(s.ID, "%d blocks for %d positions of %d tokens a block", len(s.Blocks), s.Past+len(s.Tokens), size)
		}
		for _, id := range s.Blocks {
			if id < 0 || int(id) >= pool {
				return fmt.Errorf("%w: sequence %d: block %d outside the pool of %d blocks of %d tokens", ErrKVFull,
					s.ID, id, pool, size)
			}
		}
		from := 0 // the first block new to its table
		if st != nil && s.Past > 0 {
			if len(st.table) > len(s.Blocks) || !slices.Equal(s.Blocks[:len(st.table)], st.table) {
				return bad(s.ID, "holds blocks %v, the step's table is %v", st.table, s.Blocks)
			}
			from = len(st.table)
		} else {
			if s.Past%size != 0 {
				return bad(s.ID, "starts at past %d, not after whole blocks of %d", s.Past, size)
			}
			for _, id := range s.Blocks[:s.Past/size] {
				if size != b.size || b.filled[id] != int32(size) {
					return bad(s.ID, "starts after block %d, which holds no full block of %d tokens", id, size)
				}
			}
		}
		for _, id := range s.Blocks[from:] {
			delta[id]++
		}
	}
	// Each block the step writes is held by its writer alone, and written
	// on from where it was left.
	for _, s := range seqs {
		for i := s.Past / size; i < len(s.Blocks); i++ {
			id := s.Blocks[i]
			n := delta[id]
			if size == b.size {
				n += b.refs[id]
			}
			if n != 1 {
				return bad(s.ID, "writes block %d, which %d sequences hold", id, n)
			}
			off := s.Past % size
			if i == s.Past/size && off > 0 && (size != b.size || b.filled[id] != int32(off)) {
				return bad(s.ID, "writes position %d at offset %d of block %d, which holds %d", s.Past, off, id, b.filled[id])
			}
		}
	}
	return nil
}

// claim adds the blocks of s's table that st does not hold yet to st's
// table (after checkStep, before the step runs), allocating the store at
// the first step with blocks and resizing its bookkeeping for a new block
// size.
func (b *blockStore) claim(st *seqState, s models.StepSeq) error {
	if s.BlockSize == 0 {
		return nil
	}
	if b.data == nil {
		data, err := allocBytes(b.d.bytes(1, b.slots))
		if err != nil {
			return fmt.Errorf("onnx: block store: %w", err)
		}
		b.data = data
	}
	if s.BlockSize != b.size {
		n := b.slots / s.BlockSize
		b.size, b.refs, b.filled, b.inUse = s.BlockSize, make([]int32, n), make([]int32, n), 0
	}
	if st.table == nil {
		st.table = make([]int32, 0, len(s.Blocks))
	}
	for _, id := range s.Blocks[len(st.table):] {
		st.table = append(st.table, id)
		if b.refs[id]++; b.refs[id] == 1 {
			b.inUse++
		}
	}
	return nil
}

// release drops st's table.
func (b *blockStore) release(st *seqState) {
	for _, id := range st.table {
		if b.refs[id]--; b.refs[id] == 0 {
			b.inUse--
		}
	}
	st.table = nil
}

// wrote records that a run wrote st's positions from, from+1, …, st.n-1
// into its row (st.kv, st.row), and copies the blocks it filled to the
// store.
func (b *blockStore) wrote(st *seqState, from int) {
	if st.table == nil || from >= st.n {
		return
	}
	size := b.size
	for i := from / size; i*size < st.n; i++ {
		b.filled[st.table[i]] = int32(min(size, st.n-i*size))
	}
	first, end := from/size, st.n/size // the blocks the run filled: [first, end)
	if first >= end {
		return
	}
	// Where the row holds positions first·size … st.n-1: the last ones of
	// its mask.
	kv, d := st.kv, b.d
	mask := kv.mask[st.row*kv.t : (st.row+1)*kv.t]
	b.pos = grow(b.pos, st.n-first*size)
	k := len(b.pos)
	for p := len(mask) - 1; p >= 0 && k > 0; p-- {
		if mask[p] != 0 {
			k--
			b.pos[k] = p
		}
	}
	for ti := range d.tensors() {
		src, w := d.tensor(kv, ti), d.posBytes()
		for h := range d.heads {
			row := src[(st.row*d.heads+h)*kv.t*w:][:kv.t*w]
			for i := first; i < end; i++ {
				stored := b.block(ti, h, st.table[i])
				for j := range size {
					p := b.pos[(i-first)*size+j]
					copy(stored[j*w:][:w], row[p*w:][:w])
				}
			}
		}
	}
	b.copied += end - first
}

// block returns the stored keys or values (tensor ti) of head h of
// block id.
func (b *blockStore) block(ti, h int, id int32) []byte {
	w := b.d.posBytes()
	return b.d.tensorIn(b.data, ti, 1, b.slots)[(h*b.slots+int(id)*b.size)*w:][:b.size*w]
}

// fill copies the first n blocks of st's table (a cached prefix) from the
// store into row r of kv, positions 0 … n·size-1, and marks them held.
func (b *blockStore) fill(st *seqState, n int, kv *kvBuf, r int) {
	d, size := b.d, b.size
	mask := kv.mask[r*kv.t : (r+1)*kv.t]
	for i := range mask {
		mask[i] = 0
		if i < n*size {
			mask[i] = 1
		}
	}
	for ti := range d.tensors() {
		dst, w := d.tensor(kv, ti), d.posBytes()
		for h := range d.heads {
			row := dst[(r*d.heads+h)*kv.t*w:][:kv.t*w]
			for i, id := range st.table[:n] {
				copy(row[i*size*w:], b.block(ti, h, id))
			}
		}
	}
	b.copied += n
}

// close frees the store's memory.
func (b *blockStore) close() {
	freeBytes(b.data)
	b.data, b.refs, b.filled, b.size, b.inUse = nil, nil, nil, 0, 0
}
