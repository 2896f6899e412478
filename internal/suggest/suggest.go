// Package suggest finds the word a user probably meant: the "did you mean"
// of unknown scenario keys, model names and the like.
package suggest

// MaxDistance is the most edits (insertions, deletions, substitutions) a
// typo may hold for Closest to suggest a word: "bert-mni" → "bert-mini" is
// one, "concurency" → "concurrency" one; "gpt3" is three away from "gpt2-…"
// names and gets no suggestion.
const MaxDistance = 2

// Closest returns the word of known nearest to word, if at most MaxDistance
// edits away; else "". Of words at the same distance the first in known wins.
// Letters are compared as bytes, case included.
func Closest(word string, known []string) string {
	best, bestD := "", MaxDistance+1
	for _, k := range known {
		if d := Distance(word, k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// Distance is the Levenshtein distance between a and b: the fewest
// single-byte insertions, deletions and substitutions that turn a into b.
// It takes O(len(a)·len(b)) time and O(len(b)) memory.
func Distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
