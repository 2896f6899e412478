package encoder

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inferhq/infer/server"
	"github.com/inferhq/infer/server/batch"
	"github.com/inferhq/infer/server/metric"
)

// Endpoint labels. v2 requests run on the batched path but are counted apart.
const (
	endpointNaive   = "naive"
	endpointBatched = "batched"
	endpointV2      = "v2"
	// OpenAI's /v1/embeddings and /naive/v1/embeddings.
	endpointEmbeddings      = "embeddings"
	endpointNaiveEmbeddings = "naive_embeddings"
)

// metrics holds the service's collectors, served on the host's /metrics.
type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	inFlight *prometheus.GaugeVec
	queueDur *prometheus.HistogramVec
	batch    *prometheus.HistogramVec
	compute  *prometheus.HistogramVec
	items    *prometheus.CounterVec
	dropped  *prometheus.CounterVec
	failed   *prometheus.CounterVec
	padding  *prometheus.HistogramVec
	calls    *prometheus.CounterVec
	refused  *prometheus.CounterVec

	cacheHits   prometheus.Counter
	cacheMisses prometheus.Counter
	extra       []prometheus.Collector // gauges and the batching settings

	naive, batched, v2          *epMetrics // each endpoint's, resolved once
	embeddings, naiveEmbeddings *epMetrics
}

// epMetrics holds one endpoint's resolved children, so that the hot path does
// no label hashing.
type epMetrics struct {
	duration prometheus.Observer
	queueDur prometheus.Observer
	inFlight prometheus.Gauge
	batch    prometheus.Observer
	compute  prometheus.Observer
	items    prometheus.Counter
	dropped  prometheus.Counter
	failed   prometheus.Counter
	padding  prometheus.Observer
	retries  prometheus.Counter // extra model calls spent isolating failed items

	refusedVec *prometheus.CounterVec
	mu         sync.RWMutex
	codes      map[int]prometheus.Counter
	vec        *prometheus.CounterVec
	name       string
}

func newMetrics(s *Service) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infer_requests_total", Help: "HTTP inference requests by endpoint and status code (499: client went away).",
		}, []string{"endpoint", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: metric.RequestDuration, Help: "Time from a request's arrival to its answer.", Buckets: metric.LatencyBuckets(),
		}, []string{"endpoint"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "infer_in_flight_requests", Help: "Inference requests being handled.",
		}, []string{"endpoint"}),
		queueDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: metric.QueueDuration, Help: "Time a request's items waited before their batch started.", Buckets: metric.LatencyBuckets(),
		}, []string{"endpoint"}),
		batch: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: metric.BatchSize, Help: "Items computed per batch.", Buckets: metric.BatchSizeBuckets(),
		}, []string{"endpoint"}),
		compute: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: metric.ComputeDuration, Help: "Time the model spent on one batch.", Buckets: metric.LatencyBuckets(),
		}, []string{"endpoint"}),
		items: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metric.ItemsTotal, Help: "Items computed by the model.",
		}, []string{"endpoint"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metric.DroppedItems, Help: "Items dropped before compute because their deadline passed or their client went away.",
		}, []string{"endpoint"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metric.FailedItems, Help: "Items the model failed on.",
		}, []string{"endpoint"}),
		padding: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "infer_padding_ratio", Help: "Per batch of a token model: batch size × longest item ÷ real tokens (1 = no padding).",
			Buckets: []float64{1, 1.1, 1.25, 1.5, 2, 3, 4, 6, 8},
		}, []string{"endpoint"}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infer_isolation_calls_total", Help: "Extra model calls made to find the failing items of batches that failed as a whole.",
		}, []string{"endpoint"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infer_refused_total", Help: "Requests refused at admission with 429, by reason (queue_full, deadline_unreachable).",
		}, []string{"endpoint", "reason"}),
		cacheHits:   prometheus.NewCounter(prometheus.CounterOpts{Name: "infer_cache_hits_total", Help: "Items answered from the result cache."}),
		cacheMisses: prometheus.NewCounter(prometheus.CounterOpts{Name: "infer_cache_misses_total", Help: "Items looked up in the result cache and not found."}),
	}
	m.naive = m.endpoint(endpointNaive, true)
	m.batched = m.endpoint(endpointBatched, true)
	m.v2 = m.endpoint(endpointV2, false) // v2 requests run in the batched endpoint's batches
	if s.embeds() {                      // and embeddings in the naive and batched endpoints'
		m.embeddings = m.endpoint(endpointEmbeddings, false)
		m.naiveEmbeddings = m.endpoint(endpointNaiveEmbeddings, false)
	}
	depth := func(ep string, n func() int) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "infer_queue_depth", Help: "Items admitted and not yet taken by a model instance.",
			ConstLabels: prometheus.Labels{"endpoint": ep},
		}, func() float64 { return float64(n()) })
	}
	m.extra = []prometheus.Collector{batchingCollector{s},
		depth(endpointBatched, func() int {
			if b := s.batched.Load(); b != nil {
				return b.Len()
			}
			return 0
		}),
		depth(endpointNaive, func() int {
			if n := s.naive.Load(); n != nil {
				return n.Len()
			}
			return 0
		}),
	}
	if s.cache != nil {
		m.extra = append(m.extra, m.cacheHits, m.cacheMisses, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "infer_cache_entries", Help: "Results held in the result cache.",
		}, func() float64 { return float64(s.cache.len()) }))
	}
	return m
}

