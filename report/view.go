package report

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/inferhq/infer/loadgen/record"
)

// config is what the server was at a sweep point, without the load.
type config struct {
	Model    string // the server's, when the sweep sets it
	Endpoint string
	Batch    int
	Workers  int
	Latency  record.Duration
	Policy   string
	Buckets  string // bucketsText of the point's buckets: "16,32,64", "" for none
	Items    int
	// A generation server's --max-seqs and --max-batched-tokens, and its
	// prefix cache ("on", "off", "" when the sweep left it).
	MaxSeqs, MaxBatchedTokens int
	Cache                     string
}

func configOf(p record.Point) config {
	return config{Model: p.Model, Endpoint: p.Endpoint, Batch: p.Batch, Workers: p.Workers, Latency: p.Latency, Policy: p.Policy,
		Buckets: bucketsText(p.Buckets), Items: p.Items, MaxSeqs: p.MaxSeqs, MaxBatchedTokens: p.MaxBatchedTokens,
		Cache: cacheOf(p)}
}

// bucketsText renders bucket bounds as a comparable key and label:
// "16,32,64"; "" for none.
func bucketsText(bs []int) string {
	parts := make([]string, len(bs))
	for i, b := range bs {
		parts[i] = fmt.Sprint(b)
	}
	return strings.Join(parts, ",")
}

// series is a configuration without its batch size: one line on the charts
// drawn against batch size.
type series struct {
	Model    string
	Endpoint string
	Workers  int
	Latency  record.Duration
	Policy   string
	Buckets  string
	Items    int
}

func seriesOf(p record.Point) series {
	c := configOf(p)
	return series{Model: c.Model, Endpoint: c.Endpoint, Workers: c.Workers, Latency: c.Latency, Policy: c.Policy, Buckets: c.Buckets, Items: c.Items}
}

// variant is a series without its worker count: what sets a marker's shape.
type variant struct {
	Model    string
	Endpoint string
	Latency  record.Duration
	Policy   string
	Buckets  string
	Items    int
}

func (s series) variant() variant {
	return variant{Model: s.Model, Endpoint: s.Endpoint, Latency: s.Latency, Policy: s.Policy, Buckets: s.Buckets, Items: s.Items}
}

// key matches a point across runs: its configuration and its load.
type key struct {
	config
	Load record.Load
}

func keyOf(p record.Point) key { return key{config: configOf(p), Load: p.Load} }

func isNaive(r *record.Record) bool { return r.Point.Endpoint == "naive" }

// succeeded reports whether any request of r succeeded, so that its
// latencies mean something.
func succeeded(r *record.Record) bool { return r.Status["200"] > 0 || r.Throughput > 0 }

// trusted reports whether r's numbers can be taken at face value: no
// validity flag against it and not cut short.
func trusted(r *record.Record) bool { return r.Valid && !r.Partial }

func compareLoad(a, b record.Load) int {
	return cmp.Or(
		cmp.Compare(a.Mode, b.Mode),
		cmp.Compare(a.Pacer, b.Pacer),
		cmp.Compare(a.Arrival, b.Arrival),
		cmp.Compare(a.Burstiness, b.Burstiness),
		cmp.Compare(a.Rate, b.Rate),
		cmp.Compare(a.RampFrom, b.RampFrom),
		cmp.Compare(a.Concurrency, b.Concurrency),
	)
}

// tput is a point's throughput as its charts and verdicts weigh it:
// output tokens per second for an LLM point, else successful requests per
// second.
func tput(r *record.Record) float64 {
	if r.LLM != nil {
		return r.LLM.OutputTokensPerS
	}
	return r.Throughput
}

// p99Of is a point's p99 latency in milliseconds as its verdicts weigh
// it: TTFT's for an LLM point, else the service time's.
func p99Of(r *record.Record) float64 {
	if r.LLM != nil {
		return r.LLM.TTFT.P99
	}
	return r.Latency.P99.Ms()
}

