package broker

import (
	"context"
	"math"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/inferhq/infer/server/batch"
	"github.com/inferhq/infer/server/metric"
)

// streamCollector reports the request stream's backlog and pending entries,
// asking Redis at each scrape, and whether Redis is reachable.
type streamCollector struct {
	rdb     *redis.Client
	stream  string
	up      *atomic.Bool
	backlog *prometheus.Desc
	pending *prometheus.Desc
	upDesc  *prometheus.Desc
}

func newStreamCollector(rdb *redis.Client, stream string, up *atomic.Bool) *streamCollector {
	labels := prometheus.Labels{"stream": stream}
	return &streamCollector{
		rdb: rdb, stream: stream, up: up,
		backlog: prometheus.NewDesc("infer_broker_backlog_items",
			"Items in the request stream: waiting for a worker or being computed.", nil, labels),
		pending: prometheus.NewDesc("infer_broker_pending_items",
			"Items delivered to a worker and not yet acknowledged.", nil, labels),
		upDesc: prometheus.NewDesc("infer_broker_up",
			"1 while Redis is reachable.", nil, labels),
	}
}

func (c *streamCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.backlog
	ch <- c.pending
	ch <- c.upDesc
}

// Collect asks Redis for the stream's length and pending count, waiting at
// most a second; when Redis does not answer, only infer_broker_up is sent.
func (c *streamCollector) Collect(ch chan<- prometheus.Metric) {
	up := 0.0
	if c.up.Load() {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(c.upDesc, prometheus.GaugeValue, up)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	pipe := c.rdb.Pipeline()
	xlen := pipe.XLen(ctx, c.stream)
	pend := pipe.XPending(ctx, c.stream, group)
	pipe.Exec(ctx) // errors are read per command below
	if n, err := xlen.Result(); err == nil {
		ch <- prometheus.MustNewConstMetric(c.backlog, prometheus.GaugeValue, float64(n))
	}
	if p, err := pend.Result(); err == nil {
		ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(p.Count))
	} else if isNoGroup(err) {
		ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, 0)
	}
}

// frontendMetrics are a frontend's collectors.
type frontendMetrics struct {
	stream  *streamCollector
	reply   prometheus.Histogram
	late    prometheus.Counter
	workers prometheus.GaugeFunc
	drain   prometheus.GaugeFunc
}

func newFrontendMetrics(f *Frontend) frontendMetrics {
	return frontendMetrics{
		stream: newStreamCollector(f.rdb, f.stream, &f.up),
		reply: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "infer_broker_reply_duration_seconds",
			Help:    "Time from admitting a request into the stream to receiving its last result.",
			Buckets: metric.LatencyBuckets(),
		}),
		late: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "infer_broker_late_replies_total",
			Help: "Results received for no waiting request: duplicates, or requests that timed out or failed before.",
		}),
		workers: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "infer_broker_live_workers", Help: "Workers of the model that announced themselves within the last four heartbeats.",
			ConstLabels: prometheus.Labels{"stream": f.stream},
		}, func() float64 {
			if v := f.view.Load(); v != nil {
				return float64(v.workers)
			}
			return 0
		}),
		drain: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "infer_broker_drain_items_per_second", Help: "Rate at which the request stream was measured to drain while it held items; Retry-After is the backlog over it.",
			ConstLabels: prometheus.Labels{"stream": f.stream},
		}, func() float64 { return math.Float64frombits(f.rate.Load()) }),
	}
}

func (m frontendMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.stream, m.reply, m.late, m.workers, m.drain}
}

// workerMetrics are a worker's collectors.
type workerMetrics struct {
	stream    *streamCollector
	batch     prometheus.Histogram
	compute   prometheus.Histogram
	items     prometheus.Counter
	failed    prometheus.Counter
	expired   prometheus.Counter
	claims    prometheus.Counter
	abandoned prometheus.Counter
	cancelled prometheus.Counter
}

func newWorkerMetrics(w *Worker) *workerMetrics {
	m := &workerMetrics{
		stream: newStreamCollector(w.rdb, w.stream, &w.up),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: metric.BatchSize, Help: "Items computed per batch.", Buckets: metric.BatchSizeBuckets(),
		}),
		compute: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: metric.ComputeDuration, Help: "Time the model spent on one batch.", Buckets: metric.LatencyBuckets(),
		}),
		items: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metric.ItemsTotal, Help: "Items computed by the model.",
		}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metric.FailedItems, Help: "Items the model failed on.",
		}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metric.DroppedItems, Help: "Items answered with a deadline error without compute: their deadline had passed.",
		}),
		claims: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "infer_broker_claims_total", Help: "Entries claimed from workers that left them pending longer than the visibility timeout.",
		}),
		abandoned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "infer_broker_abandoned_items_total", Help: "Entries answered with an error because they had been delivered too many times.",
		}),
		cancelled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "infer_broker_cancelled_items_total", Help: "Entries read whose client went away before their result: skipped unless already computing.",
		}),
	}
	return m
}

func (m *workerMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.batch, m.compute, m.items, m.failed, m.expired, m.claims, m.abandoned, m.cancelled, m.stream}
}

// observeBatch is a consumer batcher's OnBatch.
func (m *workerMetrics) observeBatch(info batch.Info) {
	m.expired.Add(float64(info.Dropped))
	if info.Size == 0 {
		return
	}
	m.batch.Observe(float64(info.Size))
	m.compute.Observe(info.Compute.Seconds())
	m.items.Add(float64(info.Size))
	m.failed.Add(float64(info.Failed))
}
