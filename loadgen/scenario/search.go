package scenario

// load.search: instead of levels the user guesses, the bench finds each
// configuration's highest load that meets the SLO (package search).

import (
	"math"
	"strconv"
	"strings"

	"github.com/inferhq/infer/loadgen/llm"
	"github.com/inferhq/infer/loadgen/record"
	"github.com/inferhq/infer/loadgen/search"
)

// Search is load.search: the load it searches over and how.
type Search struct {
	// Over is record.OverRate (open loop, requests per second) or
	// record.OverClients (closed loop).
	Over string
	// From is the first and lowest level; To the highest it may try.
	// Defaults: 1 and the load's bound (1e6 requests/s; 100000 clients,
	// llm.MaxStreams streams).
	From, To float64
	// Growth, Tolerance, MaxPoints and Repeats are package search's
	// Growth, Tolerance, MaxProbes and Repeats, its defaults applied.
	Growth, Tolerance  float64
	MaxPoints, Repeats int
}

// Config returns the search's configuration.
func (s *Search) Config() search.Config {
	return search.Config{From: s.From, To: s.To, Whole: s.Over == record.OverClients, Growth: s.Growth,
		Tolerance: s.Tolerance, MaxProbes: s.MaxPoints, Repeats: s.Repeats}
}

// Open reports whether the search is over an open loop's rate.
func (s *Search) Open() bool { return s.Over == record.OverRate }

// SearchErrorRate is the most failed requests a level may have in a
// search whose SLO sets no slo.max_error_rate: a server that refuses
// its overload quickly (429) would otherwise meet a latency bound at any
// load.
const SearchErrorRate = 0.01

// fileSearch is load.search in the file. Tolerance is a share (0.05) or
// a percentage ("5%").
type fileSearch struct {
	Over      string   `yaml:"over"`
	From      *float64 `yaml:"from"`
	To        *float64 `yaml:"to"`
	Growth    *float64 `yaml:"growth"`
	Tolerance any      `yaml:"tolerance"`
	MaxPoints *int     `yaml:"max_points"`
	Repeats   *int     `yaml:"repeats"`
}

