package report

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/inferhq/infer/loadgen/record"
)

// point is a trusted record of 1000 requests at 100 req/s with a p99 of
// 100 ms, changed by the options.
func point(opts ...func(*record.Record)) record.Record {
	r := record.Record{
		Point:      record.Point{Endpoint: "batched", Batch: 8, Workers: 1, Load: record.Load{Mode: "open", Rate: 100}, Items: 1},
		Sent:       1000,
		Throughput: 100,
		Status:     map[string]int{"200": 1000},
		Latency:    record.Percentiles{P50: record.Duration(50 * time.Millisecond), P99: record.Duration(100 * time.Millisecond)},
		Valid:      true,
	}
	for _, o := range opts {
		o(&r)
	}
	return r
}

func thrX(f float64) func(*record.Record) {
	return func(r *record.Record) { r.Throughput *= f }
}

func p99X(f float64) func(*record.Record) {
	return func(r *record.Record) { r.Latency.P99 = record.Duration(float64(r.Latency.P99) * f) }
}

func failing(n int) func(*record.Record) {
	return func(r *record.Record) { r.Status = map[string]int{"200": r.Sent - n, "429": n} }
}

func flagged(f string) func(*record.Record) {
	return func(r *record.Record) { r.Valid, r.Flags = false, append(r.Flags, f) }
}

func noSuccess(r *record.Record) {
	r.Throughput, r.Latency = 0, record.Percentiles{}
	r.Status = map[string]int{"error": r.Sent}
	r.Valid, r.Flags = false, []string{record.FlagErrors, record.FlagNoSuccess}
}

func partial(r *record.Record) { r.Partial = true }

// repeats gives the record three repeats whose throughputs and p99s spread
// by ±spread around its own.
func repeats(spread float64) func(*record.Record) {
	return func(r *record.Record) {
		for _, f := range []float64{1 - spread, 1, 1 + spread} {
			r.Repeats = append(r.Repeats, record.Repeat{Throughput: r.Throughput * f,
				P99: record.Duration(float64(r.Latency.P99) * f)})
		}
	}
}

// repeatP99s gives the record a repeat of its own throughput for each of
// the p99s, in ms.
func repeatP99s(ms ...float64) func(*record.Record) {
	return func(r *record.Record) {
		for _, p := range ms {
			r.Repeats = append(r.Repeats, record.Repeat{Throughput: r.Throughput, P99: record.Duration(p * float64(time.Millisecond))})
		}
	}
}

// llmPoint is a trusted LLM record of 100 output tokens/s, TTFT p99 1 s
// and the given TPOT p99 in ms, changed by the options.
func llmPoint(tpot float64, opts ...func(*record.Record)) record.Record {
	r := point()
	r.LLM = &record.LLM{Requests: 100, Completed: 100, OutputTokensPerS: 100,
		TTFT: record.MsStats{P99: 1000}, TPOT: record.MsStats{P99: tpot}}
	for _, o := range opts {
		o(&r)
	}
	return r
}

// repeatTTFTs gives the LLM record a repeat of its own tokens/s for each
// of the TTFT p99s, in ms.
func repeatTTFTs(ms ...float64) func(*record.Record) {
	return func(r *record.Record) {
		for _, p := range ms {
			r.Repeats = append(r.Repeats, record.Repeat{Throughput: r.Throughput, OutputTokensPerS: r.LLM.OutputTokensPerS,
				TTFTP99: record.Duration(p * float64(time.Millisecond))})
		}
	}
}