// endpoint resolves the children of one endpoint label; batches says whether
// the endpoint's requests run in batches of its own (v2's run in the batched
// endpoint's, which counts them).
func (m *metrics) endpoint(name string, batches bool) *epMetrics {
	e := &epMetrics{
		duration:   m.duration.WithLabelValues(name),
		queueDur:   m.queueDur.WithLabelValues(name),
		inFlight:   m.inFlight.WithLabelValues(name),
		codes:      make(map[int]prometheus.Counter),
		vec:        m.requests,
		name:       name,
		refusedVec: m.refused,
	}
	if batches {
		e.batch = m.batch.WithLabelValues(name)
		e.compute = m.compute.WithLabelValues(name)
		e.items = m.items.WithLabelValues(name)
		e.dropped = m.dropped.WithLabelValues(name)
		e.failed = m.failed.WithLabelValues(name)
		e.padding = m.padding.WithLabelValues(name)
		e.retries = m.calls.WithLabelValues(name)
	}
	return e
}

// collectors are the service's metrics, for the host's registry.
func (m *metrics) collectors() []prometheus.Collector {
	return append([]prometheus.Collector{m.requests, m.duration, m.inFlight, m.queueDur, m.batch, m.compute,
		m.items, m.dropped, m.failed, m.padding, m.calls, m.refused}, m.extra...)
}

// request counts one answered request.
func (e *epMetrics) request(code int, took time.Duration) {
	e.mu.RLock()
	c, ok := e.codes[code]
	e.mu.RUnlock()
	if !ok {
		c = e.vec.WithLabelValues(e.name, strconv.Itoa(code))
		e.mu.Lock()
		e.codes[code] = c
		e.mu.Unlock()
	}
	c.Inc()
	e.duration.Observe(took.Seconds())
}

// answered counts a request answered with an error.
func (e *epMetrics) answered(err *server.Error, took time.Duration) {
	e.request(err.Status, took)
	if err.Status == http.StatusTooManyRequests {
		e.refusedVec.WithLabelValues(e.name, err.Code).Inc()
	}
}

func (e *epMetrics) observeBatch(info batch.Info) {
	if info.Dropped > 0 {
		e.dropped.Add(float64(info.Dropped))
	}
	if info.Size == 0 {
		return
	}
	e.batch.Observe(float64(info.Size))
	e.compute.Observe(info.Compute.Seconds())
	e.items.Add(float64(info.Size))
	if info.Failed > 0 {
		e.failed.Add(float64(info.Failed))
	}
	if info.Calls > 1 {
		e.retries.Add(float64(info.Calls - 1))
	}
	if info.Padding > 0 {
		e.padding.Observe(info.Padding)
	}
}

// batchingCollector reports the batching settings in effect, which the
// admin API may change at run time.
type batchingCollector struct{ s *Service }

var batchingDesc = prometheus.NewDesc(metric.BatchingInfo,
	"The batched endpoint's settings in effect; always 1.",
	[]string{"policy", "max_batch", "max_latency", "workers"}, nil)

func (c batchingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- batchingDesc }

func (c batchingCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.batching()
	ch <- prometheus.MustNewConstMetric(batchingDesc, prometheus.GaugeValue, 1,
		string(st.Policy), strconv.Itoa(st.Batch), st.MaxLatency.String(), strconv.Itoa(st.Workers))
}
