package record

import (
	"fmt"
	"math"
	"time"
)

// LLM is what one point of a streaming LLM load (an OpenAI-compatible
// /v1/completions or /v1/chat/completions endpoint) measured, with vLLM's
// metric definitions so that figures compare with `vllm bench serve`:
//
//   - TTFT: send → the first chunk with non-empty content (a role-only or
//     empty chunk is not a token);
//   - TPOT: (E2EL − TTFT) / (output tokens − 1), over requests of more
//     than one output token, the tokens from the server's usage;
//   - ITL: the gaps between consecutive content chunks, pooled over
//     requests (a chunk may carry several tokens: ITL is per chunk, TPOT
//     per token);
//   - E2EL: send → the last content chunk;
//   - goodput: completed requests per second that met every per-request
//     threshold of SLO (all of them when none is set).
//
// Latency distributions are over the requests whose intended send time
// fell in the measured window, failures excluded (they are counted by
// cause). Rates are over what finished in the window, whenever it was
// sent: requests completed, and output tokens received (a request's
// tokens shared out over its content chunks by their arrival time), so
// that an overloaded server is not credited with work it did later.
//
// The JSON keys ttft_ms, tpot_ms, itl_ms, e2el_ms, requests_per_s,
// output_tokens_per_s and goodput_per_s are what `--output json` carries
// per point.
type LLM struct {
	API    string `json:"api"`    // "completions" or "chat"
	Stream bool   `json:"stream"` // streaming was asked for
	Model  string `json:"model,omitempty"`

	// Scheduled counts the sends the open loop's pacer scheduled in the
	// window (0 in closed loop); Requests those sent; Completed and Failed
	// split Requests; Failures counts the failed by cause ("connect",
	// "http_4xx", "stream_error", …). Unfinished requests were still
	// streaming when the run cut them off after its drain time (or a
	// stop): the run's doing, not the server's, so in neither count.
	Scheduled  int            `json:"scheduled,omitempty"`
	Requests   int            `json:"requests"`
	Completed  int            `json:"completed"`
	Failed     int            `json:"failed"`
	Failures   map[string]int `json:"failures,omitempty"`
	Unfinished int            `json:"unfinished,omitempty"`
	// Errors counts failure texts (bounded: rare texts are grouped).
	Errors map[string]int `json:"errors,omitempty"`

	TTFT MsStats `json:"ttft_ms"`
	TPOT MsStats `json:"tpot_ms"`
	ITL  MsStats `json:"itl_ms"`
	E2EL MsStats `json:"e2el_ms"`

	RequestsPerS     float64 `json:"requests_per_s"`
	OutputTokensPerS float64 `json:"output_tokens_per_s"`
	TotalTokensPerS  float64 `json:"total_tokens_per_s"` // prompt tokens of the completed + output tokens, per second
	GoodputPerS      float64 `json:"goodput_per_s"`
	// ChunksPerS counts the content chunks received per second, of every
	// request (failed and unfinished too): with OutputTokensPerS, how
	// many tokens a chunk carries.
	ChunksPerS float64 `json:"chunks_per_s"`
	// Good counts the requests completed in the window (by their last
	// token, whenever sent) that met the SLO: GoodputPerS's numerator.
	Good int `json:"good"`

	// Tokens of the completed requests sent in the window: prompt tokens
	// (the server's usage, else the client's count of what it sent) and
	// output tokens; TokenSource says where the output counts came from.
	PromptTokens int64        `json:"prompt_tokens"`
	OutputTokens int64        `json:"output_tokens"`
	TokenSource  TokenSources `json:"token_source"`
	// NotStreamed counts requests answered with one JSON body although
	// streaming was asked for (their TTFT is their E2EL); NoDone counts
	// streams that ended without "data: [DONE]" (allowed, for the record).
	NotStreamed int `json:"not_streamed,omitempty"`
	NoDone      int `json:"no_done,omitempty"`

	// The client's own timing, apart from the server's: Queue is the time
	// a due request waited for a free stream slot (the open loop's bound
	// on streams in flight); Lag is intended → actual send, queueing
	// included (always 0 in closed loop, where the clients set the pace).
	Queue MsStats `json:"queue_ms"`
	Lag   MsStats `json:"schedule_lag_ms"`
	// FromIntended has TTFT and E2EL measured from the intended send time
	// instead of the actual one (wrk2's correction for coordinated
	// omission): what a user arriving on schedule would have seen.
	FromIntended FromIntended `json:"from_intended"`

	Histograms *LLMHistograms `json:"histograms,omitempty"`
	// Timeline is a sample of requests, in order of intended send time,
	// for a picture of queueing, time to first token and decoding.
	Timeline []Span `json:"timeline,omitempty"`
	// Seconds is the window second by second: tokens, completions, TTFT.
	Seconds []LLMSecond `json:"seconds,omitempty"`

	SLO LLMSLO `json:"slo,omitzero"`
	// Server is what an infer generation server's /metrics said over the
	// window; nil for servers without them.
	Server *LLMServer `json:"server,omitempty"`
	// Replicas is each replica's share of the window, when the load went
	// through a front (infer route, HAProxy) to several replicas whose
	// /metrics were read; Server then sums them.
	Replicas []ReplicaShare `json:"replicas,omitempty"`
	// Timing is what the completed requests' Server-Timing headers said
	// (infer serve's queue and ttft); nil when none carried one.
	Timing *LLMTiming `json:"server_timing,omitempty"`
	// Prefix is what the answers said of the server's prefix cache; nil
	// when none said (no cached_tokens, no Server-Timing cached).
	Prefix *LLMPrefix `json:"prefix,omitempty"`
	// Trace is, for a trace replay, the hit rate the trace allows (before
	// the run, from its hash ids).
	Trace *TraceCache `json:"trace,omitempty"`
	// Turns has TTFT by turn index, for multi-turn sessions (turn 1
	// first); nil otherwise.
	Turns []LLMTurn `json:"turns,omitempty"`
	// Ideal is the steady-state ideal output tokens/s of a simulated
	// model (sim-lm) at the point's slots, from the mean prompt and output
	// tokens served (DESIGN.md: Lo / (Lo·(step/B + per_seq) +
	// per_prefill_token·Lp)); 0 when unknown.
	Ideal float64 `json:"ideal_tokens_per_s,omitempty"`
	// Flags are the validity and data-quality flags (Flag* constants),
	// to be merged into Record.Flags.
	Flags []string `json:"flags,omitempty"`
}

