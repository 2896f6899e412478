package attack

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// MaxArrivalRate bounds the random pacers' rate, in requests per second.
const MaxArrivalRate = 1e6

// GammaPacer is a vegeta.Pacer of random arrivals at a mean rate: the
// gaps between requests are drawn from a gamma distribution of shape
// burstiness and mean 1/rate, as vLLM's `--burstiness` does. Burstiness 1
// is a Poisson process (exponential gaps); below 1 the arrivals come in
// bursts (the gaps' coefficient of variation is 1/√burstiness), above 1
// they are more regular, and +Inf gives constant gaps. The first request
// comes one gap after the start, as with vegeta's constant pacer.
//
// Windows, when given, are consecutive spans from the start (a warm-up
// and a measured window) that each hold exactly round(rate × length)
// arrivals: the window's n+1 gaps are drawn and scaled so that they sum
// to its length. For Poisson arrivals that is the process conditioned on
// its count, so a short window is as random within itself as ever but its
// rate is the one asked for (unconditioned, 20 s at 2/s can draw 2.9/s by
// chance). After the windows the gaps run on unscaled.
//
// The schedule is a function of the seed only: the same seed gives the
// same send times, whatever the elapsed times Pace is asked at. A
// GammaPacer is safe for concurrent use.
type GammaPacer struct {
	rate, shape float64
	seed        uint64
	windows     []window
	tail        float64 // where the unscaled gaps start: the windows' end

	mu  sync.Mutex
	rng *rand.Rand
	k   uint64  // the latest hit whose arrival is known
	at  float64 // its arrival, in seconds
	w   int     // the window of the next arrival; len(windows) past them
	in  uint64  // arrivals drawn in window w
	sum float64 // their gaps, unscaled
}

// window is a span of the schedule that holds n arrivals.
type window struct {
	start, length float64 // seconds
	n             uint64
	total         float64 // the sum of its n+1 unscaled gaps
}

// maxFitted bounds the arrivals of the windows scaled to their count: each
// is drawn twice. Beyond it the windows are long enough that the drawn
// rate is within a fraction of a per cent of the rate, and are not scaled.
const maxFitted = 1 << 24

var _ vegeta.Pacer = (*GammaPacer)(nil)

// NewGammaPacer returns a pacer of rate requests per second (0 < rate ≤
// MaxArrivalRate) and burstiness > 0 (+Inf: constant gaps), whose windows
// (consecutive spans from the start; none: no scaling) each hold exactly
// round(rate × length) arrivals.
func NewGammaPacer(rate, burstiness float64, seed uint64, windows ...time.Duration) (*GammaPacer, error) {
	if !(rate > 0 && rate <= MaxArrivalRate) {
		return nil, fmt.Errorf("arrival rate %v: want more than 0, at most %v", rate, MaxArrivalRate)
	}
	if !(burstiness > 0) || math.IsNaN(burstiness) {
		return nil, fmt.Errorf("burstiness %v: want more than 0", burstiness)
	}
	p := &GammaPacer{rate: rate, shape: burstiness, seed: seed}
	var start, count float64
	for _, d := range windows {
		if d < 0 {
			return nil, fmt.Errorf("window %v: want at least 0", d)
		}
		n := math.Round(rate * d.Seconds())
		p.windows = append(p.windows, window{start: start, length: d.Seconds(), n: uint64(n)})
		start += d.Seconds()
		count += n
	}
	if count > maxFitted {
		p.windows = nil
		start = 0
	}
	p.tail = start
	for i := range p.windows {
		w := &p.windows[i]
		p.rng = p.stream(i)
		for range w.n + 1 {
			w.total += p.gap()
		}
	}
	p.rewind()
	return p, nil
}

// NewPoissonPacer returns a pacer of Poisson arrivals at rate per second:
// a gamma pacer of burstiness 1 (see NewGammaPacer for the windows).
func NewPoissonPacer(rate float64, seed uint64, windows ...time.Duration) (*GammaPacer, error) {
	return NewGammaPacer(rate, 1, seed, windows...)
}

// String describes p.
func (p *GammaPacer) String() string {
	if p.shape == 1 {
		return fmt.Sprintf("Poisson{%v/s}", p.rate)
	}
	return fmt.Sprintf("Gamma{%v/s, burstiness %v}", p.rate, p.shape)
}

// stream returns the random source of window i (i = len(windows): of the
// gaps after them).
func (p *GammaPacer) stream(i int) *rand.Rand {
	return rand.New(rand.NewPCG(p.seed, 0x6a77a+uint64(i)))
}

// rewind restarts the schedule at hit 0 (the lock held, or not yet shared).
func (p *GammaPacer) rewind() {
	p.rng, p.w, p.in, p.sum = p.stream(0), 0, 0, 0
	p.k, p.at = 0, p.next()
}

// next draws the arrival after the latest, in seconds from the start.
func (p *GammaPacer) next() float64 {
	for p.w < len(p.windows) {
		w := p.windows[p.w]
		if p.in < w.n {
			p.in++
			p.sum += p.gap()
			return w.start + w.length*p.sum/w.total
		}
		p.w++
		p.in, p.sum, p.rng = 0, 0, p.stream(p.w)
	}
	p.sum += p.gap()
	return p.tail + p.sum
}

// gap draws one gap, in seconds.
func (p *GammaPacer) gap() float64 {
	mean := 1 / p.rate
	switch {
	case math.IsInf(p.shape, 1):
		return mean
	case p.shape == 1:
		return mean * p.rng.ExpFloat64()
	}
	return mean / p.shape * gamma(p.rng, p.shape)
}

// Pace returns the wait before hit number hits (from 0), given the time
// elapsed since the start: 0 when it is due.
func (p *GammaPacer) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if hits < p.k {
		p.rewind()
	}
	for p.k < hits {
		p.k++
		p.at = p.next()
	}
	if p.at >= float64(math.MaxInt64)/float64(time.Second) {
		return 0, true // past what a Duration holds
	}
	due := time.Duration(p.at * float64(time.Second))
	if wait := due - elapsed; wait > 0 {
		return wait, false
	}
	return 0, false
}

// Rate returns the mean rate, whatever the elapsed time.
func (p *GammaPacer) Rate(time.Duration) float64 { return p.rate }

// gamma draws from Gamma(shape, 1): Marsaglia and Tsang's method, boosted
// for shape < 1.
func gamma(r *rand.Rand, shape float64) float64 {
	if shape < 1 {
		u := r.Float64()
		for u == 0 {
			u = r.Float64()
		}
		return gamma(r, shape+1) * math.Pow(u, 1/shape)
	}
	d := shape - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := r.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := r.Float64()
		if u < 1-0.0331*x*x*x*x || math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}
