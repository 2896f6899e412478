package compare

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/inferhq/infer/models"
)

const fakeVocab = 10

// fakeDecoder's most likely next token is a function of the token fed and
// its position: (3·token + position + shift(position)) mod 10.
type fakeDecoder struct {
	shift  func(pos int) int
	logits [][]float32
	held   map[models.SeqID]int // tokens held per sequence
	fail   bool
}

func newFake(shift func(int) int) *fakeDecoder {
	return &fakeDecoder{shift: shift, held: map[models.SeqID]int{}}
}

func (f *fakeDecoder) Step(_ context.Context, seqs []models.StepSeq, next []int32) error {
	if f.fail {
		return errors.New("boom")
	}
	f.logits = f.logits[:0]
	for i, s := range seqs {
		if s.Past != f.held[s.ID] || len(s.Tokens) != 1 {
			return fmt.Errorf("sequence %d: past %d, holds %d", s.ID, s.Past, f.held[s.ID])
		}
		f.held[s.ID]++
		pos := s.Past
		best := (3*int(s.Tokens[0]) + pos + f.shift(pos)) % fakeVocab
		l := make([]float32, fakeVocab)
		l[best] = 5
		l[(best+1)%fakeVocab] = 1
		f.logits = append(f.logits, l)
		next[i] = int32(best)
	}
	return nil
}

func (f *fakeDecoder) Logits(i int) []float32 { return f.logits[i] }
func (f *fakeDecoder) Free(id models.SeqID)   { delete(f.held, id) }
func (f *fakeDecoder) Close() error           { return nil }

func TestDecode(t *testing.T) {
	same := func(int) int { return 0 }
	prompts := [][]int32{{1, 2, 3}, {4}, {5, 6}}

	// B equals A: everything agrees, no run diverges.
	a, b := newFake(same), newFake(same)
	rep, err := Decode(context.Background(), a, b, prompts, DecodeConfig{Tokens: 4, EOS: -1})
	if err != nil {
		t.Fatal(err)
	}
	// Positions: the prompts' next tokens (2 + 0 + 1) and 4 generated each.
	if rep.Positions != 3+12 || rep.Top1 != 1 || rep.Runs != 3 || rep.Full != 3 || rep.Diverge.Min != 4 {
		t.Errorf("B = A: %+v, want 15 positions, top-1 1, 3 full runs of 4", rep)
	}
	if len(a.held)+len(b.held) != 0 {
		t.Errorf("sequences left held: %v %v", a.held, b.held)
	}

	// B differs from position 3 on: the first prompt diverges at its first
	// generated token (position 3), the second after 2 (positions 1, 2
	// agree) and the third after 1.
	b = newFake(func(pos int) int {
		if pos >= 2 {
			return 1
		}
		return 0
	})
	rep, err = Decode(context.Background(), newFake(same), b, prompts, DecodeConfig{Tokens: 4, EOS: -1})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Full != 0 || rep.Diverge.Min != 0 || rep.Diverge.Mean != (0+2+1)/3.0 {
		t.Errorf("B differing from position 2: %+v; want runs of 0, 2 and 1", rep)
	}
	// Teacher-forced along A's text, B agrees at positions 0 and 1 only:
	// 2 of the first prompt's 6 positions, 2 of the second's 4, 2 of the
	// third's 5.
	if want := 6.0 / 15; rep.Top1 != want {
		t.Errorf("top-1 %v, want %v", rep.Top1, want)
	}

	// Along the prompts alone.
	rep, err = Decode(context.Background(), newFake(same), newFake(same), prompts, DecodeConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Positions != 3 || rep.Runs != 0 {
		t.Errorf("prompts alone: %+v, want 3 positions, no runs", rep)
	}

	// EOS ends a run: A's first generated token after [4] is 3·4 mod 10.
	rep, err = Decode(context.Background(), newFake(same), newFake(same), [][]int32{{4}}, DecodeConfig{Tokens: 5, EOS: 2})
	if err != nil || rep.Runs != 1 || rep.Diverge.Mean != 1 || rep.Positions != 1 {
		t.Errorf("EOS first: %+v, %v; want one run of 1", rep, err)
	}

	for _, c := range []struct {
		prompts [][]int32
		cfg     DecodeConfig
		want    string
	}{
		{[][]int32{{}}, DecodeConfig{Tokens: 1}, "empty"},
		{[][]int32{{1, 2}}, DecodeConfig{Tokens: 9, Context: 10}, "context"},
		{[][]int32{{1}}, DecodeConfig{Tokens: -1}, "negative"},
	} {
		if _, err := Decode(context.Background(), newFake(same), newFake(same), c.prompts, c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Decode(%v, %+v) = %v, want an error saying %q", c.prompts, c.cfg, err, c.want)
		}
	}
	failing := newFake(same)
	failing.fail = true
	if _, err := Decode(context.Background(), newFake(same), failing, prompts, DecodeConfig{Tokens: 2}); err == nil || !strings.Contains(err.Error(), "model B") {
		t.Errorf("B failing: %v, want an error naming model B", err)
	}
}
