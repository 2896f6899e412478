package scenario_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/inferhq/infer/loadgen"
	"github.com/inferhq/infer/loadgen/scenario"
)

func TestParseRoute(t *testing.T) {
	sc, err := scenario.Parse("r.yaml", "", []byte(`
server:
  model: sim-lm
  replicas: 4
  timeout: 5m
  route:
    args: [--balance-abs, "8"]
payload:
  api: completions
load:
  concurrency: 8
sweep:
  max_seqs: 32
  route_policy: [round-robin, prefix]
`))
	if err != nil {
		t.Fatal(err)
	}
	if sc.Server.Replicas != 4 || !sc.Server.Routed() || !slices.Equal(sc.Sweep.RoutePolicy, []string{"round-robin", "prefix"}) {
		t.Fatalf("server %+v, sweep %+v", sc.Server, sc.Sweep)
	}
	plans := loadgen.Plans(sc)
	if len(plans) != 2 || plans[0].Group == plans[1].Group || plans[1].Settings.RoutePolicy != "prefix" || plans[1].Point.RoutePolicy != "prefix" ||
		!strings.Contains(plans[1].Point.Name, "route=prefix") {
		t.Fatalf("plans %+v", plans)
	}
	got := sc.Server.RouteFlags(plans[1].Settings, []string{"http://a:1", "http://b:2"})
	want := []string{"--upstream", "http://a:1,http://b:2", "--policy", "prefix", "--timeout", "5m0s", "--balance-abs", "8"}
	if !slices.Equal(got, want) {
		t.Errorf("route flags %q, want %q", got, want)
	}
	// The replicas' flags carry none of the router's.
	if f := sc.Server.Flags(plans[1].Settings); slices.Contains(f, "prefix") {
		t.Errorf("replica flags %q carry the route policy", f)
	}
	if _, err := sc.WithTargets([]string{"http://h:1"}); err == nil || !strings.Contains(err.Error(), "route_policy") {
		t.Errorf("WithTargets = %v, want an error naming route_policy", err)
	}
	tgt, err := scenario.Parse("t.yaml", "", []byte("target:\n  urls: http://front:80\n  replicas: [http://a:1, http://b:2/]\npayload:\n  api: chat\nload:\n  concurrency: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(tgt.Replicas, []string{"http://a:1", "http://b:2"}) {
		t.Errorf("target replicas %v", tgt.Replicas)
	}
}

func TestParseRouteErrors(t *testing.T) {
	head := "server:\n  model: sim-lm\n"
	tail := "payload:\n  api: completions\nload:\n  concurrency: 4\n"
	for _, tc := range []struct {
		name string
		src  string
		line int
		want string
	}{
		{"replicas zero", head + "  replicas: 0\n" + tail, 3, "server.replicas 0: want 1 to 16"},
		{"replicas many", head + "  replicas: 1000\n" + tail, 3, "server.replicas 1000"},
		{"route without replicas", head + "  route:\n    args: [--attempts, \"2\"]\n" + tail, 3, "server.route: set server.replicas"},
		{"upstream in args", head + "  replicas: 2\n  route:\n    args: [--upstream, http://x:1]\n" + tail, 5, "--upstream is set by infer bench"},
		{"policy in args", head + "  replicas: 2\n  route:\n    args: [--policy=hash]\n" + tail, 5, "--policy is set by infer bench"},
		{"policy without replicas", head + tail + "sweep:\n  route_policy: hash\n", 8, "sweep.route_policy: set server.replicas"},
		{"unknown policy", head + "  replicas: 2\n" + tail + "sweep:\n  route_policy: [hash, fastest]\n", 9, `sweep.route_policy "fastest": want round-robin`},
		{"bad key header", head + "  replicas: 2\npayload:\n  api: completions\n  key_header: \"X Key\"\nload:\n  concurrency: 4\n", 6, "payload.key_header"},
		{"bad target replica", "target:\n  urls: http://a:1\n  replicas: [b:2]\n" + tail, 3, "target.replicas[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := scenario.Parse("s.yaml", t.TempDir(), []byte(tc.src))
			if err == nil {
				t.Fatalf("Parse succeeded, want an error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %q, want it to contain %q", err, tc.want)
			}
			var se *scenario.ScenarioError
			if errors.As(err, &se) && se.Line != tc.line {
				t.Errorf("error at line %d, want %d (%v)", se.Line, tc.line, err)
			}
		})
	}
}
