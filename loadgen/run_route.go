package loadgen

// The servers' side of a load through a front (infer route that infer
// bench started in front of server.replicas, or one the user runs, with
// target.replicas): each replica's share.

import (
	"net/url"
	"slices"
	"time"

	"github.com/inferhq/infer/loadgen/llm"
	"github.com/inferhq/infer/loadgen/record"
	"github.com/inferhq/infer/loadgen/target"
)

// shares returns each replica's part of a window of that length; nil
// without a front (the load went to the servers themselves), or without
// infer_gen_ metrics.
func (w *genWatch) shares(window time.Duration) []record.ReplicaShare {
	w.mu.Lock()
	defer w.mu.Unlock()
	reps := w.r.servers.Replicas()
	front := !slices.Equal(reps, w.r.servers.URLs())
	if !front || !w.haveBegin || !w.haveEnd || len(w.beginEach) != len(reps) || len(w.endEach) != len(reps) {
		return nil
	}
	out := make([]record.ReplicaShare, len(reps))
	for i, base := range reps {
		out[i] = shareOf(hostOf(base), target.GenDelta(w.beginEach[i], w.endEach[i], window))
	}
	return out
}

// replicasBehind is how many servers share the load behind a front (a
// router), 1 without one.
func (r *runner) replicasBehind() int {
	reps := r.servers.Replicas()
	if slices.Equal(reps, r.servers.URLs()) {
		return 1
	}
	return len(reps)
}

// shareOf is a replica's share from its window's server side.
func shareOf(name string, s *record.LLMServer) record.ReplicaShare {
	return record.ReplicaShare{Name: name, Requests: s.Requests, PromptTokens: s.PromptTokens,
		OutputTokensPerS: s.OutputTokensPerS, TTFTMean: s.TTFTMean,
		PrefixQueries: s.PrefixQueries, PrefixHits: s.PrefixHits, PrefixHitRate: s.PrefixHitRate}
}

// hostOf is a base URL's host:port, the name infer route gives a replica.
func hostOf(base string) string {
	if u, err := url.Parse(base); err == nil && u.Host != "" {
		return u.Host
	}
	return base
}

// mergeShares merges the repeats' shares of a point, replica by replica in
// order (a restarted server keeps its place, though not its port): counts
// add up, rates and means are weighted by the repeats' windows. nil when a
// repeat has none, or their replicas differ in number.
func mergeShares(reps [][]record.ReplicaShare, outs []*llm.Outcome) []record.ReplicaShare {
	if len(reps) == 0 || len(reps[0]) == 0 {
		return nil
	}
	n := len(reps[0])
	out := make([]record.ReplicaShare, n)
	var secs float64
	for k, shares := range reps {
		if len(shares) != n {
			return nil
		}
		w := outs[k].Window.Seconds()
		secs += w
		for i, s := range shares {
			o := &out[i]
			if k == 0 {
				o.Name = s.Name
			}
			o.TTFTMean += s.TTFTMean * s.Requests // weighted by requests, divided below
			o.Requests += s.Requests
			o.PromptTokens += s.PromptTokens
			o.OutputTokensPerS += s.OutputTokensPerS * w
			o.PrefixQueries += s.PrefixQueries
			o.PrefixHits += s.PrefixHits
		}
	}
	for i := range out {
		o := &out[i]
		if o.Requests > 0 {
			o.TTFTMean = record.Round3(o.TTFTMean / o.Requests)
		}
		if secs > 0 {
			o.OutputTokensPerS = record.Round3(o.OutputTokensPerS / secs)
		}
		if o.PrefixQueries > 0 {
			o.PrefixHitRate = record.Round3(o.PrefixHits / o.PrefixQueries)
		}
	}
	return out
}
