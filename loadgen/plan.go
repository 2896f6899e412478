package loadgen

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/inferhq/infer/loadgen/record"
	"github.com/inferhq/infer/loadgen/scenario"
	"github.com/inferhq/infer/loadgen/target"
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
	// Settings are the group's batching settings: a started server has
	// them in Serve, existing targets get them through their admin API.
	Settings target.Settings
	// LatencySet tells a max latency of zero set by the sweep from one
	// left to the server.
	LatencySet bool
	// level is the point's place in the load's levels, from 0.
	level int
}

// Plans expands the sweep of sc. Points that share a server
// configuration are consecutive, in the order model, route policy,
// buckets, policy, max latency, workers, batch (batch varies fastest); within one
// configuration, endpoints, then load levels.
// The naive endpoint does not depend on the batching settings, so it is
// measured once per load level and model, with the model's first
// configuration.
func Plans(sc *scenario.Scenario) []Plan {
	var plans []Plan
	naive := map[string]bool{} // the models whose naive points are planned
	for g, set := range settings(sc.Sweep) {
		var serve []string
		if sc.Server != nil {
			serve = sc.Server.Flags(set)
		}
		for _, ep := range sc.Sweep.Endpoints {
			if ep == "naive" {
				if naive[set.Model] {
					continue
				}
				naive[set.Model] = true
			}
			scale := 1
			if sc.Load.PerWorker && ep != "naive" {
				scale = max(set.Workers, 1)
			}
			for level, load := range loads(sc, scale) {
				p := record.Point{Model: set.Model, Endpoint: ep, Load: load, Items: sc.Payload.N, PrefixCache: set.PrefixCache}
				if ep != "naive" {
					p.Batch, p.Workers, p.Latency, p.Policy = set.Batch, set.Workers, record.Duration(set.MaxLatency), set.Policy
					p.Buckets = set.Buckets
					p.MaxSeqs, p.MaxBatchedTokens = set.MaxSeqs, set.MaxBatchedTokens
				}
				p.RoutePolicy = set.RoutePolicy
				latencySet := set.MaxLatencySet && ep != "naive"
				p.Name = pointName(p, varied(sc.Sweep), ep != "naive")
				plans = append(plans, Plan{Index: len(plans), Point: p, Group: g, Serve: serve, Settings: set, LatencySet: latencySet, level: level})
			}
		}
	}
	return plans
}

// settings returns each combination of the sweep's server dimensions: the
// server configurations, in the order they run.
func settings(s scenario.Sweep) []target.Settings {
	var out []target.Settings
	models := s.Model
	if len(models) == 0 {
		models = []string{""} // the server's own
	}
	for _, m := range models {
		out = append(out, batchSettings(s, m)...)
	}
	return out
}

// batchSettings returns each combination of the sweep's batching
// dimensions, for model m.
func batchSettings(s scenario.Sweep, m string) []target.Settings {
	or := func(n int) int { return max(n, 1) }
	var out []target.Settings
	// A generation server's max_batched_tokens and max_seqs take the
	// places of workers and batch, which it has none of (one of each pair
	// is empty).
	for ri := range or(len(s.RoutePolicy)) {
		for ki := range or(len(s.Buckets)) {
			for pi := range or(len(s.Policy)) {
				for li := range or(len(s.MaxLatency)) {
					for wi := range or(len(s.Workers) + len(s.MaxBatchedTokens)) {
						for bi := range or(len(s.Batch) + len(s.MaxSeqs)) {
							c := target.Settings{Model: m}
							if len(s.MaxBatchedTokens) > 0 {
								c.MaxBatchedTokens = s.MaxBatchedTokens[wi]
							}
							if len(s.MaxSeqs) > 0 {
								c.MaxSeqs = s.MaxSeqs[bi]
							}
							if len(s.Buckets) > 0 {
								c.BucketsSet = true
								if bs := s.Buckets[ki]; len(bs) > 0 {
									c.Buckets = bs
								}
							}
							if len(s.Policy) > 0 {
								c.Policy = s.Policy[pi]
							}
							if len(s.MaxLatency) > 0 {
								c.MaxLatency, c.MaxLatencySet = s.MaxLatency[li], true
							}
							if len(s.Workers) > 0 {
								c.Workers = s.Workers[wi]
							}
							if len(s.Batch) > 0 {
								c.Batch = s.Batch[bi]
							}
							if len(s.RoutePolicy) > 0 {
								c.RoutePolicy = s.RoutePolicy[ri]
							}
							out = append(out, c)
						}
					}
				}
			}
		}
	}
	return withPrefixCache(out, s.PrefixCache)
}

