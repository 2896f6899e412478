package target

import (
	"io"
	"testing"
)

func TestTailBuffer(t *testing.T) {
	tb := &tailBuffer{max: 3}
	io.WriteString(tb, "one\ntwo\nthr")
	io.WriteString(tb, "ee\nfour\nfive")
	if got, want := tb.String(), "three\nfour\nfive"; got != want {
		t.Errorf("tail = %q, want %q", got, want)
	}
}
