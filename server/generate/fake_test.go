package generate

import (
	"context"
	"fmt"
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
type fake struct {
	fixed, perSeq, perToken time.Duration
	kv                      int // capacity; 0: unlimited

	mu    sync.Mutex
	held  map[models.SeqID]int
	used  int
	steps [][]stepRec
	fail  error // the next step fails with it
}

type stepRec struct {
	At     time.Time // when the step started
	ID     models.SeqID
	Past   int
	N      int
	Sample bool
}

const fakeEOS = 0

var fakeInfo = models.DecoderInfo{Context: 256, EOS: fakeEOS, Vocab: 1000, KVTokens: 1 << 16}

func newFake() *fake { return &fake{held: make(map[models.SeqID]int)} }

func (f *fake) Step(_ context.Context, seqs []models.StepSeq, next []int32) error {
	f.mu.Lock()
	rec := make([]stepRec, len(seqs))
	decodes, prefill, grow := 0, 0, 0
	for i, s := range seqs {
		rec[i] = stepRec{time.Now(), s.ID, s.Past, len(s.Tokens), s.Sample}
		if s.Past != f.held[s.ID] {
			f.mu.Unlock()
			return fmt.Errorf("seq %d: past %d, held %d", s.ID, s.Past, f.held[s.ID])
		}
		if len(s.Tokens) == 1 && s.Past >= s.PromptLen {
			decodes++
		} else {
			prefill += len(s.Tokens)
		}
		grow += len(s.Tokens)
	}
	f.steps = append(f.steps, rec)
	if f.kv > 0 && f.used+grow > f.kv {
		f.mu.Unlock()
		return fmt.Errorf("KV overflow: %d held + %d > %d", f.used, grow, f.kv)
	}
	if err := f.fail; err != nil {
		f.fail = nil
		f.mu.Unlock()
		return err
	}
	f.mu.Unlock()
	time.Sleep(f.fixed + time.Duration(decodes)*f.perSeq + time.Duration(prefill)*f.perToken)
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, s := range seqs {
		if s.Past == 0 {
			f.used -= f.held[s.ID]
			f.held[s.ID] = 0
		}
		f.held[s.ID] += len(s.Tokens)
		f.used += len(s.Tokens)
		if s.Sample {
			next[i] = fakeToken(int(s.Sampling.Seed), s.PromptLen, s.Past+len(s.Tokens))
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
	f.used -= f.held[id]
	delete(f.held, id)
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