// withPrefixCache returns the configurations sets with each of the prefix
// cache settings in turn (the slowest-varying dimension), or sets when
// there are none.
func withPrefixCache(sets []target.Settings, cache []bool) []target.Settings {
	if len(cache) == 0 {
		return sets
	}
	out := make([]target.Settings, 0, len(sets)*len(cache))
	for i := range cache {
		for _, c := range sets {
			c.PrefixCache = &cache[i]
			out = append(out, c)
		}
	}
	return out
}

// loads returns the load of each level of s, scaled by scale.
func loads(s *scenario.Scenario, scale int) []record.Load {
	var out []record.Load
	for _, c := range s.Load.Concurrency {
		out = append(out, record.Load{Mode: "closed", Concurrency: c * scale})
	}
	for _, r := range s.Load.Rates {
		l := record.Load{Mode: "open", Pacer: s.Load.Pacer, Rate: r * float64(scale)}
		if a := s.Load.Arrival; a == "poisson" || a == "gamma" || a == "trace" {
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
type dims struct{ model, batch, workers, latency, policy, buckets, maxSeqs, mbt, cache, route bool }

// varied returns the dimensions the sweep gives more than one value.
func varied(s scenario.Sweep) dims {
	return dims{len(s.Model) > 1, len(s.Batch) > 1, len(s.Workers) > 1, len(s.MaxLatency) > 1, len(s.Policy) > 1, len(s.Buckets) > 1,
		len(s.MaxSeqs) > 1, len(s.MaxBatchedTokens) > 1, len(s.PrefixCache) > 1, len(s.RoutePolicy) > 1}
}

// single returns the dimensions the sweep gives one value.
func single(s scenario.Sweep) dims {
	return dims{len(s.Model) == 1, len(s.Batch) == 1, len(s.Workers) == 1, len(s.MaxLatency) == 1, len(s.Policy) == 1, len(s.Buckets) == 1,
		len(s.MaxSeqs) == 1, len(s.MaxBatchedTokens) == 1, len(s.PrefixCache) == 1, len(s.RoutePolicy) == 1}
}

// pointName labels a point with its endpoint, the server settings among
// show (of a point with batching settings) and its load: "batched b=64
// w=2 c=32". Points are named by what tells them apart: a setting the
// sweep gives one value is the same on every point, and said once
// (Shared).
func pointName(p record.Point, show dims, batching bool) string {
	var parts []string
	if show.model && p.Model != "" {
		parts = append(parts, p.Model)
	}
	parts = append(parts, p.Endpoint)
	if show.route && p.RoutePolicy != "" {
		parts = append(parts, "route="+p.RoutePolicy)
	}
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
		parts = append(parts, "buckets="+target.BucketsText(p.Buckets))
	}
	if show.maxSeqs && p.MaxSeqs > 0 {
		parts = append(parts, fmt.Sprintf("seqs=%d", p.MaxSeqs))
	}
	if show.mbt && p.MaxBatchedTokens > 0 {
		parts = append(parts, fmt.Sprintf("mbt=%d", p.MaxBatchedTokens))
	}
	if show.cache && p.PrefixCache != nil {
		parts = append(parts, "cache="+record.OnOff(*p.PrefixCache))
	}
	return parts
}

// Shared returns the server settings the sweep of sc gives one value,
// which point names leave out since every point with batching settings
// has them: like "w=1 lat=20ms"; "" when there are none.
func Shared(sc *scenario.Scenario) string {
	s := sc.Sweep
	var p record.Point
	if len(s.Batch) == 1 {
		p.Batch = s.Batch[0]
	}
	if len(s.Workers) == 1 {
		p.Workers = s.Workers[0]
	}
	if len(s.MaxLatency) == 1 {
		p.Latency = record.Duration(s.MaxLatency[0])
	}
	if len(s.Policy) == 1 {
		p.Policy = s.Policy[0]
	}
	if len(s.Buckets) == 1 {
		p.Buckets = s.Buckets[0]
	}
	if len(s.MaxSeqs) == 1 {
		p.MaxSeqs = s.MaxSeqs[0]
	}
	if len(s.MaxBatchedTokens) == 1 {
		p.MaxBatchedTokens = s.MaxBatchedTokens[0]
	}
	if len(s.PrefixCache) == 1 {
		p.PrefixCache = &s.PrefixCache[0]
	}
	parts := settingParts(p, single(s))
	if len(s.RoutePolicy) == 1 {
		parts = append([]string{"route=" + s.RoutePolicy[0]}, parts...)
	}
	if len(s.Model) == 1 {
		parts = append([]string{s.Model[0]}, parts...)
	}
	return strings.Join(parts, " ")
}

func loadName(l record.Load) string {
	switch {
	case l.Mode == "closed":
		return fmt.Sprintf("c=%d", l.Concurrency)
	case l.Pacer == "ramp":
		return fmt.Sprintf("ramp=%s→%s/s", fmtRate(l.RampFrom), fmtRate(l.Rate))
	case l.Arrival == "trace":
		return fmt.Sprintf("trace=%s/s", fmtRate(l.Rate))
	default:
		return fmt.Sprintf("rate=%s/s", fmtRate(l.Rate))
	}
}

func fmtRate(r float64) string { return strconv.FormatFloat(r, 'f', -1, 64) }

// abbreviations are the short names of point names, in words.
var abbreviations = []struct{ short, long string }{
	{"b=", "b batch size"}, {"w=", "w workers"}, {"lat=", "lat max latency"}, {"c=", "c clients"},
	{"seqs=", "seqs max sequences"}, {"mbt=", "mbt max batched tokens"}, {"rate=", "rate arrivals/s"},
}

// Legend explains the abbreviations a point name uses: "b batch size · w
// workers · c clients"; "" when it uses none.
func Legend(name string) string {
	var parts []string
	for _, a := range abbreviations {
		if strings.HasPrefix(name, a.short) || strings.Contains(name, " "+a.short) {
			parts = append(parts, a.long)
		}
	}
	return strings.Join(parts, " · ")
}

// SharedText says the settings every point with batching has (Shared), in
// words: "every batched point: max latency 10ms"; for LLM runs "every
// batching point: max 8 sequences".
func SharedText(shared string, llm bool) string {
	var words []string
	for part := range strings.FieldsSeq(shared) {
		k, v, ok := strings.Cut(part, "=")
		switch {
		case !ok:
			words = append(words, "policy "+part)
		case k == "b":
			words = append(words, "batch size "+v)
		case k == "w" && v == "1":
			words = append(words, "1 worker")
		case k == "w":
			words = append(words, v+" workers")
		case k == "lat":
			words = append(words, "max latency "+v)
		case k == "seqs":
			words = append(words, "max "+v+" sequences")
		case k == "mbt":
			words = append(words, "max "+v+" batched tokens")
		default:
			words = append(words, k+" "+v)
		}
	}
	if llm {
		return "every continuous and static point: " + strings.Join(words, ", ")
	}
	return "every batched point: " + strings.Join(words, ", ")
}
