package cmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/inferhq/infer/loadgen"
	"github.com/inferhq/infer/loadgen/record"
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
	// A bench without a scenario file (--target with no --scenario):
	// scenario.Quick's fields, and where to save the scenario built.
	Quick scenario.Quick
	Save  string

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
		Use:   "bench [SCENARIO]",
		Short: "Load-test any inference server, OpenAI-compatible or HTTP",
		Long: `Load-test an inference server. Without a scenario file, --target URL with
--api, --rate or --concurrency and --duration builds one (--save writes it
out); a scenario file (YAML, or a name in scenarios/) sweeps servers infer
starts or existing targets over endpoints, batching settings and load
levels. Streaming LLM APIs get TTFT, TPOT, ITL and E2EL with vLLM's
definitions; try one with no GPU against infer serve --model sim-lm.

Each point's record goes to RUN_DIR/results.jsonl as soon as it is done. On
a terminal a live view shows the sweep; q or Ctrl-C stops it, keeping the
points measured. The summary ends PASS, FAIL, NO VERDICT or STOPPED.

Exit codes: 0 done; 1 failure; 2 bad scenario, flags or unreachable target;
3 SLO not met, or no point to judge; 130 stopped before the end.
Guide: docs/bench.md. Every scenario key: scenarios/reference.yaml.`,
		Example: `  infer bench --target http://127.0.0.1:8000 --rate 2,4,8 --duration 10s
  infer bench --target http://10.0.0.5:8080/predict --api http --concurrency 1,8
  infer bench --target http://127.0.0.1:8000 --rate 2,4 --save my.yaml
  infer bench scenarios/quick.yaml
  infer bench -s llm-quick --no-tui --output json
  infer bench -s quick --target http://10.0.0.5:8080,http://10.0.0.6:8080
  infer bench -s policies-sim --duration 2s --warmup 500ms
  infer bench -s bert --dry-run`,
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case len(args) > 1:
				return usageErrorf("%s takes one scenario file, got %q", cmd.CommandPath(), args)
			case len(args) == 1 && cmd.Flags().Changed("scenario"):
				return usageErrorf("scenario %q and --scenario %q: give one", args[0], opts.Scenario)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Stdin, opts.Stdout, opts.Stderr = cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr()
			opts.Terminal = isTerminal(opts.Stdin) && isTerminal(opts.Stdout)
			opts.WarmupSet = cmd.Flags().Changed("warmup")
			if len(args) == 1 {
				opts.Scenario = args[0]
			}
			if opts.Scenario != "" {
				for _, name := range quickFlags {
					if cmd.Flags().Changed(name) {
						return usageErrorf("--%s builds a scenario without a file; with %s, set it in the file", name, opts.Scenario)
					}
				}
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runBench(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&opts.Scenario, "scenario", "s", "", "scenario file (YAML), or a name in scenarios/ (quick)")
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
	f.StringVar(&opts.Quick.API, "api", "completions", "without a scenario: the API to load: completions, chat (OpenAI-compatible, streamed) or http")
	f.Float64SliceVar(&opts.Quick.Rates, "rate", nil, "without a scenario: open-loop levels in requests/s (Poisson arrivals for LLM APIs), e.g. 2,4,8")
	f.IntSliceVar(&opts.Quick.Concurrency, "concurrency", nil, "without a scenario: closed-loop levels in clients, e.g. 1,8,32 (default 8)")
	f.StringVar(&opts.Quick.Model, "model", "", "without a scenario: the model name in requests (default: asked from the server)")
	f.StringVar(&opts.Quick.Prompts, "prompts", "", "without a scenario: a JSONL or ShareGPT prompt file (LLM APIs)")
	f.StringVar(&opts.Quick.Corpus, "corpus", "", "without a scenario: a file of request items, one a line (--api http)")
	f.StringVar(&opts.Save, "save", "", "without a scenario: also write the scenario built from the flags to this file")
	opts.Log.Format = "text"
	return cmd
}

// quickFlags are the flags that build a scenario without a file.
var quickFlags = []string{"api", "rate", "concurrency", "model", "prompts", "corpus", "save"}

// findScenario returns the scenario file a --scenario value names: the
// path, else a name in scenarios/ ("quick" is scenarios/quick.yaml).
func findScenario(name string) string {
	if _, err := os.Stat(name); err == nil || strings.ContainsRune(name, filepath.Separator) {
		return name
	}
	for _, p := range []string{name + ".yaml", filepath.Join("scenarios", name), filepath.Join("scenarios", name+".yaml")} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return name
}