// ComputedPrompt is the mean prompt tokens of l's completed requests that
// the server computed: without the share its answers said was cached
// (a cached token costs no prefill). 0 with no completed request.
func (l *LLM) ComputedPrompt() float64 {
	if l.Completed == 0 {
		return 0
	}
	lp := float64(l.PromptTokens) / float64(l.Completed)
	if p := l.Prefix; p != nil && p.PromptTokens > 0 {
		lp *= 1 - float64(p.CachedTokens)/float64(p.PromptTokens)
	}
	return lp
}

// LLMServer is what an infer generation server (infer_gen_* metrics, for
// the point's endpoint) said about the measured window: the deltas of its
// counters and histograms, and its gauges sampled through the window.
// Latencies are in milliseconds; the quantiles are interpolated within
// the server's histogram buckets (a factor of 2 wide), the means exact.
type LLMServer struct {
	Requests     float64 `json:"requests"` // finished successfully
	TTFTMean     float64 `json:"ttft_mean_ms"`
	TTFTP50      float64 `json:"ttft_p50_ms"`
	TTFTP99      float64 `json:"ttft_p99_ms"`
	TPOTMean     float64 `json:"tpot_mean_ms"`
	E2ELMean     float64 `json:"e2el_mean_ms"`
	QueueMean    float64 `json:"queue_mean_ms"`
	PromptTokens float64 `json:"prompt_tokens"`
	// OutputTokensPerS is the tokens the engine generated per second.
	OutputTokensPerS float64 `json:"output_tokens_per_s"`
	Preemptions      float64 `json:"preemptions"`
	StepBatch        float64 `json:"step_batch_mean"` // sequences per engine step
	// StepMean is the model's mean time on one engine step, and StepBusy
	// the share of the window the model spent in steps (the rest is the
	// engine's time between steps: HTTP, streaming, scheduling).
	StepMean float64 `json:"step_mean_ms,omitempty"`
	StepBusy float64 `json:"step_busy,omitempty"`
	// Gauges sampled during the window: running and waiting sequences,
	// the KV cache's used share (0 to 1).
	Running Gauge `json:"running"`
	Waiting Gauge `json:"waiting"`
	KV      Gauge `json:"kv_usage"`
	Samples int   `json:"samples"`
	// Policy, MaxSeqs, MaxBatchedTokens, KVTokens: the engine's settings
	// (the /v1 engine's from infer_gen_batching_info; static's and
	// naive's are their own policy with the same bounds).
	Policy           string `json:"policy,omitempty"`
	MaxSeqs          int    `json:"max_seqs,omitempty"`
	MaxBatchedTokens int    `json:"max_batched_tokens,omitempty"`
	KVTokens         int    `json:"kv_tokens,omitempty"`
	// Model and Params describe the model served (infer_gen_model_info).
	Model  string `json:"model,omitempty"`
	Params string `json:"params,omitempty"`
	// The prefix cache: whether it is on and its block size (the /v1
	// engine's, from infer_gen_batching_info), and the window's deltas
	// of prefix_cache_queries and prefix_cache_hits (prompt tokens of
	// requests started, and of those found cached) with their ratio.
	PrefixCache   *bool   `json:"prefix_cache,omitempty"`
	BlockSize     int     `json:"block_size,omitempty"`
	PrefixQueries float64 `json:"prefix_cache_queries,omitempty"`
	PrefixHits    float64 `json:"prefix_cache_hits,omitempty"`
	PrefixHitRate float64 `json:"prefix_hit_rate,omitempty"`
}

