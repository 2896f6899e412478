package suggest

import "testing"

func TestDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"", "abc", 3},
		{"abc", "", 3},
		{"bert-mni", "bert-mini", 1},
		{"duraton", "duration", 1},
		{"kitten", "sitting", 3},
		{"flaw", "lawn", 2},
		{"sim", "sim", 0},
	} {
		if got := Distance(tc.a, tc.b); got != tc.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := Distance(tc.b, tc.a); got != tc.want {
			t.Errorf("Distance(%q, %q) = %d, want %d (symmetric)", tc.b, tc.a, got, tc.want)
		}
	}
}

func TestClosest(t *testing.T) {
	known := []string{"sim", "bert-tiny", "bert-mini", "sim-lm", "gpt2-tiny"}
	for _, tc := range []struct{ word, want string }{
		{"bert-mni", "bert-mini"},
		{"bert-mimi", "bert-mini"},
		{"simlm", "sim-lm"},
		{"gpt2tiny", "gpt2-tiny"},
		{"sin", "sim"},
		{"bert-tiny", "bert-tiny"},
		{"gpt3", ""},               // three edits from anything
		{"nope", ""},               // nothing near
		{"bert-xiny", "bert-tiny"}, // one from tiny, two from mini: the nearest
		{"bert-tini", "bert-tiny"}, // one from both: the first in known
	} {
		if got := Closest(tc.word, known); got != tc.want {
			t.Errorf("Closest(%q) = %q, want %q", tc.word, got, tc.want)
		}
	}
	if got := Closest("x", nil); got != "" {
		t.Errorf("Closest with nothing known = %q, want \"\"", got)
	}
}
