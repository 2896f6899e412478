package cmd

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/inferhq/infer/server"
)

// Exit codes of infer. This file is the one place where errors become
// them; docs/bench.md#exit-codes is the one place that tells users.
const (
	exitOK           = 0
	exitError        = 1   // the command failed
	exitUsage        = 2   // bad flags or arguments (bench: also a bad scenario or an unreachable target)
	exitThresholds   = 3   // bench: the SLO thresholds were not met, or no complete point could be judged
	exitRegression   = 4   // report --fail-on-regression: a regression against the baseline
	exitDrainTimeout = 5   // serve, worker: the drain timeout passed; the requests still running were answered 503 draining
	exitInterrupted  = 130 // bench stopped before its end (q, Ctrl-C, a signal); any command: a second signal cut the drain short
)

// usageError marks an error in how infer was called.
type usageError struct {
	msg string
	cmd string // the command path whose help the hint names; "" for infer
}

func (e *usageError) Error() string { return e.msg }

func usageErrorf(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// thresholdError reports SLO thresholds not met, or not judged.
type thresholdError struct {
	verdict  string
	unjudged bool // no complete point to judge
}

func (e *thresholdError) Error() string {
	if e.unjudged {
		return "no SLO verdict: " + e.verdict
	}
	return "SLO not met: " + e.verdict
}

// regressionError reports a regression against a baseline.
type regressionError struct{ verdict string }

func (e *regressionError) Error() string { return "regression against the baseline: " + e.verdict }

// errInterrupted reports a command stopped by a signal after cleaning up.
var errInterrupted = errors.New("interrupted")

// errStopped reports a bench stopped before its last point.
var errStopped = fmt.Errorf("stopped before the end: no verdict (%w)", errInterrupted)

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
	if errors.Is(err, server.ErrDrainTimeout) {
		return exitDrainTimeout
	}
	var ue *usageError
	if errors.As(err, &ue) || strings.HasPrefix(err.Error(), "unknown command") {
		cmd := "infer"
		if ue != nil && ue.cmd != "" {
			cmd = ue.cmd
		}
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd)
		return exitUsage
	}
	return exitError
}

// flagError rewrites pflag's message for a value it could not parse
// (`invalid argument "abc" for "--batch" flag: strconv.ParseInt: parsing
// "abc": invalid syntax`) into one that says what the flag wants.
func flagError(err error) string {
	var ive *pflag.InvalidValueError
	if !errors.As(err, &ive) {
		return err.Error()
	}
	f := ive.GetFlag()
	var want string
	switch f.Value.Type() {
	case "int", "int64", "uint", "uint64":
		want = "want a whole number"
		var ne *strconv.NumError
		if errors.As(err, &ne) && errors.Is(ne.Err, strconv.ErrRange) {
			want = "out of range"
		}
	case "float64":
		want = "want a number"
	case "duration":
		want = "want a duration like 250ms, 2s or 1m"
	case "bool":
		want = "want true or false"
	default:
		if cause := errors.Unwrap(ive); cause != nil {
			want = cause.Error()
		} else {
			want = err.Error()
		}
	}
	return fmt.Sprintf("--%s %q: %s", f.Name, ive.GetValue(), want)
}