// loadLabel names a load level: "400 req/s", "ramp 10→400 req/s", "16 clients".
func loadLabel(l record.Load) string {
	switch {
	case l.Mode == "closed" || (l.Rate == 0 && l.Concurrency > 0):
		return plural(l.Concurrency, "client")
	case l.Pacer == "ramp":
		return fmt.Sprintf("ramp %s→%s req/s", num(l.RampFrom), num(l.Rate))
	case l.Rate > 0 && l.Arrival == "poisson":
		return num(l.Rate) + " req/s Poisson"
	case l.Rate > 0 && l.Arrival == "gamma":
		return fmt.Sprintf("%s req/s gamma(%s)", num(l.Rate), num(l.Burstiness))
	case l.Rate > 0 && l.Arrival == "trace":
		return num(l.Rate) + " req/s trace"
	case l.Rate > 0:
		return num(l.Rate) + " req/s"
	default:
		return "unknown load"
	}
}

// shortLoad names a load level briefly, for labels at points: "c=16",
// "400/s", "→400/s" (a ramp's end).
func shortLoad(l record.Load) string {
	switch {
	case l.Mode == "closed" || (l.Rate == 0 && l.Concurrency > 0):
		return fmt.Sprintf("c=%d", l.Concurrency)
	case l.Pacer == "ramp":
		return "→" + num(l.Rate) + "/s"
	default:
		return num(l.Rate) + "/s"
	}
}

// num formats a rate or count without trailing zeros: 12.5, 400, 0.25.
func num(v float64) string { return fmt.Sprintf("%g", math.Round(v*100)/100) }

// view is a run arranged for the report: its records with the groupings the
// charts and the summary share.
type view struct {
	run     *record.Run
	recs    []*record.Record // in sweep order
	naive   []*record.Record
	served  []*record.Record // every endpoint but the naive one
	loads   []record.Load    // distinct load levels, ordered
	workers []int            // distinct worker counts of the served points, ordered
	vars    []variant        // distinct variants of the served points, ordered
	vary    struct {
		model, endpoint, latency, policy, buckets, items bool
	}
}

func newView(run *record.Run) *view {
	v := &view{run: run}
	for i := range run.Records {
		v.recs = append(v.recs, &run.Records[i])
	}
	slices.SortStableFunc(v.recs, func(a, b *record.Record) int { return cmp.Compare(a.Index, b.Index) })
	var mods, eps, lats, pols, bks, items []string
	for _, r := range v.recs {
		if !slices.ContainsFunc(v.loads, func(l record.Load) bool { return l == r.Point.Load }) {
			v.loads = append(v.loads, r.Point.Load)
		}
		mods = appendNew(mods, r.Point.Model) // naive points too: every series names its model
		if isNaive(r) {
			v.naive = append(v.naive, r)
			continue
		}
		v.served = append(v.served, r)
		s := seriesOf(r.Point)
		if !slices.Contains(v.workers, s.Workers) {
			v.workers = append(v.workers, s.Workers)
		}
		if !slices.Contains(v.vars, s.variant()) {
			v.vars = append(v.vars, s.variant())
		}
		eps, lats = appendNew(eps, s.Endpoint), appendNew(lats, s.Latency.D().String())
		pols, bks, items = appendNew(pols, s.Policy), appendNew(bks, s.Buckets), appendNew(items, fmt.Sprint(s.Items))
	}
	slices.SortFunc(v.loads, compareLoad)
	slices.Sort(v.workers)
	slices.SortFunc(v.vars, func(a, b variant) int {
		return cmp.Or(cmp.Compare(slices.Index(mods, a.Model), slices.Index(mods, b.Model)), cmp.Compare(a.Endpoint, b.Endpoint), cmp.Compare(a.Latency, b.Latency),
			cmp.Compare(a.Policy, b.Policy), cmp.Compare(a.Buckets, b.Buckets), cmp.Compare(a.Items, b.Items))
	})
	v.vary.model, v.vary.endpoint, v.vary.latency = len(mods) > 1, len(eps) > 1, len(lats) > 1
	v.vary.policy, v.vary.buckets, v.vary.items = len(pols) > 1, len(bks) > 1, len(items) > 1
	return v
}

func appendNew(s []string, v string) []string {
	if slices.Contains(s, v) {
		return s
	}
	return append(s, v)
}

