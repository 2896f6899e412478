package cmd

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Set at build time: go build -ldflags "-X github.com/inferhq/infer/cmd.version=v0.1.0 -X github.com/inferhq/infer/cmd.commit=abc123".
var (
	version = ""
	commit  = ""
)

// Version returns infer's version and commit, from the build flags or, failing
// that, from the module's build information.
func Version() (ver, rev string) {
	ver, rev = version, commit
	if bi, ok := debug.ReadBuildInfo(); ok {
		if ver == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			ver = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && rev == "" {
				rev = s.Value
			}
		}
	}
	if ver == "" {
		ver = "dev"
	}
	if rev == "" {
		rev = "unknown"
	}
	return ver, rev
}

type versionOptions struct {
	Out io.Writer
}

func newCmdVersion(runF func(context.Context, *versionOptions) error) *cobra.Command {
	opts := &versionOptions{}
	return &cobra.Command{
		Use:   "version",
		Short: "Print infer's version",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Out = cmd.OutOrStdout()
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runVersion(cmd.Context(), opts)
		},
	}
}

func runVersion(_ context.Context, opts *versionOptions) error {
	ver, rev := Version()
	_, err := fmt.Fprintf(opts.Out, "infer %s (commit %s, %s, %s/%s)\n", ver, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return err
}

// noArgs rejects positional arguments as a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErrorf("%s takes no arguments, got %q", cmd.CommandPath(), args)
	}
	return nil
}
