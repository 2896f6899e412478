package setting

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestRender(t *testing.T) {
	flags := func(n Name) string {
		return map[Name]string{"max seqs": "--max-seqs", "max batched tokens": "--max-batched-tokens"}[n]
	}
	for _, tc := range []struct {
		err         *Error
		words, flag string
	}{
		{Errorf("max seqs", -1, "want 1 to %d", 4096), "max seqs -1: want 1 to 4096", "--max-seqs -1: want 1 to 4096"},
		{Errorf("max batched tokens", 8, "want at least %s (%d)", Name("max seqs"), 16),
			"max batched tokens 8: want at least max seqs (16)", "--max-batched-tokens 8: want at least --max-seqs (16)"},
		{Errorf("max seqs", time.Minute, "must not be negative"), "max seqs 1m0s: must not be negative", "--max-seqs 1m0s: must not be negative"},
	} {
		if got := tc.err.Error(); got != tc.words {
			t.Errorf("Error() = %q, want %q", got, tc.words)
		}
		if got := tc.err.Render(flags); got != tc.flag {
			t.Errorf("Render(flags) = %q, want %q", got, tc.flag)
		}
	}
}

// A wrapped setting error is found with errors.As, whatever the context
// around it.
func TestAs(t *testing.T) {
	err := fmt.Errorf("onnx: %w", Errorf("threads", -2, "must not be negative"))
	var se *Error
	if !errors.As(err, &se) || se.Name != "threads" || se.Value != -2 {
		t.Fatalf("errors.As(%v) = %v, %+v", err, errors.As(err, &se), se)
	}
	// Rendering leaves the arguments of the error alone.
	e := Errorf("a", 1, "want %s", Name("b"))
	e.Render(func(Name) string { return "x" })
	if got := e.Error(); got != "a 1: want b" {
		t.Errorf("Error() after Render = %q", got)
	}
}
