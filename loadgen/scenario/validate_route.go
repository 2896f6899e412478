package scenario

// Validation of the keys that put replicas behind a router: server.replicas,
// server.route, sweep.route_policy and target.replicas.

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/inferhq/infer/loadgen/target"
	"github.com/inferhq/infer/route"
)

// MaxReplicas bounds server.replicas: each is a process infer starts.
const MaxReplicas = 16

// routed checks server.replicas and server.route into spec.
func (v *validator) routed(s *fileServer, spec *target.Serve) {
	if s.Replicas != nil {
		spec.Replicas = *s.Replicas
		if spec.Replicas < 1 || spec.Replicas > MaxReplicas {
			v.errorf("$.server.replicas", "server.replicas %d: want 1 to %d (infer serve processes behind an infer route)", spec.Replicas, MaxReplicas)
		}
	}
	if s.Route == nil {
		return
	}
	if s.Replicas == nil {
		v.errorf("$.server.route", "server.route: set server.replicas, the servers the router fronts")
	}
	for i, a := range s.Route.Args {
		if f := target.RouteSetByBench(a); f != "" {
			v.errorf(fmt.Sprintf("$.server.route.args[%d]", i), "server.route.args: %s is set by infer bench (use sweep.route_policy or server.replicas)", f)
		}
	}
	spec.RouteArgs = s.Route.Args
}

// routePolicies checks sweep.route_policy, which needs server.replicas.
func (v *validator) routePolicies(s *fileSweep, spec *target.Serve) []string {
	if s == nil || len(s.RoutePolicy) == 0 {
		return nil
	}
	if spec == nil || !spec.Routed() {
		v.errorf("$.sweep.route_policy", "sweep.route_policy: set server.replicas, the servers an infer route fronts (a front you run yourself is a target)")
	}
	names := make([]string, len(route.Policies))
	for i, p := range route.Policies {
		names[i] = string(p)
	}
	for i, p := range s.RoutePolicy {
		if _, err := route.ParsePolicy(p); err != nil {
			v.errorf(fmt.Sprintf("$.sweep.route_policy[%d]", i), "sweep.route_policy %q: want %s", p, strings.Join(names, ", "))
		}
	}
	return s.RoutePolicy
}

// targetReplicas checks target.replicas: the base URLs of the servers
// behind the targets.
func (v *validator) targetReplicas(t *fileTarget) []string {
	if len(t.Replicas) > MaxReplicas*4 {
		v.errorf("$.target.replicas", "target.replicas: %d URLs, at most %d", len(t.Replicas), MaxReplicas*4)
	}
	out := make([]string, 0, len(t.Replicas))
	for i, s := range t.Replicas {
		if err := checkBaseURL(s); err != nil {
			v.errorf(fmt.Sprintf("$.target.replicas[%d]", i), "target.replicas[%d]: %v", i, err)
		}
		out = append(out, strings.TrimSuffix(s, "/"))
	}
	return out
}

// keyHeader checks payload.key_header: an HTTP header's name.
func (v *validator) keyHeader(h string) string {
	if h != "" && !headerRE.MatchString(h) {
		v.errorf("$.payload.key_header", "payload.key_header %q: want a header name like X-Routing-Key", h)
	}
	return h
}

var headerRE = regexp.MustCompile("^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,128}$")