// quickScenario builds the scenario of a bench without a file, and saves
// it when asked. Files it names are resolved from the working directory,
// and written relative to the saved file's.
func quickScenario(opts *benchOptions) (*scenario.Scenario, error) {
	q := opts.Quick
	q.Targets, q.Duration, q.Warmup = opts.Targets, opts.Duration, -1
	if opts.WarmupSet {
		q.Warmup = opts.Warmup
	}
	if opts.Duration < 0 || (opts.WarmupSet && opts.Warmup < 0) {
		return nil, usageErrorf("--duration %v, --warmup %v: must not be negative", opts.Duration, opts.Warmup)
	}
	dir := "."
	if opts.Save != "" {
		dir = filepath.Dir(opts.Save)
		for _, p := range []*string{&q.Prompts, &q.Corpus} {
			if *p == "" || *p == "builtin" || *p == "mixed" {
				continue
			}
			abs, err := filepath.Abs(*p)
			if err != nil {
				return nil, err
			}
			absDir, err := filepath.Abs(dir)
			if err != nil {
				return nil, err
			}
			if rel, err := filepath.Rel(absDir, abs); err == nil {
				*p = rel
			}
		}
	}
	src, err := q.YAML()
	if err != nil {
		return nil, usageErrorf("%v", err)
	}
	name := scenario.QuickName + ".yaml"
	if opts.Save != "" {
		name = opts.Save
	}
	sc, err := scenario.Parse(name, dir, src)
	if err != nil {
		return nil, usageErrorf("%v", err)
	}
	if opts.Save != "" {
		if err := os.WriteFile(opts.Save, src, 0o644); err != nil {
			return nil, fmt.Errorf("--save: %w", err)
		}
		fmt.Fprintf(opts.Stderr, "scenario written to %s: infer bench %s\n", opts.Save, opts.Save)
	}
	return sc, nil
}

func isTerminal(v any) bool {
	f, ok := v.(*os.File)
	return ok && tui.IsTerminal(f)
}

func runBench(ctx context.Context, opts *benchOptions) error {
	if opts.Output != "text" && opts.Output != "json" {
		return usageErrorf("--output %q: want text or json", opts.Output)
	}
	var sc *scenario.Scenario
	var err error
	switch {
	case opts.Scenario == "" && len(opts.Targets) == 0:
		return usageErrorf("name a scenario (infer bench scenarios/quick.yaml, or -s quick), or a server: infer bench --target http://127.0.0.1:8000 --rate 2,4")
	case opts.Scenario == "":
		if sc, err = quickScenario(opts); err != nil {
			return err
		}
	default:
		if sc, err = scenario.LoadFile(findScenario(opts.Scenario)); err != nil {
			return usageErrorf("%v", err)
		}
		if len(opts.Targets) > 0 {
			if sc, err = sc.WithTargets(opts.Targets); err != nil {
				return usageErrorf("%v", err)
			}
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
	// Logs go to a file in the run directory; with progress lines on
	// stderr, its warnings and errors go there too (the progress lines say
	// the rest in words).
	stderr := &lockedWriter{w: opts.Stderr}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create run directory: %w", err)
	}
	logFile, err := os.Create(filepath.Join(dir, "bench.log"))
	if err != nil {
		return fmt.Errorf("create log: %w", err)
	}
	defer logFile.Close()
	logger, err := opts.Log.logger(logFile)
	if err != nil {
		return err
	}
	if !live {
		warn := opts.Log
		if lvl, err := levelOf(warn.Level); err == nil && lvl < slog.LevelWarn {
			warn.Level = "warn"
		}
		toStderr, _ := warn.logger(stderr)
		logger = slog.New(teeHandler{logger.Handler(), toStderr.Handler()})
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
	if acc := compareSwept(ctx, record.Models(out.Records, nil), logger); len(acc) > 0 {
		// Kept with the run, so that infer report shows it too.
		out.Manifest.Accuracy = acc
		if err := record.WriteManifest(dir, &out.Manifest); err != nil {
			return err
		}
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
	case out.Interrupted || ctx.Err() != nil:
		// Stopped by q, Ctrl-C in the live view or a signal: never a
		// verdict, whatever the finished points say.
		return errStopped
	case !summary.Passed:
		return &thresholdError{verdict: summary.Verdict, unjudged: summary.Outcome == loadgen.OutcomeUnjudged}
	}
	return nil
}

// compareSwept measures the accuracy of each model of a sweep of models
// against the first (infer models compare on bounded inputs), so that the
// summary gives speed, memory and accuracy together; it returns them by
// model. A model it cannot compare (a simulated one, another task) says
// why.
func compareSwept(ctx context.Context, rows []record.ModelRow, log *slog.Logger) map[string]string {
	var acc map[string]string
	for i := 1; i < len(rows) && ctx.Err() == nil; i++ {
		start := time.Now()
		a, err := accuracy(ctx, rows[0].Model, rows[i].Model)
		if err != nil {
			a = "not measured: " + err.Error()
		}
		if acc == nil {
			acc = map[string]string{}
		}
		acc[rows[i].Model] = a
		log.Info("compared models", "a", rows[0].Model, "b", rows[i].Model, "took", time.Since(start).Round(time.Millisecond))
	}
	return acc
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

// teeHandler sends each record to every handler that takes its level.
type teeHandler []slog.Handler

func (t teeHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return slices.ContainsFunc(t, func(h slog.Handler) bool { return h.Enabled(ctx, l) })
}

func (t teeHandler) Handle(ctx context.Context, r slog.Record) error {
	var errs []error
	for _, h := range t {
		if h.Enabled(ctx, r.Level) {
			errs = append(errs, h.Handle(ctx, r.Clone()))
		}
	}
	return errors.Join(errs...)
}

func (t teeHandler) WithAttrs(as []slog.Attr) slog.Handler {
	out := make(teeHandler, len(t))
	for i, h := range t {
		out[i] = h.WithAttrs(as)
	}
	return out
}

func (t teeHandler) WithGroup(name string) slog.Handler {
	out := make(teeHandler, len(t))
	for i, h := range t {
		out[i] = h.WithGroup(name)
	}
	return out
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
