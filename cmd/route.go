package cmd

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/inferhq/infer/route"
	"github.com/inferhq/infer/server"
)

type routeOptions struct {
	Addr            string
	Upstreams       []string
	Policy          string
	HashKey         string
	HashBalance     float64
	PrefixBlock     int
	PrefixThreshold float64
	PrefixCapacity  int
	BalanceAbs      int
	BalanceRel      float64
	ScoreWeights    string
	MetricsInterval time.Duration
	HealthPath      string
	HealthInterval  time.Duration
	HealthTimeout   time.Duration
	EjectFailures   int
	EjectTime       time.Duration
	Timeout         time.Duration
	MaxBody         byteSize
	Attempts        int
	StrictRetries   bool
	ConnectTimeout  time.Duration
	WriteTimeout    time.Duration
	ResolveInterval time.Duration
	DrainTimeout    time.Duration
	MaxConns        int
	IdleTimeout     time.Duration
	AdminToken      string
	Log             logOptions
	Stderr          io.Writer
}

func newCmdRoute(runF func(context.Context, *routeOptions) error) *cobra.Command {
	d := route.DefaultConfig()
	opts := &routeOptions{MaxBody: server.DefaultMaxBody}
	cmd := &cobra.Command{
		Use:   "route",
		Short: "Spread requests over model server replicas by key, load or prefix",
		Long: `Route requests over replicas of a model server (infer serve, or any
OpenAI-compatible server: vLLM, SGLang, llama.cpp, Ollama) by --policy:
round-robin (the default, by weight), random, least-request, power-of-two,
hash (consistent hashing on --hash-key), prefix (the replica that served the
longest prefix of the prompt) or scored (queue depth, KV cache use and
prefix affinity, read from each replica's /metrics).

It proxies infer's encoder API (/naive, /batched, /v2/…) and the OpenAI API
(/v1/…); streams pass through event by event. A request is retried on
another replica only before any byte of its answer reached the client.
Replicas are health-checked and ejected on failures. docs/route.md has the
details: retries, health, metrics, the admin API, measurements.`,
		Example: `  infer serve --model sim --addr 127.0.0.1:8081 &
  infer serve --model sim --addr 127.0.0.1:8082 &
  infer route --upstream http://127.0.0.1:8081,http://127.0.0.1:8082 \
    --policy least-request
  curl -d 'Paris is the [MASK] of France.' 127.0.0.1:8080/batched

  infer route --upstream 'http://10.0.0.1:8000;w=2' \
    --upstream http://10.0.0.2:8000 --policy hash --hash-key user
  infer route --upstream dns://vllm-headless.default.svc:8000 --policy scored`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Stderr = cmd.ErrOrStderr()
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runRoute(cmd.Context(), opts)
		},
	}
	names := make([]string, len(route.Policies))
	for i, p := range route.Policies {
		names[i] = string(p)
	}
	f := cmd.Flags()
	f.StringVar(&opts.Addr, "addr", server.DefaultAddr, "listen address")
	f.StringArrayVar(&opts.Upstreams, "upstream", nil, fmt.Sprintf("replicas: http://host:port, https://host:port or dns://name:port (each address a replica, resolved every --resolve-interval), with an optional weight ';w=N' (1 to %d); comma-separated or repeated", route.MaxWeight))
	f.StringVar(&opts.Policy, "policy", string(d.Policy), "how to pick a replica: "+strings.Join(names, ", "))
	f.StringVar(&opts.HashKey, "hash-key", d.Key.String(), "hash: where the key is: header:NAME, user (OpenAI's user field) or json:a.b (a field of the JSON body); a request without one goes to the least loaded replica")
	f.Float64Var(&opts.HashBalance, "hash-balance", d.Balance, fmt.Sprintf("hash: a replica takes at most this many times the mean load, then the next on the ring takes the request (1 to %d)", route.MaxBalance))
	f.IntVar(&opts.PrefixBlock, "prefix-block", d.Prefix.BlockBytes, "prefix, scored: bytes of prompt per block of the prefix index")
	f.Float64Var(&opts.PrefixThreshold, "prefix-threshold", d.Prefix.Threshold, "prefix: the least fraction of a prompt's blocks a replica must hold to be preferred")
	f.IntVar(&opts.PrefixCapacity, "prefix-capacity", d.Prefix.Capacity, fmt.Sprintf("prefix, scored: blocks the index remembers per replica, least recently used forgotten first (about 50 bytes each; at most %d)", route.MaxIndexCapacity))
	f.IntVar(&opts.BalanceAbs, "balance-abs", d.Prefix.BalanceAbs, "prefix: loads are out of balance when the most and least loaded replicas differ by more than this many requests…")
	f.Float64Var(&opts.BalanceRel, "balance-rel", d.Prefix.BalanceRel, "prefix: …and the most loaded carries more than this many times the least")
	f.StringVar(&opts.ScoreWeights, "score-weights", fmt.Sprintf("queue=%g,kv=%g,prefix=%g", d.Score.Queue, d.Score.KV, d.Score.Prefix), "scored: weights of the queue-depth, KV-cache-use and prefix-affinity scorers (0 turns one off)")
	f.DurationVar(&opts.MetricsInterval, "metrics-interval", d.Score.Interval, fmt.Sprintf("scored: how often each replica's /metrics is read (%v to %v); a sample older than 3 intervals is not used", route.MinScrapeInterval, route.MaxScrapeInterval))
	f.StringVar(&opts.HealthPath, "health-path", "", "health check path (default: /readyz, else /health, else /v1/models, whichever the replica has)")
	f.DurationVar(&opts.HealthInterval, "health-interval", d.Health.Interval, "time between health checks of each replica")
	f.DurationVar(&opts.HealthTimeout, "health-timeout", d.Health.Timeout, "a health check that takes longer fails")
	f.IntVar(&opts.EjectFailures, "eject-failures", d.Health.Failures, "failed requests in a row (500, 502, 503, 504, deadlines, connections broken or not made in time) that eject a replica, unless it is the last that may be picked")
	f.DurationVar(&opts.EjectTime, "eject-time", d.Health.EjectBase, fmt.Sprintf("how long an ejected replica stays out at least, doubling with each ejection (up to %v)", d.Health.EjectMax))
	f.DurationVar(&opts.Timeout, "timeout", server.DefaultTimeout, "default deadline of a request, through to the end of its answer; X-Request-Timeout may shorten it, and the time left travels to the replica")
	f.Var(&opts.MaxBody, "max-body", fmt.Sprintf("largest request body (e.g. 1MiB, 512KiB, 65536; at most %dMiB)", server.MaxBodyLimit>>20))
	f.IntVar(&opts.Attempts, "attempts", d.Attempts, fmt.Sprintf("most replicas one request tries, the first included (1 to %d)", route.MaxAttempts))
	f.BoolVar(&opts.StrictRetries, "strict-retries", false, "retry only requests that never reached a replica or were refused (default: also those whose replica's connection broke before it answered, as when it crashed)")
	f.DurationVar(&opts.ConnectTimeout, "connect-timeout", d.ConnectTimeout, "bound on connecting to a replica")
	f.DurationVar(&opts.WriteTimeout, "write-timeout", d.WriteTimeout, "a client that does not take a write of its answer within this is cut, and its request to the replica cancelled")
	f.DurationVar(&opts.ResolveInterval, "resolve-interval", d.ResolveInterval, "how often dns:// upstreams are resolved again")
	f.DurationVar(&opts.DrainTimeout, "drain-timeout", server.DefaultDrainTimeout, "on SIGINT/SIGTERM, how long to finish the requests in flight")
	f.IntVar(&opts.MaxConns, "max-conns", 0, fmt.Sprintf("most open client connections; at the cap the longest idle one is closed to let a new one in (0: half the open-file limit, at most %d)", server.DefaultMaxConnsCap))
	f.DurationVar(&opts.IdleTimeout, "idle-timeout", server.DefaultIdleTimeout, "close client keep-alive connections idle for this long")
	f.StringVar(&opts.AdminToken, "admin-token", "", "enable the admin API (/admin/replicas) for this bearer token (also INFER_ADMIN_TOKEN)")
	opts.Log.bind(cmd)
	return cmd
}

