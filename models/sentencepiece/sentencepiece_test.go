package sentencepiece

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// toy is a small vocabulary in the reference's layout: 6 reserved entries,
// then scored pieces.
func toy(t testing.TB, extra ...Piece) *Tokenizer {
	t.Helper()
	pieces := []Piece{
		{"\ufffd", 0}, {"<s>", 0}, {"</s>", 0}, {"x1", 0}, {"x2", 0}, {"x3", 0},
		{"▁", -2},       // 6
		{"▁the", -3},    // 7
		{"▁th", -6},     // 8
		{"e", -4},       // 9
		{"▁a", -4},      // 10
		{"b", -5},       // 11
		{"ab", -4},      // 12
		{"a", -5},       // 13
		{"é", -6},       // 14
		{"A", -6},       // 15
		{"▁ab", -12},    // 16
		{"\u00e9t", -7}, // 17
		{"t", -5},       // 18
	}
	tok, err := New(append(pieces, extra...), Reserved)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestEncode(t *testing.T) {
	tok := toy(t)
	for _, tc := range []struct {
		text string
		want []int32
	}{
		{"", nil},
		{"the", []int32{7}},             // ▁the (-3) beats ▁th+e (-10)
		{"ab", []int32{6, 12}},          // ▁ ab (-6) beats ▁a b (-9) and ▁ab (-12)
		{"a b", []int32{10, 6, 11}},     // a space becomes ▁; "▁b" is no piece
		{"a  b", []int32{10, 6, 6, 11}}, // repeated spaces stay repeated
		{"the\tthe", []int32{7, 0, 18, 0, 9}},
		{"zz", []int32{6, 0}}, // a run of unknown code points is one id
		{"z a z", []int32{6, 0, 10, 6, 0}},
		{"Ａ", []int32{6, 15}},        // NFKC: fullwidth A is A
		{"e\u0301t", []int32{6, 17}}, // NFKC composes e + combining acute into é
		{"<s>", []int32{6, 0}},       // reserved pieces are never matched (and < s > are unknown)
		{"x1", []int32{6, 0}},
	} {
		got := tok.Encode(tc.text)
		if !slices.Equal(got, tc.want) {
			t.Errorf("Encode(%q) = %v, want %v", tc.text, got, tc.want)
		}
	}
}

// TestReferenceQuirks pins the behaviours of the reference's search that a
// textbook Viterbi would not have: they decide ids on the real vocabulary
// (whose ":" has a null score, ":30" a score of +30 and "”5" three
// entries).
func TestReferenceQuirks(t *testing.T) {
	t.Run("a best score of 0 means none", func(t *testing.T) {
		// ▁r scores 0, so the best cut of "▁r" has the score 0, which the
		// reference reads as none yet: ▁ then r (-2 + -9) replaces it.
		tok := toy(t, Piece{"▁r", 0}, Piece{"r", -9})
		if got, want := tok.Encode("r"), []int32{6, 20}; !slices.Equal(got, want) {
			t.Errorf("Encode(r) = %v, want %v", got, want)
		}
	})
	t.Run("a position no piece reaches scores 0", func(t *testing.T) {
		// No piece ends inside "▁word", so the unknown code points from
		// there (score 0 + 0) beat ▁word itself (-1): all is one unknown.
		tok, err := New([]Piece{{"\ufffd", 0}, {"▁word", -1}}, 1)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := tok.Encode("word word "), []int32{0}; !slices.Equal(got, want) {
			t.Errorf("Encode(word word ) = %v, want %v", got, want)
		}
	})
	t.Run("ties go to the later start", func(t *testing.T) {
		tok := toy(t, Piece{"▁c", -4}, Piece{"c", -2})
		// ▁c = -4, ▁ + c = -2 + -2 = -4: a tie, won by c (the later start).
		if got, want := tok.Encode("c"), []int32{6, 20}; !slices.Equal(got, want) {
			t.Errorf("Encode(c) = %v, want %v", got, want)
		}
	})
	t.Run("a duplicate's later entry wins", func(t *testing.T) {
		tok := toy(t, Piece{"d", -1}, Piece{"d", -9})
		if got, want := tok.Encode("d"), []int32{6, 20}; !slices.Equal(got, want) {
			t.Errorf("Encode(d) = %v, want %v", got, want)
		}
		if id, ok := tok.ID("d"); !ok || id != 20 {
			t.Errorf("ID(d) = %d, %v; want 20, true", id, ok)
		}
	})
}

func TestParseJSON(t *testing.T) {
	pieces, err := ParseJSON([]byte(`[["\ufffd",0],["▁a",-1.5],[":",null],["x",30]]`))
	if err != nil {
		t.Fatal(err)
	}
	want := []Piece{{"\ufffd", 0}, {"▁a", -1.5}, {":", 0}, {"x", 30}}
	if !slices.Equal(pieces, want) {
		t.Errorf("ParseJSON = %v, want %v", pieces, want)
	}
	for _, bad := range []string{
		``, `{}`, `[["a"]]`, `[["a",1,2]]`, `[[1,2]]`, `[["a","b"]]`, `[null]`, `[["a",1]`,
	} {
		if _, err := ParseJSON([]byte(bad)); err == nil {
			t.Errorf("ParseJSON(%q) = nil error", bad)
		}
	}
}

func TestNewRefuses(t *testing.T) {
	unk := Piece{"\ufffd", 0}
	for _, tc := range []struct {
		name     string
		pieces   []Piece
		reserved int
	}{
		{"empty", nil, 0},
		{"reserved beyond the vocabulary", []Piece{unk}, 2},
		{"negative reserved", []Piece{unk}, -1},
		{"empty unknown piece", []Piece{{"", 0}, {"a", -1}}, 1},
		{"invalid UTF-8", []Piece{unk, {"\xff", -1}}, 1},
		{"a piece too long", []Piece{unk, {strings.Repeat("a", MaxPieceRunes+1), -1}}, 1},
	} {
		if _, err := New(tc.pieces, tc.reserved); err == nil {
			t.Errorf("New(%s) = nil error", tc.name)
		}
	}
}

func TestAppendEncodeTruncates(t *testing.T) {
	tok := toy(t)
	all := tok.Encode("a b a b")
	for _, tc := range []struct {
		maxLen    int
		want      []int32
		truncated bool
	}{
		{0, all, false},
		{len(all), all, false},
		{len(all) + 1, all, false},
		{3, all[:3], true},
		{1, all[:1], true},
	} {
		dst := []int32{42}
		got, truncated := tok.AppendEncode(dst, "a b a b", tc.maxLen)
		if !slices.Equal(got, append([]int32{42}, tc.want...)) || truncated != tc.truncated {
			t.Errorf("AppendEncode(maxLen %d) = %v, %v; want [42 %v], %v", tc.maxLen, got, truncated, tc.want, tc.truncated)
		}
	}
}

// TestAppendEncodePrefix: with a maxLen, the ids are the first maxLen ids
// of the whole text and the truncation flag says whether there were more,
// whether the tokenizer searches a prefix (no piece holds an inner "▁") or
// the whole text (one does).
func TestAppendEncodePrefix(t *testing.T) {
	// A long piece, so that a cut inside it would change an early id.
	long := Piece{"▁administration", -3}
	prefixed := toy(t, long)
	inner := toy(t, long, Piece{"b▁the", -1})
	if prefixed.inner[spaceRune] || !inner.inner[spaceRune] {
		t.Fatalf("▁ inner: %v, %v; want false, true", prefixed.inner[spaceRune], inner.inner[spaceRune])
	}
	r := rand.New(rand.NewPCG(1, 2))
	parts := []string{" ", "  ", "the", "a", "b", "ab", "é", "e\u0301", "z", "Ａ", "t", "\t", " administration"}
	for range 300 {
		var b strings.Builder
		for range r.IntN(400) {
			b.WriteString(parts[r.IntN(len(parts))])
		}
		text := b.String()
		for _, tok := range []*Tokenizer{prefixed, inner} {
			all := tok.Encode(text)
			for _, maxLen := range []int{1, 2, 3, 7, 20, 64} {
				got, truncated := tok.AppendEncode(nil, text, maxLen)
				want := all[:min(maxLen, len(all))]
				if !slices.Equal(got, want) || truncated != (len(all) > maxLen) {
					t.Fatalf("AppendEncode(%q, %d) = %v, %v; want %v, %v", text, maxLen, got, truncated, want, len(all) > maxLen)
				}
			}
		}
	}
}

// TestCuts: the ids of a text up to a code point that no piece holds after
// its first are the first ids of the whole text, which is what lets
// AppendEncode search only a prefix.
func TestCuts(t *testing.T) {
	tok := toy(t)
	r := rand.New(rand.NewPCG(3, 4))
	parts := []string{" ", "  ", "the", "a", "b", "ab", "é", "z", "t", "\t", "th", "e", "日本", "😀"}
	cuts := 0
	for range 300 {
		var b strings.Builder
		for range r.IntN(60) {
			b.WriteString(parts[r.IntN(len(parts))])
		}
		s := b.String()
		all := tok.appendCut(nil, s)
		for k, c := range s {
			if c == ' ' {
				c = spaceRune
			}
			if k == 0 || tok.inner[c] {
				continue
			}
			cuts++
			if got := tok.appendCut(nil, s[:k]); !slices.Equal(got, all[:len(got)]) {
				t.Fatalf("ids of %q are %v; up to %q, %v: not their start", s, all, s[:k], got)
			}
		}
	}
	if cuts < 1000 {
		t.Fatalf("only %d cuts tried", cuts)
	}
}

// TestAppendEncodeCapped: a long text with nowhere to cut exactly is
// searched up to SearchBytes, and reported truncated.
func TestAppendEncodeCapped(t *testing.T) {
	tok := toy(t)
	for _, tc := range []struct {
		name, text string
		want       []int32
	}{
		// "a" is inside pieces (▁a, ▁ab), so a run of them cannot be cut.
		{"a run of one letter", strings.Repeat("a", 4*SearchBytes), nil},
		// Unknown code points cut anywhere, but their run is one id.
		{"a run of unknown characters", strings.Repeat("☃", SearchBytes), []int32{6, 0}},
	} {
		got, truncated := tok.AppendEncode(nil, tc.text, 5)
		want := tc.want
		if want == nil {
			want = tok.Encode(tc.text[:SearchBytes])[:5]
		}
		if !slices.Equal(got, want) || !truncated {
			t.Errorf("%s: AppendEncode = %v, %v; want %v, true", tc.name, got, truncated, want)
		}
	}
}

func TestTokenAndID(t *testing.T) {
	tok := toy(t)
	if got := tok.Token(7); got != "▁the" {
		t.Errorf("Token(7) = %q, want ▁the", got)
	}
	for _, id := range []int32{-1, int32(tok.Len())} {
		if got := tok.Token(id); got != "" {
			t.Errorf("Token(%d) = %q, want empty", id, got)
		}
	}
	if id, ok := tok.ID("<s>"); !ok || id != 1 {
		t.Errorf("ID(<s>) = %d, %v; want 1, true", id, ok)
	}
	if _, ok := tok.ID("nope"); ok {
		t.Error("ID(nope) found")
	}
}

// FuzzEncode: any text, valid UTF-8 or not, encodes without panicking into
// ids of the vocabulary, and no two unknown ids follow each other.
func FuzzEncode(f *testing.F) {
	for _, s := range []string{"", " ", "the abé", "\xff\xfe", "日本語 😀", "ＡＢ", "a\u0301", "  \t\n"} {
		f.Add(s)
	}
	tok := toy(f)
	f.Fuzz(func(t *testing.T, s string) {
		ids := tok.Encode(s)
		if utf8.RuneCountInString(s) > 0 && len(ids) == 0 {
			t.Fatalf("Encode(%q) is empty", s)
		}
		for i, id := range ids {
			if id < 0 || int(id) >= tok.Len() || (id > 0 && id < Reserved) {
				t.Fatalf("Encode(%q)[%d] = %d: not a matchable id", s, i, id)
			}
			if i > 0 && id == UnknownID && ids[i-1] == UnknownID {
				t.Fatalf("Encode(%q) = %v: two unknown ids in a row", s, ids)
			}
		}
	})
}
