package loadgen

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/inferhq/infer/loadgen/record"
)

// Plan is one point of a sweep, ready to run.
type Plan struct {
	Index int
	// Point is the point's configuration. Targets are filled in when the
	// server is known; Batch, Workers, Latency and Policy are those the
	// sweep sets (zero when it leaves them to the server; the record then
	// holds what the server reports, when it does).
	Point record.Point
	// Group numbers the server configurations: consecutive plans of one
	// group run against one server.
	Group int
	// Serve holds the `infer serve` flags of the group's server (without
	// --addr); nil when the scenario loads existing targets.
	Serve []string
	// server is the group's configuration: what a started server gets as
	// flags, or a target through its admin API.
	server serverConfig
	// LatencySet tells a max latency of zero set by the sweep from one
	// left to the server.
	LatencySet bool
	// level is the point's place in the load's levels, from 0.
	level int
}

// Settings returns the batching settings the sweep gives the point's
// server, as infer serve flags: the flags of a started server, or what the
// admin API applies to targets.
func (p Plan) Settings() []string { return p.server.flags() }

// Estimate is the time the point's load takes: warm-up and measurement,
// for every repeat.
func (s *Scenario) Estimate() time.Duration {
	return time.Duration(s.Load.Repeats) * (s.Load.Warmup + s.Load.Duration)
}

// serverConfig is one combination of the sweep's server dimensions; a zero
// field is left to the server.
type serverConfig struct {
	batch, workers int
	maxSeqs, mbt   int // generation servers: --max-seqs, --max-batched-tokens
	latency        time.Duration
	latencySet     bool
	policy         string
	buckets        []int
	bucketsSet     bool // buckets set by the sweep, maybe to none
}

// Plans expands the sweep. Points that share a server configuration are
// consecutive, in the order buckets, policy, max latency, workers, batch
// (batch varies fastest); within one configuration, endpoints, then load
// levels.
// The naive endpoint does not depend on the batching settings, so it is
// measured once per load level, with the first configuration.
func (s *Scenario) Plans() []Plan {
	var plans []Plan
	for g, sc := range s.serverConfigs() {
		var serve []string
		if s.Server != nil {
			serve = append(append([]string(nil), s.Server.Flags...), sc.flags()...)
		}
		for _, ep := range s.Sweep.Endpoints {
			if ep == "naive" && g > 0 {
				continue
			}
			scale := 1
			if s.Load.PerWorker && ep != "naive" {
				scale = max(sc.workers, 1)
			}
			for level, load := range s.loads(scale) {
				p := record.Point{Endpoint: ep, Load: load, Items: s.Payload.N}
				if ep != "naive" {
					p.Batch, p.Workers, p.Latency, p.Policy = sc.batch, sc.workers, record.Duration(sc.latency), sc.policy
					p.Buckets = sc.buckets
					p.MaxSeqs, p.MaxBatchedTokens = sc.maxSeqs, sc.mbt
				}
				set := sc.latencySet && ep != "naive"
				p.Name = pointName(p, s.Sweep.varied(), ep != "naive")
				plans = append(plans, Plan{Index: len(plans), Point: p, Group: g, Serve: serve, LatencySet: set, server: sc, level: level})
			}
		}
	}
	return plans
}

func (s *Scenario) serverConfigs() []serverConfig {
	or := func(n int) int { return max(n, 1) }
	var out []serverConfig
	// A generation server's max_batched_tokens and max_seqs take the
	// places of workers and batch, which it has none of (one of each pair
	// is empty).
	for ki := range or(len(s.Sweep.Buckets)) {
		for pi := range or(len(s.Sweep.Policy)) {
			for li := range or(len(s.Sweep.MaxLatency)) {
				for wi := range or(len(s.Sweep.Workers) + len(s.Sweep.MaxBatchedTokens)) {
					for bi := range or(len(s.Sweep.Batch) + len(s.Sweep.MaxSeqs)) {
						var c serverConfig
						if len(s.Sweep.MaxBatchedTokens) > 0 {
							c.mbt = s.Sweep.MaxBatchedTokens[wi]
						}
						if len(s.Sweep.MaxSeqs) > 0 {
							c.maxSeqs = s.Sweep.MaxSeqs[bi]
						}
						if len(s.Sweep.Buckets) > 0 {
							c.bucketsSet = true
							if bs := s.Sweep.Buckets[ki]; len(bs) > 0 {
								c.buckets = bs
							}
						}
						if len(s.Sweep.Policy) > 0 {
							c.policy = s.Sweep.Policy[pi]
						}
						if len(s.Sweep.MaxLatency) > 0 {
							c.latency, c.latencySet = s.Sweep.MaxLatency[li], true
						}
						if len(s.Sweep.Workers) > 0 {
							c.workers = s.Sweep.Workers[wi]
						}
						if len(s.Sweep.Batch) > 0 {
							c.batch = s.Sweep.Batch[bi]
						}
						out = append(out, c)
					}
				}
			}
		}
	}
	return out
}

func (c serverConfig) flags() []string {
	var f []string
	if c.batch > 0 {
		f = append(f, "--batch", strconv.Itoa(c.batch))
	}
	if c.workers > 0 {
		f = append(f, "--workers", strconv.Itoa(c.workers))
	}
	if c.latencySet {
		f = append(f, "--max-latency", c.latency.String())
	}
	if c.policy != "" {
		f = append(f, "--policy", c.policy)
	}
	if c.maxSeqs > 0 {
		f = append(f, "--max-seqs", strconv.Itoa(c.maxSeqs))
	}
	if c.mbt > 0 {
		f = append(f, "--max-batched-tokens", strconv.Itoa(c.mbt))
	}
	if c.bucketsSet {
		f = append(f, "--buckets", bucketsText(c.buckets))
	}
	return f
}

