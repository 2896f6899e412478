package cmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/inferhq/infer/loadgen"
	"github.com/inferhq/infer/loadgen/scenario"
	"github.com/inferhq/infer/loadgen/target"
	"github.com/inferhq/infer/loadgen/tui"
	"github.com/inferhq/infer/report"
)

type benchOptions struct {
	Scenario   string
	Targets    []string
	Out        string
	NoTUI      bool
	Output     string
	DryRun     bool
	Report     bool          // draw the report when the run ends
	Baseline   string        // a run folder the report compares with
	AdminToken string        // the targets' admin token
	Duration   time.Duration // 0: the scenario's
	Warmup     time.Duration
	WarmupSet  bool // --warmup given: it replaces the scenario's
	Log        logOptions

	// Set from the command's streams.
	Stdin    io.Reader
	Stdout   io.Writer
	Stderr   io.Writer
	Terminal bool // stdin and stdout are a terminal: show the live view
	// Launcher starts servers; nil: this infer binary, as a child process.
	Launcher target.Launcher
}

func newCmdBench(runF func(context.Context, *benchOptions) error) *cobra.Command {
	opts := &benchOptions{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Load-test an inference server from a scenario file",
		Long: `Load-test an inference server from a YAML scenario: the server (existing URLs,
or an infer serve started for each server configuration of the sweep), the
payload, the load (open loop at a rate, or closed loop with a number of
clients), and a sweep over endpoints, batch size, workers, max latency,
policy, length buckets and load levels. See scenarios/reference.yaml for
every key.

Existing targets (target: urls, or --target) are loaded as they are, unless
the sweep sets batch, workers, max_latency or policy: then infer bench applies
each point's settings through the targets' PATCH /admin/batching (started
with infer serve --admin-token), checks that they took, and puts the targets'
own settings back at the end. The token comes from --admin-token, else the
variable named by target.admin_token_env, else INFER_ADMIN_TOKEN.

Any HTTP server can be a target: payload.expect says how its answers are
checked (by default infer's shape for infer servers, the status alone for
others), and what it cannot tell (no /readyz, /metrics or Server-Timing) is
said once per run.

Streaming LLM endpoints: with payload.api (completions or chat) the points
load OpenAI-compatible /v1/completions or /v1/chat/completions, streamed
with usage, on a generation server infer starts (server.model: sim-lm; the
sweep's endpoints continuous, static and naive are its schedulers, and
max_seqs, max_batched_tokens and max_latency its settings) or on any target
(vLLM, TGI, llama.cpp, Ollama…). Each point records TTFT, TPOT, ITL and
E2EL with vLLM's definitions, output tokens/s, goodput under the SLO's
ttft_p99, tpot_p99 and e2el_p99, failures by cause, and from an infer
server its running and waiting sequences, KV use and own TTFT; the live
view shows them as they come.

Each point's record (throughput, latency percentiles and histogram, status
counts and error causes, the server's batch sizes, CPU, validity flags; in
open loop the schedule lag and the latency from each request's intended send
time) is appended to results.jsonl in the run directory as soon as the point
is done, next to manifest.json. On a terminal a live view shows the sweep; q
or Ctrl-C stops it, keeping the finished points and the current one (marked
partial).

Exit codes: 0 done (or stopped with q); 1 failure; 2 bad scenario, flags or
unreachable target; 3 SLO thresholds not met; 130 stopped by a signal.`,
		Example: `  infer bench --scenario scenarios/quick.yaml
  infer bench -s scenarios/sim-gpu.yaml --out results/sim-gpu --no-tui
  infer bench -s scenarios/quick.yaml --target http://10.0.0.5:8080,http://10.0.0.6:8080
  INFER_ADMIN_TOKEN=… infer bench -s scenarios/policies-sim.yaml --target http://10.0.0.5:8080
  infer bench -s scenarios/policies-sim.yaml --duration 2s --warmup 500ms
  infer bench -s scenarios/bert.yaml --dry-run
  infer bench -s scenarios/llm-sim.yaml
  infer bench -s scenarios/llm-quick.yaml --output json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Stdin, opts.Stdout, opts.Stderr = cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr()
			opts.Terminal = isTerminal(opts.Stdin) && isTerminal(opts.Stdout)
			opts.WarmupSet = cmd.Flags().Changed("warmup")
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runBench(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&opts.Scenario, "scenario", "s", "", "scenario file (YAML) (required)")
	f.StringSliceVar(&opts.Targets, "target", nil, "load these servers instead of the scenario's (base URLs; repeat or separate with commas)")
	f.StringVarP(&opts.Out, "out", "o", "", "run directory (default results/<scenario>-<time>)")
	f.BoolVar(&opts.NoTUI, "no-tui", false, "print plain progress lines instead of the live view")
	f.StringVar(&opts.Output, "output", "text", "end-of-run summary on stdout: text or json")
	f.BoolVar(&opts.DryRun, "dry-run", false, "list the sweep's points and its planned time, and exit")
	f.BoolVar(&opts.Report, "report", true, "draw the report (PNG charts and summary.md, as infer report does) into RUN_DIR/report when the run ends")
	f.StringVar(&opts.Baseline, "baseline", "", "with the report, compare with this run folder (see infer report --baseline)")
	f.StringVar(&opts.AdminToken, "admin-token", "", "bearer token of the targets' admin API, for sweeps of their batching settings (default: $target.admin_token_env, else $INFER_ADMIN_TOKEN)")
	f.DurationVar(&opts.Duration, "duration", 0, "measured time of each repeat, instead of the scenario's load.duration (for a short check)")
	f.DurationVar(&opts.Warmup, "warmup", 0, "warm-up before each repeat, instead of the scenario's load.warmup")
	f.StringVar(&opts.Log.Level, "log-level", "info", "log level: debug, info, warn, error")
	opts.Log.Format = "text"
	return cmd
}

func isTerminal(v any) bool {
	f, ok := v.(*os.File)
	return ok && tui.IsTerminal(f)
}

func runBench(ctx context.Context, opts *benchOptions) error {
	if opts.Scenario == "" {
		return usageErrorf("--scenario: name a scenario file, e.g. scenarios/quick.yaml")
	}
	if opts.Output != "text" && opts.Output != "json" {
		return usageErrorf("--output %q: want text or json", opts.Output)
	}
	sc, err := scenario.LoadFile(opts.Scenario)
	if err != nil {
		return usageErrorf("%v", err)
	}
	if len(opts.Targets) > 0 {
		if sc, err = sc.WithTargets(opts.Targets); err != nil {
			return usageErrorf("%v", err)
		}
	}
	switch {
	case opts.Duration < 0:
		return usageErrorf("--duration %v: must be positive", opts.Duration)
	case opts.Duration > 0:
		sc.Load.Duration = opts.Duration
	}
	switch {
	case opts.WarmupSet && opts.Warmup < 0:
		return usageErrorf("--warmup %v: must not be negative", opts.Warmup)
	case opts.WarmupSet:
		sc.Load.Warmup = opts.Warmup
	}
	if opts.DryRun {
		return printPlan(opts.Stdout, sc)
	}
	dir := opts.Out
	if dir == "" {
		dir = loadgen.DefaultDir(sc, time.Now())
	}
	live := opts.Terminal && !opts.NoTUI
	// Logs share stderr with the progress lines, or go to a file in the run
	// directory while the live view owns the terminal.
	stderr := &lockedWriter{w: opts.Stderr}
	logOut := io.Writer(stderr)
	if live {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create run directory: %w", err)
		}
		f, err := os.Create(filepath.Join(dir, "bench.log"))
		if err != nil {
			return fmt.Errorf("create log: %w", err)
		}
		defer f.Close()
		logOut = f
	}
	logger, err := opts.Log.logger(logOut)
	if err != nil {
		return err
	}
	launcher := opts.Launcher
	if launcher == nil {
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find the infer binary to start servers: %w", err)
		}
		launcher = target.ExecLauncher{Path: self}
	}
	ver, rev := Version()
	cfg := loadgen.Config{Dir: dir, Launcher: launcher, Version: ver, Commit: rev, Logger: logger,
		AdminToken: adminToken(opts.AdminToken, sc.AdminTokenEnv)}

	out, err := runSweep(ctx, opts, sc, cfg, live, stderr)
	if err != nil {
		if errors.Is(err, target.ErrUnreachable) || errors.Is(err, target.ErrAdminAPI) {
			return usageErrorf("%v", err)
		}
		return err
	}
	summary := loadgen.Summarize(out, sc.SLO)
	if opts.Output == "json" {
		enc := json.NewEncoder(opts.Stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		err = enc.Encode(summary)
	} else {
		err = summary.WriteText(opts.Stdout)
	}
	if err != nil {
		return err
	}
	if opts.Report {
		// The summary owns stdout with --output json; the report's lines go
		// to stderr then.
		w := opts.Stdout
		if opts.Output == "json" {
			w = opts.Stderr
		}
		fmt.Fprintln(w)
		if err := runReport(context.WithoutCancel(ctx), &reportOptions{
			Run: dir, Baseline: opts.Baseline, Stdout: w,
			NoiseThroughput: report.DefaultNoiseThroughput * 100, NoiseP99: report.DefaultNoiseP99 * 100,
		}); err != nil {
			return fmt.Errorf("report: %w", err)
		}
	}
	switch {
	case !summary.Passed:
		return &thresholdError{verdict: summary.Verdict}
	case ctx.Err() != nil:
		return errInterrupted
	}
	return nil
}

// adminToken is the targets' admin token: the flag's, else the variable
// the scenario names, else INFER_ADMIN_TOKEN.
func adminToken(flag, env string) string {
	if flag != "" {
		return flag
	}
	if env != "" {
		if t := os.Getenv(env); t != "" {
			return t
		}
	}
	return os.Getenv("INFER_ADMIN_TOKEN")
}

// runSweep runs the sweep with the live view, or with progress lines on
// stderr.
func runSweep(ctx context.Context, opts *benchOptions, sc *scenario.Scenario, cfg loadgen.Config, live bool, stderr io.Writer) (*loadgen.Outcome, error) {
	if !live {
		lines := &tui.Lines{W: stderr}
		cfg.Progress = lines.Put
		return loadgen.Run(ctx, sc, cfg)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	feed := tui.NewFeed()
	cfg.Progress = feed.Put
	var (
		out    *loadgen.Outcome
		runErr error
		done   = make(chan struct{})
	)
	go func() {
		defer close(done)
		defer feed.Close()
		out, runErr = loadgen.Run(runCtx, sc, cfg)
	}()
	viewErr := tui.Run(opts.Stdin, opts.Stdout, feed, stop)
	if viewErr != nil {
		stop()
	}
	<-done
	if runErr == nil && viewErr != nil {
		cfg.Logger.Error("live view", "err", viewErr)
	}
	return out, runErr
}

// lockedWriter serializes writes from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// serverText says which server p's point runs on: the flags of the infer
// serve started, or the targets and the settings their admin API gets.
func serverText(sc *scenario.Scenario, p loadgen.Plan) string {
	if p.Serve != nil {
		return strings.Join(p.Serve, " ")
	}
	server := strings.Join(sc.Targets, ",")
	if set := p.Settings.Flags(); len(set) > 0 {
		server += " via admin API: " + strings.Join(set, " ")
	}
	return server
}

// printPlan lists the points of the sweep.
func printPlan(w io.Writer, sc *scenario.Scenario) error {
	if sc.Load.Search != nil {
		return printSearchPlan(w, sc)
	}
	plans := loadgen.Plans(sc)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tPOINT\tSERVER")
	for _, p := range plans {
		fmt.Fprintf(tw, "%d\t%s\t%s\n", p.Index, p.Point.Name, serverText(sc, p))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	groups := 0
	if len(plans) > 0 {
		groups = plans[len(plans)-1].Group + 1
	}
	order, plus := "", ""
	if sc.Load.Interleave {
		order = ", repeats interleaved"
	}
	switch {
	case sc.Server != nil:
		plus = fmt.Sprintf(", plus %d server starts", loadgen.Switches(sc, plans))
	case len(plans) > 0 && len(plans[0].Settings.Flags()) > 0:
		plus = fmt.Sprintf(", plus %d changes through the admin API", loadgen.Switches(sc, plans))
	}
	_, err := fmt.Fprintf(w, "%d points, %d server configurations%s; load time %v (%d × %v)%s\n",
		len(plans), groups, order, time.Duration(len(plans))*sc.Estimate(), len(plans), sc.Estimate(), plus)
	return err
}
