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
	exitUsage       = 2   // bad flags or arguments (bench: also a bad scenario or an unreachable target)
	exitThresholds  = 3   // bench: the scenario's SLO thresholds were not met
	exitRegression  = 4   // report --fail-on-regression: a regression against the baseline
	exitInterrupted = 130 // a second signal cut the drain short
)

// usageError marks an error in how infer was called.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usageErrorf(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// thresholdError reports SLO thresholds not met.
type thresholdError struct{ verdict string }

func (e *thresholdError) Error() string { return "SLO not met: " + e.verdict }

// regressionError reports a regression against a baseline.
type regressionError struct{ verdict string }

func (e *regressionError) Error() string { return "regression against the baseline: " + e.verdict }

// errInterrupted reports a command stopped by a signal after cleaning up.
var errInterrupted = errors.New("interrupted")

// exitCode prints err, if any, and returns the exit code for it.
func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(stderr, "infer: %v\n", err)
	var te *thresholdError
	if errors.As(err, &te) {
		return exitThresholds
	}
	var re *regressionError
	if errors.As(err, &re) {
		return exitRegression
	}
	if errors.Is(err, errInterrupted) {
		return exitInterrupted
	}
	var ue *usageError
	if errors.As(err, &ue) || strings.HasPrefix(err.Error(), "unknown command") {
		fmt.Fprintln(stderr, "Run 'infer --help' for usage.")
		return exitUsage
	}
	return exitError
}
