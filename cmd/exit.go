package cmd

import (
	"errors"
	"fmt"
	"io"
	"strings"
)

// Exit codes of infer. This file is the one place where errors become them.
const (
	exitOK          = 0
	exitError       = 1   // the command failed
	exitUsage       = 2   // bad flags or arguments
	exitInterrupted = 130 // a second signal cut the drain short
)

// usageError marks an error in how infer was called.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usageErrorf(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// exitCode prints err, if any, and returns the exit code for it.
func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(stderr, "infer: %v\n", err)
	var ue *usageError
	if errors.As(err, &ue) || strings.HasPrefix(err.Error(), "unknown command") {
		fmt.Fprintln(stderr, "Run 'infer --help' for usage.")
		return exitUsage
	}
	return exitError
}
