package attack

import (
	"context"
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/inferhq/infer/loadgen/record"
)

// maxResponse bounds the bytes read of one response body; a longer body
// fails the shape check.
const maxResponse = 4 << 20

// stopGrace is how long requests in flight may finish after a stop before
// they are cancelled.
const stopGrace = 2 * time.Second

// Config is one repeat of a point: warm-up, then the measured window.
type Config struct {
	Traffic  *Traffic
	Load     record.Load
	Warmup   time.Duration
	Duration time.Duration
	Timeout  time.Duration // per request
	// MaxInFlight bounds the requests in flight of an open loop; a closed
	// loop has Load.Concurrency.
	MaxInFlight int
}

// Result is what one repeat measured.
type Result struct {
	Tally Tally // the requests sent in the measured window
	// Answered counts the successful answers received in the measured
	// window, whenever they were sent: the server's real rate, which
	// under overload lags what was sent in the window.
	Answered int
	Timeline Timeline
	Start    time.Time     // of the measured window
	Window   time.Duration // measured time; shorter than asked when stopped
	Stopped  bool          // ctx was done before the end
}

// Run sends the load until the end or until ctx is done. Every answer goes
// to live; those of requests sent in the measured window are tallied. mark
// is called, from another goroutine, when the window starts (end false)
// and when it ends (end true, only if it started).
func Run(ctx context.Context, a Config, live func(*Outcome), mark func(end bool)) Result {
	workers, conns := a.workers()
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	defer tr.CloseIdleConnections()
	// Requests carry reqCtx, cancelled a grace period after a stop, so
	// that stopping never waits out a slow server's timeouts.
	reqCtx, cancelReqs := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelReqs()
	client := &http.Client{Transport: ctxTransport{tr, reqCtx}, Timeout: a.Timeout}
	// Closed loop: exactly the clients asked for. Open loop: a few
	// workers to begin with; vegeta adds more, up to the bound, when all
	// are waiting on answers.
	initial := workers
	if a.Load.Mode != "closed" {
		initial = min(workers, 16)
	}
	atk := vegeta.NewAttacker(
		vegeta.Client(client),
		vegeta.Workers(uint64(initial)),
		vegeta.MaxWorkers(uint64(workers)),
		vegeta.MaxBody(maxResponse),
	)

	pacer := newPacer(a.Load, a.Warmup, a.Duration)
	sched, _ := pacer.(schedule)
	began := time.Now() // vegeta's own start, within a microsecond
	res := Result{Start: began.Add(a.Warmup)}
	end := res.Start.Add(a.Duration)
	results := atk.Attack(a.Traffic.targeter(), pacer, a.Warmup+a.Duration, "")

	var (
		wg        sync.WaitGroup
		finished  = make(chan struct{})
		mu        sync.Mutex
		stoppedAt time.Time
	)
	wg.Add(2)
	go func() { // stopper
		defer wg.Done()
		select {
		case <-ctx.Done():
			mu.Lock()
			stoppedAt = time.Now()
			mu.Unlock()
			atk.Stop()
			select {
			case <-time.After(stopGrace):
				cancelReqs()
			case <-finished:
			}
		case <-finished:
		}
	}()
	go func() { // marks the window
		defer wg.Done()
		if !waitUntil(ctx, res.Start) {
			return
		}
		mark(false)
		waitUntil(ctx, end)
		mark(true)
	}()

	for r := range results {
		mu.Lock()
		stop := stoppedAt
		mu.Unlock()
		if !stop.IsZero() && strings.Contains(r.Error, context.Canceled.Error()) {
			continue // cut off by the stop, not by the server
		}
		o := classify(int(r.Code), r.Error, r.Body, r.Headers.Get("Server-Timing"), a.Traffic.check)
		o.Sent, o.Latency = r.Timestamp, r.Latency
		if sched != nil {
			// Hits are numbered in the order they go out, which is the
			// order the pacer released them in.
			o.intended = began.Add(sched.Intended(r.Seq))
		}
		o.carrier = strings.HasSuffix(r.URL, injectFragment)
		live(&o)
		if !o.Sent.Before(res.Start) && o.Sent.Before(end) {
			res.Tally.Add(&o)
			res.Timeline.add(o.Sent.Sub(res.Start), &o)
		}
		windowEnd := end
		if !stop.IsZero() && stop.Before(end) {
			windowEnd = stop
		}
		if done := o.Sent.Add(o.Latency); o.OK() && !done.Before(res.Start) && done.Before(windowEnd) {
			res.Answered++
			res.Timeline.answer(done.Sub(res.Start))
		}
	}
	close(finished)
	wg.Wait()

	res.Window = a.Duration
	if !stoppedAt.IsZero() {
		res.Stopped = true
		res.Window = max(0, min(stoppedAt.Sub(res.Start), a.Duration))
	}
	return res
}

// workers returns the attacker's worker bound (the most requests in
// flight) and the connections to keep per host.
func (a Config) workers() (workers, conns int) {
	if a.Load.Mode == "closed" {
		return a.Load.Concurrency, a.Load.Concurrency
	}
	return a.MaxInFlight, a.MaxInFlight
}