// bucketsText renders bucket bounds as the --buckets flag takes them:
// "16,32,64", or "none".
func bucketsText(bs []int) string {
	if len(bs) == 0 {
		return "none"
	}
	parts := make([]string, len(bs))
	for i, b := range bs {
		parts[i] = strconv.Itoa(b)
	}
	return strings.Join(parts, ",")
}

// loads returns the load of each level, scaled by scale.
func (s *Scenario) loads(scale int) []record.Load {
	var out []record.Load
	for _, c := range s.Load.Concurrency {
		out = append(out, record.Load{Mode: "closed", Concurrency: c * scale})
	}
	for _, r := range s.Load.Rates {
		l := record.Load{Mode: "open", Pacer: s.Load.Pacer, Rate: r * float64(scale)}
		if a := s.Load.Arrival; a == "poisson" || a == "gamma" {
			l.Arrival, l.Burstiness = a, s.Load.Burstiness
		}
		if s.Load.Pacer == "ramp" {
			l.RampFrom = s.Load.RampFrom * float64(scale)
		}
		out = append(out, l)
	}
	return out
}

// dims names the server dimensions of a sweep.
type dims struct{ batch, workers, latency, policy, buckets, maxSeqs, mbt bool }

// varied returns the dimensions the sweep gives more than one value.
func (s Sweep) varied() dims {
	return dims{len(s.Batch) > 1, len(s.Workers) > 1, len(s.MaxLatency) > 1, len(s.Policy) > 1, len(s.Buckets) > 1,
		len(s.MaxSeqs) > 1, len(s.MaxBatchedTokens) > 1}
}

// set returns the dimensions the sweep gives one value.
func (s Sweep) set() dims {
	return dims{len(s.Batch) == 1, len(s.Workers) == 1, len(s.MaxLatency) == 1, len(s.Policy) == 1, len(s.Buckets) == 1,
		len(s.MaxSeqs) == 1, len(s.MaxBatchedTokens) == 1}
}

// pointName labels a point with its endpoint, the server settings among
// show (of a point with batching settings) and its load: "batched b=64
// w=2 c=32". Points are named by what tells them apart: a setting the
// sweep gives one value is the same on every point, and said once
// (Scenario.Shared).
func pointName(p record.Point, show dims, batching bool) string {
	parts := []string{p.Endpoint}
	if batching {
		parts = append(parts, settingParts(p, show)...)
	}
	parts = append(parts, loadName(p.Load))
	if p.Items > 1 {
		parts = append(parts, fmt.Sprintf("items=%d", p.Items))
	}
	return strings.Join(parts, " ")
}

// settingParts renders p's server settings among show: "b=64", "w=2",
// "lat=10ms", the policy, "buckets=16,32,64" or "buckets=none".
func settingParts(p record.Point, show dims) []string {
	var parts []string
	if show.batch && p.Batch > 0 {
		parts = append(parts, fmt.Sprintf("b=%d", p.Batch))
	}
	if show.workers && p.Workers > 0 {
		parts = append(parts, fmt.Sprintf("w=%d", p.Workers))
	}
	if show.latency {
		parts = append(parts, "lat="+p.Latency.D().String())
	}
	if show.policy && p.Policy != "" {
		parts = append(parts, p.Policy)
	}
	if show.buckets {
		parts = append(parts, "buckets="+bucketsText(p.Buckets))
	}
	if show.maxSeqs && p.MaxSeqs > 0 {
		parts = append(parts, fmt.Sprintf("seqs=%d", p.MaxSeqs))
	}
	if show.mbt && p.MaxBatchedTokens > 0 {
		parts = append(parts, fmt.Sprintf("mbt=%d", p.MaxBatchedTokens))
	}
	return parts
}

// Shared returns the server settings the sweep gives one value, which
// point names leave out since every point with batching settings has
// them: like "w=1 lat=20ms"; "" when there are none.
func (s *Scenario) Shared() string {
	var p record.Point
	if len(s.Sweep.Batch) == 1 {
		p.Batch = s.Sweep.Batch[0]
	}
	if len(s.Sweep.Workers) == 1 {
		p.Workers = s.Sweep.Workers[0]
	}
	if len(s.Sweep.MaxLatency) == 1 {
		p.Latency = record.Duration(s.Sweep.MaxLatency[0])
	}
	if len(s.Sweep.Policy) == 1 {
		p.Policy = s.Sweep.Policy[0]
	}
	if len(s.Sweep.Buckets) == 1 {
		p.Buckets = s.Sweep.Buckets[0]
	}
	if len(s.Sweep.MaxSeqs) == 1 {
		p.MaxSeqs = s.Sweep.MaxSeqs[0]
	}
	if len(s.Sweep.MaxBatchedTokens) == 1 {
		p.MaxBatchedTokens = s.Sweep.MaxBatchedTokens[0]
	}
	return strings.Join(settingParts(p, s.Sweep.set()), " ")
}

func loadName(l record.Load) string {
	switch {
	case l.Mode == "closed":
		return fmt.Sprintf("c=%d", l.Concurrency)
	case l.Pacer == "ramp":
		return fmt.Sprintf("ramp=%s→%s/s", fmtRate(l.RampFrom), fmtRate(l.Rate))
	default:
		return fmt.Sprintf("rate=%s/s", fmtRate(l.Rate))
	}
}

func fmtRate(r float64) string { return strconv.FormatFloat(r, 'f', -1, 64) }
