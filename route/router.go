package route

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inferhq/infer/internal/setting"
	"github.com/inferhq/infer/server"
)

// Config configures a Router. Zero values take the documented defaults;
// Upstreams is required.
type Config struct {
	// Upstreams are the replicas, listed or found by DNS.
	Upstreams []Upstream
	// Policy picks a replica per request. Default RoundRobin.
	Policy Policy
	// Key is where hash finds a request's key. Default the header
	// X-Routing-Key.
	Key KeySource
	// Balance is hash's load bound c: a replica takes at most c × the mean
	// load (weighted), 1 to MaxBalance. Default DefaultBalance.
	Balance float64
	// Prefix configures the prefix index and the prefix policy.
	Prefix PrefixConfig
	// Score configures the scored policy.
	Score ScoreConfig
	// Health configures health checks and ejection.
	Health HealthConfig
	// Attempts is the most replicas one request tries, the first
	// included: a request is retried on another replica only while no
	// byte of an answer has reached the client, and only when the replica
	// could not be reached, refused it (429, 503), or (unless
	// StrictRetries) its connection broke before any byte of an answer
	// came back, as when it crashed. 1 to MaxAttempts. Default 3.
	Attempts int
	// StrictRetries retries only requests that never reached a replica
	// or were refused. By default a request whose replica's connection
	// broke before it answered is retried too: the endpoints routed are
	// computations without side effects, so a retry costs only the work
	// done twice, and requests queued on a replica that crashes are not
	// lost.
	StrictRetries bool
	// ConnectTimeout bounds connecting to a replica. Default 2s.
	ConnectTimeout time.Duration
	// WriteTimeout bounds each write of an answer to the client: a client
	// that stops reading is cut after it, and its request to the replica
	// cancelled. Default 10s.
	WriteTimeout time.Duration
	// ResolveInterval is how often DNS upstreams are resolved again.
	// Default 5s.
	ResolveInterval time.Duration
	// Resolver resolves DNS upstreams. Default net.DefaultResolver.
	Resolver Resolver
	// Transport carries requests to replicas. Default: proxied requests
	// to http:// replicas are written and read on the handler's own
	// goroutine (see h1); the rest go through an http.Transport tuned for
	// many long-lived streams (see newTransport).
	Transport http.RoundTripper
	// Logger receives replica state changes; nil discards them.
	Logger *slog.Logger

	rnd rng              // tests seed it; default math/rand/v2
	now func() time.Time // tests set it; default time.Now
}

// Resolver resolves a DNS upstream's name; *net.Resolver is one.
type Resolver interface {
	LookupHost(ctx context.Context, host string) ([]string, error)
}

// Defaults and bounds of Config.
const (
	MaxAttempts        = 8
	MaxBalance         = 100
	MinResolveInterval = 100 * time.Millisecond
)

