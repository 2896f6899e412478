package cmd

import (
	"context"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/inferhq/infer/server"
)

type serveOptions struct {
	Addr         string
	Batching     batchOptions
	Workers      int
	QueueCap     int
	AdmitLate    bool
	Timeout      time.Duration
	MaxBody      byteSize
	MaxItems     int
	DrainTimeout time.Duration
	AdminToken   string
	CacheSize    int
	CacheTTL     time.Duration
	Model        modelOptions
	Log          logOptions
	Broker       string
	Stderr       io.Writer
}

func newCmdServe(runF func(context.Context, *serveOptions) error) *cobra.Command {
	opts := &serveOptions{MaxBody: 1 << 20}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve a model through naive and dynamically batched endpoints",
		Long: `Serve a model over HTTP through two endpoints side by side:

  POST /naive    each request runs alone on its own model instance
  POST /batched  requests are queued and run in dynamic batches

plus KServe v2 (POST /v2/models/{name}/infer), /healthz, /readyz and /metrics.
A batch closes when it holds --batch items or --max-latency after its first
item arrived, whichever comes first.`,
		Example: `  infer serve --batch 64 --max-latency 100ms
  infer serve --model sim --sim-fixed 4ms --sim-per-item 0.1ms --workers 4
  curl -d 'Paris is the [MASK] of France.' 127.0.0.1:8080/batched`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Stderr = cmd.ErrOrStderr()
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runServe(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Addr, "addr", "127.0.0.1:8080", "listen address")
	opts.Batching.bind(cmd)
	f.IntVar(&opts.Workers, "workers", 1, "model instances behind the batched endpoint")
	f.IntVar(&opts.QueueCap, "queue-cap", 0, "most items waiting before requests are refused with 429 (0: 16 × batch × workers)")
	f.DurationVar(&opts.Timeout, "timeout", 30*time.Second, "default deadline of a request; X-Request-Timeout may shorten it")
	f.Var(&opts.MaxBody, "max-body", "largest request body (e.g. 1MiB, 512KiB, 65536)")
	f.IntVar(&opts.MaxItems, "max-items", 0, "most items in one request (0: 256, or the queue capacity if smaller)")
	f.DurationVar(&opts.DrainTimeout, "drain-timeout", 30*time.Second, "on SIGINT/SIGTERM, how long to finish admitted requests")
	f.BoolVar(&opts.AdmitLate, "admit-late", false, "admit requests even when the backlog predicts they will miss their deadline (default: refuse at once with 429)")
	f.StringVar(&opts.AdminToken, "admin-token", "", "enable PATCH /admin/batching for this bearer token (also INFER_ADMIN_TOKEN)")
	f.IntVar(&opts.CacheSize, "cache-size", 0, "results kept in a cache for identical inputs (0: no cache)")
	f.DurationVar(&opts.CacheTTL, "cache-ttl", 0, "how long a cached result stays valid (0: until evicted)")
	f.StringVar(&opts.Broker, "broker", "", "Redis URL (redis://[user:pass@]host:port/db, rediss://…): /batched admits into its stream for infer worker processes (--queue-cap bounds the stream)")
	opts.Model.bind(cmd)
	opts.Log.bind(cmd)
	return cmd
}

func (o *serveOptions) config() (server.Config, error) {
	bcfg, err := o.Batching.config()
	if err != nil {
		return server.Config{}, err
	}
	switch {
	case o.Workers < 1:
		return server.Config{}, usageErrorf("--workers %d: must be at least 1", o.Workers)
	case o.QueueCap < 0:
		return server.Config{}, usageErrorf("--queue-cap %d: must not be negative", o.QueueCap)
	case o.Timeout <= 0:
		return server.Config{}, usageErrorf("--timeout %v: must be positive", o.Timeout)
	case o.MaxItems < 0:
		return server.Config{}, usageErrorf("--max-items %d: must not be negative", o.MaxItems)
	case o.DrainTimeout <= 0:
		return server.Config{}, usageErrorf("--drain-timeout %v: must be positive", o.DrainTimeout)
	case o.CacheSize < 0 || o.CacheTTL < 0:
		return server.Config{}, usageErrorf("--cache-size and --cache-ttl must not be negative")
	}
	bcfg.QueueCap, bcfg.AdmitLate = o.QueueCap, o.AdmitLate
	adminToken := o.AdminToken
	if adminToken == "" {
		adminToken = os.Getenv("INFER_ADMIN_TOKEN")
	}
	ver, _ := Version()
	cfg := server.Config{
		Addr:         o.Addr,
		Batch:        bcfg,
		Workers:      o.Workers,
		Timeout:      o.Timeout,
		MaxBody:      int64(o.MaxBody),
		MaxItems:     o.MaxItems,
		DrainTimeout: o.DrainTimeout,
		AdminToken:   adminToken,
		CacheSize:    o.CacheSize,
		CacheTTL:     o.CacheTTL,
		Version:      ver,
	}
	if err := cfg.Validate(); err != nil {
		return server.Config{}, usageErrorf("%v", err)
	}
	return cfg, nil
}

func runServe(ctx context.Context, opts *serveOptions) error {
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
	if err := useBroker(&cfg, opts.Broker, factory); err != nil {
		return err
	}
	srv, err := server.New(cfg, factory)
	if err != nil {
		return usageErrorf("%v", err)
	}
	return srv.Run(ctx)
}
