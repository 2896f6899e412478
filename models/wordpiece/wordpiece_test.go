package wordpiece

import (
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestEncode(t *testing.T) {
	tests := []struct {
		name, text string
		want       []string // between [CLS] and [SEP]
	}{
		{"fill-mask", "Paris is the [MASK] of France.", []string{"paris", "is", "the", "[MASK]", "of", "france", "."}},
		{"every special", "[CLS][SEP] [PAD]x[UNK]", []string{"[CLS]", "[SEP]", "[PAD]", "x", "[UNK]"}},
		{"specials are case-sensitive", "[mask] [MASK", []string{"[", "mask", "]", "[", "mask"}},
		{"pieces", "Unbelievable tokenization", []string{"unbelievable", "token", "##ization"}},
		{"accents", "Café naïve Ångström", []string{"cafe", "naive", "ang", "##strom"}},
		{"decomposed accents", "e\u0301te\u0301", []string{"et", "##e"}},
		{"dotted capital I", "İstanbul", []string{"istanbul"}},
		{"greek", "ΣΊΣΥΦΟΣ", []string{"σ", "##ι", "##σ", "##υ", "##φ", "##ο", "##σ"}},
		{"punctuation", "U.S.A.! (x)—“y”", []string{"u", ".", "s", ".", "a", ".", "!", "(", "x", ")", "—", "“", "y", "”"}},
		{"ascii symbols", "a$b+c^d", []string{"a", "$", "b", "+", "c", "^", "d"}},
		{"CJK ideographs", "Tokyo東京2020", []string{"tokyo", "東", "京", "2020"}},
		{"CJK compatibility ideograph", "\uF902", []string{"車"}},
		{"hangul decomposes", "한국", []string{"ᄒ", "##ᅡ", "##ᆫ", "##ᄀ", "##ᅮ", "##ᆨ"}},
		{"emoji", "I ❤ 🚀", []string{"i", "[UNK]", "[UNK]"}},
		{"unicode white space", "a\u00a0b\u3000c\u2028d", []string{"a", "b", "c", "d"}},
		{"control characters are removed", "x\vy\x00z\u200bw", []string{"x", "##y", "##z", "##w"}},
		{"invalid UTF-8 is removed", "ab\xffc", []string{"abc"}},
		{"private use is removed", "a\ue000b", []string{"ab"}},
		{"unknown word", "qqqq\u0378", []string{"[UNK]"}},
		{"empty", "", nil},
		{"white space only", " \t\r\n", nil},
	}
	tk := BertBaseUncased()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, truncated := tk.Encode(tt.text, 0)
			want := append(append([]string{"[CLS]"}, tt.want...), "[SEP]")
			if !slices.Equal(tokens(tk, got), want) || truncated {
				t.Errorf("Encode(%q, 0) = %q, %v, want %q, false", tt.text, tokens(tk, got), truncated, want)
			}
		})
	}
}

func TestMaxWordChars(t *testing.T) {
	tk := BertBaseUncased()
	for _, tt := range []struct {
		char string
		n    int
		unk  bool
	}{
		{"a", 99, false}, {"a", 100, false}, {"a", 101, true},
		// Characters count after normalization: é is one (e), e+U+0301 too.
		{"é", 100, false}, {"é", 101, true}, {"e\u0301", 100, false},
	} {
		text := strings.Repeat(tt.char, tt.n)
		got, _ := tk.Encode(text, 0)
		if unk := slices.Equal(got, []int32{CLSID, UnkID, SEPID}); unk != tt.unk || len(got) < 3 {
			t.Errorf("Encode(%q × %d) = %q, want [UNK] alone: %v", tt.char, tt.n, tokens(tk, got), tt.unk)
		}
	}
}

func TestBertBaseUncased(t *testing.T) {
	tk := BertBaseUncased()
	if tk != BertBaseUncased() {
		t.Error("BertBaseUncased() returned two tokenizers, want one shared")
	}
	if got := tk.VocabSize(); got != 30522 {
		t.Errorf("VocabSize() = %d, want 30522", got)
	}
	for _, s := range []struct {
		token string
		id    int32
	}{{"[PAD]", PadID}, {"[UNK]", UnkID}, {"[CLS]", CLSID}, {"[SEP]", SEPID}, {"[MASK]", MaskID}, {"the", 1996}, {"##ing", 2075}} {
		if id, ok := tk.ID(s.token); id != s.id || !ok {
			t.Errorf("ID(%q) = %d, %v, want %d, true", s.token, id, ok, s.id)
		}
		if got := tk.Token(s.id); got != s.token {
			t.Errorf("Token(%d) = %q, want %q", s.id, got, s.token)
		}
	}
	for _, id := range []int32{-1, 30522} {
		if got := tk.Token(id); got != "" {
			t.Errorf("Token(%d) = %q, want \"\"", id, got)
		}
	}
	if id, ok := tk.ID("no such token"); ok {
		t.Errorf(`ID("no such token") = %d, true, want false`, id)
	}
}

