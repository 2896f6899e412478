package tokenizer

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/llama/stories260k"
)

var _ models.Tokenizer = (*Tokenizer)(nil)

func tok512(t testing.TB) *Tokenizer {
	t.Helper()
	tok, err := Parse(stories260k.Tokenizer)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestEncodeAsLlama2c: the ids of ASCII, accented, CJK and emoji texts are
// those of testdata/ids.json, written by testdata/llama2c_encode.py, a port
// of llama2.c's encode() independent of this package's.
func TestEncodeAsLlama2c(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "ids.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Text string  `json:"text"`
		IDs  []int32 `json:"ids"`
	}
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) < 20 {
		t.Fatalf("%d cases in ids.json", len(cases))
	}
	tok := tok512(t)
	for _, c := range cases {
		if got := tok.Encode(c.Text); !slices.Equal(got, c.IDs) {
			t.Errorf("Encode(%q) = %v\nllama2.c gives %v", c.Text, got, c.IDs)
		}
		if got := tok.Decode(c.IDs); got != c.Text {
			t.Errorf("Decode(%v) = %q, want %q", c.IDs, got, c.Text)
		}
	}
}

// TestEncodeRules checks the rules one at a time on tok512.
func TestEncodeRules(t *testing.T) {
	tok := tok512(t)
	space := tok.ids[" "]
	for _, tc := range []struct {
		text string
		want []int32
	}{
		{"", []int32{BOS}},                                           // no dummy prefix for an empty text
		{"e", []int32{BOS, tok.ids[" e"]}},                           // the dummy prefix merged in
		{"\n", []int32{BOS, space, ByteBase + '\n'}},                 // byte fallback: no piece "\n"
		{"é", []int32{BOS, space, tok.ids["é"]}},                     // a two-byte character with a piece
		{"ü", []int32{BOS, space, ByteBase + 0xC3, ByteBase + 0xBC}}, // without one: its bytes
		{"\xff", []int32{BOS, space, ByteBase + 0xFF}},               // invalid UTF-8: byte tokens
		{"\x00", []int32{BOS, space, ByteBase}},                      // NUL is a byte like any other
		{"the", []int32{BOS, tok.ids[" the"]}},
		{" the", []int32{BOS, space, tok.ids[" the"]}},
	} {
		if got := tok.Encode(tc.text); !slices.Equal(got, tc.want) {
			t.Errorf("Encode(%q) = %v, want %v", tc.text, got, tc.want)
		}
	}
	// Merges go by score, not from the left: " wa" + "s" is " was".
	if got := tok.Decode(tok.Encode("was")); got != "was" {
		t.Errorf("round trip of \"was\": %q", got)
	}
}

// naiveMerge is llama2.c's merge loop as written there: rescan every pair
// after each merge, the first strictly best pair wins.
func naiveMerge(t *Tokenizer, ids []int32) []int32 {
	ids = slices.Clone(ids)
	for {
		best, bestID, at := float32(noMerge), int32(-1), -1
		for i := 0; i+1 < len(ids); i++ {
			id, ok := t.ids[string(t.pieces[ids[i]])+string(t.pieces[ids[i+1]])]
			if ok && t.scores[id] > best {
				best, bestID, at = t.scores[id], id, i
			}
		}
		if at < 0 {
			return ids
		}
		ids[at] = bestID
		ids = slices.Delete(ids, at+1, at+2)
	}
}

// FuzzEncode: the heap-based merge gives what llama2.c's loop gives, and
// decoding gives the text back, whatever the bytes.
func FuzzEncode(f *testing.F) {
	for _, s := range []string{"", "Once upon a time", "café 东京 😀", "  x  y ", "\xff\xfe\x80abc", "<0x41>", "aaaaaaaa"} {
		f.Add(s)
	}
	tok := tok512(f)
	f.Fuzz(func(t *testing.T, text string) {
		if len(text) > 2000 {
			return
		}
		got := tok.Encode(text)
		if back := tok.Decode(got); back != text {
			t.Fatalf("Decode(Encode(%q)) = %q", text, back)
		}
		if want := naiveMerge(tok, tok.split(text)); !slices.Equal(got, want) {
			t.Fatalf("Encode(%q) = %v; llama2.c's loop gives %v", text, got, want)
		}
	})
}

