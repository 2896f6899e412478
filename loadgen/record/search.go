package record

import (
	"cmp"
	"slices"
)

// Flags of a capacity search (load.search) and of steadiness.
const (
	// FlagSearch marks a probe of a capacity search: a point whose load
	// level the search chose (Record.Search). It casts no doubt on the
	// figures.
	FlagSearch = "search"
	// FlagUnsteady: the point's throughput drifted across its measured
	// window (the line fitted to it second by second changed by over 5 %
	// of its mean, significantly): it had not settled, so its figures
	// describe no steady state. A search measures such a point again
	// before it trusts it.
	FlagUnsteady = "unsteady"
	// FlagTargetFailed: the target stopped answering during the point (a
	// connection refused): the point, and the search it belonged to, are
	// partial.
	FlagTargetFailed = "target-failed"
)

// What a capacity search searches over.
const (
	OverRate    = "rate"    // open loop: requests per second
	OverClients = "clients" // closed loop: concurrent clients
)

// Search is what a probe of a capacity search says: the level measured,
// its verdict against the SLO, and the search's bracket after it.
type Search struct {
	// Config numbers the configuration searched, from 0 in the order the
	// run searched them; Name names it without the load ("batched b=64").
	Config int     `json:"config"`
	Name   string  `json:"name"`
	Over   string  `json:"over"`  // OverRate or OverClients
	Probe  int     `json:"probe"` // from 1 within the configuration's search
	Phase  string  `json:"phase"` // "bracket" (growing) or "bisect"
	Level  float64 `json:"level"`
	// Pass is the verdict: Margin at most 1. Margin is the median, over
	// the measurements that decided, of the worst ratio of a measured
	// figure to its SLO bound; Margins holds each measurement's when the
	// level was measured more than once (Repeated says why), in order.
	Pass     bool      `json:"pass"`
	Margin   float64   `json:"margin"`
	Margins  []float64 `json:"margins,omitempty"`
	Repeated string    `json:"repeated,omitempty"`
	// Passed and Failed are the bracket after this probe: the highest
	// level that met the SLO and the lowest that missed it, 0 for none.
	Passed    float64 `json:"passed,omitempty"`
	Failed    float64 `json:"failed,omitempty"`
	Tolerance float64 `json:"tolerance"`
	// End and Why are set on a search's last probe: how it ended
	// (converged, none-meets, above-range, budget, target-failed,
	// stopped), in a word and in a sentence.
	End string `json:"end,omitempty"`
	Why string `json:"why,omitempty"`
}

// Ends of a search beyond package search's (converged, none-meets,
// above-range, budget): its target failed, or the run was stopped.
const (
	EndTargetFailed = "target-failed"
	EndStopped      = "stopped"
)

// Capacity is a configuration's capacity under the SLO, as its search
// found it.
type Capacity struct {
	Config int    `json:"config"`
	Name   string `json:"name"`
	Over   string `json:"over"`
	// Capacity is the highest level that met the SLO (0: none did);
	// Failed the lowest that missed it (0: none did). The capacity lies
	// between them.
	Capacity  float64 `json:"capacity"`
	Failed    float64 `json:"failed,omitempty"`
	Tolerance float64 `json:"tolerance"`
	// Probes counts the levels measured, Measurements their repeats in
	// all.
	Probes       int `json:"probes"`
	Measurements int `json:"measurements"`
	// End and Why: how the search ended (Search.End, Search.Why); "" for
	// a search still running when the run stopped.
	End string `json:"end,omitempty"`
	Why string `json:"why,omitempty"`
	// Partial says the search was cut short: stopped (End "" or
	// "stopped"), or its target failed.
	Partial bool `json:"partial,omitempty"`
	// Index is the record of the probe at Capacity (-1: none), whose
	// throughput (successful requests/s) and, for LLM points, output
	// tokens/s are these.
	Index            int     `json:"index"`
	Throughput       float64 `json:"throughput,omitempty"`
	OutputTokensPerS float64 `json:"output_tokens_per_s,omitempty"`
	// Elapsed is the search's time, servers' starts included; 0 when
	// unknown (derived from records alone).
	Elapsed Duration `json:"elapsed,omitzero"`
}

// Capacities gathers the searches of recs, each probe carrying the
// bracket after it: one Capacity per configuration searched, in the
// order of Config. Records without Search are ignored.
func Capacities(recs []Record) []Capacity {
	var out []Capacity
	at := map[int]int{}
	for i := range recs {
		r := &recs[i]
		s := r.Search
		if s == nil {
			continue
		}
		k, ok := at[s.Config]
		if !ok {
			k = len(out)
			at[s.Config] = k
			out = append(out, Capacity{Config: s.Config, Name: s.Name, Over: s.Over, Index: -1})
		}
		c := &out[k]
		c.Probes++
		c.Measurements += max(len(s.Margins), 1)
		// The bracket only narrows: the last probe's is the search's.
		c.Capacity, c.Failed, c.Tolerance = s.Passed, s.Failed, s.Tolerance
		if s.End != "" {
			c.End, c.Why = s.End, s.Why
		}
		c.Partial = c.Partial || r.Partial || s.End == EndTargetFailed || s.End == EndStopped
	}
	for i := range out {
		out[i].Partial = out[i].Partial || out[i].End == "" // a search without an end was cut short
	}
	for i := range recs {
		r := &recs[i]
		if s := r.Search; s != nil && s.Pass {
			if c := &out[at[s.Config]]; s.Level == c.Capacity {
				c.Index, c.Throughput = r.Index, r.Throughput
				if r.LLM != nil {
					c.OutputTokensPerS = r.LLM.OutputTokensPerS
				}
			}
		}
	}
	slices.SortStableFunc(out, func(a, b Capacity) int { return cmp.Compare(a.Config, b.Config) })
	return out
}

// LLMSecond is one second of an LLM point's measured window: the output
// tokens received and the requests completed in it (whenever sent), and
// the TTFT of the requests sent in it.
type LLMSecond struct {
	At        Duration `json:"at"` // start of the second, from the window's start
	Tokens    float64  `json:"tokens"`
	Completed int      `json:"completed"`
	TTFTP50   Duration `json:"ttft_p50,omitzero"`
	TTFTP99   Duration `json:"ttft_p99,omitzero"`
}

// GoodFraction is the share of the window's requests that completed and
// met every per-request bound of the SLO: the good share of the
// completions (GoodputPerS ÷ RequestsPerS) times the completed share of
// the requests (failures are not good). 0 when none completed.
func (l *LLM) GoodFraction() float64 {
	if l.RequestsPerS <= 0 || l.Requests == 0 {
		return 0
	}
	return min(l.GoodputPerS/l.RequestsPerS, 1) * float64(l.Completed) / float64(l.Requests)
}
