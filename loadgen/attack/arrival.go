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
// The schedule is a function of the seed only: the same seed gives the
// same send times, whatever the elapsed times Pace is asked at. A
// GammaPacer is safe for concurrent use.
type GammaPacer struct {
	rate, shape float64
	seed        uint64

	mu  sync.Mutex
	rng *rand.Rand
	k   uint64  // the latest hit whose arrival is known
	at  float64 // its arrival, in seconds
}

var _ vegeta.Pacer = (*GammaPacer)(nil)

// NewGammaPacer returns a pacer of rate requests per second (0 < rate ≤
// MaxArrivalRate) and burstiness > 0 (+Inf: constant gaps).
func NewGammaPacer(rate, burstiness float64, seed uint64) (*GammaPacer, error) {
	if !(rate > 0 && rate <= MaxArrivalRate) {
		return nil, fmt.Errorf("arrival rate %v: want more than 0, at most %v", rate, MaxArrivalRate)
	}
	if !(burstiness > 0) || math.IsNaN(burstiness) {
		return nil, fmt.Errorf("burstiness %v: want more than 0", burstiness)
	}
	p := &GammaPacer{rate: rate, shape: burstiness, seed: seed}
	p.rewind()
	return p, nil
}

// NewPoissonPacer returns a pacer of Poisson arrivals at rate per second:
// a gamma pacer of burstiness 1.
func NewPoissonPacer(rate float64, seed uint64) (*GammaPacer, error) {
	return NewGammaPacer(rate, 1, seed)
}

// String describes p.
func (p *GammaPacer) String() string {
	if p.shape == 1 {
		return fmt.Sprintf("Poisson{%v/s}", p.rate)
	}
	return fmt.Sprintf("Gamma{%v/s, burstiness %v}", p.rate, p.shape)
}

// rewind restarts the schedule at hit 0 (the lock held, or not yet shared).
func (p *GammaPacer) rewind() {
	p.rng = rand.New(rand.NewPCG(p.seed, 0x6a77a))
	p.k, p.at = 0, p.gap()
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
		p.at += p.gap()
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
