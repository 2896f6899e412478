package batch

import (
	"math"
	"time"
)

// The adaptive policy: a forming batch waits only when waiting pays, never
// longer than MaxLatency. Which rule decides depends on whether the callers
// form a closed pool: measured as the echo share ρ, or, with two or more
// workers, known from their number (the full house).
//
// Echo share. Callers in a closed loop send again as soon as they are
// answered, so the arrivals bunch up right after a batch finishes: its
// echo. Of the arrivals of about the last second, ρ is the share that came
// within the echo window w after a finish, beyond the share of the time
// such windows covered (what arrivals unrelated to answers would show):
// about 1 for a closed pool of callers, about 0 for an open loop. w is a
// quarter of the fitted fixed cost a of a batch (echoWindow).
//
// Full house. With two or more workers the callers are also taken for a
// pool, whatever ρ, when the pool (below) would about fill a batch for
// every worker: pool ≥ ¾·W·MaxBatch (fullHouse; the pool counts only the
// callers in the batcher at once, and some are always on their way back).
// So many callers keep the host busy answering them and reading their next
// requests; their round trips spread over far more than w, and ρ no longer
// sees them. Sized from their arrival rate by the share rule, the batches
// would be small, and each costs the host work of its own (a worker woken,
// the dispatcher's turn) that slows the callers' round trips further: the
// rate, and with it the share size, falls. On a 2-core host with 4 workers
// and 256 callers some runs fell that way from about 9,000 to 4,000 req/s.
// Under the pool rule a worker's batch waits for the callers out, up to
// MaxLatency when they would fill it, as fixed waits for a full batch; with
// that many callers the wait is short. An open loop that has held ¾ of W
// full batches at once is treated the same for as long as the pool is
// remembered, and loses the share rule's lower latency there; that is what
// bounds the threshold from below. With the pool rule at 128 callers on
// those 4 workers (threshold 0.4 or lower), 2 repeats of 32 fell below
// 5,000 req/s instead of 9 of 32, but at 0.4 an open loop at half the
// capacity of 4 workers of 77 ms + 1.16 ms per item came under it too, and
// its p99 went from 0.67× to 1.06× immediate's. Below ¾ the fall remains.
//
// Pool rule, when ρ ≥ ½ or the house is full. The pool is the most items
// in the batcher at once during the last one to two seconds; the callers
// out of the batcher, the pool less the items in it, are about to send.
// While some are out, an idle worker waits for them, each idle worker for
// its part: the expected items are split over the idle workers in parts no
// smaller than the share size below (one part with one worker). A batch is
// judged only when a worker is free: offered earlier, it would go to the
// first worker to finish before that worker's callers could come back. No
// batch waits longer than w (nor MaxLatency) from the moment a worker was
// free for it, or MaxLatency if the callers out would fill it, as fixed
// waits for a full batch. A caller later than that waits for the next
// batch.
//
// Share rule, otherwise. With one worker a batch is sent at once: it grows
// by itself while the worker computes, and for arrivals that do not come in
// bursts waiting only adds latency. With W workers, idle ones grabbing tiny
// batches would tie themselves up for a whole batch time each, so a batch
// waits for its share of the arrivals: the size n at which batches of n,
// taken by the workers in turn, keep up with the measured arrival rate λ
// at utilisation adaptiveUtil, n = λ·a / (W·u − λ·b) with t(n) = a + b·n
// the fitted cost. When two or more workers are idle the share is rounded
// down (latency first), when only one is, up (keeping up first). A batch
// never waits past MaxLatency after its first item arrived.