// LLMPrefix is what a point's completed requests said of the server's
// prefix cache (usage.prompt_tokens_details.cached_tokens, else infer's
// Server-Timing "cached;desc=N"), over those that said it.
type LLMPrefix struct {
	Reported     int   `json:"reported"` // completed requests that said their cached tokens
	PromptTokens int64 `json:"prompt_tokens"`
	CachedTokens int64 `json:"cached_tokens"`
	// HitRate is CachedTokens / PromptTokens: the clients' view of the
	// hit rate.
	HitRate float64 `json:"hit_rate"`
	// A request is a hit when at least HitShare of its prompt tokens
	// were cached (a shared first block alone does not make one), else a
	// miss; their TTFTs apart.
	HitShare float64 `json:"hit_share"`
	Hits     int     `json:"hits"`
	Misses   int     `json:"misses"`
	TTFTHit  MsStats `json:"ttft_hit_ms"`
	TTFTMiss MsStats `json:"ttft_miss_ms"`
}

// TraceCache is the hit rate a trace replay's window allows, computed from
// its hash ids before the run: the share of its prompt tokens (Queries)
// that a prefix cache of blocks of BlockSize tokens finds, unbounded and
// with LRU at Capacity blocks (the server's KV capacity; 0 when unknown).
type TraceCache struct {
	Requests  int     `json:"requests"`
	Queries   int64   `json:"queries"`
	Unbounded float64 `json:"unbounded"`
	LRU       float64 `json:"lru,omitempty"`
	Capacity  int     `json:"capacity_blocks,omitempty"`
	BlockSize int     `json:"block_size"`
	// Warm is set when a repeat ran on a server whose cache held earlier
	// load (not restarted since), which the figures above do not model.
	Warm bool `json:"warm,omitempty"`
}

// OnOff renders a setting that is on or off.
func OnOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// LLMTurn is the TTFT of the requests of one turn of multi-turn
// sessions, with their mean prompt and cached tokens.
type LLMTurn struct {
	Turn         int     `json:"turn"`
	TTFT         MsStats `json:"ttft_ms"`
	PromptTokens float64 `json:"prompt_tokens_mean"`
	CachedTokens float64 `json:"cached_tokens_mean,omitempty"`
}

// LLMTiming sums up the Server-Timing headers of completed requests: how
// many carried one, and the server's mean queue time and time to first
// token by its own clock (from its read of the request to its write of
// the first token), in milliseconds.
type LLMTiming struct {
	Timed     int     `json:"timed"`
	QueueMean float64 `json:"queue_mean_ms"`
	TTFTMean  float64 `json:"ttft_mean_ms"`
}

// Gauge is a gauge's mean and maximum over samples.
type Gauge struct {
	Mean float64 `json:"mean"`
	Max  float64 `json:"max"`
}

// TokenSources counts completed requests by where their output token
// count came from.
type TokenSources struct {
	Usage     int `json:"usage"`               // the server's usage
	Tokenizer int `json:"tokenizer,omitempty"` // no usage: the client's tokenizer over the text
	Chunks    int `json:"chunks,omitempty"`    // no usage, no tokenizer: one token per content chunk
}

// FromIntended are latencies measured from the intended send time.
type FromIntended struct {
	TTFT MsStats `json:"ttft_ms"`
	E2EL MsStats `json:"e2el_ms"`
}

// LLMHistograms keep the distributions, for CDFs and for merging.
type LLMHistograms struct {
	TTFT *Histogram `json:"ttft"`
	TPOT *Histogram `json:"tpot"`
	ITL  *Histogram `json:"itl"`
	E2EL *Histogram `json:"e2el"`
	// TTFTHit and TTFTMiss split TTFT by LLMPrefix's hits and misses;
	// Turns by turn (LLM.Turns).
	TTFTHit  *Histogram   `json:"ttft_hit,omitempty"`
	TTFTMiss *Histogram   `json:"ttft_miss,omitempty"`
	Turns    []*Histogram `json:"turns,omitempty"`
}

