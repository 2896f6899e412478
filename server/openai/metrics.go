package openai

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inferhq/infer/server/generate"
	"github.com/inferhq/infer/server/metric"
)

// Metrics are named after vLLM's (vllm:X is infer_gen_X here) so that
// dashboards map; the endpoint label is v1, static or naive. Those that
// infer bench reads back are named in package metric.
type metrics struct {
	requests     *prometheus.CounterVec
	success      *prometheus.CounterVec
	aborted      *prometheus.CounterVec
	inFlight     *prometheus.GaugeVec
	ttft         *prometheus.HistogramVec
	tpot         *prometheus.HistogramVec
	e2e          *prometheus.HistogramVec
	queue        *prometheus.HistogramVec
	promptTokens *prometheus.CounterVec
	genTokens    *prometheus.CounterVec
	preemptions  *prometheus.CounterVec
	cacheQueries *prometheus.CounterVec
	cacheHits    *prometheus.CounterVec
	stepDur      *prometheus.HistogramVec
	stepBatch    *prometheus.HistogramVec
	stepTokens   *prometheus.HistogramVec
	gauges       []prometheus.Collector
}

// epMetrics are one endpoint's resolved children: no label hashing on the
// hot path.
type epMetrics struct {
	name         string
	m            *metrics
	inFlight     prometheus.Gauge
	ttft         prometheus.Observer
	tpot         prometheus.Observer
	e2e          prometheus.Observer
	queue        prometheus.Observer
	promptTokens prometheus.Counter
	genTokens    prometheus.Counter
	preemptions  prometheus.Counter
	cacheQueries prometheus.Counter
	cacheHits    prometheus.Counter
	stepDur      prometheus.Observer
	stepBatch    prometheus.Observer
	stepTokens   prometheus.Observer

	mu    sync.RWMutex
	codes map[int]prometheus.Counter
}

var (
	latencyBuckets = prometheus.ExponentialBuckets(0.001, 2, 17)  // 1 ms to ~65 s
	tokenBuckets   = prometheus.ExponentialBuckets(0.0005, 2, 14) // 0.5 ms to ~4 s
	stepBuckets    = prometheus.ExponentialBuckets(0.0005, 1.5, 20)
	batchBuckets   = []float64{1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024}
	tokensBuckets  = []float64{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}
)

func newMetrics(s *Service) *metrics {
	ep := []string{"endpoint"}
	// counter and hist define the vectors by endpoint (and more labels).
	counter := func(name, help string, more ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, append([]string{"endpoint"}, more...))
	}
	hist := func(name, help string, buckets []float64) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, ep)
	}
	m := &metrics{
		requests: counter("infer_gen_requests_total",
			"Generation requests by endpoint and HTTP status (499: the client went away).", "code"),
		success: counter(metric.GenRequestSuccess,
			"Requests that finished, by finish reason (stop, length).", "finished_reason"),
		aborted: counter("infer_gen_requests_aborted_total",
			"Requests that ended before finishing, by reason (client_gone, deadline, slow_reader, write_failed, model_error).", "reason"),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "infer_gen_in_flight_requests",
			Help: "Generation requests being handled."}, ep),
		ttft: hist(metric.GenTTFT,
			"Time from a request's arrival to its first token (first event written, for a stream).", latencyBuckets),
		tpot: hist(metric.GenTPOT,
			"Per request: (e2e latency - time to first token) / (output tokens - 1).", tokenBuckets),
		e2e: hist(metric.GenE2E,
			"Time from a request's arrival to its last token.", latencyBuckets),
		queue: hist(metric.GenQueueTime,
			"Time a request waited before its first step.", latencyBuckets),
		promptTokens: counter(metric.GenPromptTokens,
			"Prompt tokens of admitted requests."),
		genTokens: counter(metric.GenGeneratedTokens,
			"Tokens generated."),
		preemptions: counter(metric.GenPreemptions,
			"Sequences preempted (their KV freed, to be recomputed) to make room."),
		cacheQueries: counter(metric.GenPrefixCacheQueries,
			"Prompt tokens of requests started while the prefix cache is on (vLLM's prefix_cache_queries)."),
		cacheHits: counter(metric.GenPrefixCacheHits,
			"Of those, the tokens found in the prefix cache, whose KV was reused (vLLM's prefix_cache_hits)."),
		stepDur: hist(metric.GenStepDuration,
			"Time the model spent on one engine step.", stepBuckets),
		stepBatch: hist(metric.GenStepBatch,
			"Sequences in one engine step (a static batch's finished rows included).", batchBuckets),
		stepTokens: hist("infer_gen_iteration_tokens_total",
			"Tokens fed to the model in one engine step (decodes plus prefill).", tokensBuckets),
	}
	for _, e := range s.eps {
		e.m = &epMetrics{
			name: e.name, m: m, codes: make(map[int]prometheus.Counter),
			inFlight:     m.inFlight.WithLabelValues(e.name),
			ttft:         m.ttft.WithLabelValues(e.name),
			tpot:         m.tpot.WithLabelValues(e.name),
			e2e:          m.e2e.WithLabelValues(e.name),
			queue:        m.queue.WithLabelValues(e.name),
			promptTokens: m.promptTokens.WithLabelValues(e.name),
			genTokens:    m.genTokens.WithLabelValues(e.name),
			preemptions:  m.preemptions.WithLabelValues(e.name),
			cacheQueries: m.cacheQueries.WithLabelValues(e.name),
			cacheHits:    m.cacheHits.WithLabelValues(e.name),
			stepDur:      m.stepDur.WithLabelValues(e.name),
			stepBatch:    m.stepBatch.WithLabelValues(e.name),
			stepTokens:   m.stepTokens.WithLabelValues(e.name),
		}
		labels := prometheus.Labels{"endpoint": e.name}
		gauge := func(name, help string, f func(*generate.Engine) float64) prometheus.Collector {
			return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels}, func() float64 {
				if e.engine == nil {
					return 0
				}
				return f(e.engine)
			})
		}
		m.gauges = append(m.gauges,
			gauge(metric.GenRunning, "Sequences running (in the batch).", func(g *generate.Engine) float64 { return float64(g.Running()) }),
			gauge(metric.GenWaiting, "Requests waiting to start.", func(g *generate.Engine) float64 { return float64(g.Waiting()) }),
			gauge(metric.GenKVUsage, "Fraction of the KV capacity in use (0 to 1).", func(g *generate.Engine) float64 { return g.KVUsage() }),
		)
	}
	info := prometheus.NewGauge(prometheus.GaugeOpts{Name: metric.GenModelInfo,
		Help:        "The generative model served and its settings (a simulated model's costs); always 1.",
		ConstLabels: prometheus.Labels{"model": s.info.Name, "backend": s.info.Backend, "params": s.info.Params}})
	info.Set(1)
	m.gauges = append(m.gauges, batchingCollector{s}, info)
	return m
}

