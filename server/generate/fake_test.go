package generate

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing/synctest"
	"time"

	"github.com/inferhq/infer/models"
)

// fake is a decoder for the engine's tests. Its tokens are a pure function
// of the prompt and the position: the answer to a prompt whose first token
// is L has L tokens, the last of which is EOS (0); the others are letters
// 1..26 ('a'..'z') chosen by the position. A step takes fixed + perSeq per
// decoding sequence + perToken per prefilled token of virtual time
// (time.Sleep, under testing/synctest). It checks the engine's KV
// accounting like a device would and records every step.
//
// It keeps its KV in the engine's blocks (fakeInfo.BlockKV): it writes each
// fed token into the block its table names, refuses a step that writes a
// block another live sequence holds or writes a block out of order, and
// starts a sequence after a cached prefix only from full blocks. With
// prompt set, every step also reads back each sequence's whole KV through
// its table and fails unless it holds the sequence's tokens: prompt(seed,
// pos) at prompt positions, the fake's own answer after them.
type fake struct {
	fixed, perSeq, perToken time.Duration
	kv                      int // capacity in tokens; 0: unlimited
	prompt                  func(seed uint64, pos int) int32

	mu      sync.Mutex
	seqs    map[models.SeqID]*fakeSeq
	used    int               // positions held, summed over seqs
	size    int               // block size of the tables seen
	content map[int32][]int32 // what each block holds
	refs    map[int32]int     // live sequences whose table holds the block
	steps   [][]stepRec
	fail    error // the next step fails with it
}

type fakeSeq struct {
	held  int
	table []int32
}

type stepRec struct {
	At     time.Time // when the step started
	ID     models.SeqID
	Past   int
	N      int
	Sample bool
}

const fakeEOS = 0

var fakeInfo = models.DecoderInfo{Context: 256, EOS: fakeEOS, Vocab: 1000, KVTokens: 1 << 16, BlockKV: true}

func newFake() *fake {
	return &fake{seqs: make(map[models.SeqID]*fakeSeq), content: make(map[int32][]int32), refs: make(map[int32]int)}
}

// answerLen is the answer length L a request's seed asks the fake for.
func answerLen(seed uint64) int { return int(seed % 1000) }

func (f *fake) Step(_ context.Context, seqs []models.StepSeq, next []int32) error {
	f.mu.Lock()
	rec := make([]stepRec, len(seqs))
	decodes, prefill, grow := 0, 0, 0
	for i, s := range seqs {
		rec[i] = stepRec{time.Now(), s.ID, s.Past, len(s.Tokens), s.Sample}
		if err := f.check(s); err != nil {
			f.mu.Unlock()
			return err
		}
		if len(s.Tokens) == 1 && s.Past >= s.PromptLen {
			decodes++
		} else {
			prefill += len(s.Tokens)
		}
		grow += len(s.Tokens)
	}
	f.steps = append(f.steps, rec)
	if f.kv > 0 && seqs[0].BlockSize == 0 && f.used+grow > f.kv {
		f.mu.Unlock()
		return fmt.Errorf("KV overflow: %d held + %d > %d", f.used, grow, f.kv)
	}
	if err := f.fail; err != nil {
		f.fail = nil
		f.mu.Unlock()
		return err
	}
	for _, s := range seqs {
		if err := f.write(s); err != nil {
			f.mu.Unlock()
			return err
		}
	}
	f.mu.Unlock()
	time.Sleep(f.fixed + time.Duration(decodes)*f.perSeq + time.Duration(prefill)*f.perToken)
	for i, s := range seqs {
		if s.Sample {
			next[i] = fakeToken(answerLen(s.Sampling.Seed), s.PromptLen, s.Past+len(s.Tokens))
		}
	}
	return nil
}

// check validates a step's sequence against what the fake holds, changing
// nothing.
func (f *fake) check(s models.StepSeq) error {
	st := f.seqs[s.ID]
	held := 0
	if st != nil {
		held = st.held
	}
	if s.BlockSize == 0 {
		if s.Past != held {
			return fmt.Errorf("seq %d: past %d, held %d", s.ID, s.Past, held)
		}
		return nil
	}
	B := s.BlockSize
	if f.size != 0 && f.size != B && len(f.refs) > 0 {
		return fmt.Errorf("seq %d: block size %d while sequences hold blocks of %d", s.ID, B, f.size)
	}
	if want := (s.Past + len(s.Tokens) + B - 1) / B; len(s.Blocks) != want {
		return fmt.Errorf("seq %d: %d blocks for %d positions of %d", s.ID, len(s.Blocks), s.Past+len(s.Tokens), B)
	}
	if f.kv > 0 {
		for _, b := range s.Blocks {
			if b < 0 || int(b) >= f.kv/B {
				return fmt.Errorf("seq %d: block %d outside the pool of %d", s.ID, b, f.kv/B)
			}
		}
	}
	if st != nil {
		if s.Past != held || !slices.Equal(s.Blocks[:len(st.table)], st.table) {
			return fmt.Errorf("seq %d: past %d, held %d; table %v, was %v", s.ID, s.Past, held, s.Blocks, st.table)
		}
		return nil
	}
	if s.Past%B != 0 {
		return fmt.Errorf("seq %d starts at past %d, not after whole blocks of %d", s.ID, s.Past, B)
	}
	for _, b := range s.Blocks[:s.Past/B] {
		if len(f.content[b]) != B {
			return fmt.Errorf("seq %d starts after block %d, which holds %d tokens", s.ID, b, len(f.content[b]))
		}
	}
	return nil
}

