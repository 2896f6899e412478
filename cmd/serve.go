package cmd

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/registry"
	"github.com/inferhq/infer/server"
	"github.com/inferhq/infer/server/batch"
	"github.com/inferhq/infer/server/broker"
	"github.com/inferhq/infer/server/encoder"
	"github.com/inferhq/infer/server/generate"
	"github.com/inferhq/infer/server/openai"
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
	MaxConns     int
	PerAddr      int
	HeaderTime   time.Duration
	IdleTimeout  time.Duration
	AdminToken   string
	CacheSize    int
	CacheTTL     time.Duration
	Model        modelOptions
	Gen          genOptions
	Log          logOptions
	Broker       string
	Stderr       io.Writer
}

func newCmdServe(runF func(context.Context, *serveOptions) error) *cobra.Command {
	opts := &serveOptions{MaxBody: server.DefaultMaxBody}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve a model: batched endpoints or an OpenAI-compatible API",
		Long: `Serve a model over HTTP. An encoder gets two endpoints side by side: POST
/naive (each request alone) and POST /batched (dynamic batches of at most
--batch items, none waiting longer than --max-latency; --policy decides
within that), plus KServe v2, /healthz, /readyz, /metrics, and OpenAI's
/v1/embeddings for a model with an embedding head (use-lite, the default).

A generative model (sim-lm, a built-in GPT-2 decoder, stories260k, a llama2.c
checkpoint .bin, or an export by path) is served through an OpenAI-compatible
API, so any OpenAI client or LLM benchmark works by base URL
(http://ADDR/v1): /v1/completions and /v1/chat/completions with continuous
batching, streamed with "stream": true, the same under /static/v1 and
/naive/v1. --model sim-lm is a fake OpenAI server with known timing.

Overload is refused at once with 429; SIGINT or SIGTERM drains (past
--drain-timeout the requests still running are answered 503 and serve exits
5), a second signal exits. Guide: docs/serving.md, docs/generation.md.`,
		Example: `  infer serve --batch 64 --max-latency 100ms
  infer serve --model sim --sim-fixed 4ms --sim-per-item 0.1ms --workers 4
  curl -d 'Paris is the [MASK] of France.' 127.0.0.1:8080/batched

  infer serve --model sim-lm --max-seqs 32
  curl -N 127.0.0.1:8080/v1/completions \
    -d '{"prompt": "Once upon a time", "max_tokens": 32, "stream": true}'
  curl 127.0.0.1:8080/static/v1/chat/completions \
    -d '{"messages": [{"role": "user", "content": "Hi"}]}'

  infer serve --model gpt2-tiny --kv-tokens 8192
  optimum-cli export onnx --model gpt2 gpt2-onnx/   # elsewhere, then:
  infer serve --model ./gpt2-onnx/`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Stderr = cmd.ErrOrStderr()
			opts.Model.taskSet(cmd)
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runServe(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	maxBody := byteSize(server.MaxBodyLimit)
	f.StringVar(&opts.Addr, "addr", server.DefaultAddr, "listen address")
	opts.Batching.bind(cmd)
	f.IntVar(&opts.Workers, "workers", encoder.DefaultWorkers, fmt.Sprintf("model instances behind the batched endpoint (at most %d)", batch.WorkersLimit))
	f.IntVar(&opts.QueueCap, "queue-cap", 0, fmt.Sprintf("most items waiting before requests are refused with 429 (0: %d × batch × workers; at most %d; decoder models: requests waiting per path, 0: %d × --max-seqs)",
		batch.DefaultQueueBatches, batch.QueueCapLimit, generate.DefaultQueueSeqs))
	f.DurationVar(&opts.Timeout, "timeout", server.DefaultTimeout, "default deadline of a request; X-Request-Timeout may shorten it")
	f.Var(&opts.MaxBody, "max-body", fmt.Sprintf("largest request body (e.g. 1MiB, 512KiB, 65536; at most %s)", maxBody.String()))
	f.IntVar(&opts.MaxItems, "max-items", 0, fmt.Sprintf("most items in one request (0: %d, or the queue capacity if smaller)", encoder.DefaultMaxItems))
	f.DurationVar(&opts.DrainTimeout, "drain-timeout", server.DefaultDrainTimeout, "on SIGINT/SIGTERM, how long to finish admitted requests")
	f.IntVar(&opts.MaxConns, "max-conns", 0, fmt.Sprintf("most open client connections; at the cap the one quiet for longest (idle, or without a complete request header yet) is closed to let a new one in (0: half the open-file limit, at most %d)", server.DefaultMaxConnsCap))
	f.IntVar(&opts.PerAddr, "max-conns-per-addr", 0, "most open connections from one client IP address; more are refused (0: no cap per address)")
	f.DurationVar(&opts.HeaderTime, "header-timeout", server.DefaultHeaderTimeout, "close a connection that has not sent a complete request header within this")
	f.DurationVar(&opts.IdleTimeout, "idle-timeout", server.DefaultIdleTimeout, "close keep-alive connections idle for this long")
	f.BoolVar(&opts.AdmitLate, "admit-late", false, "turn deadline-aware scheduling off: admit requests the backlog says will miss their deadline, and compute items whose batch would end after it (default: refuse at once with 429, drop before compute)")
	f.StringVar(&opts.AdminToken, "admin-token", "", "enable PATCH /admin/batching for this bearer token (also INFER_ADMIN_TOKEN)")
	f.IntVar(&opts.CacheSize, "cache-size", 0, fmt.Sprintf("results kept in a cache for identical inputs (0: no cache; at most %d)", encoder.CacheSizeLimit))
	f.DurationVar(&opts.CacheTTL, "cache-ttl", 0, "how long a cached result stays valid (0: until evicted)")
	f.StringVar(&opts.Broker, "broker", "", "Redis URL (redis://[user:pass@]host:port/db, rediss://…): /batched admits into its stream for infer worker processes (--queue-cap bounds the stream)")
	opts.Model.bind(cmd)
	opts.Model.bindTokenizer(cmd)
	f.Lookup("model").Usage = "model: sim (simulated accelerator), a built-in encoder (" + nameList(isEncoder) + "), a generative model served through the OpenAI API: sim-lm (simulated) or a built-in decoder (" +
		nameList(isDecoder) + ")" + twinsNote(func(registry.Entry) bool { return true }) + ", or a path: an .onnx file (an encoder, or a decoder with a KV cache), a decoder export directory or a llama2.c checkpoint (.bin)"
	opts.Gen.bind(cmd)
	opts.Log.bind(cmd)
	groupFlags(cmd,
		[2]string{"Model", "model tokenizer task max-seq-len truncate"},
		[2]string{"Network", "addr timeout max-body max-items max-conns max-conns-per-addr header-timeout idle-timeout drain-timeout admin-token"},
		[2]string{"Encoder batching", "batch max-latency policy buckets no-isolation workers queue-cap admit-late cache-size cache-ttl"},
		[2]string{"Generation (decoder models)", "max-seqs max-batched-tokens kv-tokens gen-policy stream-interval prefix-cache block-size"},
		[2]string{"Simulation (sim, sim-lm)", "sim-fixed sim-per-item sim-fail-on sim-step sim-per-seq sim-per-prefill-token"},
		[2]string{"ONNX Runtime", "devices threads ort-lib"},
		[2]string{"Distributed", "broker"},
	)
	return cmd
}

// serveConfig is what infer serve runs: a host, and the encoder API on it
// (for an encoder model).
type serveConfig struct {
	Host    server.Config
	Encoder encoder.Config
}

// config returns the configuration of the flags, or a usage error. The
// bounds of each setting are checked by its library's Validate; here only
// what is the command line's own: a flag set to 0 where the library would
// take 0 for its default.
func (o *serveOptions) config() (serveConfig, error) {
	bcfg, err := o.Batching.config()
	if err != nil {
		return serveConfig{}, err
	}
	if o.Workers < 1 {
		return serveConfig{}, usageErrorf("--workers %d: must be at least 1", o.Workers)
	}
	if err := notZero(flagValue{"--timeout", o.Timeout}, flagValue{"--drain-timeout", o.DrainTimeout},
		flagValue{"--idle-timeout", o.IdleTimeout}, flagValue{"--header-timeout", o.HeaderTime}); err != nil {
		return serveConfig{}, err
	}
	if o.Broker != "" {
		if err := (broker.Config{URL: o.Broker}).Validate(); err != nil {
			return serveConfig{}, usageErrorf("--broker: %v", err)
		}
	}
	bcfg.QueueCap, bcfg.AdmitLate = o.QueueCap, o.AdmitLate
	adminToken := o.AdminToken
	if adminToken == "" {
		adminToken = os.Getenv("INFER_ADMIN_TOKEN")
	}
	ver, _ := Version()
	cfg := serveConfig{
		Host: server.Config{
			Addr:            o.Addr,
			Timeout:         o.Timeout,
			MaxBody:         int64(o.MaxBody),
			DrainTimeout:    o.DrainTimeout,
			MaxConns:        o.MaxConns,
			MaxConnsPerAddr: o.PerAddr,
			HeaderTimeout:   o.HeaderTime,
			IdleTimeout:     o.IdleTimeout,
			AdminToken:      adminToken,
		},
		Encoder: encoder.Config{
			Batch:     bcfg,
			Workers:   o.Workers,
			MaxItems:  o.MaxItems,
			CacheSize: o.CacheSize,
			CacheTTL:  o.CacheTTL,
			Version:   ver,
		},
	}
	if err := cfg.Host.Validate(); err != nil {
		return serveConfig{}, settingError(err)
	}
	if err := cfg.Encoder.Validate(); err != nil {
		return serveConfig{}, usageErrorf("%v", err)
	}
	return cfg, nil
}

func runServe(ctx context.Context, opts *serveOptions) error {
	cfg, err := opts.config()
	if err != nil {
		return err
	}
	log, err := opts.Log.logger(opts.Stderr)
	if err != nil {
		return err
	}
	cfg.Host.Logger, cfg.Encoder.Logger = log, log
	m, err := opts.Model.lookup(serveModels)
	if err != nil {
		return err
	}
	// The address is bound before the model loads: a busy port is found
	// in a moment, not after minutes of loading.
	ln, err := listen(opts.Addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	if m.Kind == registry.Decoder {
		return serveDecoder(ctx, opts, cfg.Host, m, ln)
	}
	factory, err := opts.Model.openEncoder(m, opts.Workers, log)
	if err != nil {
		return err
	}
	defer factory.Close()
	if err := useBroker(&cfg.Encoder, opts.Broker, factory); err != nil {
		return err
	}
	svc, err := encoder.New(cfg.Encoder, factory)
	if err != nil {
		return usageErrorf("%v", err)
	}
	srv, err := server.New(cfg.Host, svc)
	if err != nil {
		return usageErrorf("%v", err)
	}
	return srv.Serve(ctx, ln)
}

// serveDecoder serves the generative model m through the OpenAI-compatible
// API. Every flag is checked before the model is loaded, or generated on
// first use.
func serveDecoder(ctx context.Context, opts *serveOptions, cfg server.Config, m registry.Model, ln net.Listener) error {
	if opts.Broker != "" {
		return usageErrorf("--broker: distributed mode serves encoder models only, not %s", opts.Model.Model)
	}
	ecfg, err := opts.decoderEngine(m)
	if err != nil {
		return err
	}
	// The engines of infer serve's three paths share one session per
	// device, and one path computes at a time in the common case: each
	// session gets all the threads.
	f, err := opts.Model.openDecoder(m, opts.Gen.KVTokens, opts.Gen.simLM(), cfg.Logger)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := ecfg.CheckModel(f.Decoder()); err != nil {
		return settingError(err)
	}
	cfg.Logger.Info("model", "name", describe(f.Info()))
	svc, err := openai.New(openai.Config{Engine: ecfg, StreamInterval: opts.Gen.StreamInterval, Logger: cfg.Logger}, f)
	if err != nil {
		return usageErrorf("%v", err)
	}
	srv, err := server.New(cfg, svc)
	if err != nil {
		return usageErrorf("%v", err)
	}
	return srv.Serve(ctx, ln)
}

// decoderEngine returns the engine configuration of the flags, with the
// engine defaults of m for those left at 0, checked against what is known
// of m before it is loaded (its context).
func (opts *serveOptions) decoderEngine(m registry.Model) (generate.Config, error) {
	ecfg, err := opts.Gen.engine(m.Engine, opts.Batching.MaxLatency, opts.QueueCap, opts.AdmitLate)
	if err != nil {
		return generate.Config{}, err
	}
	if err := ecfg.CheckModel(models.DecoderInfo{Context: m.Context}); err != nil {
		return generate.Config{}, settingError(err)
	}
	return ecfg, nil
}
