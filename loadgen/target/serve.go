package target

import (
	"cmp"
	"strconv"
	"strings"
	"time"
)

// Serve is an `infer serve` that infer bench starts: the model and the
// settings every configuration of a sweep shares. A zero or nil field is
// left to infer serve's default. Flags renders it, with one configuration's
// Settings, as the command line; this file is the one place that knows
// infer serve's flags.
type Serve struct {
	Model string
	// SimFixed, SimPerItem and SimFailOn are the simulated encoder's
	// costs and the text it fails on (model sim).
	SimFixed, SimPerItem *time.Duration
	SimFailOn            string
	// SimStep, SimPerSeq and SimPerPrefillToken are the simulated
	// decoder's step costs (model sim-lm); KVTokens a generation server's
	// KV capacity in tokens.
	SimStep, SimPerSeq, SimPerPrefillToken *time.Duration
	KVTokens                               int
	Devices                                string
	QueueCap                               int
	Timeout                                time.Duration
	// Args are more flags, passed verbatim after the others; none may set
	// a flag that infer bench sets (SetByBench).
	Args []string
	// BlockSize is a generation server's KV block size in tokens
	// (--block-size).
	BlockSize int
	// ReadyTimeout bounds the wait for /readyz after a start.
	ReadyTimeout time.Duration
	// Replicas, when above 0, starts that many servers (each with the
	// flags above) and an `infer route` in front of them, which the load
	// goes to (RouteFlags); 0 starts one server and loads it directly.
	Replicas int
	// RouteArgs are more `infer route` flags, passed verbatim; none may
	// set a flag that infer bench sets (RouteSetByBench).
	RouteArgs []string
}

// Routed reports whether s starts replicas behind an infer route.
func (s *Serve) Routed() bool { return s.Replicas > 0 }

// Settings are the batching settings that one configuration of a sweep
// gives its server; a zero field is left to the server. A started server
// gets them as flags (Flags), an existing one through its admin API.
type Settings struct {
	// Model replaces the Serve's model (a sweep of models); a started
	// server's only: the admin API cannot change a target's model.
	Model          string
	Batch, Workers int
	MaxLatency     time.Duration
	MaxLatencySet  bool // MaxLatency is set: zero is a setting too
	Policy         string
	// MaxSeqs and MaxBatchedTokens are a generation server's, and
	// PrefixCache turns its prefix cache on or off (nil: left as it is).
	MaxSeqs, MaxBatchedTokens int
	PrefixCache               *bool
	// Buckets are the length buckets' bounds; set to none when BucketsSet
	// and empty. Only a server infer starts takes them.
	Buckets    []int
	BucketsSet bool
	// RoutePolicy is the policy of the infer route in front of the
	// replicas (Serve.Replicas); "" leaves it to infer route.
	RoutePolicy string
}

// infer serve's flags that infer bench sets or passes.
const (
	flagAddr               = "--addr"
	flagModel              = "--model"
	flagBatch              = "--batch"
	flagWorkers            = "--workers"
	flagMaxLatency         = "--max-latency"
	flagPolicy             = "--policy"
	flagBuckets            = "--buckets"
	flagMaxSeqs            = "--max-seqs"
	flagMaxBatchedTokens   = "--max-batched-tokens"
	flagSimFixed           = "--sim-fixed"
	flagSimPerItem         = "--sim-per-item"
	flagSimFailOn          = "--sim-fail-on"
	flagSimStep            = "--sim-step"
	flagSimPerSeq          = "--sim-per-seq"
	flagSimPerPrefillToken = "--sim-per-prefill-token"
	flagKVTokens           = "--kv-tokens"
	flagBlockSize          = "--block-size"
	flagPrefixCache        = "--prefix-cache"
	flagDevices            = "--devices"
	flagQueueCap           = "--queue-cap"
	flagTimeout            = "--timeout"
)

// infer route's flags that infer bench sets.
const (
	flagUpstream = "--upstream"
	// flagRoutePolicy is infer route's --policy (a flag of the same name
	// as infer serve's batching policy).
	flagRoutePolicy = "--policy"
)

