package llm

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/inferhq/infer/models/bpe"
)

// body decodes a request's body.
func body(t *testing.T, r *Request) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("body %s: %v", r.Body, err)
	}
	return m
}

// common returns the length of the common prefix of a and b.
func common(a, b []int32) int {
	n := 0
	for n < min(len(a), len(b)) && a[n] == b[n] {
		n++
	}
	return n
}

func TestWordsAreOneTokenEach(t *testing.T) {
	tok := bpe.GPT2()
	ws := words()
	if len(ws) < 150 {
		t.Fatalf("%d single-token words; want enough to tell blocks apart (150 or more)", len(ws))
	}
	for _, w := range ws {
		if tok.Count(w) != 1 || tok.Count(" "+w) != 1 {
			t.Errorf("word %q: %d tokens alone, %d after a space; want 1 and 1", w, tok.Count(w), tok.Count(" "+w))
		}
	}
	for _, n := range []int{1, 7, 16, 500} {
		text := wordText(3, uint64(n), n)
		if got := tok.Count(text); got != n {
			t.Errorf("wordText(%d words) = %d tokens", n, got)
		}
		if wordText(3, uint64(n), n) != text || wordText(4, uint64(n), n) == text && n > 1 {
			t.Errorf("wordText(%d): not a function of its seed and key", n)
		}
	}
	// Texts joined by a space tokenise to their tokens joined: blocks keep
	// their tokens whatever follows.
	a, b := wordText(1, 1, 16), wordText(1, 2, 16)
	if got, want := tok.Encode(a+" "+b), append(tok.Encode(a), tok.Encode(" "+b)...); !slices.Equal(got, want) {
		t.Errorf("joined text tokenises to %v, want %v", got, want)
	}
}

func TestSharedPrefix(t *testing.T) {
	tok := bpe.GPT2()
	cfg := PayloadConfig{API: Completions, Model: "m", Stream: true, OutputTokens: Fixed(128), Seed: 7,
		SharedPrefix: &SharedPrefix{Groups: 4, PrefixTokens: 64, QuestionTokens: Fixed(16)}}
	src, err := NewSource(cfg)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := NewSource(cfg)
	toks := make([][]int32, 12)
	for i := range toks {
		r := src.Request(uint64(i))
		if r2 := again.Request(uint64(i)); string(r.Body) != string(r2.Body) {
			t.Fatalf("request %d differs between two sources of one config", i)
		}
		m := body(t, r)
		prompt := m["prompt"].(string)
		toks[i] = tok.Encode(prompt)
		if len(toks[i]) != 80 || r.PromptTokens != 80 || r.MaxTokens != 128 || m["max_tokens"] != 128.0 {
			t.Errorf("request %d: %d tokens (said %d), max_tokens %v; want 80 and 128", i, len(toks[i]), r.PromptTokens, m["max_tokens"])
		}
	}
	for i := range toks {
		for j := range i {
			n := common(toks[i], toks[j])
			// Round robin: i and j are of one group when i ≡ j mod 4.
			switch same := i%4 == j%4; {
			case same && (n < 64 || n > 66):
				// Questions are drawn apart: a word in common at their
				// start is a 1-in-195 chance.
				t.Errorf("requests %d and %d of group %d share %d tokens; want the 64 of the prefix (and about no more: their questions are their own)", j, i, i%4, n)
			case !same && n > 2:
				t.Errorf("requests %d and %d of groups %d and %d share %d tokens; want none", j, i, j%4, i%4, n)
			}
		}
	}

	// Chat: the prefix is the system message, the question the user's.
	cfg.API, cfg.SharedPrefix.Pick = Chat, PickRandom
	src, _ = NewSource(cfg)
	groups := map[int]int{}
	for i := range 400 {
		g := cfg.SharedPrefix.Group(cfg.Seed, uint64(i))
		groups[g]++
		if i > 8 {
			continue
		}
		msgs := body(t, src.Request(uint64(i)))["messages"].([]any)
		sys, user := msgs[0].(map[string]any), msgs[1].(map[string]any)
		if sys["role"] != "system" || user["role"] != "user" || tok.Count(sys["content"].(string)) != 64 || tok.Count(user["content"].(string)) != 16 {
			t.Errorf("chat request %d: messages %v", i, msgs)
		}
	}
	for g := range 4 {
		if n := groups[g]; n < 60 || n > 140 {
			t.Errorf("random pick: group %d drew %d of 400; want about 100", g, n)
		}
	}
	for _, bad := range []SharedPrefix{
		{Groups: 0, PrefixTokens: 8, QuestionTokens: Fixed(1)}, {Groups: MaxGroups + 1, PrefixTokens: 8, QuestionTokens: Fixed(1)},
		{Groups: 1, PrefixTokens: 0, QuestionTokens: Fixed(1)}, {Groups: 1, PrefixTokens: 8},
		{Groups: 1, PrefixTokens: 8, QuestionTokens: Fixed(1), Pick: "hash"},
	} {
		cfg.SharedPrefix = &bad
		if _, err := NewSource(cfg); err == nil {
			t.Errorf("shared_prefix %+v accepted", bad)
		}
	}
}

