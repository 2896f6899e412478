package loadgen

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

// genCounters are one endpoint's counters, histograms and gauges at one
// scrape, summed over targets.
type genCounters struct {
	ttft                                    histo
	tpot, e2e, queue                        sumCount
	success, prompt, generated, preemptions float64
	stepBatch, stepDur                      sumCount
	running, waiting, kv                    float64
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
func (c *genCounters) fields() map[string]*float64 {
	m := map[string]*float64{
		metric.GenRequestSuccess:  &c.success,
		metric.GenPromptTokens:    &c.prompt,
		metric.GenGeneratedTokens: &c.generated,
		metric.GenPreemptions:     &c.preemptions,
		metric.GenRunning:         &c.running,
		metric.GenWaiting:         &c.waiting,
		metric.GenKVUsage:         &c.kv,
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

// genOf picks the endpoint's infer_gen_* samples; ok is false when there
// are none.
func genOf(samples []sample, label string) (c genCounters, ok bool) {
	fields := c.fields()
	for _, s := range samples {
		if !strings.HasPrefix(s.name, metric.GenPrefix) || s.labels["endpoint"] != label {
			continue
		}
		ok = true
		if s.name == metric.GenTTFT+metric.Bucket {
			le, err := strconv.ParseFloat(s.labels["le"], 64) // "+Inf" parses as +Inf
			if err != nil {
				continue
			}
			if c.ttft.le == nil {
				c.ttft.le = make(map[float64]float64)
			}
			c.ttft.le[le] += s.value
		} else if f := fields[s.name]; f != nil {
			*f += s.value
		}
	}
	return c, ok
}

// add sums o into c (a deployment of several frontends); the KV usage,
// a share, is averaged by the caller.
func (c *genCounters) add(o genCounters) {
	c.ttft.add(o.ttft)
	for _, p := range []struct{ a, b *sumCount }{{&c.tpot, &o.tpot}, {&c.e2e, &o.e2e}, {&c.queue, &o.queue}, {&c.stepBatch, &o.stepBatch}, {&c.stepDur, &o.stepDur}} {
		p.a.sum += p.b.sum
		p.a.count += p.b.count
	}
	c.success += o.success
	c.prompt += o.prompt
	c.generated += o.generated
	c.preemptions += o.preemptions
	c.running += o.running
	c.waiting += o.waiting
	c.kv += o.kv
}

// genDelta is the server's side of a measured window: the counters'
// deltas from begin to end, over window.
func genDelta(begin, end genCounters, window time.Duration) *record.LLMServer {
	ms := func(sum, count float64) float64 {
		if count <= 0 {
			return 0
		}
		return round3(sum / count * 1e3)
	}
	d := func(f func(genCounters) sumCount) (float64, float64) {
		a, b := f(begin), f(end)
		return b.sum - a.sum, b.count - a.count
	}
	s := &record.LLMServer{
		Requests:     end.success - begin.success,
		PromptTokens: end.prompt - begin.prompt,
		Preemptions:  end.preemptions - begin.preemptions,
	}
	s.TTFTMean = ms(d(func(c genCounters) sumCount { return c.ttft.sumCount }))
	s.TPOTMean = ms(d(func(c genCounters) sumCount { return c.tpot }))
	s.E2ELMean = ms(d(func(c genCounters) sumCount { return c.e2e }))
	s.QueueMean = ms(d(func(c genCounters) sumCount { return c.queue }))
	if sum, n := d(func(c genCounters) sumCount { return c.stepBatch }); n > 0 {
		s.StepBatch = round3(sum / n)
	}
	s.StepMean = ms(d(func(c genCounters) sumCount { return c.stepDur }))
	if secs := window.Seconds(); secs > 0 {
		s.OutputTokensPerS = round3((end.generated - begin.generated) / secs)
		stepSecs, _ := d(func(c genCounters) sumCount { return c.stepDur })
		s.StepBusy = round3(stepSecs / secs)
	}
	buckets := make(map[float64]float64, len(end.ttft.le))
	for le, n := range end.ttft.le {
		buckets[le] = n - begin.ttft.le[le]
	}
	s.TTFTP50 = round3(bucketQuantile(0.5, buckets) * 1e3)
	s.TTFTP99 = round3(bucketQuantile(0.99, buckets) * 1e3)
	return s
}

func round3(v float64) float64 { return math.Round(v*1e3) / 1e3 }

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

// genInfo is what a generation server's info metrics say: the /v1
// engine's settings (infer_gen_batching_info) and the model
// (infer_gen_model_info).
type genInfo struct {
	ok                     bool // the server has infer_gen_batching_info
	policy                 string
	maxSeqs, mbt, kvTokens int
	maxLatency             time.Duration
	model, backend, params string
}

func genInfoOf(samples []sample) genInfo {
	var g genInfo
	for _, s := range samples {
		l := s.labels
		switch s.name {
		case metric.GenBatchingInfo:
			g.ok = true
			g.policy = l["policy"]
			g.maxSeqs, _ = strconv.Atoi(l["max_seqs"])
			g.mbt, _ = strconv.Atoi(l["max_batched_tokens"])
			g.kvTokens, _ = strconv.Atoi(l["kv_tokens"])
			g.maxLatency, _ = time.ParseDuration(l["max_latency"])
		case metric.GenModelInfo:
			g.model, g.backend, g.params = l["model"], l["backend"], l["params"]
		}
	}
	return g
}

// simCosts reads a simulated model's step costs from its params
// ("step=8ms per_seq=250µs per_prefill_token=20µs …"); ok is false when
// they are not all there.
func simCosts(params string) (step, perSeq, perPrefill time.Duration, ok bool) {
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

// idealTokens is the steady-state ideal output tokens/s of the simulated
// model at slots sequences (DESIGN.md): Lo / (Lo·(step/B + per_seq) +
// per_prefill_token·Lp), from the mean output and prompt tokens served.
func idealTokens(step, perSeq, perPrefill time.Duration, slots int, lo, lp float64) float64 {
	if slots < 1 || lo <= 0 {
		return 0
	}
	den := lo*(step.Seconds()/float64(slots)+perSeq.Seconds()) + perPrefill.Seconds()*lp
	if den <= 0 {
		return 0
	}
	return lo / den
}