func TestJudge(t *testing.T) {
	for _, tc := range []struct {
		name      string
		base, cur record.Record
		want      Verdict
		reason    string // part of the reason
	}{
		{"same", point(), point(), Pass, "within noise"},
		{"faster", point(), point(thrX(1.5), p99X(0.5)), Pass, "within noise or better"},
		{"throughput −9 % within ±10 %", point(), point(thrX(0.91)), Pass, ""},
		{"throughput −15 %", point(), point(thrX(0.85)), Regression, "throughput −15.0 % beyond ±10.0 %"},
		{"p99 +15 % within ±20 %", point(), point(p99X(1.15)), Pass, ""},
		{"p99 +30 %", point(), point(p99X(1.3)), Regression, "p99 +30.0 % beyond ±20.0 %"},
		{"error rate +2 points", point(), point(failing(20)), Regression, "error rate +2.0 points"},
		{"error rate +0.5 points", point(), point(failing(5)), Pass, ""},
		{"slower but flagged now", point(), point(thrX(0.8), flagged(record.FlagCoordinatedOmission)), Warn, "run point coordinated-omission"},
		{"slower but baseline saturated", point(flagged(record.FlagGeneratorSaturated)), point(thrX(0.8)), Warn, "baseline point generator-saturated"},
		{"slower but cut short", point(), point(thrX(0.8), partial), Warn, "run point partial"},
		{"errors flag alone is trusted", point(), point(thrX(0.8), failing(1), func(r *record.Record) { r.Flags = []string{record.FlagErrors} }), Regression, "throughput"},
		{"now fails", point(), point(noSuccess), Regression, "no request succeeded"},
		{"now fails, cut short", point(), point(noSuccess, partial), Warn, "cut short"},
		{"both fail", point(noSuccess), point(noSuccess), Warn, "either run"},
		{"now succeeds", point(noSuccess), point(), Pass, "baseline failed"},
		{"−15 % within repeats' ±20 %", point(repeats(0.1)), point(thrX(0.85), repeats(0.1)), Pass, ""},
		{"−3 % within tight repeats' floor of ±5 %", point(repeats(0.005)), point(thrX(0.97), repeats(0.005)), Pass, ""},
		{"−7 % beyond tight repeats", point(repeats(0.005)), point(thrX(0.93), repeats(0.005)), Regression, "beyond ±5.0 %"},
		{"repeats on one side only: default band", point(repeats(0.3)), point(thrX(0.85)), Regression, "beyond ±10.0 %"},
		// CI on unchanged code: one slow repeat took the point's p99
		// (over all its requests) 53 % up, beyond the ±41 % its spread
		// gave the band; the median of the repeats' p99s moved 31 %.
		{"one slow repeat: the repeats' median is judged", point(p99X(0.442), repeatP99s(44.6, 43.8, 45.5)),
			point(p99X(0.678), repeatP99s(48.3, 72.7, 58.4)), Pass, ""},
		{"every repeat slower", point(p99X(0.442), repeatP99s(44.6, 43.8, 45.5)),
			point(p99X(0.73), repeatP99s(70, 72.7, 74)), Regression, "p99 +63.0 % beyond ±10.0 %"},
		// The repeats' TTFT spread narrows the band to ±10 %, but they
		// carry no TPOT: CI's static point read TPOT p99 +13.3 % on
		// unchanged code. TPOT keeps the default ±20 %.
		{"TPOT +13 % within the default band", llmPoint(10, repeatTTFTs(1000, 1010, 1020)),
			llmPoint(11.3, repeatTTFTs(1000, 1010, 1020)), Pass, ""},
		{"TPOT +30 %", llmPoint(10, repeatTTFTs(1000, 1010, 1020)),
			llmPoint(13, repeatTTFTs(1000, 1010, 1020)), Regression, "TPOT p99 +30.0 % beyond ±20.0 %"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := judge(&tc.base, &tc.cur, Noise{}.withDefaults())
			if got.Verdict != tc.want || !strings.Contains(got.Reason, tc.reason) {
				t.Errorf("judge = %v (%q), want %v with a reason containing %q", got.Verdict, got.Reason, tc.want, tc.reason)
			}
		})
	}
}

// latencies gives the record a histogram of n requests: slow of them take
// 500 ms, the others spread evenly over 50–60 ms × f.
func latencies(n, slow int, f float64) func(*record.Record) {
	return func(r *record.Record) {
		h := &record.Histogram{}
		for i := range n {
			d := time.Duration(f * float64(50*time.Millisecond+time.Duration(i)*10*time.Millisecond/time.Duration(n)))
			if i >= n-slow {
				d = 500 * time.Millisecond
			}
			h.Record(d)
		}
		r.Histogram, r.Latency = h, h.Percentiles()
	}
}

func TestJudgeP99Sampling(t *testing.T) {
	for _, tc := range []struct {
		name      string
		base, cur record.Record
		want      Verdict
		reason    string
	}{
		// Of 100 requests, one slow in the baseline and two now: the p99
		// moves from ~60 to 500 ms on one request, within its sampling.
		{"p99 of 100 requests on its slowest two", point(latencies(100, 1, 1)), point(latencies(100, 2, 1)), Pass, ""},
		// Of 10 000, a tail that moved as a whole by 30 %.
		{"p99 of 10 000 requests 30 % slower", point(latencies(10000, 0, 1)), point(latencies(10000, 0, 1.3)), Regression, "p99 +"},
		{"p99 of 10 000 requests 10 % slower", point(latencies(10000, 0, 1)), point(latencies(10000, 0, 1.1)), Pass, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := judge(&tc.base, &tc.cur, Noise{}.withDefaults())
			if got.Verdict != tc.want || !strings.Contains(got.Reason, tc.reason) {
				t.Errorf("judge = %v (%q), want %v with a reason containing %q", got.Verdict, got.Reason, tc.want, tc.reason)
			}
		})
	}
}

func TestJudgeChanges(t *testing.T) {
	ch := judge(ptr(point()), ptr(point(thrX(0.85), p99X(1.1), failing(10))), Noise{}.withDefaults())
	if math.Abs(ch.Throughput+0.15) > 1e-9 || math.Abs(ch.P99-0.1) > 1e-9 || math.Abs(ch.ErrorRate-0.01) > 1e-9 {
		t.Errorf("changes = %v, %v, %v; want −0.15, +0.1, +0.01", ch.Throughput, ch.P99, ch.ErrorRate)
	}
	ch = judge(ptr(point()), ptr(point(noSuccess)), Noise{}.withDefaults())
	if ch.Throughput != -1 || !math.IsNaN(ch.P99) {
		t.Errorf("changes of a failed point = %v, %v; want −1 and NaN", ch.Throughput, ch.P99)
	}
}

