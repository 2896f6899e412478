package llm

import (
	"math"
	"slices"
	"time"

	"github.com/inferhq/infer/loadgen/record"
)

// maxExact bounds the observations a dist keeps exactly.
const maxExact = 1 << 18

// dist is a latency distribution: a record.Histogram (1 % buckets, for
// merging, CDFs and live quantiles) and, up to maxExact observations, the
// values themselves, so that the record's percentiles are exact and
// computed as vLLM's (numpy's linear interpolation). Past maxExact the
// histogram's percentiles are used (within 1 %).
type dist struct {
	h     record.Histogram
	exact []time.Duration
	sum   time.Duration
	over  bool
}

func (d *dist) record(v time.Duration) {
	d.h.Record(v)
	d.sum += v
	if d.over {
		return
	}
	if len(d.exact) == maxExact {
		d.over, d.exact = true, nil
		return
	}
	d.exact = append(d.exact, v)
}

// stats summarises d in milliseconds.
func (d *dist) stats() record.MsStats {
	if d.over || d.h.Count() == 0 {
		return record.MsStatsOf(&d.h)
	}
	s := slices.Clone(d.exact)
	slices.Sort(s)
	ms := func(v float64) float64 { return math.Round(v/1e3) / 1e3 }
	q := func(p float64) float64 {
		pos := p * float64(len(s)-1)
		lo := int(pos)
		if lo+1 >= len(s) {
			return float64(s[len(s)-1])
		}
		return float64(s[lo]) + (pos-float64(lo))*float64(s[lo+1]-s[lo])
	}
	return record.MsStats{
		Mean: ms(float64(d.sum) / float64(len(s))),
		P50:  ms(q(0.50)), P90: ms(q(0.90)), P99: ms(q(0.99)), P999: ms(q(0.999)),
		Max: ms(float64(s[len(s)-1])), N: uint64(len(s)),
	}
}

// p99 returns the 99th percentile, exact when it can be.
func (d *dist) p99() time.Duration {
	return time.Duration(d.stats().P99 * 1e6)
}