func TestSessionBuildsConversation(t *testing.T) {
	tok := bpe.GPT2()
	cfg := PayloadConfig{API: Chat, Model: "m", Stream: true, OutputTokens: Fixed(8), Seed: 1,
		MultiTurn: &MultiTurn{Turns: 3, ThinkTime: time.Second, FirstTokens: Fixed(20), MessageTokens: Fixed(5)}}
	src, err := NewSource(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ss := src.(SessionSource)
	if ss.ThinkTime() != time.Second {
		t.Errorf("think time %v", ss.ThinkTime())
	}
	s := ss.Session(4)
	var want []any
	for turn := 1; turn <= 3; turn++ {
		r := s.Next()
		if r == nil || r.Turn != turn || !r.KeepText {
			t.Fatalf("turn %d: request %+v", turn, r)
		}
		if s.Next() != nil {
			t.Fatalf("turn %d: a next turn before the answer", turn)
		}
		msgs := body(t, r)["messages"].([]any)
		if len(msgs) != 2*turn-1 || !slices.EqualFunc(msgs[:len(want)], want, func(a, b any) bool { return a.(map[string]any)["content"] == b.(map[string]any)["content"] }) {
			t.Fatalf("turn %d: messages %v; want the conversation %v and a new message", turn, msgs, want)
		}
		last := msgs[len(msgs)-1].(map[string]any)
		n := 5
		if turn == 1 {
			n = 20
		}
		if last["role"] != "user" || tok.Count(last["content"].(string)) != n {
			t.Errorf("turn %d: new message %v; want %d tokens from the user", turn, last, n)
		}
		answer := strings.Repeat(" reply", turn)
		s.Answer(answer, turn)
		want = append(msgs, map[string]any{"role": "assistant", "content": answer})
		if wantTokens := 20 + 5*(turn-1) + (turn-1)*turn/2; r.PromptTokens != wantTokens {
			t.Errorf("turn %d: prompt tokens %d, want %d", turn, r.PromptTokens, wantTokens)
		}
	}
	if s.Next() != nil {
		t.Error("a fourth turn of three")
	}
	// Sessions differ; one session is the same every time.
	a, b := ss.Session(1).Next(), ss.Session(2).Next()
	if string(a.Body) == string(b.Body) || string(ss.Session(1).Next().Body) != string(a.Body) || string(src.Request(1).Body) != string(a.Body) {
		t.Error("sessions are not their own, or not a function of their number")
	}

	// Completions: the conversation rendered as infer's chat template.
	cfg.API = Completions
	s = mustSessions(t, cfg).Session(0)
	first := body(t, s.Next())["prompt"].(string)
	s.Answer("A1", 1)
	second := body(t, s.Next())["prompt"].(string)
	if !strings.HasPrefix(first, "user: ") || !strings.HasSuffix(first, "\nassistant:") ||
		!strings.HasPrefix(second, first+" A1\nuser: ") || !strings.HasSuffix(second, "\nassistant:") {
		t.Errorf("completion prompts %q then %q", first, second)
	}
	for _, bad := range []MultiTurn{{Turns: 0, FirstTokens: Fixed(1)}, {Turns: MaxTurns + 1, FirstTokens: Fixed(1), MessageTokens: Fixed(1)},
		{Turns: 2, FirstTokens: Fixed(1)}, {Turns: 1}, {Turns: 1, FirstTokens: Fixed(1), ThinkTime: -time.Second}} {
		cfg.MultiTurn = &bad
		if _, err := NewSource(cfg); err == nil {
			t.Errorf("multi_turn %+v accepted", bad)
		}
	}
}

func mustSessions(t *testing.T, cfg PayloadConfig) SessionSource {
	t.Helper()
	src, err := NewSource(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return src.(SessionSource)
}

func TestNewSourceOneWorkload(t *testing.T) {
	sp := &SharedPrefix{Groups: 1, PrefixTokens: 4, QuestionTokens: Fixed(1)}
	mt := &MultiTurn{Turns: 1, FirstTokens: Fixed(4)}
	if _, err := NewSource(PayloadConfig{SharedPrefix: sp, MultiTurn: mt}); err == nil {
		t.Error("two workloads accepted")
	}
	if _, err := NewSource(PayloadConfig{SharedPrefix: sp, Extra: map[string]any{"prompt": "x"}}); err == nil {
		t.Error("an extra field that sets the prompt accepted")
	}
}