func TestDecode(t *testing.T) {
	tok := tok512(t)
	the := tok.ids[" the"]
	for _, tc := range []struct {
		ids  []int32
		want string
	}{
		{[]int32{BOS, the}, "the"},                                        // the space after BOS is dropped
		{[]int32{the, the}, " the the"},                                   // elsewhere kept
		{[]int32{BOS, the, BOS, the}, "thethe"},                           // after every BOS: a new story
		{[]int32{EOS, Unk}, "<unk>"},                                      // EOS is a control token; <unk> as llama2.c prints it
		{[]int32{ByteBase + 0xE4, ByteBase + 0xB8, ByteBase + 0x9C}, "东"}, // bytes make a character
		{[]int32{-1, 512, 1 << 30}, ""},                                   // outside the vocabulary
	} {
		if got := tok.Decode(tc.ids); got != tc.want {
			t.Errorf("Decode(%v) = %q, want %q", tc.ids, got, tc.want)
		}
	}
	if got := string(tok.TokenBytes(ByteBase + 0xE4)); got != "\xe4" {
		t.Errorf("TokenBytes(<0xE4>) = %q: want the raw byte", got)
	}
	if tok.Piece(ByteBase+'\n') != "<0x0A>" || tok.Piece(BOS) != "\n<s>\n" || tok.Piece(-1) != "" || tok.Vocab() != 512 {
		t.Errorf("pieces: %q %q %q, vocab %d", tok.Piece(ByteBase+'\n'), tok.Piece(BOS), tok.Piece(-1), tok.Vocab())
	}
}

// file writes a tokenizer file: max_token_length, then the pieces with
// descending scores.
func file(maxLen int32, pieces ...string) []byte {
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, maxLen)
	for i, p := range pieces {
		binary.Write(&b, binary.LittleEndian, -float32(i))
		binary.Write(&b, binary.LittleEndian, int32(len(p)))
		b.WriteString(p)
	}
	return b.Bytes()
}

// basePieces are the special and byte tokens every tokenizer starts with.
func basePieces() []string {
	p := []string{"<unk>", "\n<s>\n", "\n</s>\n"}
	for c := range 256 {
		p = append(p, byteName(byte(c)))
	}
	return p
}

// TestParseHostile: a file that is not a llama2.c tokenizer gets an error
// saying what is wrong, and never a panic or a huge allocation.
func TestParseHostile(t *testing.T) {
	good := file(6, append(basePieces(), " ", "a", " a")...)
	tok, err := Parse(good)
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Encode("a a"); !slices.Equal(got, []int32{BOS, 261, 261}) {
		t.Errorf("Encode(\"a a\") with a made-up vocabulary = %v", got)
	}
	noSpace := file(6, append(basePieces(), "a")...)
	if tok, err := Parse(noSpace); err != nil || !slices.Equal(tok.Encode("a"), []int32{BOS, ByteBase + ' ', 259}) {
		t.Errorf("without a \" \" piece the dummy prefix is the byte token of ' ': %v", err)
	}
	huge := slices.Clone(good)
	binary.LittleEndian.PutUint32(huge[4+4:], 0x7fffffff) // token 0's length
	badBytes := basePieces()
	badBytes[3+'A'] = "A"
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "too short"},
		{"max_token_length 0", file(0, basePieces()...), "max_token_length 0"},
		{"max_token_length huge", file(1<<30, basePieces()...), "max_token_length 1073741824"},
		{"truncated in a header", good[:len(good)-6], "truncated"},
		{"truncated in a piece", good[:len(good)-1], "truncated"},
		{"a huge length", huge, "length 2147483647"},
		{"a piece longer than max_token_length", file(3, basePieces()...), "max_token_length 3"},
		{"too few tokens", file(6, basePieces()[:100]...), "100 tokens"},
		{"no byte tokens", file(6, badBytes...), "want the byte token <0x41>"},
		{"a checkpoint", stories260k.Checkpoint, "want 0 to max_token_length 64"},
	} {
		if _, err := Parse(tc.b); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

func TestCheckVocab(t *testing.T) {
	tok := tok512(t)
	if err := tok.CheckVocab(512); err != nil {
		t.Error(err)
	}
	err := tok.CheckVocab(32000)
	var se *SizeError
	if !errors.As(err, &se) || se.Tokenizer != 512 || se.Checkpoint != 32000 || !strings.Contains(err.Error(), "trained with") {
		t.Errorf("CheckVocab(32000) = %v", err)
	}
}

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tok512.bin")
	if err := os.WriteFile(path, stories260k.Tokenizer, 0o644); err != nil {
		t.Fatal(err)
	}
	if tok, err := ReadFile(path); err != nil || tok.Vocab() != 512 {
		t.Fatalf("ReadFile: %v", err)
	}
	bad := filepath.Join(dir, "bad.bin")
	if err := os.WriteFile(bad, stories260k.Tokenizer[:100], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("ReadFile of a truncated file: %v, want an error naming it", err)
	}
	if _, err := ReadFile(filepath.Join(dir, "none.bin")); err == nil {
		t.Error("ReadFile of a missing file succeeded")
	}
}

// BenchmarkEncode encodes 64 KiB of mixed text (ASCII words, CJK and
// emoji, which fall back to bytes): the cost of a long prompt.
func BenchmarkEncode(b *testing.B) {
	tok := tok512(b)
	text := strings.Repeat("Once upon a time, Lily saw a big red ball in the park. 东京 😀 ", 1000)[:64<<10]
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		tok.Encode(text)
	}
}
