package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/inferhq/infer/server"
	"github.com/inferhq/infer/server/broker"
)

type workerOptions struct {
	Broker      string
	Batching    batchOptions
	Workers     int
	Visibility  time.Duration
	MetricsAddr string
	// MetricsAddrSet is set when --metrics-addr was given: then it must be
	// free. Left at its default, the next free port is taken instead.
	MetricsAddrSet bool
	Model          modelOptions
	Log            logOptions
	Stderr         io.Writer
}

// defaultMetricsAddr is --metrics-addr's default; metricsPorts is how many
// ports from it a worker tries when the flag is not given, so that the
// workers of one host (one per accelerator) need no flag each.
const (
	defaultMetricsAddr = "127.0.0.1:9101"
	metricsPorts       = 64
)

func newCmdWorker(runF func(context.Context, *workerOptions) error) *cobra.Command {
	opts := &workerOptions{}
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run the model for infer serve --broker frontends (distributed)",
		Long: `Run the model for the frontends of a broker: read requests from its Redis
stream through a consumer group, compute them in dynamic batches (formed as
in infer serve: --batch, --max-latency, --policy), send each result to the
frontend that owns the request, then acknowledge it.

Entries left unacknowledged by a worker that died are claimed by another
after --visibility-timeout; results are keyed by request id, so a duplicate
is harmless. Run one worker per accelerator, on any machine that reaches
Redis; a frontend with no live worker of its model answers 503 no_workers.
Without --metrics-addr, each worker takes the first free port from 9101 up.
Guide: docs/distributed.md.`,
		Example: `  infer serve --broker redis://127.0.0.1:6379/0 --model sim
  infer worker --broker redis://127.0.0.1:6379/0 --model sim  # metrics: :9101
  infer worker --broker redis://127.0.0.1:6379/0 --model sim  # a second: :9102
  infer worker --broker rediss://user:pass@redis.internal:6380/0 \
    --devices cuda:0,cuda:1 --workers 2 --metrics-addr :9101`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Stderr = cmd.ErrOrStderr()
			opts.MetricsAddrSet = cmd.Flags().Changed("metrics-addr")
			opts.Model.taskSet(cmd)
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runWorker(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Broker, "broker", broker.DefaultURL, "Redis URL: redis://[user:pass@]host:port/db, or rediss://… for TLS")
	f.IntVar(&opts.Workers, "workers", broker.DefaultInstances, "model instances in this process, each a consumer of its own")
	f.DurationVar(&opts.Visibility, "visibility-timeout", broker.DefaultVisibility, "how long an entry may stay unacknowledged with a worker before another claims it; longer than a batch takes")
	f.StringVar(&opts.MetricsAddr, "metrics-addr", defaultMetricsAddr, fmt.Sprintf("listen address of /metrics, /healthz and /readyz (empty: none); left out, the first free port from 9101 to %d", 9101+metricsPorts-1))
	opts.Batching.bind(cmd)
	opts.Model.bind(cmd)
	opts.Log.bind(cmd)
	return cmd
}

func (o *workerOptions) config() (broker.WorkerConfig, error) {
	bcfg, err := o.Batching.config()
	if err != nil {
		return broker.WorkerConfig{}, err
	}
	switch {
	case o.Broker == "":
		return broker.WorkerConfig{}, usageErrorf("--broker: a Redis URL is needed")
	case o.Workers < 1:
		return broker.WorkerConfig{}, usageErrorf("--workers %d: must be at least 1", o.Workers)
	case o.Visibility <= 0:
		return broker.WorkerConfig{}, usageErrorf("--visibility-timeout %v: must be positive", o.Visibility)
	}
	if err := (broker.Config{URL: o.Broker}).Validate(); err != nil {
		return broker.WorkerConfig{}, usageErrorf("--broker: %v", err)
	}
	return broker.WorkerConfig{
		Config:     broker.Config{URL: o.Broker},
		Batch:      bcfg,
		Instances:  o.Workers,
		Visibility: o.Visibility,
	}, nil
}

func runWorker(ctx context.Context, opts *workerOptions) error {
	cfg, err := opts.config()
	if err != nil {
		return err
	}
	if cfg.Logger, err = opts.Log.logger(opts.Stderr); err != nil {
		return err
	}
	ln, err := listenMetrics(opts.MetricsAddr, !opts.MetricsAddrSet)
	if err != nil {
		return err
	}
	served := false
	defer func() {
		if ln != nil && !served {
			ln.Close()
		}
	}()
	factory, err := opts.Model.open(workerModels, opts.Workers, cfg.Logger)
	if err != nil {
		return err
	}
	defer factory.Close()
	broker.LogClientTo(cfg.Logger)
	w, err := broker.NewWorker(cfg, factory)
	if err != nil {
		return usageErrorf("--broker: %v", err)
	}
	if ln == nil { // --metrics-addr "": no HTTP at all
		return w.Run(ctx, func() {})
	}
	// The worker mounts on the host that serve's APIs use: /metrics,
	// /healthz and /readyz on ln.
	host, err := server.New(server.Config{Logger: cfg.Logger}, w)
	if err != nil {
		return err
	}
	served = true
	return host.Serve(ctx, ln)
}

// listenMetrics listens on addr, or returns nil for an empty addr. With
// next, a port in use makes it try the following ones, up to metricsPorts
// in all.
func listenMetrics(addr string, next bool) (net.Listener, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err == nil || !next || !errors.Is(err, syscall.EADDRINUSE) {
		return ln, metricsAddrError(addr, err)
	}
	host, port, perr := net.SplitHostPort(addr)
	first, aerr := strconv.Atoi(port)
	if perr != nil || aerr != nil {
		return nil, metricsAddrError(addr, err)
	}
	for p := first + 1; p < first+metricsPorts && p <= 65535; p++ {
		if ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p))); err == nil || !errors.Is(err, syscall.EADDRINUSE) {
			return ln, metricsAddrError(addr, err)
		}
	}
	return nil, fmt.Errorf("--metrics-addr: ports %d to %d on %s are all in use: give this worker a free --metrics-addr, or an empty one for none",
		first, first+metricsPorts-1, host)
}

func metricsAddrError(addr string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.EADDRINUSE):
		return fmt.Errorf("--metrics-addr %s: %w: another worker on this host? Give each its own --metrics-addr, or leave the flag out to take the next free port", addr, err)
	default:
		return fmt.Errorf("--metrics-addr %s: %w", addr, err)
	}
}
