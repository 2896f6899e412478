package bpe

import (
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

func TestKnownIDs(t *testing.T) {
	// GPT-2's ids, as Hugging Face's GPT2Tokenizer gives them.
	tests := []struct {
		text string
		want []int32
	}{
		{"Hello world", []int32{15496, 995}},
		{" the", []int32{262}},
		{"<|endoftext|>", []int32{27, 91, 437, 1659, 5239, 91, 29}},
	}
	tok := GPT2()
	for _, tt := range tests {
		got := tok.Encode(tt.text)
		if !equal(got, tt.want) {
			t.Errorf("Encode(%q) = %v, want %v", tt.text, got, tt.want)
		}
		if n := tok.Count(tt.text); n != len(tt.want) {
			t.Errorf("Count(%q) = %d, want %d", tt.text, n, len(tt.want))
		}
	}
}

func TestRoundTrip(t *testing.T) {
	tok := GPT2()
	for _, s := range []string{
		"", "a", "The quick brown fox jumps over the lazy dog.",
		"emoji 🦊 and CJK 東京, naïve café", "  spaces\tand\nnewlines\r\n",
	} {
		if got := tok.Decode(tok.Encode(s)); got != s {
			t.Errorf("Decode(Encode(%q)) = %q", s, got)
		}
	}
}

func TestTokenBytesSplitsCharacters(t *testing.T) {
	tok := GPT2()
	ids := tok.Encode("🦊")
	if len(ids) < 2 {
		t.Fatalf("Encode(fox emoji) = %v, want a character split over tokens", ids)
	}
	if utf8.Valid(tok.TokenBytes(ids[0])) {
		t.Errorf("first token of the emoji is valid UTF-8 on its own; want a partial sequence")
	}
	if tok.TokenBytes(EOS) != nil || tok.TokenBytes(-1) != nil || tok.TokenBytes(Vocab) != nil {
		t.Errorf("TokenBytes of EOS or out of range is not empty")
	}
}

func TestConcurrent(t *testing.T) {
	tok := GPT2()
	text := strings.Repeat("concurrent tokenization is safe ", 20)
	want := tok.Encode(text)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20 {
				if got := tok.Encode(text); !equal(got, want) {
					t.Error("concurrent Encode differs")
					return
				}
			}
		})
	}
	wg.Wait()
}

func BenchmarkEncode(b *testing.B) {
	tok := GPT2()
	text := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 10)
	n := len(tok.Encode(text))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		tok.Encode(text)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/token")
}

func equal(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
