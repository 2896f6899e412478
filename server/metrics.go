package server

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/inferhq/infer/server/metric"
)

// metrics is the host's registry: its own collectors (readiness, the models
// served, connections, the Go runtime and the process) and those the
// services add (Mount.Collect).
type metrics struct {
	reg  *prometheus.Registry
	info *prometheus.GaugeVec // infer_model_info, set by Mount.Model
}

func newMetrics(s *Server) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		info: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: metric.ModelInfo, Help: "The models served; always 1.",
		}, []string{"model", "task", "backend"}),
	}
	ready := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "infer_ready", Help: "1 when the services are loaded and can serve (as /readyz says) and the server is not draining.",
	}, func() float64 {
		if s.serving() {
			return 1
		}
		return 0
	})
	m.reg.MustRegister(ready, m.info, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.reg.MustRegister(s.conns.collectors()...)
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}
