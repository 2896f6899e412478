package target

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/inferhq/infer/loadgen/record"
	"github.com/inferhq/infer/server/metric"
)

// An infer generation server's metrics (infer_gen_*, vLLM's with
// infer_gen_ for vllm:), read for one endpoint label (v1, static, naive).

// GenCounters are one endpoint's counters, histograms and gauges at one
// scrape, summed over servers: running and waiting sequences and the KV
// cache's used share (summed too: the caller averages it) are read live.
type GenCounters struct {
	ttft                                    histo
	tpot, e2e, queue                        sumCount
	success, prompt, generated, preemptions float64
	prefixQueries, prefixHits               float64
	stepBatch, stepDur                      sumCount
	Running, Waiting, KV                    float64
}

type sumCount struct{ sum, count float64 }

// histo is a Prometheus histogram: cumulative counts by upper bound.
type histo struct {
	sumCount
	le map[float64]float64
}

func (h *histo) add(o histo) {
	h.sum += o.sum
	h.count += o.count
	for le, n := range o.le {
		if h.le == nil {
			h.le = make(map[float64]float64)
		}
		h.le[le] += n
	}
}

// fields maps the names of the samples genOf sums to where they go in c.
func (c *GenCounters) fields() map[string]*float64 {
	m := map[string]*float64{
		metric.GenRequestSuccess:  &c.success,
		metric.GenPromptTokens:    &c.prompt,
		metric.GenGeneratedTokens: &c.generated,
		metric.GenPreemptions:     &c.preemptions,
		metric.GenRunning:         &c.Running,
		metric.GenWaiting:         &c.Waiting,
		metric.GenKVUsage:         &c.KV,

		metric.GenPrefixCacheQueries: &c.prefixQueries,
		metric.GenPrefixCacheHits:    &c.prefixHits,
	}
	for name, sc := range map[string]*sumCount{
		metric.GenTTFT:         &c.ttft.sumCount,
		metric.GenTPOT:         &c.tpot,
		metric.GenE2E:          &c.e2e,
		metric.GenQueueTime:    &c.queue,
		metric.GenStepBatch:    &c.stepBatch,
		metric.GenStepDuration: &c.stepDur,
	} {
		m[name+metric.Sum], m[name+metric.Count] = &sc.sum, &sc.count
	}
	return m
}

// GenOf picks the infer_gen_* samples of the endpoint label (GenLabel);
// ok is false when there are none.
func GenOf(samples []Sample, label string) (c GenCounters, ok bool) {
	fields := c.fields()
	for _, s := range samples {
		if !strings.HasPrefix(s.Name, metric.GenPrefix) || s.Labels["endpoint"] != label {
			continue
		}
		ok = true
		if s.Name == metric.GenTTFT+metric.Bucket {
			le, err := strconv.ParseFloat(s.Labels["le"], 64) // "+Inf" parses as +Inf
			if err != nil {
				continue
			}
			if c.ttft.le == nil {
				c.ttft.le = make(map[float64]float64)
			}
			c.ttft.le[le] += s.Value
		} else if f := fields[s.Name]; f != nil {
			*f += s.Value
		}
	}
	return c, ok
}

// Add sums o into c (a deployment of several frontends); the KV usage,
// a share, is averaged by the caller.
func (c *GenCounters) Add(o GenCounters) {
	c.ttft.add(o.ttft)
	for _, p := range []struct{ a, b *sumCount }{{&c.tpot, &o.tpot}, {&c.e2e, &o.e2e}, {&c.queue, &o.queue}, {&c.stepBatch, &o.stepBatch}, {&c.stepDur, &o.stepDur}} {
		p.a.sum += p.b.sum
		p.a.count += p.b.count
	}
	c.success += o.success
	c.prompt += o.prompt
	c.generated += o.generated
	c.preemptions += o.preemptions
	c.prefixQueries += o.prefixQueries
	c.prefixHits += o.prefixHits
	c.Running += o.Running
	c.Waiting += o.Waiting
	c.KV += o.KV
}