// seriesLabel names a series by what tells it apart in this run: "w=2",
// or "w=2 v2 max-lat 5ms" when endpoints and max-latencies vary too.
func (v *view) seriesLabel(s series) string {
	w := fmt.Sprintf("w=%d", s.Workers)
	if s.Workers == 0 {
		w = "w=?"
	}
	return strings.TrimSpace(w + " " + v.variantLabel(s.variant()))
}

// variantLabel names the dimensions of vr that vary in this run, or "".
func (v *view) variantLabel(vr variant) string { return strings.Join(v.variantParts(vr, ""), " ") }

// variantParts names the dimensions of vr that vary in this run, but skip
// ("policy" or "buckets").
func (v *view) variantParts(vr variant, skip string) []string {
	var parts []string
	if v.vary.model {
		parts = append(parts, vr.Model)
	}
	if v.vary.endpoint {
		parts = append(parts, vr.Endpoint)
	}
	if v.vary.latency {
		parts = append(parts, "max-lat "+vr.Latency.D().String())
	}
	if v.vary.policy && skip != "policy" {
		parts = append(parts, vr.Policy)
	}
	if v.vary.buckets && skip != "buckets" {
		parts = append(parts, bucketsLabel(vr.Buckets))
	}
	if v.vary.items {
		parts = append(parts, fmt.Sprintf("%d items/req", vr.Items))
	}
	return parts
}

// bucketsLabel names a bucket setting: "buckets 16,32,64", "no buckets".
func bucketsLabel(b string) string {
	if b == "" {
		return "no buckets"
	}
	return "buckets " + b
}

// configLabel names a served configuration briefly: "b=32 w=4", with the
// varying dimensions of seriesLabel.
func (v *view) configLabel(r *record.Record) string {
	if r.LLM != nil {
		return v.llmLabel(llmSeriesOf(r.Point))
	}
	if isNaive(r) {
		return "naive"
	}
	b := fmt.Sprintf("b=%d ", r.Point.Batch)
	if r.Point.Batch == 0 {
		b = ""
	}
	return b + v.seriesLabel(seriesOf(r.Point))
}

// batchLabel names a point's configuration briefly, for a chart whose
// colours tell the worker count and shapes the variant: "naive", "b=8".
func (v *view) batchLabel(r *record.Record) string {
	switch {
	case isNaive(r):
		return "naive"
	case r.Point.Batch > 0:
		return fmt.Sprintf("b=%d", r.Point.Batch)
	}
	return v.configLabel(r)
}

// pointLabel names a point: its configuration at its load.
func (v *view) pointLabel(r *record.Record) string {
	return v.configLabel(r) + " @ " + loadLabel(r.Point.Load)
}