func (c Config) withDefaults() Config {
	if c.Policy == "" {
		c.Policy = RoundRobin
	}
	if c.Key.Header == "" && len(c.Key.Field) == 0 {
		c.Key.Header = DefaultKeyHeader
	}
	if c.Balance == 0 {
		c.Balance = DefaultBalance
	}
	c.Prefix = c.Prefix.withDefaults()
	c.Score = c.Score.withDefaults()
	c.Health = c.Health.withDefaults()
	if c.Attempts <= 0 {
		c.Attempts = 3
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = 2 * time.Second
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 10 * time.Second
	}
	if c.ResolveInterval <= 0 {
		c.ResolveInterval = 5 * time.Second
	}
	if c.Resolver == nil {
		c.Resolver = net.DefaultResolver
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.rnd == nil {
		c.rnd = defaultRNG
	}
	if c.now == nil {
		c.now = time.Now
	}
	return c
}

// The names of Config's settings in errors (*setting.Error), its own and
// those of PrefixConfig, ScoreConfig and HealthConfig.
const (
	SettingBalance         setting.Name = "hash balance"
	SettingAttempts        setting.Name = "attempts"
	SettingConnectTimeout  setting.Name = "connect timeout"
	SettingWriteTimeout    setting.Name = "write timeout"
	SettingResolveInterval setting.Name = "resolve interval"
	SettingPrefixBlock     setting.Name = "prefix block bytes"
	SettingPrefixMaxBlocks setting.Name = "prefix blocks per prompt"
	SettingPrefixCapacity  setting.Name = "prefix index capacity"
	SettingPrefixThreshold setting.Name = "prefix threshold"
	SettingBalanceAbs      setting.Name = "balance threshold"
	SettingBalanceRel      setting.Name = "relative balance threshold"
	SettingScoreWeight     setting.Name = "score weight"
	SettingMetricsInterval setting.Name = "metrics interval"
	SettingSampleMaxAge    setting.Name = "sample max age"
	SettingHealthPath      setting.Name = "health check path"
	SettingHealthInterval  setting.Name = "health check interval"
	SettingHealthTimeout   setting.Name = "health check timeout"
	SettingEjectFailures   setting.Name = "failures to eject"
	SettingEjectTime       setting.Name = "ejection time"
	SettingEjectMax        setting.Name = "longest ejection"
)

// Validate reports settings out of their bounds, a setting's error a
// *setting.Error naming it (Setting…). Zero values stand for their
// defaults.
func (c Config) Validate() error {
	if len(c.Upstreams) == 0 {
		return errors.New("no upstream: list at least one replica")
	}
	if len(c.Upstreams) > MaxReplicas {
		return fmt.Errorf("%d upstreams: at most %d", len(c.Upstreams), MaxReplicas)
	}
	for _, u := range c.Upstreams {
		if u.URL == nil || u.Weight < 0 || u.Weight > MaxWeight {
			return fmt.Errorf("upstream %v: want a URL and a weight 1 to %d", u.URL, MaxWeight)
		}
	}
	if c.Policy != "" {
		if _, err := ParsePolicy(string(c.Policy)); err != nil {
			return err
		}
	}
	switch {
	case c.Balance != 0 && (c.Balance < 1 || c.Balance > MaxBalance):
		return setting.Errorf(SettingBalance, c.Balance, "want 1 to %d (a replica takes at most that many times the mean load)", MaxBalance)
	case c.Attempts < 0 || c.Attempts > MaxAttempts:
		return setting.Errorf(SettingAttempts, c.Attempts, "want 1 to %d", MaxAttempts)
	case c.ConnectTimeout < 0:
		return setting.Errorf(SettingConnectTimeout, c.ConnectTimeout, "must not be negative")
	case c.WriteTimeout < 0:
		return setting.Errorf(SettingWriteTimeout, c.WriteTimeout, "must not be negative")
	case c.ResolveInterval < 0 || c.ResolveInterval > 0 && c.ResolveInterval < MinResolveInterval:
		return setting.Errorf(SettingResolveInterval, c.ResolveInterval, "at least %v", MinResolveInterval)
	}
	if err := c.Prefix.validate(); err != nil {
		return err
	}
	if err := c.Score.validate(); err != nil {
		return err
	}
	return c.Health.validate()
}

// Router spreads requests over replicas by a policy. It is a service of
// the host (package server): Mount registers the encoder and OpenAI
// endpoints, its metrics, readiness and admin API; Run checks replicas'
// health and follows DNS until the host drains.
type Router struct {
	cfg       Config
	limits    server.Limits // the host's: each request's deadline and largest body
	log       *slog.Logger
	picker    Picker
	index     *prefixIndex // nil unless the policy reads prompts
	m         *metrics
	transport http.RoundTripper // health checks, /metrics, /v1/models
	carrier   http.RoundTripper // proxied requests: h1 unless Config.Transport
	h1        *h1               // nil with Config.Transport
	track     tracker

	replicas atomic.Pointer[[]*Replica] // sorted by name

	mu      sync.Mutex // guards the fields below
	sources [][]*Replica
	running context.Context // Run's, nil before
	wg      sync.WaitGroup  // the replicas' loops
	stops   map[*Replica]context.CancelFunc
}

// New returns a router over cfg's upstreams. Nothing is checked or
// resolved before Run.
func New(cfg Config) (*Router, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	rt := &Router{cfg: cfg, log: cfg.Logger, m: newMetrics(), stops: map[*Replica]context.CancelFunc{}}
	rt.transport, rt.carrier = cfg.Transport, cfg.Transport
	if cfg.Transport == nil {
		tr := newTransport(cfg.ConnectTimeout)
		rt.h1 = newH1(tr, cfg.ConnectTimeout)
		rt.transport, rt.carrier = tr, rt.h1
	}
	if cfg.Policy.needsPrompt(cfg) {
		rt.index = newPrefixIndex(cfg.Prefix)
	}
	switch cfg.Policy {
	case RoundRobin:
		rt.picker = newRoundRobin()
	case Random:
		rt.picker = random{cfg.rnd}
	case LeastRequest:
		rt.picker = leastRequest{cfg.rnd}
	case PowerOfTwo:
		rt.picker = powerOfTwo{cfg.rnd}
	case Hash:
		rt.picker = newHashPicker(cfg.Balance, cfg.rnd)
	case Prefix:
		rt.picker = &prefixPicker{cfg: cfg.Prefix, index: rt.index, rnd: cfg.rnd}
	case Scored:
		rt.picker = &scoredPicker{cfg: cfg.Score, index: rt.index, rnd: cfg.rnd, now: cfg.now}
	}
	rt.sources = make([][]*Replica, len(cfg.Upstreams))
	for i, u := range cfg.Upstreams {
		if !u.DNS {
			rt.sources[i] = []*Replica{rt.newReplica(hostPort(u.URL), u.URL, max(1, u.Weight))}
		}
	}
	rt.mu.Lock()
	rt.membersChanged(nil)
	rt.mu.Unlock()
	return rt, nil
}

// newTransport is the transport to replicas for health checks, reads of
// /metrics and /v1/models, and proxied requests over https: connections
// kept for reuse (as many streams may end at once), no compression of its
// own (bodies pass through as they are), HTTP/1.1, answers' headers
// bounded as a client's are; the same bounds as h1's.
func newTransport(connect time.Duration) *http.Transport {
	return &http.Transport{
		DialContext:            dialer(connect).DialContext,
		MaxIdleConnsPerHost:    maxIdlePerReplica,
		IdleConnTimeout:        idleConnTimeout,
		TLSHandshakeTimeout:    connect,
		DisableCompression:     true,
		MaxResponseHeaderBytes: maxAnswerHeader,
		ReadBufferSize:         connBuffer,
		WriteBufferSize:        connBuffer,
	}
}

func (rt *Router) newReplica(name string, u *url.URL, weight int) *Replica {
	r := newReplica(name, u, weight)
	r.m = rt.m.forReplica(name)
	return r
}

// Replicas returns the replicas, sorted by name.
func (rt *Router) Replicas() []*Replica { return *rt.replicas.Load() }

// candidates returns the replicas that may be picked, less those tried.
func (rt *Router) candidates(buf []*Replica, tried []*Replica) []*Replica {
	for _, r := range rt.Replicas() {
		if r.eligible() && !slices.Contains(tried, r) {
			buf = append(buf, r)
		}
	}
	return buf
}

// Ready returns nil when at least one replica may be picked, else why not.
func (rt *Router) Ready() error {
	if rt.track.isDraining() {
		return errors.New("draining")
	}
	all := rt.Replicas()
	for _, r := range all {
		if r.eligible() {
			return nil
		}
	}
	return rt.noReplica(all)
}

// noReplica says why no replica may be picked.
func (rt *Router) noReplica(all []*Replica) error {
	if len(all) == 0 {
		return errors.New("no replica is ready: no replica found (the DNS upstreams resolved to no address)")
	}
	var counts [3]int
	drained := 0
	for _, r := range all {
		if r.Drained() {
			drained++
		} else {
			counts[r.State()]++
		}
	}
	var parts []string
	for s, n := range counts {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, State(s)))
		}
	}
	if drained > 0 {
		parts = append(parts, fmt.Sprintf("%d drained", drained))
	}
	return fmt.Errorf("no replica is ready (%d known: %s)", len(all), strings.Join(parts, ", "))
}

