// Package corpus holds inputs for load tests: a built-in corpus of masked
// sentences and a reader for a user's own file. It uses the standard library
// only, so any package may use it.
package corpus

import (
	"bufio"
	"cmp"
	_ "embed"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

//go:generate go run gen.go

//go:embed masked.txt
var masked string

// Masked returns the built-in corpus: 640 English sentences, each with one
// or two "[MASK]" tokens, from 2 to about 60 words long (most between 10 and
// 35), in an order that mixes lengths. The sentences are made by gen.go from
// a small grammar with a fixed seed. The slice is new on every call.
func Masked() []string {
	return strings.Split(strings.TrimSuffix(masked, "\n"), "\n")
}

// Mixed returns a corpus of two lengths, for studying padding and length
// bucketing: the 96 shortest sentences of Masked (3 to 11 words) and its 32
// longest (47 to 65 words), three short then one long, repeating, so that
// any run of consecutive requests mixes them as a real workload with a few
// long inputs would. The slice is new on every call.
func Mixed() []string {
	all := Masked()
	byLen := slices.Clone(all)
	slices.SortStableFunc(byLen, func(a, b string) int { return cmp.Compare(len(strings.Fields(a)), len(strings.Fields(b))) })
	const nShort, nLong = 96, 32
	short, long := byLen[:nShort], byLen[len(byLen)-nLong:]
	out := make([]string, 0, nShort+nLong)
	for i := range nLong {
		out = append(out, short[3*i:3*i+3]...)
		out = append(out, long[i])
	}
	return out
}

// Read returns the items of r, one a line. Blank lines are skipped and a
// trailing carriage return is dropped; no other processing is done. It is an
// error for r to hold no item or a line longer than 1 MiB.
func Read(r io.Reader) ([]string, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var items []string
	for sc.Scan() {
		line := strings.TrimSuffix(sc.Text(), "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		items = append(items, line)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return nil, fmt.Errorf("no items: want one item a line")
	}
	return items, nil
}

// Load returns the items of the file at path, as Read does.
func Load(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	items, err := Read(f)
	if err != nil {
		return nil, fmt.Errorf("corpus %s: %w", path, err)
	}
	return items, nil
}
