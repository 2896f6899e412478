package wordpiece

import (
	"bufio"
	"bytes"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/sugarme/tokenizer"
	"github.com/sugarme/tokenizer/pretrained"
	"golang.org/x/text/unicode/norm"

	"github.com/inferhq/infer/models/wordpiece/internal/minilm"
)

// Two references check the tokenizer on testdata/corpus.txt:
//
//   - HuggingFace's tokenizers (Rust), the behaviour BERT models were trained
//     with: testdata/corpus.hf.txt holds its ids for every line, written by
//     internal/hfgolden/golden.js;
//   - github.com/sugarme/tokenizer (the fork that
//     github.com/clems4ever/all-minilm-l6-v2-go uses), run live on the same
//     tokenizer.json that vocab.txt was extracted from. It deviates from
//     HuggingFace in the ways libraryDeviations lists; on every other line the
//     ids must be identical.

// readCorpus returns the items of testdata/corpus.txt, one strconv.Quote'd
// string per line.
func readCorpus(tb testing.TB) []string {
	tb.Helper()
	var items []string
	for n, line := range readLines(tb, "testdata/corpus.txt") {
		s, err := strconv.Unquote(line)
		if err != nil {
			tb.Fatalf("corpus.txt:%d: %v", n+1, err)
		}
		items = append(items, s)
	}
	if len(items) < 3000 {
		tb.Fatalf("corpus.txt has %d items, want at least 3000", len(items))
	}
	return items
}

func readLines(tb testing.TB, path string) []string {
	tb.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
}

func tokens(tk *Tokenizer, ids []int32) []string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = tk.Token(id)
	}
	return s
}

