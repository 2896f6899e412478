// Package setting is the error of a setting out of its range. A library
// validates its settings once and names each in its own words ("max seqs");
// each front end shows the error under its own names: a flag (--max-seqs), a
// scenario key (sweep.max_seqs), a JSON field (max_seqs).
package setting

import (
	"fmt"
	"slices"
)

// Name names a setting in its library's words, e.g. "max seqs".
type Name string

// Error is a setting whose value is out of its range.
type Error struct {
	Name  Name // the setting
	Value any  // its value
	want  string
	args  []any
}

// Errorf returns the error of setting name at value. want says what the
// setting accepts, formatted with args; a Name among args is another setting,
// renamed as the first is: Errorf("max batched tokens", 8, "want at least
// %s (%d)", Name("max seqs"), 16).
func Errorf(name Name, value any, want string, args ...any) *Error {
	return &Error{Name: name, Value: value, want: want, args: args}
}

// Error says "max seqs 0: want 1 to 4096", in the library's words.
func (e *Error) Error() string { return e.Render(nil) }

// Render says what Error says with every setting called rename(name); a nil
// rename keeps the library's words.
func (e *Error) Render(rename func(Name) string) string {
	if rename == nil {
		rename = func(n Name) string { return string(n) }
	}
	args := slices.Clone(e.args)
	for i, a := range args {
		if n, ok := a.(Name); ok {
			args[i] = rename(n)
		}
	}
	return fmt.Sprintf("%s %v: ", rename(e.Name), e.Value) + fmt.Sprintf(e.want, args...)
}
