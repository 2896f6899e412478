package scenario_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/inferhq/infer/loadgen/llm"
	"github.com/inferhq/infer/loadgen/scenario"
	"github.com/inferhq/infer/loadgen/search"
)

func TestParseSearch(t *testing.T) {
	sc := mustParse(t, `
server:
  model: sim
load:
  search:
    over: rate
    from: 50
    to: 2000
    growth: 3
    tolerance: 2.5%
    max_points: 20
    repeats: 5
slo:
  p99: 500ms
`)
	s := sc.Load.Search
	want := scenario.Search{Over: "rate", From: 50, To: 2000, Growth: 3, Tolerance: 0.025, MaxPoints: 20, Repeats: 5}
	if s == nil || *s != want {
		t.Fatalf("search = %+v, want %+v", s, want)
	}
	if !sc.Load.Open() || len(sc.Load.Rates) != 0 || sc.Load.Repeats != 1 {
		t.Errorf("open %v, rates %v, repeats %d", sc.Load.Open(), sc.Load.Rates, sc.Load.Repeats)
	}
	// Without slo.max_error_rate, a search allows 1 % of failures.
	if sc.SLO.MaxErrorRate != scenario.SearchErrorRate {
		t.Errorf("max error rate = %v, want %v", sc.SLO.MaxErrorRate, scenario.SearchErrorRate)
	}
	c := s.Config()
	if c.Whole || c.From != 50 || c.MaxProbes != 20 || c.Validate() != nil {
		t.Errorf("config = %+v (%v)", c, c.Validate())
	}

	// Defaults, over clients, and a tolerance as a share.
	sc = mustParse(t, "server:\n  model: sim\nload:\n  search: {over: clients, tolerance: 0.1}\nslo:\n  p99: 1s\n  max_error_rate: 0.05\n")
	s = sc.Load.Search
	want = scenario.Search{Over: "clients", From: 1, To: 100000, Growth: search.DefaultGrowth, Tolerance: 0.1,
		MaxPoints: search.DefaultMaxProbes, Repeats: search.DefaultRepeats}
	if *s != want || sc.Load.Open() || sc.SLO.MaxErrorRate != 0.05 || !s.Config().Whole {
		t.Errorf("search = %+v, open %v, max error rate %v; want %+v, closed, 0.05", *s, sc.Load.Open(), sc.SLO.MaxErrorRate, want)
	}
	// An LLM load: streams are bounded as the client bounds them, and the
	// share of good requests is a threshold.
	sc = mustParse(t, "server:\n  model: sim-lm\npayload:\n  api: completions\nload:\n  search: {over: clients}\n  arrival: constant\nslo:\n  min_goodput_fraction: 0.9\n")
	if s := sc.Load.Search; s.To != llm.MaxStreams || sc.SLO.MinGoodputFraction != 0.9 || sc.SLO.Record().LLM().MinGoodFraction != 0.9 {
		t.Errorf("LLM search = %+v, slo %+v", s, sc.SLO)
	}
	sc = mustParse(t, "server:\n  model: sim-lm\npayload:\n  api: completions\nload:\n  search: {over: rate, from: 0.5, to: 20}\n  arrival: poisson\nslo:\n  ttft_p99: 1s\n")
	if s := sc.Load.Search; s.From != 0.5 || s.To != 20 || sc.Load.Arrival != "poisson" {
		t.Errorf("LLM rate search = %+v, arrival %s", s, sc.Load.Arrival)
	}
}

// TestParseSearchErrors: bad search keys are errors at their line, typos
// with a suggestion.
func TestParseSearchErrors(t *testing.T) {
	head := "server:\n  model: sim\nload:\n"
	slo := "slo:\n  p99: 500ms\n"
	for _, tc := range []struct {
		name string
		src  string
		line int
		want string
	}{
		{"typo", head + "  search:\n    over: rate\n    tolerence: 5%\n" + slo, 6, `unknown field "tolerence" (did you mean "tolerance"?)`},
		{"typo of search", head + "  serch: {over: rate}\n" + slo, 4, `unknown field "serch" (did you mean "search"?)`},
		{"no over", head + "  search:\n    from: 10\n" + slo, 4, "load.search.over: say what to search over"},
		{"bad over", head + "  search:\n    over: qps\n" + slo, 5, `load.search.over "qps": want rate`},
		{"zero from", head + "  search:\n    over: rate\n    from: 0\n" + slo, 6, "load.search.from 0: want a level above 0"},
		{"half a client", head + "  search:\n    over: clients\n    to: 7.5\n" + slo, 6, "load.search.to 7.5: want a whole number of clients"},
		{"to below from", head + "  search:\n    over: rate\n    from: 100\n    to: 50\n" + slo, 7, "load.search.to 50: below load.search.from (100)"},
		{"growth", head + "  search:\n    over: rate\n    growth: 1\n" + slo, 6, "load.search.growth 1: want a factor"},
		{"tolerance", head + "  search:\n    over: rate\n    tolerance: 80%\n" + slo, 6, "load.search.tolerance 80%: want a share like 5%"},
		{"tolerance text", head + "  search:\n    over: rate\n    tolerance: tight\n" + slo, 6, "load.search.tolerance tight"},
		{"max points", head + "  search:\n    over: rate\n    max_points: 1\n" + slo, 6, "load.search.max_points 1: want 2 to 100"},
		{"repeats", head + "  search:\n    over: rate\n    repeats: 0\n" + slo, 6, "load.search.repeats 0"},
		{"wrong type", head + "  search:\n    over: rate\n    max_points: many\n" + slo, 6, `load.search.max_points "many": want a whole number`},
		{"with rate", head + "  rate: [10, 20]\n  search: {over: rate}\n" + slo, 4, "load.rate does not go with load.search"},
		{"with repeats", head + "  repeats: 3\n  search: {over: rate}\n" + slo, 4, "set load.search.repeats"},
		{"with a ramp", head + "  pacer: ramp\n  search: {over: rate}\n" + slo, 4, "load.pacer does not go with load.search"},
		{"with interleave", head + "  interleave: true\n  search: {over: rate}\n" + slo, 4, "load.interleave does not go with load.search"},
		{"no SLO", head + "  search: {over: rate}\n", 4, "load.search needs an SLO"},
		{"a throughput floor", head + "  search: {over: rate}\nslo:\n  p99: 1s\n  min_throughput: 100\n", 7, "slo.min_throughput does not go with load.search"},
		{"in flight over clients", head + "  search: {over: clients}\n  max_in_flight: 8\n" + slo, 5, "open loop (rate) only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := scenario.Parse("s.yaml", t.TempDir(), []byte(tc.src))
			var se *scenario.ScenarioError
			if !errors.As(err, &se) {
				t.Fatalf("error %v (%T) is not a *scenario.ScenarioError", err, err)
			}
			if !strings.Contains(err.Error(), tc.want) || se.Line != tc.line {
				t.Errorf("error = %q at line %d, want %q at line %d", err, se.Line, tc.want, tc.line)
			}
		})
	}
	_, err := scenario.Parse("s.yaml", t.TempDir(), []byte("server:\n  model: sim-lm\npayload:\n  api: chat\nload:\n  search: {over: rate}\nslo:\n  ttft_p99: 1s\n  min_goodput_fraction: 1.5\n"))
	if err == nil || !strings.Contains(err.Error(), "s.yaml:9:3: slo.min_goodput_fraction 1.5") {
		t.Errorf("error = %v", err)
	}
}
