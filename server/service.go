package server

import (
	"context"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inferhq/infer/models"
)

// Service is an API the host serves: the encoder endpoints
// (server/encoder), the OpenAI-compatible generation API (server/openai), a
// broker worker (server/broker), a router. The host gives every service the
// same lifecycle: the listener and its connection cap, the timeouts and the
// body limit (Limits), panic recovery, /healthz, /readyz, /metrics, the
// admin token, and the drain, with Connection: close on every answer from
// its start. The host knows nothing else of a service: a new one mounts
// without a change to the host.
type Service interface {
	// Mount registers what the service serves on m: its routes and, as far
	// as it has them, its models, metrics, readiness, admin API and the
	// paths a 404 names. New calls it once; m is not used after it returns,
	// but the Limits it gives are the host's for good.
	Mount(m *Mount)
	// Run loads what the service needs, calls ready once it can serve, and
	// serves until ctx is done. ctx ending is the drain: the service then
	// refuses new work, finishes what it admitted, and returns. An error
	// before ctx ends fails the host, as a model that cannot load does.
	Run(ctx context.Context, ready func()) error
}

// Mount is a service's place on the host, handed to its Mount method. Its
// registrations are checked as they are made: a route that collides with
// another, or a metric registered twice, makes New fail with an error naming
// it.
type Mount struct {
	s   *Server
	svc Service
}

// Limits are the host's request settings (default deadline, largest body):
// read every request through them, so that every API applies them alike.
func (m *Mount) Limits() Limits { return Limits{Timeout: m.s.cfg.Timeout, MaxBody: m.s.cfg.MaxBody} }

// Handle serves pattern (http.ServeMux's syntax) with h. Patterns must not
// collide with the host's (/healthz, /readyz, /metrics) or another
// service's.
func (m *Mount) Handle(pattern string, h http.Handler) {
	if err := handle(m.s.mux, pattern, h); err != nil {
		m.fail(err)
	}
}

// Admin serves pattern with h for bearers of the host's admin token
// (Config.AdminToken), checked in constant time; without a token the
// pattern does not exist.
func (m *Mount) Admin(pattern string, h http.Handler) {
	if m.s.cfg.AdminToken != "" {
		m.Handle(pattern, m.s.authorized(h))
	}
}

// Model says that the service serves the model info describes: the host's
// infer_model_info, /readyz and logs name it. A service without a model (a
// router) says nothing.
func (m *Mount) Model(info models.Info) {
	m.s.models = append(m.s.models, info)
	m.s.metrics.info.WithLabelValues(info.Name, info.Task, info.Backend).Set(1)
}

// Collect adds the service's metrics to the host's /metrics.
func (m *Mount) Collect(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := m.s.metrics.reg.Register(c); err != nil {
			m.fail(fmt.Errorf("metrics: %w", err))
		}
	}
}

// Readiness adds a check to /readyz and infer_ready, asked at each probe
// once the service is ready (Run called ready) while the host is not
// draining: a non-nil error says why the service cannot serve now (a
// broker out of reach, no replica up) and turns them 503. An *Error gives
// /readyz its status code and reason; any other error is reported as
// "unavailable" with its text, which must then name no address or secret.
func (m *Mount) Readiness(check func() error) {
	m.s.readiness = append(m.s.readiness, check)
}

// Paths names the service's main paths in the host's 404 answers ("no
// endpoint /x; see /naive, /batched").
func (m *Mount) Paths(paths ...string) { m.s.paths = append(m.s.paths, paths...) }

func (m *Mount) fail(err error) {
	m.s.mountErrs = append(m.s.mountErrs, fmt.Errorf("mount %T: %w", m.svc, err))
}

// handle registers h at pattern on mux, turning the panic of a malformed or
// colliding pattern into an error.
func handle(mux *http.ServeMux, pattern string, h http.Handler) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("route %q: %v", pattern, v)
		}
	}()
	mux.Handle(pattern, h)
	return nil
}