const (
	// echoWindow is the echo window w as a share of the fitted fixed cost a
	// of a batch. Waiting that long costs at most a quarter of what the
	// batch it saves would, and the round trip of a closed-loop caller is
	// usually far shorter than a batch.
	echoWindow = 1.0 / 4
	// echoPool is the echo share from which the callers are a pool.
	echoPool = 0.5
	// echoTau is the time constant of the echo share's averages, and the
	// period of the pool's maximum.
	echoTau = time.Second
	// echoMinArrivals is the fewest (decayed) arrivals the share is
	// measured from; with fewer it is 0.
	echoMinArrivals = 16
	// echoMaxCover is the largest share of the time the windows may cover
	// for the share to be measured: beyond it every arrival falls in a
	// window, echo or not.
	echoMaxCover = 0.9
	// fullHouse is the share of W·MaxBatch from which a pool is taken for
	// a full house: the pool is the most callers seen in the batcher at
	// once, and a quarter of them may be on their way back at any moment.
	fullHouse = 3.0 / 4
	// adaptiveUtil is the utilisation the share rule sizes batches for:
	// close to 1 wastes least capacity on fixed costs, but leaves no
	// headroom for bursts, and queueing delay grows as 1/(1-u).
	adaptiveUtil = 0.9
)

// adaptiveReady reports whether the forming batch s, whose MaxLatency ends
// at deadline, is ready under the adaptive policy, and if not, when to look
// again (zero: at the next event).
func (b *Batcher[In, Out]) adaptiveReady(cfg *Config, s *slab[In, Out], now, deadline time.Time) (bool, time.Time) {
	workers := int(b.nworkers.Load())
	idle := workers - int(b.busy.Load())
	n := len(s.items)
	full := 0 // the pool from which the house is full; 0: never
	if workers > 1 {
		full = int(math.Ceil(fullHouse * float64(workers*cfg.MaxBatch)))
	}
	if out, pool := b.est.pool(now, full); pool {
		if idle <= 0 {
			// Judged when a worker is free, with what is known then.
			s.hold = time.Time{}
			return false, time.Time{}
		}
		parts := 1
		if idle > 1 {
			if size, ok := b.shareSize(cfg, b.est.rate(now)); ok && size > 0 {
				parts = min(idle, max(1, int(math.Round(float64(n+out)/size))))
			}
		}
		if n*parts >= n+out {
			return true, time.Time{}
		}
		if s.hold.IsZero() {
			s.hold = now
		}
		wait := min(b.est.echoWindow(), cfg.MaxLatency)
		if n+out >= cfg.MaxBatch {
			wait = cfg.MaxLatency
		}
		if until := s.hold.Add(wait); now.Before(until) {
			return false, until
		}
		return true, time.Time{}
	}
	if n >= b.adaptiveTarget(cfg) || !now.Before(deadline) {
		return true, time.Time{}
	}
	return false, deadline
}

// adaptiveTarget is the share rule's batch size, rounded down when two or
// more workers are idle and up when one is.
func (b *Batcher[In, Out]) adaptiveTarget(cfg *Config) int {
	idle := int(b.nworkers.Load()) - int(b.busy.Load())
	n, ok := b.shareSize(cfg, b.est.rate(time.Now()))
	if !ok {
		return 1
	}
	if idle >= 2 {
		n = math.Floor(n)
	} else {
		n = math.Ceil(n)
	}
	return min(cfg.MaxBatch, max(1, int(n)))
}

// shareSize is the batch size n at which the workers, taking batches of n
// in turn, keep up with arrivals at rate lambda at utilisation
// adaptiveUtil, from the fitted cost t(n) = a + b·n: n = λ·a / (W·u − λ·b),
// MaxBatch beyond what the workers can keep up with. It is 1 for one
// worker, and false while the cost is unknown or nothing arrives.
func (b *Batcher[In, Out]) shareSize(cfg *Config, lambda float64) (float64, bool) {
	workers := int(b.nworkers.Load())
	if workers <= 1 {
		return 1, true
	}
	a, per, ok := b.est.cost()
	if !ok || lambda <= 0 {
		return 0, false
	}
	den := float64(workers)*adaptiveUtil - lambda*per
	if den <= 0 {
		return float64(cfg.MaxBatch), true
	}
	return min(float64(cfg.MaxBatch), lambda*a/den), true
}