func TestNew(t *testing.T) {
	base := []string{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}
	tests := []struct {
		name    string
		vocab   []string
		opts    Options
		text    string
		want    []string
		wantErr string
	}{
		{name: "cased by default", vocab: append(base, "Café", "café"), text: "Café", want: []string{"Café"}},
		{name: "lower-case without stripping accents", vocab: append(base, "café", "cafe"), opts: Options{Lowercase: true}, text: "CAFÉ", want: []string{"café"}},
		{name: "full lower case of İ", vocab: append(base, "i\u0307", "i"), opts: Options{Lowercase: true}, text: "İ", want: []string{"i\u0307"}},
		{name: "strip accents without lower-casing", vocab: append(base, "Cafe", "cafe"), opts: Options{StripAccents: true}, text: "Café", want: []string{"Cafe"}},
		{name: "max word chars", vocab: append(base, "ab", "##c"), opts: Options{MaxWordChars: 2}, text: "ab abc", want: []string{"ab", "[UNK]"}},
		{
			// U+1D165 (class 216) sorts before U+1D16D (class 226) in NFD.
			name: "surviving marks in canonical order", vocab: append(base, "a\U0001D165\U0001D16D"), opts: Options{StripAccents: true},
			text: "a\U0001D16D\u0301\U0001D165", want: []string{"a\U0001D165\U0001D16D"},
		},
		{name: "no [MASK] in the vocabulary", vocab: []string{"[UNK]", "[CLS]", "[SEP]", "MASK", "[", "]"}, text: "[MASK]", want: []string{"[", "MASK", "]"}},
		{name: "missing specials", vocab: []string{"[CLS]", "a"}, wantErr: "vocabulary lacks [UNK], [SEP]"},
		{name: "duplicate token", vocab: append(base, "a", "a"), wantErr: `token "a" has ids 5 and 6`},
		{name: "empty token", vocab: append(base, ""), wantErr: "token 5 is empty"},
		{name: "negative max word chars", vocab: base, opts: Options{MaxWordChars: -1}, wantErr: "max word chars -1: must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tk, err := New(tt.vocab, tt.opts)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("New() error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("New() error = %v", err)
			}
			got, _ := tk.Encode(tt.text, 0)
			want := append(append([]string{"[CLS]"}, tt.want...), "[SEP]")
			if !slices.Equal(tokens(tk, got), want) {
				t.Errorf("Encode(%q) = %q, want %q", tt.text, tokens(tk, got), want)
			}
		})
	}
}

func TestTruncation(t *testing.T) {
	tk := BertBaseUncased()
	items := append(readCorpus(t), strings.Repeat("word ", 10000), strings.Repeat("é", 10000))
	for _, maxLen := range []int{-1, 0, 1, 2, 3, 8, 128, 512} {
		for _, item := range items {
			full, _ := tk.Encode(item, 0)
			want, wantTruncated := full, false
			if n := max(maxLen, 2); maxLen > 0 && len(full) > n {
				want, wantTruncated = append(slices.Clone(full[:n-1]), SEPID), true
			}
			got, truncated := tk.Encode(item, maxLen)
			if !slices.Equal(got, want) || truncated != wantTruncated {
				t.Fatalf("Encode(%.60q, %d) = %v, %v, want %v, %v", item, maxLen, got, truncated, want, wantTruncated)
			}
		}
	}
}

func TestAppendEncode(t *testing.T) {
	tk := BertBaseUncased()
	dst := []int32{7, 8}
	got, _ := tk.AppendEncode(dst, "hello world", 4)
	if want := []int32{7, 8, CLSID, 7592, 2088, SEPID}; !slices.Equal(got, want) {
		t.Errorf("AppendEncode([7 8], \"hello world\", 4) = %v, want %v", got, want)
	}
	got, truncated := tk.AppendEncode(dst, "hello big world", 4)
	if want := []int32{7, 8, CLSID, 7592, 2502, SEPID}; !slices.Equal(got, want) || !truncated {
		t.Errorf("AppendEncode([7 8], \"hello big world\", 4) = %v, %v, want %v, true", got, truncated, want)
	}
}

func TestAppendEncodeAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	tk := BertBaseUncased()
	ids := make([]int32, 0, 1024)
	for _, text := range []string{shortSentence, longSentence, "Ångström 東京 한국 ❤ \u00a0 x\u0301"} {
		if n := testing.AllocsPerRun(100, func() { ids, _ = tk.AppendEncode(ids[:0], text, 0) }); n != 0 {
			t.Errorf("AppendEncode(%.30q) allocates %v times, want 0", text, n)
		}
	}
}

func TestConcurrentUse(t *testing.T) {
	tk := BertBaseUncased()
	items := readCorpus(t)
	want := make([][]int32, len(items))
	for i, item := range items {
		want[i], _ = tk.Encode(item, 128)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for g := range 4 {
		wg.Go(func() {
			var ids []int32
			for i := range items {
				i = (i + g*len(items)/4) % len(items)
				ids, _ = tk.AppendEncode(ids[:0], items[i], 128)
				if !slices.Equal(ids, want[i]) {
					errs <- items[i]
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for item := range errs {
		t.Errorf("concurrent Encode(%q) differs from sequential", item)
	}
}