// groupBy groups the records that key keeps by their key, and returns the
// keys in the order of their first record.
func groupBy[K comparable](recs []*record.Record, key func(*record.Record) (K, bool)) ([]K, map[K][]*record.Record) {
	groups := map[K][]*record.Record{}
	var order []K
	for _, r := range recs {
		k, ok := key(r)
		if !ok {
			continue
		}
		if _, seen := groups[k]; !seen {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	return order, groups
}

// bySeries groups the served points with a known batch size into series,
// ordered by worker count then variant.
func (v *view) bySeries() ([]series, map[series][]*record.Record) {
	order, groups := groupBy(v.served, func(r *record.Record) (series, bool) { return seriesOf(r.Point), r.Point.Batch > 0 })
	slices.SortFunc(order, func(a, b series) int {
		return cmp.Or(cmp.Compare(a.Workers, b.Workers), cmp.Compare(slices.Index(v.vars, a.variant()), slices.Index(v.vars, b.variant())))
	})
	return order, groups
}

// capacity returns, for each batch size of a series, the point with the
// highest throughput over the load levels: what the configuration can
// serve. Points without a success are kept only when nothing else exists
// for that batch size.
func capacity(recs []*record.Record) (batches []int, best map[int]*record.Record) {
	best = map[int]*record.Record{}
	for _, r := range recs {
		cur, ok := best[r.Point.Batch]
		if !ok {
			batches = append(batches, r.Point.Batch)
		}
		if !ok || better(r, cur) {
			best[r.Point.Batch] = r
		}
	}
	slices.Sort(batches)
	return batches, best
}

// better reports whether a beats b as the pick for a configuration:
// trusted before flagged, then higher throughput, then lower p99.
func better(a, b *record.Record) bool {
	if succeeded(a) != succeeded(b) {
		return succeeded(a)
	}
	if trusted(a) != trusted(b) {
		return trusted(a)
	}
	if tput(a) != tput(b) {
		return tput(a) > tput(b)
	}
	return p99Of(a) < p99Of(b)
}

// keep returns, in a slice of their own, the records of recs that ok
// keeps (nil for none).
func keep(recs []*record.Record, ok func(*record.Record) bool) []*record.Record {
	var out []*record.Record
	for _, r := range recs {
		if ok(r) {
			out = append(out, r)
		}
	}
	return out
}

// atLoad returns the points at load l.
func atLoad(recs []*record.Record, l record.Load) []*record.Record {
	return keep(recs, func(r *record.Record) bool { return r.Point.Load == l })
}

// panelLoads picks at most n load levels to draw one panel each: all of
// them when they fit, else the lowest, the highest and evenly spaced ones
// between.
func panelLoads(loads []record.Load, n int) []record.Load {
	if len(loads) <= n {
		return loads
	}
	out := make([]record.Load, 0, n)
	for i := range n {
		out = append(out, loads[i*(len(loads)-1)/(n-1)])
	}
	return out
}

// frontier returns the trusted points that no other trusted point beats on
// both throughput and p99 latency, by increasing throughput.
func frontier(recs []*record.Record) []*record.Record {
	cand := keep(recs, func(r *record.Record) bool { return trusted(r) && succeeded(r) && r.Latency.P99 > 0 })
	slices.SortFunc(cand, func(a, b *record.Record) int {
		return cmp.Or(-cmp.Compare(a.Throughput, b.Throughput), cmp.Compare(a.Latency.P99, b.Latency.P99))
	})
	var front []*record.Record
	for _, r := range cand {
		if len(front) == 0 || r.Latency.P99 < front[len(front)-1].Latency.P99 {
			front = append(front, r)
		}
	}
	slices.Reverse(front)
	return front
}

// knee returns the point of the frontier where latency starts to climb:
// with throughput scaled to [0,1] and log p99 scaled to [0,1], the point
// farthest below the chord from the frontier's first to its last point.
// It returns nil when the frontier has fewer than three points or bends
// too little (less than 0.05 of the scaled range) to have a knee.
func knee(front []*record.Record) *record.Record {
	if len(front) < 3 {
		return nil
	}
	first, last := front[0], front[len(front)-1]
	x0, x1 := first.Throughput, last.Throughput
	y0, y1 := math.Log(first.Latency.P99.Ms()), math.Log(last.Latency.P99.Ms())
	if x1 <= x0 || y1 <= y0 {
		return nil
	}
	var best *record.Record
	bestD := 0.05
	for _, r := range front[1 : len(front)-1] {
		x := (r.Throughput - x0) / (x1 - x0)
		y := (math.Log(r.Latency.P99.Ms()) - y0) / (y1 - y0)
		if d := x - y; d > bestD { // distance below the diagonal, up to a factor √2
			best, bestD = r, d
		}
	}
	return best
}

// meetsSLO reports whether r is trusted, has successes and meets every
// threshold of slo that is set.
func meetsSLO(r *record.Record, slo record.SLO) bool {
	return trusted(r) && succeeded(r) &&
		(slo.P99 == 0 || r.Latency.P99 <= slo.P99) &&
		(slo.MaxErrorRate == 0 || r.ErrorRate() <= slo.MaxErrorRate) &&
		(slo.MinThroughput == 0 || r.Throughput >= slo.MinThroughput) &&
		(r.LLM == nil || len(slo.LLM().Misses(r.LLM)) == 0)
}

// ranked returns the points meeting slo, best first: highest throughput
// (output tokens/s for LLM points), then lowest p99, then sweep order.
func ranked(recs []*record.Record, slo record.SLO) []*record.Record {
	var ok []*record.Record
	for _, r := range recs {
		if meetsSLO(r, slo) {
			ok = append(ok, r)
		}
	}
	slices.SortStableFunc(ok, func(a, b *record.Record) int {
		return cmp.Or(-cmp.Compare(tput(a), tput(b)), cmp.Compare(p99Of(a), p99Of(b)))
	})
	return ok
}