// Flags returns the `infer serve` flags (without --addr, which the
// launcher adds) of s under settings set.
func (s *Serve) Flags(set Settings) []string {
	f := []string{flagModel, cmp.Or(set.Model, s.Model)}
	dur := func(flag string, d *time.Duration) {
		if d != nil {
			f = append(f, flag, d.String())
		}
	}
	dur(flagSimStep, s.SimStep)
	dur(flagSimPerSeq, s.SimPerSeq)
	dur(flagSimPerPrefillToken, s.SimPerPrefillToken)
	if s.KVTokens > 0 {
		f = append(f, flagKVTokens, strconv.Itoa(s.KVTokens))
	}
	if s.BlockSize > 0 {
		f = append(f, flagBlockSize, strconv.Itoa(s.BlockSize))
	}
	dur(flagSimFixed, s.SimFixed)
	dur(flagSimPerItem, s.SimPerItem)
	if s.SimFailOn != "" {
		f = append(f, flagSimFailOn, s.SimFailOn)
	}
	if s.Devices != "" {
		f = append(f, flagDevices, s.Devices)
	}
	if s.QueueCap > 0 {
		f = append(f, flagQueueCap, strconv.Itoa(s.QueueCap))
	}
	if s.Timeout > 0 {
		f = append(f, flagTimeout, s.Timeout.String())
	}
	f = append(f, s.Args...)
	return append(f, set.Flags()...)
}

// Flags returns the settings as infer serve's flags: those of a started
// server, or what the admin API applies to existing ones.
func (s Settings) Flags() []string {
	var f []string
	if s.Batch > 0 {
		f = append(f, flagBatch, strconv.Itoa(s.Batch))
	}
	if s.Workers > 0 {
		f = append(f, flagWorkers, strconv.Itoa(s.Workers))
	}
	if s.MaxLatencySet {
		f = append(f, flagMaxLatency, s.MaxLatency.String())
	}
	if s.Policy != "" {
		f = append(f, flagPolicy, s.Policy)
	}
	if s.MaxSeqs > 0 {
		f = append(f, flagMaxSeqs, strconv.Itoa(s.MaxSeqs))
	}
	if s.MaxBatchedTokens > 0 {
		f = append(f, flagMaxBatchedTokens, strconv.Itoa(s.MaxBatchedTokens))
	}
	if s.PrefixCache != nil {
		f = append(f, flagPrefixCache+"="+strconv.FormatBool(*s.PrefixCache))
	}
	if s.BucketsSet {
		f = append(f, flagBuckets, BucketsText(s.Buckets))
	}
	return f
}

// RouteFlags returns the `infer route` flags (without --addr) of the
// router in front of the replicas at urls, under settings set: the
// replicas, the policy, the servers' deadline (the router's must not cut
// what a replica may still answer), then RouteArgs. This is the one place
// that knows infer route's flags.
func (s *Serve) RouteFlags(set Settings, urls []string) []string {
	f := []string{flagUpstream, strings.Join(urls, ",")}
	if set.RoutePolicy != "" {
		f = append(f, flagRoutePolicy, set.RoutePolicy)
	}
	if s.Timeout > 0 {
		f = append(f, flagTimeout, s.Timeout.String())
	}
	return append(f, s.RouteArgs...)
}

// RouteSetByBench returns the infer route flag that arg sets if infer
// bench sets it itself (the replicas, the policy, the address); "" when
// arg is free.
func RouteSetByBench(arg string) string {
	for _, f := range []string{flagAddr, flagUpstream, flagRoutePolicy} {
		if arg == f || strings.HasPrefix(arg, f+"=") {
			return f
		}
	}
	return ""
}

// BucketsText renders bucket bounds as the --buckets flag takes them:
// "16,32,64", or "none".
func BucketsText(bs []int) string {
	if len(bs) == 0 {
		return "none"
	}
	parts := make([]string, len(bs))
	for i, b := range bs {
		parts[i] = strconv.Itoa(b)
	}
	return strings.Join(parts, ",")
}

// SetsFlag reports whether arg (like "--block-size" or "--block-size=32")
// sets the flag of a scenario key: "block_size" or "prefix_cache".
func SetsFlag(arg, key string) bool {
	f := map[string]string{"block_size": flagBlockSize, "prefix_cache": flagPrefixCache}[key]
	return f != "" && (arg == f || strings.HasPrefix(arg, f+"="))
}

// SetByBench returns the flag that arg (like "--batch" or "--batch=8")
// sets if infer bench sets it itself, so that a scenario's extra flags
// may not; "" when arg is free. buckets tells that the sweep sets
// --buckets, gen that the server is a generation server (whose --max-seqs
// and --max-batched-tokens the sweep sets).
func SetByBench(arg string, buckets, gen bool) string {
	set := []string{flagAddr, flagBatch, flagWorkers, flagMaxLatency, flagPolicy, flagModel}
	if buckets {
		set = append(set, flagBuckets)
	}
	if gen {
		set = append(set, flagMaxSeqs, flagMaxBatchedTokens)
	}
	for _, f := range set {
		if arg == f || strings.HasPrefix(arg, f+"=") {
			return f
		}
	}
	return ""
}
