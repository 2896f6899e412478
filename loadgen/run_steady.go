package loadgen

// Steady state: a point whose throughput drifts across its window is
// flagged unsteady (package search's Drift), and a capacity search
// measures it again before it trusts it.

import (
	"github.com/inferhq/infer/loadgen/record"
	"github.com/inferhq/infer/loadgen/search"
)

// drifted reports whether a repeat's throughput second by second drifted;
// a ramp's does by design, and is not judged.
func drifted(l record.Load, perSecond []float64) bool {
	return l.Pacer != "ramp" && search.Unsteady(perSecond)
}

// flagUnsteady flags rec unsteady, and not valid, when most of its
// repeats drifted.
func flagUnsteady(rec *record.Record, unsteady []bool) {
	n := 0
	for _, u := range unsteady {
		if u {
			n++
		}
	}
	if 2*n > len(unsteady) {
		rec.Flags = append(rec.Flags, record.FlagUnsteady)
		rec.Valid = false
	}
}

// last returns the record of the latest repeat alone, and whether it
// drifted; nil when none was measured.
func (c *classicRun) last() (*record.Record, bool) {
	if c.lastRes == nil {
		return nil, false
	}
	res := c.lastRes
	rec := buildRecord(c.p.Index, c.pt, res.Start, &res.Tally, res.Answered, &c.lastM, nil, c.r.sc.Payload.N)
	judge(rec, c.r.cfg.Cores)
	return rec, c.unsteady[len(c.unsteady)-1]
}

// last returns the record of the latest repeat alone, and whether it
// drifted; nil when none was measured.
func (l *llmRun) last() (*record.Record, bool) {
	n := len(l.outs)
	if n == 0 {
		return nil, false
	}
	return buildLLMRecord(l.p.Index, l.pt, l.outs[n-1:], l.servers[n-1:]), l.unsteady[n-1]
}