func TestMatchesHuggingFace(t *testing.T) {
	items := readCorpus(t)
	golden := readLines(t, "testdata/corpus.hf.txt")
	if len(golden) != len(items) {
		t.Fatalf("corpus.hf.txt has %d lines for %d items: regenerate it (internal/hfgolden/golden.js)", len(golden), len(items))
	}
	tk := BertBaseUncased()
	bad := 0
	for i, item := range items {
		var want []int32
		for _, f := range strings.Fields(golden[i]) {
			id, err := strconv.ParseInt(f, 10, 32)
			if err != nil {
				t.Fatalf("corpus.hf.txt:%d: %v", i+1, err)
			}
			want = append(want, int32(id))
		}
		if got, _ := tk.Encode(item, 0); !slices.Equal(got, want) {
			if bad++; bad <= 10 {
				t.Errorf("Encode(%q) =\n%q, want (HuggingFace)\n%q", item, tokens(tk, got), tokens(tk, want))
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d items differ from HuggingFace", bad, len(items))
	}
}

var tokenizerJSON = sync.OnceValues(func() ([]byte, error) {
	path, err := minilm.TokenizerJSON()
	if err != nil {
		return nil, err
	}
	return os.ReadFile(path)
})

// library returns the library's tokenizer for tokenizer.json with the file's
// truncation at maxLen (none when maxLen is 0) and no padding.
func library(tb testing.TB, maxLen int) *tokenizer.Tokenizer {
	tb.Helper()
	data, err := tokenizerJSON()
	if err != nil {
		tb.Fatalf("read the library's tokenizer.json: %v", err)
	}
	lib, err := pretrained.FromReader(bytes.NewReader(data))
	if err != nil {
		tb.Fatalf("load the library's tokenizer: %v", err)
	}
	lib.WithPadding(nil)
	lib.WithTruncation(nil)
	if maxLen > 0 {
		lib.WithTruncation(&tokenizer.TruncationParams{MaxLength: maxLen, Strategy: tokenizer.LongestFirst})
	}
	return lib
}

// libraryEncode returns the library's ids for text, or nil if it panics.
//
// The library reads the file's "strip_accents": null as false where
// HuggingFace reads it as "same as lowercase" (true), and its own accent
// stripping, when turned on, gives [UNK] for "café" and panics on "İstanbul".
// So the text is given to it with accents already stripped: HuggingFace's
// step (NFD, then drop non-spacing marks) done ahead with x/text.
func libraryEncode(lib *tokenizer.Tokenizer, text string) (ids []int32) {
	defer func() {
		if recover() != nil {
			ids = nil
		}
	}()
	stripped := strings.Map(func(r rune) rune {
		if unicode.Is(unicode.Mn, r) {
			return -1
		}
		return r
	}, norm.NFD.String(text))
	enc, err := lib.EncodeSingle(stripped, true)
	if err != nil {
		return nil
	}
	ids = make([]int32, len(enc.Ids))
	for i, id := range enc.Ids {
		ids[i] = int32(id)
	}
	return ids
}

var specialAfterBracket = regexp.MustCompile(`(\[|\[(PAD|UNK|CLS|SEP|MASK)\])\[(PAD|UNK|CLS|SEP|MASK)\]`)

// libraryDeviations are the cases where the library's output differs from
// HuggingFace's (checked by TestMatchesHuggingFace), each with a test that
// says whether an item may show it. Examples are from the corpus.
var libraryDeviations = []struct {
	why  string
	hits func(string) bool
}{
	// "can\u2028go": HF [can go], library [[UNK]].
	{"only ASCII white space separates words", func(s string) bool {
		return strings.ContainsFunc(s, func(r rune) bool { return r >= utf8.RuneSelf && unicode.Is(unicode.White_Space, r) })
	}},
	// "don't\ue000an": HF [don ' tan], library [don ' [UNK]].
	{"private-use characters are kept", func(s string) bool {
		return strings.ContainsFunc(s, func(r rune) bool { return unicode.Is(unicode.Co, r) })
	}},
	// "\ufeffateuvttfеM": HF [ate ##u ##v ##tt ##f ##е ##m], library repeats
	// "##mt ##tf ##е ##m".
	{"a removed character at the start garbles the text", func(s string) bool {
		r, _ := utf8.DecodeRuneInString(s)
		return s != "" && isRemoved(r)
	}},
	// "[MASK][MASK]": HF [[MASK] [MASK]], library [[ mask ] [ mask ]].
	{"a special token right after '[' or another special token is missed", specialAfterBracket.MatchString},
}

func TestMatchesLibrary(t *testing.T) {
	items := readCorpus(t)
	tk := BertBaseUncased()
	for _, maxLen := range []int{0, 128} {
		lib := library(t, maxLen)
		same, truncated := 0, 0
		deviations := make([]int, len(libraryDeviations))
		for _, item := range items {
			got, tr := tk.Encode(item, maxLen)
			if tr {
				truncated++
			}
			want := libraryEncode(lib, item)
			if slices.Equal(got, want) {
				same++
				continue
			}
			explained := false
			for i, d := range libraryDeviations {
				if d.hits(item) {
					deviations[i]++
					explained = true
				}
			}
			if !explained {
				t.Errorf("Encode(%q, %d) =\n%q, want (library)\n%q", item, maxLen, tokens(tk, got), tokens(tk, want))
			}
		}
		t.Logf("maxLen %d: %d of %d items identical (%d truncated); the rest differ where the library deviates from HuggingFace:", maxLen, same, len(items), truncated)
		for i, d := range libraryDeviations {
			t.Logf("  %4d items: %s", deviations[i], d.why)
			if deviations[i] == 0 {
				t.Errorf("no item shows the deviation %q: drop it from libraryDeviations", d.why)
			}
		}
	}
}

// TestHuggingFaceSweep compares every Unicode scalar value, alone and inside
// a word ("x"+c+"x"), with HuggingFace. It needs the file that
// internal/hfgolden/sweep.js writes (about 30 s, 25 MB), named by
// WORDPIECE_HF_SWEEP.
func TestHuggingFaceSweep(t *testing.T) {
	path := os.Getenv("WORDPIECE_HF_SWEEP")
	if path == "" {
		t.Skip("WORDPIECE_HF_SWEEP is not set: see internal/hfgolden/sweep.js")
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tk := BertBaseUncased()
	format := func(ids []int32) string {
		s := make([]string, len(ids))
		for i, id := range ids {
			s[i] = strconv.Itoa(int(id))
		}
		return strings.Join(s, " ")
	}
	n, bad := 0, 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), "\t")
		cp, err := strconv.ParseInt(fields[0], 16, 32)
		if err != nil || len(fields) != 3 {
			t.Fatalf("%s: bad line %q", path, sc.Text())
		}
		n++
		c := string(rune(cp))
		alone, _ := tk.Encode(c, 0)
		inWord, _ := tk.Encode("x"+c+"x", 0)
		if format(alone) != fields[1] || format(inWord) != fields[2] {
			if bad++; bad <= 20 {
				t.Errorf("%U: Encode = %s and %s in a word, want (HuggingFace) %s and %s", cp, format(alone), format(inWord), fields[1], fields[2])
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n != 0x110000-0x800 {
		t.Errorf("%s has %d code points, want all %d", path, n, 0x110000-0x800)
	}
	if bad > 0 {
		t.Errorf("%d of %d code points differ from HuggingFace", bad, n)
	}
}

var (
	shortSentence = "The quick brown fox jumps over the lazy [MASK] tonight."
	longSentence  = "Batching trades latency for throughput: every request may wait up to the maximum latency " +
		"for company, and in exchange the accelerator computes many items at once, which costs far less than " +
		"computing them one by one. Tokenization runs on the same cores as the model, so its cost per item " +
		"must stay well under the model's, or it becomes the bottleneck that nobody measured. This paragraph " +
		"has about one hundred words, including some unusual ones like internationalization, hyperparameters, " +
		"and state-of-the-art preprocessing, to exercise the WordPiece splitting of long words into pieces."
)

func BenchmarkEncode(b *testing.B) {
	tk := BertBaseUncased()
	lib := library(b, 0)
	for _, s := range []struct{ name, text string }{{"short", shortSentence}, {"long", longSentence}} {
		b.Run(s.name+"/wordpiece", func(b *testing.B) {
			ids := make([]int32, 0, 512)
			b.ReportAllocs()
			for b.Loop() {
				ids, _ = tk.AppendEncode(ids[:0], s.text, 0)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(ids)), "ns/token")
		})
		b.Run(s.name+"/library", func(b *testing.B) {
			var n int
			b.ReportAllocs()
			for b.Loop() {
				enc, err := lib.EncodeSingle(s.text, true)
				if err != nil {
					b.Fatal(err)
				}
				n = len(enc.Ids)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/token")
		})
	}
}

// BenchmarkEncodeCorpus encodes the whole corpus once per op, at the server's
// default limit of 128 ids.
func BenchmarkEncodeCorpus(b *testing.B) {
	tk := BertBaseUncased()
	items := readCorpus(b)
	ids := make([]int32, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		for _, item := range items {
			ids, _ = tk.AppendEncode(ids[:0], item, 128)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(items)), "ns/item")
}
