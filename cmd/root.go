// Package cmd is the command line of infer: cobra wiring only. Each command is
// an options struct, newCmdX(runF) binding flags into it, and runX(ctx, opts)
// with no cobra inside. Errors become exit codes in exit.go.
package cmd

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// Main runs the command line and returns the process exit code. The first
// SIGINT or SIGTERM cancels the command's context (servers drain); a second
// one exits at once.
func Main() int {
	ctx, stop := signalContext()
	defer stop()
	root := newCmdRoot(os.Stdout, os.Stderr)
	return exitCode(execute(ctx, root), root.ErrOrStderr())
}

// execute runs the command line; a usage error learns which command it is
// about, so that its hint names that command's help.
func execute(ctx context.Context, root *cobra.Command) error {
	cmd, err := root.ExecuteContextC(ctx)
	var ue *usageError
	if cmd != nil && errors.As(err, &ue) && ue.cmd == "" {
		ue.cmd = cmd.CommandPath()
	}
	return err
}

func signalContext() (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		if _, ok := <-sigs; !ok {
			return
		}
		cancel()
		if _, ok := <-sigs; ok {
			os.Exit(exitInterrupted)
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(sigs)
		cancel()
	}
}

func newCmdRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "infer",
		Short: "Serve models (OpenAI-compatible LLM API), load-test any server, report",
		Long: `infer serves a model through a naive and a dynamically batched endpoint side
by side, and LLMs through an OpenAI-compatible API with continuous batching;
it load-tests any inference server and draws the results. Guide: docs/.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &usageError{msg: unknownFlag(c, flagError(err)), cmd: c.CommandPath()}
	})
	cobra.AddTemplateFunc("flagUsages", flagUsages)
	root.SetUsageTemplate(usageTemplate)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(newCmdServe(nil), newCmdModels(), newCmdVersion(nil))
	root.AddCommand(newCmdBench(nil))
	root.AddCommand(newCmdReport(nil))
	root.AddCommand(newCmdWorker(nil))
	root.AddCommand(newCmdRoute(nil))
	return root
}

// logOptions are the logging flags shared by long-running commands.
type logOptions struct {
	Level  string
	Format string
}

func (o *logOptions) bind(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.Level, "log-level", "info", "log level: debug, info, warn, error")
	cmd.Flags().StringVar(&o.Format, "log-format", "text", "log format: text or json")
}

// levelOf parses a --log-level.
func levelOf(s string) (slog.Level, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(s)); err != nil {
		return 0, usageErrorf("--log-level %q: want debug, info, warn or error", s)
	}
	return level, nil
}

func (o logOptions) logger(w io.Writer) (*slog.Logger, error) {
	level, err := levelOf(o.Level)
	if err != nil {
		return nil, err
	}
	hopts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(o.Format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, hopts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, hopts)), nil
	default:
		return nil, usageErrorf("--log-format %q: want text or json", o.Format)
	}
}