// collectors are the router's metrics, registered on the host's registry.
func (rt *Router) collectors() []prometheus.Collector {
	cs := rt.m.collectors()
	if rt.index != nil {
		cs = append(cs,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "infer_route_prefix_blocks",
				Help: "Prompt blocks the prefix index remembers, all replicas together."}, func() float64 {
				n := 0
				for _, r := range rt.Replicas() {
					n += rt.index.size(r)
				}
				return float64(n)
			}),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "infer_route_prefix_evictions_total",
				Help: "Prompt blocks the prefix index forgot to stay within its capacity."}, func() float64 {
				return float64(rt.index.evictions.Load())
			}))
	}
	return cs
}

// Run checks the replicas' health (and, for the scored policy, reads their
// load) and follows the DNS upstreams until ctx is done. It calls ready
// once every replica has been checked once. When ctx ends, the router
// refuses new requests with 503 and Run returns once the requests in
// flight have finished.
func (rt *Router) Run(ctx context.Context, ready func()) error {
	rt.mu.Lock()
	if rt.running != nil {
		rt.mu.Unlock()
		return errors.New("route: Run called twice")
	}
	rt.running = ctx
	for _, r := range rt.Replicas() {
		rt.startLoops(r)
	}
	rt.mu.Unlock()

	var loops sync.WaitGroup // DNS, and the reaping of idle connections
	if rt.h1 != nil {
		loops.Go(func() { rt.h1.reap(ctx) })
	}
	for i, u := range rt.cfg.Upstreams {
		if u.DNS {
			rt.resolve(ctx, i, u)
			loops.Go(func() { rt.resolveLoop(ctx, i, u) })
		}
	}
	rt.awaitChecked(ctx)
	if ready != nil {
		ready()
	}
	<-ctx.Done()
	<-rt.track.drain()
	loops.Wait()
	if rt.h1 != nil {
		rt.h1.closeIdle(time.Time{})
	}
	rt.mu.Lock()
	for _, stop := range rt.stops {
		stop()
	}
	rt.mu.Unlock()
	rt.wg.Wait()
	return nil
}

