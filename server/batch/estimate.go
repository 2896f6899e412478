package batch

import (
	"math"
	"sync"
	"time"

	"github.com/inferhq/infer/internal/linfit"
)

// estimator measures what the adaptive policy and deadline-aware admission
// need: the arrival rate of items and the cost of a batch, t(n) = a + b·n,
// fitted online by least squares with exponential forgetting. Safe for
// concurrent use.
type estimator struct {
	mu sync.Mutex
	// Arrivals: exponentially decayed counts over a slow and a fast time
	// constant, corrected for the bias of a short history.
	slow, fast decayed
	first      time.Time // the first arrival
	// Cost: the observed batches, their weights decayed by costDecay per
	// new batch.
	fit     linfit.Sums
	samples int
	echoes  echoes // what follows finished batches (adaptive.go)
}

// decayed is a count whose past decays with time constant tau: for arrivals
// at rate λ it tends to λ·tau.
type decayed struct {
	tau   time.Duration
	count float64
	at    time.Time
}

func (d *decayed) add(t time.Time) {
	if dt := t.Sub(d.at); dt > 0 {
		d.count *= math.Exp(-float64(dt) / float64(d.tau))
		d.at = t
	} else if d.at.IsZero() {
		d.at = t
	}
	d.count++
}

// rate returns the arrival rate the count implies at now, given a history
// of length age (a short history has had no time to fill the count).
func (d *decayed) rate(now time.Time, age time.Duration) float64 {
	c := d.count
	if dt := now.Sub(d.at); dt > 0 {
		c *= math.Exp(-float64(dt) / float64(d.tau))
	}
	fill := 1.0
	if age > 0 {
		fill = -math.Expm1(-float64(age) / float64(d.tau))
	}
	return c / d.tau.Seconds() / max(fill, 1e-3)
}

const (
	// The arrival rate is the larger of a 1 s average (steady) and a 100 ms
	// one (quick to see a rise): an under-estimate makes the adaptive
	// policy send small batches that waste the workers; an over-estimate
	// only makes it wait a little longer, never past MaxLatency.
	slowTau    = time.Second
	fastTau    = 100 * time.Millisecond
	costDecay  = 0.95 // weight of the past per new batch
	minSamples = 2
)

func newEstimator() estimator {
	return estimator{slow: decayed{tau: slowTau}, fast: decayed{tau: fastTau}}
}

func (e *estimator) arrive(t time.Time) {
	e.mu.Lock()
	if e.first.IsZero() {
		e.first = t
	}
	e.slow.add(t)
	e.fast.add(t)
	e.echoes.arrive(t)
	e.mu.Unlock()
}

// rate returns the estimated arrival rate at now, in items per second.
func (e *estimator) rate(now time.Time) float64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.first.IsZero() {
		return 0
	}
	age := now.Sub(e.first)
	return max(e.slow.rate(now, age), e.fast.rate(now, age))
}

func (e *estimator) observe(n int, d time.Duration) {
	e.mu.Lock()
	e.fit.Scale(costDecay)
	e.fit.Add(float64(n), d.Seconds(), 1)
	e.samples++
	e.mu.Unlock()
}

// cost returns the fitted t(n) = a + per·n in seconds (linfit's rules:
// both non-negative; per is 0 when all batches had the same size), and
// whether enough batches were seen.
func (e *estimator) cost() (a, per float64, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.samples < minSamples {
		return 0, 0, false
	}
	return e.fit.Line()
}

// batchTime returns the estimated time of a batch of n items.
func (e *estimator) batchTime(n int) (time.Duration, bool) {
	a, per, ok := e.cost()
	if !ok {
		return 0, false
	}
	return time.Duration((a + per*float64(n)) * float64(time.Second)), true
}

// clear estimates how long q queued items take to clear with workers
// running full batches of maxBatch; 0 when nothing is known yet.
func (e *estimator) clear(q, maxBatch, workers int) time.Duration {
	full, ok := e.batchTime(maxBatch)
	if !ok || q <= 0 || workers <= 0 || full <= 0 {
		return 0
	}
	capacity := float64(workers*maxBatch) / full.Seconds() // items per second
	return time.Duration(float64(q) / capacity * float64(time.Second))
}