// write stores a checked sequence's tokens.
func (f *fake) write(s models.StepSeq) error {
	st := f.seqs[s.ID]
	if st == nil {
		st = &fakeSeq{}
		f.seqs[s.ID] = st
		if s.BlockSize != 0 {
			st.held = s.Past
			f.used += s.Past
		}
	}
	st.held += len(s.Tokens)
	f.used += len(s.Tokens)
	if s.BlockSize == 0 {
		return nil
	}
	B := s.BlockSize
	if f.size != B {
		f.size = B
		clear(f.content)
	}
	for _, b := range s.Blocks[len(st.table):] {
		st.table = append(st.table, b)
		f.refs[b]++
	}
	for j, tok := range s.Tokens {
		pos := s.Past + j
		b, off := s.Blocks[pos/B], pos%B
		if f.refs[b] != 1 {
			return fmt.Errorf("seq %d writes position %d into block %d, which %d live sequences hold", s.ID, pos, b, f.refs[b])
		}
		if off == 0 {
			f.content[b] = f.content[b][:0]
		}
		if len(f.content[b]) != off {
			return fmt.Errorf("seq %d writes position %d at offset %d of block %d, which holds %d", s.ID, pos, off, b, len(f.content[b]))
		}
		f.content[b] = append(f.content[b], tok)
	}
	if f.prompt == nil {
		return nil
	}
	L := answerLen(s.Sampling.Seed)
	for pos := range st.held {
		got := f.content[st.table[pos/B]][pos%B]
		want := fakeToken(L, s.PromptLen, pos)
		if pos < s.PromptLen {
			want = f.prompt(s.Sampling.Seed, pos)
		}
		if got != want {
			return fmt.Errorf("seq %d reads %d at position %d (block %d), want %d", s.ID, got, pos, st.table[pos/B], want)
		}
	}
	return nil
}

// fakeToken is the token at position pos of an answer of length L (the
// prompt's first token, passed as seed by the tests' requests).
func fakeToken(L, promptLen, pos int) int32 {
	if pos-promptLen == L-1 {
		return fakeEOS
	}
	return int32(1 + pos%26)
}

func (f *fake) Free(id models.SeqID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.seqs[id]
	if st == nil {
		return
	}
	f.used -= st.held
	for _, b := range st.table {
		if f.refs[b]--; f.refs[b] == 0 {
			delete(f.refs, b)
		}
	}
	delete(f.seqs, id)
}

func (f *fake) Close() error { return nil }

// Held returns the tokens the decoder holds once every goroutine of the
// test's bubble is blocked: the engine answers a stream before it ends its
// step, and frees a static batch, and publishes its gauges, after the last
// answer. Call it from a synctest bubble.
func (f *fake) Held() int {
	synctest.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.used
}

// HeldBlocks returns the blocks in the tables of the sequences the fake
// holds, once every goroutine of the test's bubble is blocked.
func (f *fake) HeldBlocks() int {
	synctest.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.refs)
}

func (f *fake) Steps() [][]stepRec {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]stepRec(nil), f.steps...)
}

// letters is the fake's tokenizer: 1..26 are 'a'..'z', 0 (EOS) is empty,
// 100.. spell the bytes of "€" (e2 82 ac) one token each, 200 is " ".
type letters struct{}

func (letters) Encode(s string) []int32 {
	var ids []int32
	for _, r := range s {
		ids = append(ids, int32(r-'a'+1))
	}
	return ids
}

func (letters) TokenBytes(id int32) []byte {
	switch {
	case id >= 1 && id <= 26:
		return []byte{byte('a' + id - 1)}
	case id >= 100 && id <= 102:
		return []byte("€")[id-100 : id-99]
	case id == 200:
		return []byte(" ")
	}
	return nil
}

// expected is the text and token count the fake answers a request with
// answer length L, prompt length n and max tokens m (0: no cap).
func expected(L, n, m int) (string, int) {
	var b []byte
	k := 0
	for pos := n; ; pos++ {
		t := fakeToken(L, n, pos)
		k++
		if t == fakeEOS {
			return string(b), k
		}
		b = append(b, byte('a'+t-1))
		if k == m {
			return string(b), k
		}
	}
}