func ptr(r record.Record) *record.Record { return &r }

func TestNoiseDefaults(t *testing.T) {
	for _, tc := range []struct {
		in, want Noise
	}{
		{Noise{}, Noise{0.10, 0.20, 0.01}},
		{Noise{Throughput: 0.05}, Noise{0.05, 0.20, 0.01}},
		{Noise{Throughput: -1, P99: 0.5, ErrorRate: 0.1}, Noise{0.10, 0.5, 0.1}},
	} {
		if got := tc.in.withDefaults(); got != tc.want {
			t.Errorf("%+v.withDefaults() = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

func TestCompareMatching(t *testing.T) {
	at := func(rate float64, opts ...func(*record.Record)) record.Record {
		return point(append([]func(*record.Record){func(r *record.Record) { r.Point.Load.Rate = rate }}, opts...)...)
	}
	for _, tc := range []struct {
		name                   string
		base, cur              []record.Record
		want                   Verdict
		matched, onlyRun, only int
	}{
		{"all pass", []record.Record{at(10), at(100)}, []record.Record{at(10), at(100)}, Pass, 2, 0, 0},
		{"one regression makes the verdict", []record.Record{at(10), at(100)}, []record.Record{at(10), at(100, thrX(0.5))}, Regression, 2, 0, 0},
		{"a warning", []record.Record{at(10), at(100)}, []record.Record{at(10), at(100, thrX(0.5), partial)}, Warn, 2, 0, 0},
		{"unmatched points do not count", []record.Record{at(10), at(200, thrX(3))}, []record.Record{at(10), at(100, thrX(0.1))}, Pass, 1, 1, 1},
		{"nothing matches: warn", []record.Record{at(10)}, []record.Record{at(20)}, Warn, 0, 1, 1},
		{"repeated configurations match in order", []record.Record{at(10), at(10, thrX(2))}, []record.Record{at(10), at(10, thrX(2))}, Pass, 2, 0, 0},
		{"other batch size does not match", []record.Record{at(10)}, []record.Record{at(10, func(r *record.Record) { r.Point.Batch = 16 })}, Warn, 0, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Compare(&record.Run{Dir: "cur", Records: tc.cur}, &record.Run{Dir: "base", Records: tc.base}, Noise{})
			if c.Verdict != tc.want || len(c.Changes) != tc.matched || len(c.OnlyRun) != tc.onlyRun || len(c.OnlyBaseline) != tc.only {
				t.Errorf("Compare = %v with %d matched, %d only in run, %d only in baseline; want %v, %d, %d, %d",
					c.Verdict, len(c.Changes), len(c.OnlyRun), len(c.OnlyBaseline), tc.want, tc.matched, tc.onlyRun, tc.only)
			}
		})
	}
}

// TestCompareModels: a sweep.model run's points match a baseline's by
// model, and a run of one model (server.model, its points naming none)
// matches the points of that model only, either way round.
func TestCompareModels(t *testing.T) {
	of := func(model string) record.Record {
		return point(func(r *record.Record) { r.Point.Model, r.Point.Load.Rate = model, 10 })
	}
	swept := &record.Run{Dir: "swept", Records: []record.Record{of("bert-base"), of("bert-base-int8")}}
	swept.Manifest.Model = "bert-base,bert-base-int8"
	for _, tc := range []struct {
		server    string
		matchedTo string
	}{{"bert-base", "bert-base"}, {"bert-base-int8", "bert-base-int8"}, {"bert-mini", ""}} {
		one := &record.Run{Dir: "one", Records: []record.Record{of("")}}
		one.Manifest.Model = tc.server
		for _, c := range []*Comparison{Compare(swept, one, Noise{}), Compare(one, swept, Noise{})} {
			var got string
			for _, ch := range c.Changes {
				got += ch.Base.Point.Model + ch.Cur.Point.Model
			}
			if got != tc.matchedTo || len(c.OnlyRun)+len(c.OnlyBaseline) != 3-2*len(c.Changes) {
				t.Errorf("server.model %s against the sweep: matched %q, %d and %d unmatched; want %q", tc.server, got, len(c.OnlyRun), len(c.OnlyBaseline), tc.matchedTo)
			}
		}
	}
}

func TestCompareLine(t *testing.T) {
	c := &Comparison{Verdict: Regression, Changes: []Change{{Verdict: Regression}, {Verdict: Pass}, {Verdict: Pass}},
		OnlyBaseline: []*record.Record{{}}}
	if got, want := c.Line(), "regression: 1 regression, 0 warn, 2 pass; 1 point unmatched"; got != want {
		t.Errorf("Line() = %q, want %q", got, want)
	}
}