// search checks load.search into out; l is the file's load section.
func (v *validator) search(l *fileLoad, out *Load, gen bool) {
	fs := l.Search
	if fs == nil {
		return
	}
	const at = "$.load.search"
	s := &Search{Over: fs.Over, From: 1}
	out.Search = s
	maxLevel := 1e6
	switch fs.Over {
	case record.OverRate:
	case record.OverClients:
		maxLevel = 100000
		if gen {
			maxLevel = llm.MaxStreams
		}
	case "":
		v.errorf(at, "load.search.over: say what to search over: rate (open loop, requests/s) or clients (closed loop)")
	default:
		v.errorf(at+".over", "load.search.over %q: want rate (open loop, requests/s) or clients (closed loop)", fs.Over)
	}
	s.To = maxLevel
	for _, k := range []struct {
		key string
		set bool
		why string
	}{
		{"rate", len(l.Rate) > 0, "the search chooses the levels; bound them with load.search.from and to"},
		{"concurrency", len(l.Concurrency) > 0, "the search chooses the levels; bound them with load.search.from and to"},
		{"repeats", l.Repeats != nil, "a search measures a level again near the SLO's bounds: set load.search.repeats"},
		{"interleave", l.Interleave, "a search measures one configuration at a time"},
		{"per_worker", l.PerWorker, "a search finds each configuration's own capacity"},
		{"pacer", l.Pacer == "ramp", "a search holds each level steady"},
	} {
		if k.set {
			v.errorf("$.load."+k.key, "load.%s does not go with load.search: %s", k.key, k.why)
		}
	}
	level := func(key string, p *float64, def float64) float64 {
		if p == nil {
			return def
		}
		x := *p
		switch {
		case !(x > 0) || math.IsInf(x, 0) || x > maxLevel:
			v.errorf(at+"."+key, "load.search.%s %v: want a level above 0, at most %g", key, x, maxLevel)
		case fs.Over == record.OverClients && x != math.Trunc(x):
			v.errorf(at+"."+key, "load.search.%s %v: want a whole number of clients", key, x)
		}
		return x
	}
	s.From = level("from", fs.From, 1)
	s.To = level("to", fs.To, maxLevel)
	if fs.From != nil && fs.To != nil && s.To < s.From {
		v.errorf(at+".to", "load.search.to %v: below load.search.from (%v)", s.To, s.From)
	}
	s.Growth = search.DefaultGrowth
	if fs.Growth != nil {
		s.Growth = *fs.Growth
		if !(s.Growth >= search.MinGrowth && s.Growth <= search.MaxGrowth) {
			v.errorf(at+".growth", "load.search.growth %v: want a factor from %v to %v between bracketing levels", s.Growth, search.MinGrowth, search.MaxGrowth)
		}
	}
	s.Tolerance = search.DefaultTolerance
	if fs.Tolerance != nil {
		t, ok := share(fs.Tolerance)
		s.Tolerance = t
		if !ok || !(t >= search.MinTolerance && t <= search.MaxTolerance) {
			v.errorf(at+".tolerance", "load.search.tolerance %v: want a share like 5%% or 0.05, from %g%% to %g%%", fs.Tolerance,
				100*search.MinTolerance, 100*search.MaxTolerance)
		}
	}
	s.MaxPoints = search.DefaultMaxProbes
	if fs.MaxPoints != nil {
		s.MaxPoints = *fs.MaxPoints
		if s.MaxPoints < search.MinProbes || s.MaxPoints > search.MaxProbes {
			v.errorf(at+".max_points", "load.search.max_points %d: want %d to %d levels per configuration", s.MaxPoints, search.MinProbes, search.MaxProbes)
		}
	}
	s.Repeats = search.DefaultRepeats
	if fs.Repeats != nil {
		s.Repeats = *fs.Repeats
		if s.Repeats < 1 || s.Repeats > search.MaxRepeats {
			v.errorf(at+".repeats", "load.search.repeats %d: want 1 (never again) to %d measurements of a level", s.Repeats, search.MaxRepeats)
		}
	}
}

// share reads a tolerance: a number (0.05) or a percentage ("5%").
func share(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case uint64:
		return float64(x), true
	case int64:
		return float64(x), true
	case int:
		return float64(x), true
	case string:
		if p, ok := strings.CutSuffix(strings.TrimSpace(x), "%"); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
			return f / 100, err == nil
		}
		f, err := strconv.ParseFloat(x, 64)
		return f, err == nil
	}
	return 0, false
}

// searchSLO checks that a search's SLO can tell levels apart, and gives
// it the default error bound.
func (v *validator) searchSLO(s *Search, slo *SLO) {
	if s == nil {
		return
	}
	for _, k := range []struct {
		key string
		set bool
	}{{"min_throughput", slo.MinThroughput > 0}, {"min_goodput", slo.MinGoodput > 0}} {
		if k.set {
			v.errorf("$.slo."+k.key, "slo.%s does not go with load.search: a floor on a rate is missed at low load, so no capacity is between; bound latencies, errors or slo.min_goodput_fraction", k.key)
		}
	}
	bounded := slo.P99 > 0 || slo.TTFTP99 > 0 || slo.TPOTP99 > 0 || slo.E2ELP99 > 0 || slo.MinGoodputFraction > 0 || slo.MaxErrorRate > 0
	if !bounded {
		v.errorf("$.load.search", "load.search needs an SLO to search under: set slo.p99 (encoders), slo.ttft_p99, tpot_p99, e2el_p99 or min_goodput_fraction (LLM loads), or slo.max_error_rate")
	}
	if slo.MaxErrorRate == 0 {
		slo.MaxErrorRate = SearchErrorRate
	}
}
