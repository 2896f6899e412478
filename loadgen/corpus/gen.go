//go:build ignore

// gen writes masked.txt, the built-in corpus: masked sentences from a small
// grammar, drawn with a fixed seed so that the file is reproducible. Run it
// with `go generate ./loadgen/corpus`.
package main

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
)

// short sentences, written by hand: a mask in a few words.
var short = []string{
	"Paris is the [MASK] of France.",
	"The cat sat on the [MASK].",
	"She drinks [MASK] every morning.",
	"Water boils at one hundred [MASK].",
	"He plays the [MASK] in a band.",
	"The sky is [MASK] today.",
	"I left my keys in the [MASK].",
	"Dogs like to chase [MASK].",
	"The train was [MASK] again.",
	"We ate [MASK] for dinner.",
	"My phone battery is [MASK].",
	"The meeting starts at [MASK].",
	"Rome was not built in a [MASK].",
	"Bees make [MASK].",
	"Close the [MASK], please.",
	"The [MASK] is ringing.",
	"Snow fell all [MASK].",
	"He forgot his [MASK] again.",
	"The baby is [MASK].",
	"Turn left at the [MASK].",
	"The river flows to the [MASK].",
	"Tea or [MASK]?",
	"The shop opens on [MASK].",
	"Her favourite colour is [MASK].",
	"The printer is out of [MASK].",
	"They won the [MASK] yesterday.",
	"The soup needs more [MASK].",
	"Birds fly [MASK] in winter.",
	"The [MASK] barked all night.",
	"I need a new [MASK].",
	"Thank you for the [MASK].",
	"The moon orbits the [MASK].",
	"Please pass the [MASK].",
	"The light turned [MASK].",
	"Happy [MASK] to you!",
	"The bread is still [MASK].",
	"He speaks three [MASK].",
	"The lake froze [MASK].",
	"Our flight was [MASK].",
	"The [MASK] of Japan is Tokyo.",
}

var (
	subjects = []string{
		"the old fisherman", "my younger sister", "a committee of local farmers", "the new software team",
		"the museum curator", "our neighbours across the street", "a small group of tourists", "the school principal",
		"the night shift nurse", "the city council", "a retired history teacher", "the youngest player on the team",
		"the bakery owner", "two engineers from the north office", "the mayor", "a journalist from the capital",
		"my grandfather", "the students in the back row", "the lighthouse keeper", "a volunteer at the shelter",
		"the orchestra", "the delivery driver", "the research group", "an elderly couple", "the airline",
	}
	verbs = []string{
		"repaired", "painted", "discussed", "ignored", "carried", "measured", "described", "praised", "delivered",
		"cancelled", "photographed", "rebuilt", "questioned", "explained", "sold", "borrowed", "tested", "moved",
		"cleaned", "reviewed", "planted", "announced", "studied", "opened", "returned",
	}
	objects = []string{
		"the broken fence", "a long report about water quality", "the annual budget", "an old wooden boat",
		"the results of the survey", "a basket of fresh apples", "the plans for the new bridge", "the heavy boxes",
		"a letter from the bank", "the map of the valley", "the rules of the game", "a painting of the harbour",
		"the roof of the church", "the old railway station", "a recipe for plum cake", "the damaged server",
		"the children's library", "a stack of unpaid bills", "the wedding photographs", "the garden behind the school",
	}
	places = []string{
		"in the harbour", "near the train station", "at the edge of the forest", "behind the town hall",
		"on the third floor", "by the river", "in a small village in the mountains", "outside the stadium",
		"at the corner of the market square", "in the basement of the library", "on the island", "at the airport",
	}
	times = []string{
		"last winter", "early on monday morning", "after the storm", "during the summer holidays", "before sunrise",
		"two weeks ago", "in the middle of the night", "at the end of the year", "on a rainy afternoon",
		"shortly after lunch", "every other weekend", "for the first time in years",
	}
	links = []string{
		"because", "although", "and then", "while", "so", "but", "even though", "just before", "until", "since",
	}
	clauses = []string{
		"the weather was unusually cold", "nobody had asked them to", "the shops were already closed",
		"the old road had been washed away", "everyone else was asleep", "the price had doubled", "the phone kept ringing",
		"the children were waiting outside", "the manager was on holiday", "the instructions were missing",
		"the first attempt had failed", "the guests arrived early", "the river had flooded the fields",
		"the lights went out across the town", "a crowd gathered to watch", "the deadline was the next day",
	}
)

func main() {
	r := rand.New(rand.NewPCG(2024, 4))
	pick := func(xs []string) string { return xs[r.IntN(len(xs))] }
	var lines []string
	lines = append(lines, short...)
	seen := map[string]bool{}
	for _, s := range short {
		seen[s] = true
	}
	for len(lines) < 640 {
		// A sentence of one to five clauses: most are short or medium, a
		// few run long, as real inputs do.
		n := 1
		switch x := r.IntN(100); {
		case x >= 95:
			n = 5
		case x >= 85:
			n = 4
		case x >= 65:
			n = 3
		case x >= 35:
			n = 2
		}
		var b strings.Builder
		b.WriteString(pick(subjects) + " " + pick(verbs) + " " + pick(objects))
		if r.IntN(2) == 0 {
			b.WriteString(" " + pick(places))
		}
		if r.IntN(2) == 0 {
			b.WriteString(" " + pick(times))
		}
		for i := 1; i < n; i++ {
			if r.IntN(2) == 0 {
				b.WriteString(" " + pick(links) + " " + pick(clauses))
			} else {
				b.WriteString(", and " + pick(subjects) + " " + pick(verbs) + " " + pick(objects))
				if r.IntN(3) == 0 {
					b.WriteString(" " + pick(places))
				}
			}
		}
		words := strings.Fields(b.String())
		// Mask one word (two in a long sentence), never a short function word.
		masks := 1
		if len(words) > 30 && r.IntN(3) == 0 {
			masks = 2
		}
		for m := 0; m < masks; {
			i := r.IntN(len(words))
			w := strings.TrimRight(words[i], ",")
			if len(w) < 4 || w == "[MASK]" {
				continue
			}
			words[i] = "[MASK]" + words[i][len(w):]
			m++
		}
		s := strings.Join(words, " ")
		s = strings.ToUpper(s[:1]) + s[1:] + "."
		if !seen[s] {
			seen[s] = true
			lines = append(lines, s)
		}
	}
	// Interleave the short ones so that a prefix of the corpus has a spread.
	r.Shuffle(len(lines), func(i, j int) { lines[i], lines[j] = lines[j], lines[i] })
	f, err := os.Create("masked.txt")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	w := bufio.NewWriter(f)
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	if err := w.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := f.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