// GenDelta is the server's side of a measured window: the counters'
// deltas from begin to end, over window.
func GenDelta(begin, end GenCounters, window time.Duration) *record.LLMServer {
	ms := func(sum, count float64) float64 {
		if count <= 0 {
			return 0
		}
		return record.Round3(sum / count * 1e3)
	}
	d := func(f func(GenCounters) sumCount) (float64, float64) {
		a, b := f(begin), f(end)
		return b.sum - a.sum, b.count - a.count
	}
	s := &record.LLMServer{
		Requests:      end.success - begin.success,
		PromptTokens:  end.prompt - begin.prompt,
		Preemptions:   end.preemptions - begin.preemptions,
		PrefixQueries: end.prefixQueries - begin.prefixQueries,
		PrefixHits:    end.prefixHits - begin.prefixHits,
	}
	if s.PrefixQueries > 0 {
		s.PrefixHitRate = record.Round3(s.PrefixHits / s.PrefixQueries)
	}
	s.TTFTMean = ms(d(func(c GenCounters) sumCount { return c.ttft.sumCount }))
	s.TPOTMean = ms(d(func(c GenCounters) sumCount { return c.tpot }))
	s.E2ELMean = ms(d(func(c GenCounters) sumCount { return c.e2e }))
	s.QueueMean = ms(d(func(c GenCounters) sumCount { return c.queue }))
	if sum, n := d(func(c GenCounters) sumCount { return c.stepBatch }); n > 0 {
		s.StepBatch = record.Round3(sum / n)
	}
	s.StepMean = ms(d(func(c GenCounters) sumCount { return c.stepDur }))
	if secs := window.Seconds(); secs > 0 {
		s.OutputTokensPerS = record.Round3((end.generated - begin.generated) / secs)
		stepSecs, _ := d(func(c GenCounters) sumCount { return c.stepDur })
		s.StepBusy = record.Round3(stepSecs / secs)
	}
	buckets := make(map[float64]float64, len(end.ttft.le))
	for le, n := range end.ttft.le {
		buckets[le] = n - begin.ttft.le[le]
	}
	s.TTFTP50 = record.Round3(bucketQuantile(0.5, buckets) * 1e3)
	s.TTFTP99 = record.Round3(bucketQuantile(0.99, buckets) * 1e3)
	return s
}

// bucketQuantile estimates the q-quantile of a Prometheus histogram's
// cumulative bucket counts as PromQL's histogram_quantile does: linearly
// within the bucket that holds it (from 0 for the first), the highest
// finite bound when it falls in +Inf's. 0 when the histogram is empty.
func bucketQuantile(q float64, cum map[float64]float64) float64 {
	les := slices.Sorted(func(yield func(float64) bool) {
		for le := range cum {
			if !yield(le) {
				return
			}
		}
	})
	if len(les) == 0 {
		return 0
	}
	total := cum[les[len(les)-1]]
	if total <= 0 {
		return 0
	}
	rank := q * total
	prevLE, prevN := 0.0, 0.0
	for _, le := range les {
		n := cum[le]
		if n >= rank {
			if math.IsInf(le, 1) {
				return prevLE
			}
			if n == prevN {
				return le
			}
			return prevLE + (le-prevLE)*(rank-prevN)/(n-prevN)
		}
		prevLE, prevN = le, n
	}
	return prevLE
}

// GenInfo is what a generation server's info metrics say: the /v1
// engine's settings (infer_gen_batching_info) and the model
// (infer_gen_model_info).
type GenInfo struct {
	OK                                  bool // the server has infer_gen_batching_info
	Policy                              string
	MaxSeqs, MaxBatchedTokens, KVTokens int
	MaxLatency                          time.Duration
	Model, Backend, Params              string

	// PrefixCache is whether the prefix cache is on (nil when the
	// metric does not say), BlockSize its block size in tokens.
	PrefixCache *bool
	BlockSize   int
}

// GenInfoOf reads the generation info metrics out of samples.
func GenInfoOf(samples []Sample) GenInfo {
	var g GenInfo
	for _, s := range samples {
		l := s.Labels
		switch s.Name {
		case metric.GenBatchingInfo:
			g.OK = true
			g.Policy = l["policy"]
			g.MaxSeqs, _ = strconv.Atoi(l["max_seqs"])
			g.MaxBatchedTokens, _ = strconv.Atoi(l["max_batched_tokens"])
			g.KVTokens, _ = strconv.Atoi(l["kv_tokens"])
			g.MaxLatency, _ = time.ParseDuration(l["max_latency"])
			if on, err := strconv.ParseBool(l["prefix_cache"]); err == nil {
				g.PrefixCache = &on
			}
			g.BlockSize, _ = strconv.Atoi(l["block_size"])
		case metric.GenModelInfo:
			g.Model, g.Backend, g.Params = l["model"], l["backend"], l["params"]
		}
	}
	return g
}

// SimCosts reads a simulated model's step costs from its params
// ("step=8ms per_seq=250µs per_prefill_token=20µs …"); ok is false when
// they are not all there.
func SimCosts(params string) (step, perSeq, perPrefill time.Duration, ok bool) {
	found := 0
	for _, f := range strings.Fields(params) {
		k, v, _ := strings.Cut(f, "=")
		d, err := time.ParseDuration(v)
		if err != nil {
			continue
		}
		switch k {
		case "step":
			step, found = d, found+1
		case "per_seq":
			perSeq, found = d, found+1
		case "per_prefill_token":
			perPrefill, found = d, found+1
		}
	}
	return step, perSeq, perPrefill, found == 3
}

// IdealTokens is the steady-state ideal output tokens/s of the simulated
// model at slots sequences (DESIGN.md): Lo / (Lo·(step/B + per_seq) +
// per_prefill_token·Lp), from the mean output and prompt tokens served.
func IdealTokens(step, perSeq, perPrefill time.Duration, slots int, lo, lp float64) float64 {
	if slots < 1 || lo <= 0 {
		return 0
	}
	den := lo*(step.Seconds()/float64(slots)+perSeq.Seconds()) + perPrefill.Seconds()*lp
	if den <= 0 {
		return 0
	}
	return lo / den
}
