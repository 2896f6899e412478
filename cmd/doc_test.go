package cmd

import (
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/inferhq/infer/internal/doccheck"
)

// TestDocCommands keeps the command lines of README.md and docs/ true: every
// infer command in their sh blocks parses against the real command tree,
// its subcommand, its flags and their values, and the number of its
// arguments. (scripts/try.sh runs their curl commands; see
// internal/doccheck.)
func TestDocCommands(t *testing.T) {
	cmds, err := doccheck.DocCommands("..")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, c := range cmds {
		if c.Words[0] != "infer" {
			continue
		}
		checked++
		if err := parseDocCommand(c.Words[1:]); err != nil {
			t.Errorf("%s:%d: %s: %v", c.Page, c.Line, strings.Join(c.Words, " "), err)
		}
	}
	if checked < 20 {
		t.Errorf("checked %d infer commands in README.md and docs/; the sh blocks were not read", checked)
	}
}

// parseDocCommand parses args (without "infer") as the command line would,
// without running anything.
func parseDocCommand(args []string) error {
	root := newCmdRoot(io.Discard, io.Discard)
	c, rest, err := root.Find(args)
	if err != nil {
		return err
	}
	if !c.Runnable() {
		return fmt.Errorf("%s does not run by itself", c.CommandPath())
	}
	if err := c.ParseFlags(rest); err != nil {
		return err
	}
	return c.ValidateArgs(c.Flags().Args())
}

func TestParseDocCommand(t *testing.T) {
	for _, tc := range []struct {
		line    string
		wantErr string
	}{
		{"serve --batch 8 --max-latency 5ms", ""},
		{"report results/x --baseline ci/baseline/quick", ""},
		{"models bench gpt2-tiny --batch 1,8,32 --context 256", ""},
		{"serve --batchh 8", "unknown flag: --batchh"},
		{"serve --batch eight", `invalid argument "eight"`},
		{"serv", "unknown command"},
		{"models lst", "infer models does not run by itself"},
		{"models gen", "takes a built-in model name"},
		{"serve extra", "takes no arguments"},
	} {
		err := parseDocCommand(strings.Fields(tc.line))
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("parse(%q) = %v, want nil", tc.line, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("parse(%q) = %v, want an error containing %q", tc.line, err, tc.wantErr)
		}
	}
}