// awaitChecked waits until every replica has been checked once, or a
// check's timeout has passed.
func (rt *Router) awaitChecked(ctx context.Context) {
	deadline := time.Now().Add(rt.cfg.Health.Timeout + 100*time.Millisecond)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if !slices.ContainsFunc(rt.Replicas(), func(r *Replica) bool { return r.State() == StateUnknown }) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// startLoops starts r's health checks (and load reads); rt.mu is held.
func (rt *Router) startLoops(r *Replica) {
	if rt.running == nil || rt.running.Err() != nil {
		return
	}
	ctx, cancel := context.WithCancel(rt.running)
	rt.stops[r] = cancel
	rt.wg.Go(func() { rt.probeLoop(ctx, r) })
	if rt.cfg.Policy == Scored {
		rt.wg.Go(func() { rt.scrapeLoop(ctx, r) })
	}
}

// membersChanged publishes the union of the sources as the replica set;
// rt.mu is held. Replicas gone from it stop being checked and picked;
// their requests in flight finish.
func (rt *Router) membersChanged(old []*Replica) {
	var all []*Replica
	seen := map[string]bool{}
	for _, src := range rt.sources {
		for _, r := range src {
			if !seen[r.name] && len(all) < MaxReplicas {
				seen[r.name] = true
				all = append(all, r)
			}
		}
	}
	slices.SortFunc(all, func(a, b *Replica) int { return strings.Compare(a.name, b.name) })
	if s, ok := rt.picker.(replicaSetter); ok {
		s.SetReplicas(all)
	}
	rt.replicas.Store(&all)
	for _, r := range old {
		if !slices.Contains(all, r) {
			r.removed.Store(true)
			if stop := rt.stops[r]; stop != nil {
				stop()
				delete(rt.stops, r)
			}
			if !seen[r.name] {
				rt.m.drop(r.name)
			}
		}
	}
	for _, r := range all {
		if _, ok := rt.stops[r]; !ok {
			rt.startLoops(r)
		}
	}
}

// tracker counts the requests in flight, so that a drain can wait for
// them.
type tracker struct {
	mu       sync.Mutex
	n        int
	draining bool
	idle     chan struct{} // closed when draining and n == 0
}

// enter admits a request, unless draining.
func (t *tracker) enter() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.draining {
		return false
	}
	t.n++
	return true
}

func (t *tracker) leave() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n--; t.n == 0 && t.draining {
		close(t.idle)
	}
}

func (t *tracker) isDraining() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.draining
}

// drain refuses new requests; the channel closes when none is in flight.
func (t *tracker) drain() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.draining {
		t.draining = true
		t.idle = make(chan struct{})
		if t.n == 0 {
			close(t.idle)
		}
	}
	return t.idle
}

// DefaultConfig returns the configuration a zero Config stands for (less
// its upstreams): the one place the defaults are written, which the
// command line's flags show.
func DefaultConfig() Config { return Config{}.withDefaults() }