// Span is one sampled request, its times from the window's start:
// intended send, actual send, first and last content chunk (0 when none),
// and the end of its answer (a failure's, or its cut-off's).
type Span struct {
	Intended     Duration `json:"intended"`
	Sent         Duration `json:"sent"`
	FirstToken   Duration `json:"first_token,omitzero"`
	LastToken    Duration `json:"last_token,omitzero"`
	End          Duration `json:"end,omitzero"`
	OutputTokens int      `json:"output_tokens,omitempty"`
	OK           bool     `json:"ok"`
}

// LLMSLO are an LLM point's thresholds; a zero field is not checked. The
// three latencies are per-request thresholds for goodput (a request is
// good when its TTFT, TPOT and E2EL are each at most the threshold, as
// vLLM's --goodput) and also bounds on the point's p99.
type LLMSLO struct {
	TTFT       Duration `json:"ttft,omitzero"`
	TPOT       Duration `json:"tpot,omitzero"`
	E2EL       Duration `json:"e2el,omitzero"`
	MinGoodput float64  `json:"min_goodput,omitzero"` // good requests per second at least
	// MinGoodFraction: the share of good requests at least (GoodFraction).
	MinGoodFraction float64 `json:"min_good_fraction,omitzero"`
}

// Good reports whether a request of these latencies meets s. A request of
// one output token has no TPOT and meets any TPOT threshold.
func (s LLMSLO) Good(ttft, tpot, e2el time.Duration) bool {
	return (s.TTFT == 0 || ttft <= s.TTFT.D()) &&
		(s.TPOT == 0 || tpot <= s.TPOT.D()) &&
		(s.E2EL == 0 || e2el <= s.E2EL.D())
}

// Misses lists the thresholds l missed, in words: p99s above their bound,
// goodput below its floor.
func (s LLMSLO) Misses(l *LLM) []string {
	var out []string
	p99 := func(name string, m MsStats, bound Duration) {
		switch {
		case bound == 0:
		case m.N == 0:
			out = append(out, name+" p99 unknown: no observation")
		case m.P99 > bound.Ms():
			out = append(out, fmt.Sprintf("%s p99 %v > %v", name, roundMs(m.P99), bound.D()))
		}
	}
	p99("TTFT", l.TTFT, s.TTFT)
	p99("TPOT", l.TPOT, s.TPOT)
	p99("E2EL", l.E2EL, s.E2EL)
	if s.MinGoodput > 0 && l.GoodputPerS < s.MinGoodput {
		out = append(out, fmt.Sprintf("goodput %.2f/s < %v/s", l.GoodputPerS, s.MinGoodput))
	}
	if f := l.GoodFraction(); s.MinGoodFraction > 0 && f < s.MinGoodFraction {
		out = append(out, fmt.Sprintf("good %.1f%% < %g%%", 100*f, 100*s.MinGoodFraction))
	}
	return out
}

// LLM flags, beyond FlagCoordinatedOmission, FlagScheduleLag (measured on
// TTFT: from the intended send its p99 passes the one from the actual
// send by over 10 % and the bound), FlagGeneratorSaturated, FlagErrors
// and FlagNoSuccess, which keep their meaning.
const (
	// FlagNoUsage: some streams had no usage chunk; their output tokens
	// were counted by the client (TokenSource says how), which may
	// disagree with the server's tokenizer.
	FlagNoUsage = "no-usage"
	// FlagNotStreamed: streaming was asked for, but some answers came as
	// one body, so their TTFT is their E2EL.
	FlagNotStreamed = "not-streamed"
)

// MsStats summarises a latency distribution in milliseconds, rounded to
// the microsecond. N is the number of observations.
type MsStats struct {
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
	N    uint64  `json:"n"`
}

// MsStatsOf summarises h as Percentiles does, in milliseconds (all zero
// when h is empty).
func MsStatsOf(h *Histogram) MsStats {
	if h == nil || h.Count() == 0 {
		return MsStats{}
	}
	p := h.Percentiles()
	ms := func(d Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }
	return MsStats{Mean: ms(p.Mean), P50: ms(p.P50), P90: ms(p.P90), P99: ms(p.P99), P999: ms(p.P999), Max: ms(p.Max), N: h.Count()}
}

// roundMs renders milliseconds as a duration of about 3 significant
// digits: 3.18s, 41.2ms.
func roundMs(ms float64) time.Duration {
	d := time.Duration(ms * float64(time.Millisecond))
	for unit := time.Duration(1); unit < time.Hour; unit *= 10 {
		if d < 1000*unit {
			return d.Round(unit)
		}
	}
	return d.Round(time.Second)
}