func (m *metrics) collectors() []prometheus.Collector {
	return append([]prometheus.Collector{m.requests, m.success, m.aborted, m.inFlight, m.ttft, m.tpot, m.e2e, m.queue,
		m.promptTokens, m.genTokens, m.preemptions, m.cacheQueries, m.cacheHits, m.stepDur, m.stepBatch, m.stepTokens}, m.gauges...)
}

// observeStep runs on the engine's goroutine after each step.
func (e *epMetrics) observeStep(si generate.StepInfo) {
	e.stepDur.Observe(si.Duration.Seconds())
	e.stepBatch.Observe(float64(si.Seqs))
	e.stepTokens.Observe(float64(si.Decodes + si.PrefillTokens))
	if si.Generated > 0 {
		e.genTokens.Add(float64(si.Generated))
	}
	if si.Preempted > 0 {
		e.preemptions.Add(float64(si.Preempted))
	}
	if si.PrefixQueries > 0 {
		e.cacheQueries.Add(float64(si.PrefixQueries))
		e.cacheHits.Add(float64(si.PrefixHits))
	}
}

// request counts one answered request.
func (e *epMetrics) request(code int) {
	e.mu.RLock()
	c, ok := e.codes[code]
	e.mu.RUnlock()
	if !ok {
		c = e.m.requests.WithLabelValues(e.name, strconv.Itoa(code))
		e.mu.Lock()
		e.codes[code] = c
		e.mu.Unlock()
	}
	c.Inc()
}

// finished observes a request that finished.
func (e *epMetrics) finished(res generate.Result, ttft, e2e time.Duration) {
	e.m.success.WithLabelValues(e.name, string(res.Finish)).Inc()
	e.ttft.Observe(ttft.Seconds())
	e.e2e.Observe(e2e.Seconds())
	e.queue.Observe(res.Queue.Seconds())
	if res.CompletionTokens > 1 {
		e.tpot.Observe((e2e - ttft).Seconds() / float64(res.CompletionTokens-1))
	}
}

// failed counts a request that ended with an error, by its cause.
func (e *epMetrics) failed(err *apiError) {
	switch err.Code {
	case "client_closed":
		e.aborted("client_gone")
	case "deadline_exceeded":
		e.aborted("deadline")
	case "slow_reader", "model_error":
		e.aborted(err.Code)
	}
}

func (e *epMetrics) aborted(reason string) { e.m.aborted.WithLabelValues(e.name, reason).Inc() }

// batchingCollector reports the /v1 engine's settings in effect, which the
// admin API may change at run time.
type batchingCollector struct{ s *Service }

var batchingDesc = prometheus.NewDesc(metric.GenBatchingInfo,
	"The /v1 generation engine's settings in effect; always 1.",
	[]string{"policy", "max_seqs", "max_batched_tokens", "kv_tokens", "max_latency", "prefix_cache", "block_size"}, nil)

func (c batchingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- batchingDesc }

func (c batchingCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.batching()
	ch <- prometheus.MustNewConstMetric(batchingDesc, prometheus.GaugeValue, 1,
		string(st.Policy), strconv.Itoa(st.MaxSeqs), strconv.Itoa(st.MaxBatchedTokens), strconv.Itoa(st.KVTokens), st.MaxLatency,
		strconv.FormatBool(st.PrefixCache), strconv.Itoa(st.BlockSize))
}
