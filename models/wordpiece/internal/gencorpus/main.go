// Command gencorpus writes the comparison corpus of package wordpiece: a few
// thousand varied lines (English, masked sentences, punctuation, numbers,
// URLs, emoji, accented Latin, Greek, Cyrillic, CJK, white space and control
// characters, long words, near-empty input, random mixtures), one
// strconv.Quote'd string per line so that any byte can appear in an item. The
// output depends only on the seed.
//
//	go run ./internal/gencorpus -o testdata/corpus.txt
package main

import (
	"bufio"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
)

func main() {
	out := flag.String("o", "testdata/corpus.txt", "file to write")
	seed := flag.Uint64("seed", 1, "random seed")
	flag.Parse()
	if err := write(*out, corpus(rand.New(rand.NewPCG(*seed, 0)))); err != nil {
		fmt.Fprintln(os.Stderr, "gencorpus:", err)
		os.Exit(1)
	}
}

func write(path string, lines []string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	for _, l := range lines {
		w.WriteString(strconv.Quote(l))
		w.WriteByte('\n')
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

var (
	subjects   = []string{"The cat", "A young engineer", "My neighbour's dog", "The committee", "Paris", "Every student", "The old lighthouse keeper", "Our team", "She", "They", "The server", "A tokenizer", "The government", "This model", "The river"}
	verbs      = []string{"is", "was", "will be", "has become", "seems", "remains", "looked", "felt"}
	adjectives = []string{"happy", "unbelievably fast", "quite tired", "the capital of France", "an expert in linguistics", "misunderstood", "remarkably well-preserved", "under-appreciated", "ready", "overwhelmed by requests"}
	tails      = []string{"", " today", " after the storm", " in 2024", " according to the report", ", isn't it", " despite everything", " (as expected)", " — or so they say", " at 3:45 p.m."}
	ends       = []string{".", "!", "?", "...", "", "?!", ";"}
	nouns      = []string{"time", "person", "year", "way", "day", "thing", "man", "world", "life", "hand", "part", "child", "eye", "woman", "place", "work", "week", "case", "point", "government", "company", "number", "group", "problem", "fact", "tokenization", "transformers", "embeddings", "batching", "latency", "throughput", "hyperparameter", "preprocessing", "unhappiness", "internationalization"}
	words      = []string{"the", "of", "and", "to", "in", "is", "you", "that", "it", "he", "was", "for", "on", "are", "as", "with", "his", "they", "I", "at", "be", "this", "have", "from", "or", "one", "had", "by", "word", "but", "not", "what", "all", "were", "we", "when", "your", "can", "said", "there", "use", "an", "each", "which", "she", "do", "how", "their", "if", "will", "up", "other", "about", "out", "many", "then", "them", "these", "so", "some", "her", "would", "make", "like", "him", "into", "time", "has", "look", "two", "more", "write", "go", "see", "number", "no", "way", "could", "people", "my", "than", "first", "water", "been", "call", "who", "oil", "its", "now", "find", "long", "down", "day", "did", "get", "come", "made", "may", "part", "Unbelievable", "Running", "jumped", "quickly", "Tokenizers", "don't", "it's", "U.S.", "e-mail", "state-of-the-art", "COVID-19", "iPhone", "McDonald's", "O'Neill"}

	accented  = []string{"café", "naïve", "Ångström", "résumé", "São Paulo", "Zürich", "Dvořák", "Łódź", "façade", "ÉCOLE", "İstanbul", "straße", "Æsir", "œuvre", "crème brûlée", "jalapeño", "Björk", "Ærøskøbing", "Curaçao", "piñata", "coöperate", "Škoda", "Kraków", "Ñandú", "Ça va", "fiancée", "Héloïse", "ÀÉÎÕÜ", "e\u0301te\u0301", "A\u030angstro\u0308m"}
	greekCyr  = []string{"Καλημέρα κόσμε", "Ελλάδα", "ΣΊΣΥΦΟΣ", "φιλοσοφία", "Ἀθῆναι", "Москва", "Привет, мир!", "Ёлка", "Україна", "Беларусь", "Добрый день", "Σωκράτης", "αβγδεζηθ", "Ω ω Ώ", "Ђорђе"}
	cjk       = []string{"中文分词", "日本語のテキスト", "한국어 텍스트", "Tokyo東京2020", "北京欢迎你！", "我爱自然语言处理。", "カタカナ", "ひらがな", "漢字かな交じり文", "서울특별시", "中華人民共和國", "𠀋𡈁𪚲", "豈更車", "今日は良い天気ですね", "你好，世界"}
	emoji     = []string{"😀", "🥰", "👍🏽", "👨\u200d👩\u200d👧", "🇫🇷", "❤️", "🚀🚀🚀", "☕", "🤖 beep", "I ❤ NY", "😂😂", "✨new✨", "🎉🎉 party 🎉", "©®™", "½ ¾ ²"}
	punct     = []string{"!!!", "???", "...", "—", "–", "“quoted”", "‘single’", "«guillemets»", "¿Qué?", "¡Hola!", "。", "、", "(a)", "[b]", "{c}", "<tag>", "a/b\\c", "#hashtag", "@mention", "$5", "100%", "x^2", "a|b", "~tilde~", "`code`", "__init__", "C++", "C#", "--flag=value", "key: value;", "&amp;", "*bold*", "1+1=2", "§ 3", "¶", "•", "…", "‰", "†‡"}
	numbers   = []string{"3.14159", "1,000,000", "2024-01-01", "12:30", "$5.99", "50%", "1e-9", "+1 (555) 123-4567", "0x1F", "42", "007", "3rd", "21st", "1990s", "v1.2.3", "10,5 €", "£300", "¥1000", "-273.15°C", "6'2\"", "IPv4 192.168.0.1", "2^10=1024"}
	urls      = []string{"https://example.com/path?q=1&x=2#frag", "http://www.example.org/index.html", "user@example.org", "C:\\Windows\\System32", "/usr/local/bin/infer", "ftp://files.example.net/pub", "www.google.com", "https://en.wikipedia.org/wiki/Ångström", "mailto:someone@example.com", "git@github.com:org/repo.git"}
	spaces    = []string{" ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u2003", "\u3000", "\u200b", "\u2028", "\v", "\f", "\x00", "\x7f", "\u0085", "\ufeff", "\u00ad", "\ue000", "\ufffd", "\u202f", "\u205f", "\u1680", "\u180e"}
	specials  = []string{"[MASK]", "[CLS]", "[SEP]", "[PAD]", "[UNK]", "[mask]", "[Mask]", "[MASK", "MASK]", "[ MASK ]", "[[MASK]]", "[MASK][MASK]"}
	longWords = []string{"supercalifragilisticexpialidocious", "pneumonoultramicroscopicsilicovolcanoconiosis", "Llanfairpwllgwyngyllgogerychwyrndrobwllllantysiliogogogoch", "antidisestablishmentarianism", "hippopotomonstrosesquippedaliophobia"}
)

func pick[T any](r *rand.Rand, s []T) T { return s[r.IntN(len(s))] }

func corpus(r *rand.Rand) []string {
	var lines []string
	add := func(n int, f func() string) {
		for range n {
			lines = append(lines, f())
		}
	}
	sentence := func() string {
		return pick(r, subjects) + " " + pick(r, verbs) + " " + pick(r, adjectives) + pick(r, tails) + pick(r, ends)
	}
	prose := func(n int) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteByte(' ')
			}
			w := pick(r, words)
			if r.IntN(12) == 0 {
				w = pick(r, nouns)
			}
			b.WriteString(w)
			if r.IntN(10) == 0 {
				b.WriteString(pick(r, []string{",", ".", ";", ":", "!", "?"}))
			}
		}
		return b.String()
	}
	mixed := func(pools ...[]string) func() string {
		return func() string {
			var parts []string
			for range 1 + r.IntN(6) {
				parts = append(parts, pick(r, pick(r, pools)))
			}
			return strings.Join(parts, pick(r, []string{" ", "", ", ", " - "}))
		}
	}

	// Ordinary English.
	add(500, sentence)
	add(300, func() string { return prose(5 + r.IntN(20)) })
	// Masked sentences, as fill-mask clients send them.
	add(400, func() string {
		f := strings.Fields(sentence())
		f[r.IntN(len(f))] = pick(r, []string{"[MASK]", "[MASK]", "[MASK]", "[MASK].", "([MASK])", "[MASK],", "[mask]", "x[MASK]y"})
		return strings.Join(f, " ")
	})
	add(60, mixed(specials, words, punct))
	// One pool at a time, then mixed with English.
	for _, pool := range [][]string{punct, numbers, urls, emoji, accented, greekCyr, cjk, longWords} {
		lines = append(lines, pool...)
		add(60, mixed(pool, words))
	}
	// White space and control characters between words.
	add(200, func() string {
		var b strings.Builder
		for i := range 2 + r.IntN(6) {
			if i > 0 {
				b.WriteString(pick(r, spaces))
			}
			b.WriteString(pick(r, append(words, accented...)))
		}
		return b.String()
	})
	// Word length around the 100-character limit, and beyond.
	for _, n := range []int{98, 99, 100, 101, 102, 150, 400} {
		lines = append(lines, strings.Repeat("a", n), strings.Repeat("é", n), "x "+strings.Repeat("ab", n/2)+" y")
	}
	add(40, func() string {
		w := strings.Repeat(pick(r, longWords), 1+r.IntN(4))
		return prose(3) + " " + w + " " + prose(3)
	})
	// Near-empty input.
	lines = append(lines, "", " ", "\t\n", "[MASK]", ".", "\u200b", "\x00", "\ufffd", "\xff", "a\xffb", "\xe2\x82", "\u0301", "   [SEP]   ")
	add(100, func() string {
		var b strings.Builder
		for range r.IntN(4) {
			b.WriteString(pick(r, append(spaces, "", ".", "[MASK]")))
		}
		return b.String()
	})
	// Long texts (truncation): 100 to 300 words.
	add(60, func() string { return prose(100 + r.IntN(200)) })
	add(20, mixed(accented, greekCyr, cjk, emoji, punct, numbers, urls, words))
	// Random mixtures of characters from every class above.
	var chars []rune
	for _, pool := range [][]string{accented, greekCyr, cjk, emoji, punct, numbers, spaces, specials, words} {
		for _, s := range pool {
			chars = append(chars, []rune(s)...)
		}
	}
	add(1200, func() string {
		rs := make([]rune, 1+r.IntN(40))
		for i := range rs {
			rs[i] = pick(r, chars)
		}
		return string(rs)
	})
	return lines
}
