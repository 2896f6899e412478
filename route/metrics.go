package route

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the router's collectors. Per-replica children are resolved
// once, when a replica joins, and deleted when it leaves.
type metrics struct {
	requests  *prometheus.CounterVec   // {replica, code}
	errors    *prometheus.CounterVec   // {replica, kind}
	inFlight  *prometheus.GaugeVec     // {replica}
	picks     *prometheus.CounterVec   // {replica, reason}
	ejections *prometheus.CounterVec   // {replica}
	ready     *prometheus.GaugeVec     // {replica}
	start     *prometheus.HistogramVec // {replica}
	refused   *prometheus.CounterVec   // {code}: answered by the router without a replica
}

// Kinds of infer_route_errors_total.
const (
	errConnect  = "connect"   // no connection, or it broke before the request was written: retried
	errTimeout  = "timeout"   // the request's deadline passed before the answer
	errBroken   = "broken"    // the connection broke after the request was written, before the answer
	errCut      = "cut"       // the answer broke off mid-body (a stream gets an error event)
	errRefused  = "refused"   // 429 or 503: retried when another replica is left
	errServer   = "server"    // 500, 502 or 504 from the replica
	errProbe    = "probe"     // a health check failed
	errScrape   = "scrape"    // reading /metrics failed
	errClient   = "client"    // the client left before the answer ended
	errSlowRead = "slow_read" // the client did not read the answer within the write timeout
)

func newMetrics() *metrics {
	return &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "infer_route_requests_total",
			Help: "Answers from each replica passed to clients, by status code."}, []string{"replica", "code"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "infer_route_errors_total",
			Help: "Failures by replica and kind: connect (retried), timeout, broken (before the answer), cut (mid-answer), refused (429/503), server (500/502/504), probe, scrape, client (left), slow_read."},
			[]string{"replica", "kind"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "infer_route_in_flight_requests",
			Help: "Requests sent to each replica and not finished."}, []string{"replica"}),
		picks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "infer_route_picks_total",
			Help: "Picks of each replica by reason: policy (plain choice), affinity (key's or prefix's home), fallback (affinity given up), retry."},
			[]string{"replica", "reason"}),
		ejections: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "infer_route_ejections_total",
			Help: "Times each replica was taken out of rotation by failures or health checks."}, []string{"replica"}),
		ready: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "infer_route_replica_ready",
			Help: "1 while a replica may be picked (ready and not drained), else 0."}, []string{"replica"}),
		start: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "infer_route_response_start_seconds",
			Help:    "Time from sending a request to a replica to its answer's headers.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18)}, []string{"replica"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "infer_route_refused_total",
			Help: "Requests the router answered itself, by status code (503 no replica ready, 413, 400, …)."}, []string{"code"}),
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.errors, m.inFlight, m.picks, m.ejections, m.ready, m.start, m.refused}
}

// replicaMetrics are one replica's resolved children.
type replicaMetrics struct {
	m        *metrics
	name     string
	inFlight prometheus.Gauge
	picks    [numReasons]prometheus.Counter
	eject    prometheus.Counter
	ready    prometheus.Gauge
	start    prometheus.Observer

	mu    sync.RWMutex
	codes map[int]prometheus.Counter
	errs  map[string]prometheus.Counter
}

func (m *metrics) forReplica(name string) *replicaMetrics {
	rm := &replicaMetrics{m: m, name: name,
		inFlight: m.inFlight.WithLabelValues(name),
		eject:    m.ejections.WithLabelValues(name),
		ready:    m.ready.WithLabelValues(name),
		start:    m.start.WithLabelValues(name),
		codes:    map[int]prometheus.Counter{},
		errs:     map[string]prometheus.Counter{},
	}
	for r := range numReasons {
		rm.picks[r] = m.picks.WithLabelValues(name, r.String())
	}
	return rm
}

// drop deletes a departed replica's series.
func (m *metrics) drop(name string) {
	l := prometheus.Labels{"replica": name}
	m.requests.DeletePartialMatch(l)
	m.errors.DeletePartialMatch(l)
	m.picks.DeletePartialMatch(l)
	m.inFlight.Delete(l)
	m.ejections.Delete(l)
	m.ready.Delete(l)
	m.start.Delete(l)
}

func (rm *replicaMetrics) answered(code int) {
	rm.mu.RLock()
	c := rm.codes[code]
	rm.mu.RUnlock()
	if c == nil {
		c = rm.m.requests.WithLabelValues(rm.name, strconv.Itoa(code))
		rm.mu.Lock()
		rm.codes[code] = c
		rm.mu.Unlock()
	}
	c.Inc()
}

func (rm *replicaMetrics) failed(kind string) {
	rm.mu.RLock()
	c := rm.errs[kind]
	rm.mu.RUnlock()
	if c == nil {
		c = rm.m.errors.WithLabelValues(rm.name, kind)
		rm.mu.Lock()
		rm.errs[kind] = c
		rm.mu.Unlock()
	}
	c.Inc()
}
