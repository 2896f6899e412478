package onnx

import (
	"testing"
	"unsafe"

	"github.com/inferhq/infer/models"
)

// testDims is a small cache's layout, with an odd head_dim.
func testDims(left bool, elem elemType) dims {
	return dims{layers: 2, heads: 3, headDim: 5, left: left, elem: elem}
}

// stamp is the byte a cache tensor holds at one position: what it came
// from, so that a copy to the wrong place shows.
func stamp(seq models.SeqID, ti, h, pos, k int) byte {
	return byte(int(seq)*67 + ti*31 + h*17 + pos*7 + k)
}

// writeStamps writes st's n tokens into row r of b at positions from
// from on, as a run would.
func writeStamps(d dims, b *kvBuf, r, from int, st *seqState) {
	for ti := range d.tensors() {
		w := d.posBytes()
		data := d.tensor(b, ti)
		for h := range d.heads {
			for i := range st.n {
				for k := range w {
					data[((r*d.heads+h)*b.t+from+i)*w+k] = stamp(st.id, ti, h, i, k)
				}
			}
		}
	}
	for i := range st.n {
		b.mask[r*b.t+from+i] = 1
	}
}

// checkStamps fails t unless row r of b holds st's n tokens, in order, at
// the positions its mask marks.
func checkStamps(t *testing.T, what string, d dims, b *kvBuf, r int, st *seqState) {
	t.Helper()
	var at []int
	for p := range b.t {
		if b.mask[r*b.t+p] != 0 {
			at = append(at, p)
		}
	}
	if len(at) != st.n {
		t.Fatalf("%s: row %d marks %d positions, want %d", what, r, len(at), st.n)
	}
	for ti := range d.tensors() {
		w := d.posBytes()
		data := d.tensor(b, ti)
		for h := range d.heads {
			for i, p := range at {
				for k := range w {
					if got, want := data[((r*d.heads+h)*b.t+p)*w+k], stamp(st.id, ti, h, i, k); got != want {
						t.Fatalf("%s: tensor %d, head %d, token %d, byte %d: %d, want %d", what, ti, h, i, k, got, want)
					}
				}
			}
		}
	}
}

// TestCachePlanes: a cache's tensors, float32 or int8, move whole through
// assembling (both layouts), joining a row, writing a run's new tokens,
// and the block store, and every float32 tensor of a buffer is aligned for
// float32.
func TestCachePlanes(t *testing.T) {
	for _, tc := range []struct {
		left bool
		elem elemType
	}{{true, elemFloat32}, {false, elemFloat32}, {true, elemInt8}, {false, elemInt8}} {
		left := tc.left
		d := testDims(left, tc.elem)
		p := &bufPool{}
		defer p.close()
		a := &seqState{id: 1, n: 7}
		c := &seqState{id: 2, n: 3}
		src, err := p.get(d, 2, 9, false)
		if err != nil {
			t.Fatal(err)
		}
		clear(src.mask)
		writeStamps(d, src, 0, 1, a) // after a hole, as a row that sat a step out
		writeStamps(d, src, 1, 0, c)
		p.moveTo(a, src, 0)
		p.moveTo(c, src, 1)
		for _, shape := range [][2]int{{1, 9}, {2, 9}, {3, 7}} {
			b, err := p.get(d, shape[0], shape[1], false)
			if err != nil {
				t.Fatal(err)
			}
			for i := range d.tensors() {
				if d.elem == elemFloat32 && uintptrOf(d.tensor(b, i))%4 != 0 {
					t.Errorf("%d×%d buffer: tensor %d starts off float32 alignment", shape[0], shape[1], i)
				}
			}
			p.put(b)
		}

		// Assembled anew, rows swapped, into a reused buffer whose bytes
		// are all 0xff (a float32 NaN).
		stale, err := p.get(d, 3, 30, false)
		if err != nil {
			t.Fatal(err)
		}
		for i := range stale.data[:cap(stale.data)] {
			stale.data[:cap(stale.data)][i] = 0xff
		}
		p.put(stale)
		b, err := p.assemble(d, []*seqState{c, a}, false)
		if err != nil {
			t.Fatal(err)
		}
		checkStamps(t, "assembled", d, b, 0, c)
		checkStamps(t, "assembled", d, b, 1, a)
		if &b.data[0] != &stale.data[0] {
			t.Fatal("the stale buffer was not reused")
		}

		// A sequence joins into a row no sequence holds.
		e := &seqState{id: 3, n: 4}
		other, err := p.get(d, 1, 4, true)
		if err != nil {
			t.Fatal(err)
		}
		clear(other.mask)
		writeStamps(d, other, 0, 0, e)
		p.moveTo(e, other, 0)
		big, err := p.assembleAt(d, []*seqState{a, nil}, 12, false)
		if err != nil {
			t.Fatal(err)
		}
		p.joinInPlace(d, big, 1, e)
		checkStamps(t, "joined", d, big, 1, e)
		checkStamps(t, "beside a join", d, big, 0, a)

		if !left {
			continue
		}
		// A run's new tokens (two of them, fed at positions 1..2 of 3)
		// written after a row's past.
		fresh := make([]byte, d.bytes(2, 3))
		for ti := range d.tensors() {
			w, data := d.posBytes(), d.tensorIn(fresh, ti, 2, 3)
			for h := range d.heads {
				for i := range 2 {
					for k := range w {
						data[((1*d.heads+h)*3+1+i)*w+k] = stamp(e.id, ti, h, e.n+i, k)
					}
				}
			}
		}
		writeNew(d, big, 1, e.n, fresh, 3, 1, 2)
		e.n += 2
		checkStamps(t, "new tokens written", d, big, 1, e)

		// Through the block store: blocks of 2 tokens, written from the
		// row and filled into a row of another buffer.
		store := &blockStore{d: d, slots: 16}
		defer store.close()
		s := models.StepSeq{ID: e.id, Tokens: make([]int32, e.n), BlockSize: 2, Blocks: []int32{5, 2, 7}}
		if err := store.claim(e, s); err != nil {
			t.Fatal(err)
		}
		store.wrote(e, 0)
		one, err := p.get(d, 1, 8, true)
		if err != nil {
			t.Fatal(err)
		}
		f := &seqState{id: e.id, n: 6, table: e.table}
		store.fill(f, 3, one, 0)
		checkStamps(t, "through the block store", d, one, 0, f)
	}
}

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
