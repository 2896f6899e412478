package cmd

import (
	"context"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/inferhq/infer/server/broker"
)

type workerOptions struct {
	Broker      string
	Batching    batchOptions
	Workers     int
	Visibility  time.Duration
	MetricsAddr string
	Model       modelOptions
	Log         logOptions
	Stderr      io.Writer
}

func newCmdWorker(runF func(context.Context, *workerOptions) error) *cobra.Command {
	opts := &workerOptions{}
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run the model for infer serve --broker frontends (distributed mode)",
		Long: `Run the model for the frontends of a broker: read requests from its Redis
stream through a consumer group, compute them in dynamic batches, send each
result to the frontend that owns the request, then acknowledge it.

A batch closes when it holds --batch items or --max-latency after its first
item reached the worker, whichever comes first. Entries left unacknowledged by
a worker that died are claimed by another after --visibility-timeout; results
are keyed by request id, so a duplicate is harmless. Entries whose deadline
passed are answered without compute. Run one worker per accelerator, on any
machine that reaches Redis; frontends and workers must serve the same model.`,
		Example: `  infer serve --broker redis://127.0.0.1:6379/0 --model sim
  infer worker --broker redis://127.0.0.1:6379/0 --model sim --metrics-addr 127.0.0.1:9101
  infer worker --broker rediss://user:pass@redis.internal:6380/0 --devices cuda:0,cuda:1 --workers 2`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Stderr = cmd.ErrOrStderr()
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runWorker(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Broker, "broker", "redis://127.0.0.1:6379/0", "Redis URL: redis://[user:pass@]host:port/db, or rediss://… for TLS")
	f.IntVar(&opts.Workers, "workers", 1, "model instances in this process, each a consumer of its own")
	f.DurationVar(&opts.Visibility, "visibility-timeout", 10*time.Second, "how long an entry may stay unacknowledged with a worker before another claims it; longer than a batch takes")
	f.StringVar(&opts.MetricsAddr, "metrics-addr", "127.0.0.1:9101", "listen address of /metrics, /healthz and /readyz (empty: none)")
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
	return broker.WorkerConfig{
		Config:      broker.Config{URL: o.Broker},
		Batch:       bcfg,
		Instances:   o.Workers,
		Visibility:  o.Visibility,
		MetricsAddr: o.MetricsAddr,
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
	factory, err := opts.Model.open(opts.Workers, cfg.Logger)
	if err != nil {
		return err
	}
	defer factory.Close()
	broker.LogClientTo(cfg.Logger)
	w, err := broker.NewWorker(cfg, factory)
	if err != nil {
		return usageErrorf("--broker: %v", err)
	}
	return w.Run(ctx)
}
