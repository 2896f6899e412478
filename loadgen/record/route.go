package record

import "math"

// ReplicaShare is one replica's part of an LLM point's window, read from
// its /metrics (infer_gen_*) at the window's edges: what the front in
// front of the replicas gave it, and how well its prefix cache did.
type ReplicaShare struct {
	// Name is the replica's host:port.
	Name string `json:"name"`
	// Requests finished successfully, and prompt tokens of requests
	// started, in the window.
	Requests     float64 `json:"requests"`
	PromptTokens float64 `json:"prompt_tokens"`
	// OutputTokensPerS is the tokens it generated per second.
	OutputTokensPerS float64 `json:"output_tokens_per_s"`
	// TTFTMean is its own mean time to first token, in milliseconds.
	TTFTMean float64 `json:"ttft_mean_ms"`
	// PrefixQueries and PrefixHits are the prompt tokens looked up in its
	// prefix cache and found there; PrefixHitRate their ratio (0 without
	// a prefix cache).
	PrefixQueries float64 `json:"prefix_cache_queries,omitempty"`
	PrefixHits    float64 `json:"prefix_cache_hits,omitempty"`
	PrefixHitRate float64 `json:"prefix_hit_rate,omitempty"`
}

// Balance sums up how evenly shares spread a measure (f of each share):
// the least and the most loaded replica's part of the total, and the
// coefficient of variation (0 for a perfect balance). Zero with no total.
func Balance(shares []ReplicaShare, f func(ReplicaShare) float64) (minShare, maxShare, cv float64) {
	if len(shares) == 0 {
		return 0, 0, 0
	}
	var sum float64
	minV, maxV := f(shares[0]), f(shares[0])
	for _, s := range shares {
		v := f(s)
		sum += v
		minV, maxV = min(minV, v), max(maxV, v)
	}
	if sum <= 0 {
		return 0, 0, 0
	}
	mean := sum / float64(len(shares))
	var ss float64
	for _, s := range shares {
		d := f(s) - mean
		ss += d * d
	}
	cv = math.Sqrt(ss/float64(len(shares))) / mean
	return minV / sum, maxV / sum, Round3(cv)
}
