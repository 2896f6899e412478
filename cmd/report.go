package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/inferhq/infer/loadgen/record"
	"github.com/inferhq/infer/report"
)

type reportOptions struct {
	Run              string
	Baseline         string
	Out              string
	FailOnRegression bool
	NoiseThroughput  float64 // percent
	NoiseP99         float64 // percent
	Stdout           io.Writer
}

func newCmdReport(runF func(context.Context, *reportOptions) error) *cobra.Command {
	opts := &reportOptions{}
	cmd := &cobra.Command{
		Use:   "report RUN_DIR",
		Short: "Draw a bench run as PNG charts and markdown, against a baseline",
		Long: `Draw the results of a bench run (the folder holding manifest.json and
results.jsonl) as PNG charts with a markdown summary: throughput and latency
against batch size per worker count, naive vs batched, throughput vs p99
latency with its knee, the server's queue vs compute time, the best
configuration under the scenario's SLO, and warnings about flagged points.

With --baseline, each point is matched with the baseline's point of the same
configuration and load, and its change of throughput, p99 and error rate is
judged against a noise band (the repeats' spread, else the --noise-* flags):
pass, warn (worse beyond noise, but on a flagged measurement) or regression.
The verdict is printed; it fails the command (exit code 4) only with
--fail-on-regression, since shared machines are noisy.

Exit codes: 0 done; 1 failure; 2 bad flags, or a folder that is not a bench
run; 4 regression against the baseline with --fail-on-regression.`,
		Example: `  infer report results/quick-20250314-092653
  infer report results/quick-20250314-092653 --baseline ci/baseline/quick \
    --out ci-report --fail-on-regression`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErrorf("%s takes one argument, the run's folder; got %d", cmd.CommandPath(), len(args))
			}
			opts.Run = args[0]
			opts.Stdout = cmd.OutOrStdout()
			if opts.NoiseThroughput < 0 || opts.NoiseP99 < 0 {
				return usageErrorf("--noise-throughput and --noise-p99 must not be negative")
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runReport(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Baseline, "baseline", "", "a run folder to compare with")
	f.StringVar(&opts.Out, "out", "", "folder to write the report into (default RUN_DIR/report)")
	f.BoolVar(&opts.FailOnRegression, "fail-on-regression", false, "exit with code 4 when the verdict against the baseline is regression")
	f.Float64Var(&opts.NoiseThroughput, "noise-throughput", report.DefaultNoiseThroughput*100, "noise band of throughput in percent, where points have no repeats")
	f.Float64Var(&opts.NoiseP99, "noise-p99", report.DefaultNoiseP99*100, "noise band of p99 latency in percent, where points have no repeats")
	return cmd
}

func runReport(ctx context.Context, opts *reportOptions) error {
	run, err := readRun("run", opts.Run)
	if err != nil {
		return err
	}
	var base *record.Run
	if opts.Baseline != "" {
		if base, err = readRun("baseline", opts.Baseline); err != nil {
			return err
		}
	}
	res, err := report.Write(ctx, run, base, opts.Out, report.Options{
		Noise: report.Noise{Throughput: opts.NoiseThroughput / 100, P99: opts.NoiseP99 / 100},
	})
	if err != nil {
		return err
	}
	printReport(opts.Stdout, res)
	if c := res.Comparison; c != nil && c.Verdict == report.Regression {
		if opts.FailOnRegression {
			return &regressionError{verdict: c.Line()}
		}
		fmt.Fprintln(opts.Stdout, "  (not failing: add --fail-on-regression to make a regression fail)")
	}
	return nil
}

// readRun reads a run folder. A folder that is missing, is no run or holds
// malformed results is bad input (exit code 2, as for bench's scenarios).
func readRun(what, dir string) (*record.Run, error) {
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil, usageErrorf("read %s %s: no such folder (infer bench writes runs under results/)", what, dir)
	}
	if _, err := os.Stat(filepath.Join(dir, record.ResultsFile)); errors.Is(err, fs.ErrNotExist) {
		return nil, usageErrorf("read %s %s: no %s there: not a bench run folder", what, dir, record.ResultsFile)
	}
	run, err := record.ReadRun(dir)
	if err != nil {
		return nil, usageErrorf("read %s: %v", what, err)
	}
	return run, nil
}

func printReport(w io.Writer, res *report.Result) {
	fmt.Fprintf(w, "report: %s\n", res.Dir)
	fmt.Fprintf(w, "  %s\n", filepath.Base(res.Summary))
	for _, c := range res.Charts {
		if c.Skipped != "" {
			fmt.Fprintf(w, "  %s: not drawn: %s\n", c.File, c.Skipped)
			continue
		}
		fmt.Fprintf(w, "  %s\n", c.File)
	}
	switch b := res.Best; {
	case b != nil && b.LLM != nil:
		fmt.Fprintf(w, "best under the SLO: %s: %.0f output tokens/s, %.2f req/s, TTFT p99 %v, TPOT p99 %v\n", b.Point.Name,
			b.LLM.OutputTokensPerS, b.LLM.RequestsPerS, msRound(b.LLM.TTFT.P99), msRound(b.LLM.TPOT.P99))
	case b != nil:
		fmt.Fprintf(w, "best under the SLO: %s: %.1f req/s, p99 %v\n", b.Point.Name, b.Throughput, b.Latency.P99.D().Round(100*time.Microsecond))
	default:
		fmt.Fprintln(w, "best under the SLO: no point qualifies (see summary.md)")
	}
	if c := res.Comparison; c != nil {
		fmt.Fprintf(w, "verdict against %s: %s\n", c.Baseline, c.Line())
	}
}

// msRound renders milliseconds as a duration to 3 significant digits.
func msRound(ms float64) time.Duration {
	return record.Round(time.Duration(ms * float64(time.Millisecond)))
}
