package loadgen

import (
	"github.com/inferhq/infer/loadgen/record"
	"github.com/inferhq/infer/loadgen/scenario"
	"github.com/inferhq/infer/loadgen/search"
)

// Margin is how far r is from missing slo: the worst ratio of a measured
// figure to its bound (p99s to theirs, the error rate to the most
// allowed, the least share of good requests allowed to the share
// measured), at most 1 when r meets every bound; search.MaxMargin when a
// bound cannot be judged (no successful request). An open loop that could
// not send its rate (coordinated omission) misses by the shortfall. Rate
// floors (min_throughput, min_goodput) are not counted: they do not go
// with a search. It is what a capacity search judges a level by.
func Margin(r *record.Record, slo scenario.SLO) float64 {
	worst := 0.0
	ratio := func(v float64) { worst = max(worst, v) }
	ms := func(value float64, known bool, bound float64) {
		switch {
		case bound <= 0:
		case !known:
			ratio(search.MaxMargin)
		default:
			ratio(value / bound)
		}
	}
	if slo.P99 > 0 {
		ms(r.Latency.P99.Ms(), r.Status["200"] > 0, record.Duration(slo.P99).Ms())
	}
	if slo.MaxErrorRate > 0 {
		ratio(r.ErrorRate() / slo.MaxErrorRate)
	}
	if l := r.LLM; l != nil {
		b := slo.Record().LLM()
		ms(l.TTFT.P99, l.TTFT.N > 0, b.TTFT.Ms())
		ms(l.TPOT.P99, l.TPOT.N > 0, b.TPOT.Ms())
		ms(l.E2EL.P99, l.E2EL.N > 0, b.E2EL.Ms())
		if f := slo.MinGoodputFraction; f > 0 {
			if g := l.GoodFraction(); g > 0 {
				ratio(f / g)
			} else {
				ratio(search.MaxMargin)
			}
		}
	}
	if r.TargetRate > 0 && r.AchievedRate < minAchieved*r.TargetRate {
		if r.AchievedRate > 0 {
			ratio(minAchieved * r.TargetRate / r.AchievedRate)
		} else {
			ratio(search.MaxMargin)
		}
	}
	return min(worst, search.MaxMargin)
}