// echoes measures the echo share and the pool of callers for the
// estimator, which guards it with its lock.
type echoes struct {
	last time.Time     // when the latest batch finished
	w    time.Duration // the echo window
	// Averages over about echoTau: arrivals within w of the latest finish,
	// all arrivals, and the time (in seconds) within w of the latest
	// finish, all time.
	inA, all     float64
	covA, covAll float64
	upd          time.Time // when the averages were last brought up to date

	inflight int // items arrived and not yet answered
	// The pool: the most items in flight during the current period of
	// echoTau, begun at period, and during the one before.
	cur, prev int
	period    time.Time
}

// advance brings the averages and the pool's periods up to now.
func (e *echoes) advance(now time.Time) {
	if e.upd.IsZero() {
		e.upd, e.period = now, now
		return
	}
	if dt := now.Sub(e.upd); dt > 0 {
		f := math.Exp(-float64(dt) / float64(echoTau))
		var covered time.Duration
		if !e.last.IsZero() {
			if end := e.last.Add(e.w); end.After(e.upd) {
				covered = min(dt, end.Sub(e.upd))
			}
		}
		e.inA, e.all = e.inA*f, e.all*f
		e.covA, e.covAll = e.covA*f+covered.Seconds(), e.covAll*f+dt.Seconds()
		e.upd = now
	}
	if since := now.Sub(e.period); since >= echoTau {
		e.prev = e.cur
		if since >= 2*echoTau {
			e.prev = e.inflight
		}
		e.cur, e.period = e.inflight, now
	}
}

func (e *echoes) arrive(t time.Time) {
	e.advance(t)
	e.inflight++
	e.cur = max(e.cur, e.inflight)
	e.all++
	if !e.last.IsZero() && !t.Before(e.last) && t.Sub(e.last) < e.w {
		e.inA++
	}
}

// finish records that the k live items of a batch of total were answered
// at t, with echo window w.
func (e *echoes) finish(t time.Time, k, total int, w time.Duration) {
	e.advance(t)
	e.inflight -= total
	if k > 0 && w > 0 {
		e.last, e.w = t, w
	}
}

// share returns the echo share ρ in [0, 1]: 0 until measured.
func (e *echoes) share() float64 {
	if e.all < echoMinArrivals || e.covAll <= 0 {
		return 0
	}
	cover := e.covA / e.covAll
	if cover > echoMaxCover {
		return 0
	}
	return min(1, max(0, (e.inA/e.all-cover)/(1-cover)))
}

// size returns the pool: the most items in flight during the current
// period and the one before.
func (e *echoes) size() int { return max(e.cur, e.prev) }

// outside returns how many callers of the pool are out of the batcher.
func (e *echoes) outside() int {
	return max(0, e.size()-e.inflight)
}

// pool reports whether the callers are a pool at now, by their echo share
// or, when full > 0, by a pool of at least full (the full house), and if so
// how many are out of the batcher.
func (e *echoes) pool(now time.Time, full int) (int, bool) {
	e.advance(now)
	if e.share() < echoPool && (full <= 0 || e.size() < full) {
		return 0, false
	}
	return e.outside(), true
}

// finish records that a batch of total items, k of them computed, was
// answered at t. Call it before the callers are answered, so that no echo
// arrives before its batch.
func (e *estimator) finish(k, total int, t time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var w time.Duration
	if e.samples >= minSamples {
		if a, _, ok := e.fit.Line(); ok {
			w = time.Duration(a * echoWindow * float64(time.Second))
		}
	}
	e.echoes.finish(t, k, total, w)
}

// pool reports whether the callers are a pool, and if so how many are out
// of the batcher (see echoes.pool).
func (e *estimator) pool(now time.Time, full int) (int, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.echoes.pool(now, full)
}

// echoWindow returns the echo window w; 0 while the cost is unknown.
func (e *estimator) echoWindow() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.echoes.w
}