// routeConfig is what infer route runs: a host, and the router on it.
type routeConfig struct {
	Host   server.Config
	Router route.Config
}

// config returns the configuration of the flags, or a usage error naming
// the flag to fix. The bounds of each setting are checked by its library's
// Validate; here only what is the command line's own (notZero).
func (o *routeOptions) config() (routeConfig, error) {
	ups, err := route.ParseUpstreams(o.Upstreams)
	if err != nil {
		return routeConfig{}, usageErrorf("--upstream %v", err)
	}
	policy, err := route.ParsePolicy(o.Policy)
	if err != nil {
		return routeConfig{}, usageErrorf("--policy: %v", err)
	}
	key, err := route.ParseKey(o.HashKey)
	if err != nil {
		return routeConfig{}, usageErrorf("--hash-key %v", err)
	}
	score, err := route.ParseWeights(o.ScoreWeights)
	if err != nil {
		return routeConfig{}, usageErrorf("--score-weights %v", err)
	}
	score.Interval = o.MetricsInterval
	if err := notZero(
		flagValue{"--hash-balance", o.HashBalance}, flagValue{"--prefix-block", o.PrefixBlock},
		flagValue{"--prefix-threshold", o.PrefixThreshold}, flagValue{"--prefix-capacity", o.PrefixCapacity},
		flagValue{"--balance-abs", o.BalanceAbs}, flagValue{"--balance-rel", o.BalanceRel},
		flagValue{"--metrics-interval", o.MetricsInterval}, flagValue{"--health-interval", o.HealthInterval},
		flagValue{"--health-timeout", o.HealthTimeout}, flagValue{"--eject-failures", o.EjectFailures},
		flagValue{"--eject-time", o.EjectTime}, flagValue{"--timeout", o.Timeout},
		flagValue{"--attempts", o.Attempts}, flagValue{"--connect-timeout", o.ConnectTimeout},
		flagValue{"--write-timeout", o.WriteTimeout}, flagValue{"--resolve-interval", o.ResolveInterval},
		flagValue{"--drain-timeout", o.DrainTimeout}, flagValue{"--idle-timeout", o.IdleTimeout},
	); err != nil {
		return routeConfig{}, err
	}
	token := o.AdminToken
	if token == "" {
		token = os.Getenv("INFER_ADMIN_TOKEN")
	}
	host := server.Config{Addr: o.Addr, Timeout: o.Timeout, MaxBody: int64(o.MaxBody), DrainTimeout: o.DrainTimeout,
		MaxConns: o.MaxConns, IdleTimeout: o.IdleTimeout, AdminToken: token}
	if err := host.Validate(); err != nil {
		return routeConfig{}, settingError(err)
	}
	cfg := route.Config{
		Upstreams: ups, Policy: policy, Key: key, Balance: o.HashBalance,
		Prefix: route.PrefixConfig{BlockBytes: o.PrefixBlock, Threshold: o.PrefixThreshold, Capacity: o.PrefixCapacity,
			BalanceAbs: o.BalanceAbs, BalanceRel: o.BalanceRel},
		Score: score,
		Health: route.HealthConfig{Path: o.HealthPath, Interval: o.HealthInterval, Timeout: o.HealthTimeout,
			Failures: o.EjectFailures, EjectBase: o.EjectTime},
		Attempts: o.Attempts, StrictRetries: o.StrictRetries, ConnectTimeout: o.ConnectTimeout,
		WriteTimeout: o.WriteTimeout, ResolveInterval: o.ResolveInterval,
	}
	if err := cfg.Validate(); err != nil {
		return routeConfig{}, settingError(err)
	}
	return routeConfig{Host: host, Router: cfg}, nil
}

func runRoute(ctx context.Context, opts *routeOptions) error {
	cfg, err := opts.config()
	if err != nil {
		return err
	}
	log, err := opts.Log.logger(opts.Stderr)
	if err != nil {
		return err
	}
	cfg.Host.Logger, cfg.Router.Logger = log, log
	rt, err := route.New(cfg.Router)
	if err != nil {
		return usageErrorf("%v", err)
	}
	ln, err := listen(opts.Addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	srv, err := server.New(cfg.Host, rt)
	if err != nil {
		return usageErrorf("%v", err)
	}
	return srv.Serve(ctx, ln)
}