// A schedule is a pacer that knows when it meant each hit to go: Intended
// returns the intended send time of hit n (from 0, in sending order) from
// the attack's start. Against it each request's actual send time gives its
// schedule lag, and its latency from the intended time (wrk2's correction
// for coordinated omission). The open loop's pacers are schedules; the
// closed loop has none (each client sends when it is answered).
type schedule interface {
	vegeta.Pacer
	Intended(hit uint64) time.Duration
}

// NewPacer returns the schedule of sends of a point's load, for a warm-up
// and a measured window of duration: random arrivals at the level's rate
// (Poisson or gamma, drawn from seed; the warm-up and the window each hold
// the count the rate asks for), or newPacer's.
func NewPacer(l record.Load, warmup, duration time.Duration, seed uint64) (vegeta.Pacer, error) {
	switch l.Arrival {
	case "poisson", "gamma":
		return NewGammaPacer(l.Rate, l.Burstiness, seed, warmup, duration)
	}
	return newPacer(l, warmup, duration), nil
}

// newPacer returns the schedule of sends: none for closed loop (each
// client sends when answered), a constant rate, or a ramp that holds its
// start rate through the warm-up.
func newPacer(l record.Load, warmup, duration time.Duration) vegeta.Pacer {
	switch {
	case l.Mode == "closed":
		return vegeta.ConstantPacer{} // as fast as the workers go
	case l.Pacer == "ramp":
		from := constantPacer(l.RampFrom)
		return warmedPacer{
			warmup: warmup,
			before: constant{from},
			after:  linear{vegeta.LinearPacer{StartAt: from, Slope: (l.Rate - l.RampFrom) / duration.Seconds()}},
			hits:   uint64(l.RampFrom * warmup.Seconds()),
		}
	default:
		return constant{constantPacer(l.Rate)}
	}
}

// constantPacer returns vegeta's constant pacer for a rate in requests per
// second, exact for whole rates and to a thousandth otherwise.
func constantPacer(rate float64) vegeta.ConstantPacer {
	if rate == math.Trunc(rate) {
		return vegeta.ConstantPacer{Freq: int(rate), Per: time.Second}
	}
	return vegeta.ConstantPacer{Freq: int(math.Round(rate * 1000)), Per: 1000 * time.Second}
}

// constant is vegeta's constant pacer as a schedule.
type constant struct{ vegeta.ConstantPacer }

// Intended implements schedule: vegeta sends hit n one interval after
// hit n−1, the first one interval after the start.
func (p constant) Intended(n uint64) time.Duration {
	interval := p.Per.Nanoseconds() / int64(p.Freq)
	return time.Duration(int64(n+1) * interval)
}

// linear is vegeta's linear pacer (rate StartAt + Slope·t) as a schedule.
type linear struct{ vegeta.LinearPacer }

// Intended implements schedule: vegeta sends hit 0 at once, and hit n when
// the hits due, StartAt·t + Slope·t²/2, reach n+1.
func (p linear) Intended(n uint64) time.Duration {
	if n == 0 {
		return 0
	}
	b := float64(p.StartAt.Freq) / p.StartAt.Per.Seconds()
	h := float64(n + 1)
	// The root of Slope/2·t² + b·t − h, in the form that also holds for
	// Slope 0 and stays exact when Slope·h is small.
	disc := max(b*b+2*p.Slope*h, 0)
	return time.Duration(2 * h / (b + math.Sqrt(disc)) * float64(time.Second))
}

// warmedPacer runs before until warmup has passed, then after, from its
// own start: hits is how many requests before should have sent by then.
type warmedPacer struct {
	warmup        time.Duration
	before, after schedule
	hits          uint64
}

func (p warmedPacer) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	if elapsed < p.warmup {
		return p.before.Pace(elapsed, hits)
	}
	if hits < p.hits {
		return 0, false // behind on the warm-up: catch up
	}
	return p.after.Pace(elapsed-p.warmup, hits-p.hits)
}

func (p warmedPacer) Rate(elapsed time.Duration) float64 {
	if elapsed < p.warmup {
		return p.before.Rate(elapsed)
	}
	return p.after.Rate(elapsed - p.warmup)
}

// Intended implements schedule.
func (p warmedPacer) Intended(n uint64) time.Duration {
	if n < p.hits {
		return p.before.Intended(n)
	}
	return p.warmup + p.after.Intended(n-p.hits)
}

// ctxTransport gives every request ctx, so that cancelling it aborts them.
type ctxTransport struct {
	base http.RoundTripper
	ctx  context.Context
}

func (t ctxTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return t.base.RoundTrip(r.WithContext(t.ctx))
}

// waitUntil sleeps until t; it returns false if ctx is done first.
func waitUntil(ctx context.Context, t time.Time) bool {
	tm := time.NewTimer(time.Until(t))
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-tm.C:
		return true
	}
}
