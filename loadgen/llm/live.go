package llm

import (
	"time"

	"github.com/inferhq/infer/loadgen/record"
)

// LiveWindow is the span a Snapshot's rates are over.
const LiveWindow = 2 * time.Second

// Snapshot is a run's live state, aggregated for a view: a runner
// publishes one a few times a second, never one per request. Latencies are
// over every request finished so far (warm-up included); rates over the
// last Window.
type Snapshot struct {
	Elapsed time.Duration // since the run started
	Phase   Phase
	Open    int // streams in flight
	// Requests since the start: sent, completed, failed.
	Sent, Completed, Failed int
	TTFT, TPOT, ITL         Quantiles
	// Window is what TokensPerS and RequestsPerS are over: the last
	// LiveWindow, or less at the start. Label rates with it.
	Window time.Duration
	// TokensPerS counts output tokens as they arrive: a content chunk is
	// one token until its request's usage says how many it carried.
	TokensPerS   float64
	RequestsPerS float64 // completed per second
	LastError    string  // the latest failure's text
}

// Quantiles are a live distribution's median and p99.
type Quantiles struct{ P50, P99 time.Duration }

// Phase is what a run is doing.
type Phase string

// Phases.
const (
	PhaseWarmup    Phase = "warm-up"
	PhaseMeasuring Phase = "measuring"
	PhaseDraining  Phase = "draining" // the schedule is over; streams finish
	PhaseDone      Phase = "done"
)

// liveStats are the figures since the start.
type liveStats struct {
	completed, failed int
	ttft, tpot, itl   record.Histogram
	lastError         string
	ring              []liveSample // recent samples, oldest first
}

type liveSample struct {
	at        time.Time
	tokens    int64
	completed int
}

func (l *liveStats) add(r *Result) {
	if r.Cause == CauseCancelled {
		return
	}
	if !r.OK() {
		l.failed++
		l.lastError = string(r.Cause) + ": " + r.Err
		return
	}
	l.completed++
	l.ttft.Record(r.TTFT())
	if r.OutputTokens > 1 {
		l.tpot.Record(r.TPOT())
	}
	for i := 1; i < len(r.Chunks); i++ {
		l.itl.Record(r.Chunks[i] - r.Chunks[i-1])
	}
}

func quantiles(h *record.Histogram) Quantiles {
	return Quantiles{P50: h.Quantile(0.5), P99: h.Quantile(0.99)}
}

// Snapshot returns the live state at now, given the streams open, the
// requests sent and the output tokens received so far (the runner's
// counters).
func (s *Stats) Snapshot(now, start time.Time, phase Phase, open, sent int, tokens int64) Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := &s.live
	l.ring = append(l.ring, liveSample{at: now, tokens: tokens, completed: l.completed})
	// Keep the newest sample at or before now − LiveWindow, and those after.
	for len(l.ring) > 2 && !l.ring[1].at.After(now.Add(-LiveWindow)) {
		l.ring = l.ring[1:]
	}
	snap := Snapshot{
		Elapsed: now.Sub(start), Phase: phase, Open: open,
		Sent: sent, Completed: l.completed, Failed: l.failed,
		TTFT: quantiles(&l.ttft), TPOT: quantiles(&l.tpot), ITL: quantiles(&l.itl),
		LastError: l.lastError,
	}
	if old := l.ring[0]; now.After(old.at) {
		snap.Window = now.Sub(old.at)
		secs := snap.Window.Seconds()
		snap.TokensPerS = float64(tokens-old.tokens) / secs
		snap.RequestsPerS = float64(l.completed-old.completed) / secs
	}
	return snap
}
