package corpus

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestMasked(t *testing.T) {
	got := Masked()
	if len(got) != 640 {
		t.Fatalf("len(Masked()) = %d, want 640", len(got))
	}
	lengths := make([]int, len(got))
	seen := make(map[string]bool)
	for i, s := range got {
		if !strings.Contains(s, "[MASK]") {
			t.Errorf("line %d %q has no [MASK]", i+1, s)
		}
		if seen[s] {
			t.Errorf("line %d %q is a duplicate", i+1, s)
		}
		seen[s] = true
		lengths[i] = len(strings.Fields(s))
	}
	slices.Sort(lengths)
	if lo, med, hi := lengths[0], lengths[len(lengths)/2], lengths[len(lengths)-1]; lo > 4 || med < 12 || med > 30 || hi < 50 {
		t.Errorf("words per sentence: min %d, median %d, max %d; want min ≤ 4, median in 12…30, max ≥ 50", lo, med, hi)
	}
	// The first lines already mix lengths, so a short run sees a spread.
	first := got[:40]
	short, long := 0, 0
	for _, s := range first {
		switch n := len(strings.Fields(s)); {
		case n <= 10:
			short++
		case n >= 25:
			long++
		}
	}
	if short == 0 || long == 0 {
		t.Errorf("first 40 lines: %d short, %d long; want both", short, long)
	}
	got[0] = "changed"
	if Masked()[0] == "changed" {
		t.Error("Masked() shares its slice between calls")
	}
}

func TestRead(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []string
		wantErr string
	}{
		{in: "a\nb\n", want: []string{"a", "b"}},
		{in: "a\r\n\r\n  \nb", want: []string{"a", "b"}},
		{in: " keep  spaces \n", want: []string{" keep  spaces "}},
		{in: "\n\n", wantErr: "no items"},
		{in: strings.Repeat("x", 2<<20), wantErr: "too long"},
	} {
		got, err := Read(strings.NewReader(tc.in))
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Read(%.20q) error = %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("Read(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "items.txt")
	if err := os.WriteFile(path, []byte("one [MASK]\ntwo\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Load(path)
	if err != nil || !slices.Equal(got, []string{"one [MASK]", "two"}) {
		t.Errorf("Load = %q, %v", got, err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.txt")); err == nil {
		t.Error("Load of a missing file succeeded")
	}
	empty := filepath.Join(t.TempDir(), "empty.txt")
	os.WriteFile(empty, nil, 0o644)
	if _, err := Load(empty); err == nil || !strings.Contains(err.Error(), empty) {
		t.Errorf("Load(empty) error = %v, want one naming the file", err)
	}
}

func TestMixed(t *testing.T) {
	got := Mixed()
	if len(got) != 128 {
		t.Fatalf("len(Mixed()) = %d, want 128", len(got))
	}
	masked := Masked()
	for i, s := range got {
		if !slices.Contains(masked, s) {
			t.Errorf("item %d %q is not from Masked()", i, s)
		}
		n := len(strings.Fields(s))
		if long := i%4 == 3; long != (n >= 40) || (!long && n > 12) {
			t.Errorf("item %d has %d words; want every fourth ≥ 40 words, the others ≤ 12", i, n)
		}
	}
	got[0] = "changed"
	if Mixed()[0] == "changed" {
		t.Error("Mixed() shares its slice between calls")
	}
}
