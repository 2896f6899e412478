// Package ceiling measures a model alone, with no HTTP and no queue: the
// items per second and the latency of each batch size, which bound what any
// server of that model can do on the same machine. It also fits the linear
// cost t(n) = fixed + per_item·n to such a measurement, the model of
// models/sim.
package ceiling

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/inferhq/infer/internal/linfit"
	"github.com/inferhq/infer/models"
)

// Config configures Measure. The zero value measures batch sizes 1, 8, 32
// and 64 for 3 s each.
type Config struct {
	// Batches are the batch sizes to measure. Default 1, 8, 32, 64.
	Batches []int
	// Duration is how long each batch size is measured. Default 3s.
	Duration time.Duration
	// MinRuns is the fewest measured runs of each batch size, however long
	// they take. Default 3.
	MinRuns int
	// Warmup is the number of unmeasured runs before each batch size.
	// Default 1.
	Warmup int
}

// WithDefaults returns c with its zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if len(c.Batches) == 0 {
		c.Batches = []int{1, 8, 32, 64}
	}
	if c.Duration <= 0 {
		c.Duration = 3 * time.Second
	}
	if c.MinRuns <= 0 {
		c.MinRuns = 3
	}
	if c.Warmup <= 0 {
		c.Warmup = 1
	}
	return c
}

// prepareRuns is the fewest items whose preparation is timed.
const prepareRuns = 2000

// Result is a measurement of one model.
type Result struct {
	Model string `json:"model"`
	// Items is the number of distinct inputs the batches were drawn from.
	Items int `json:"items"`
	// MeanTokens is their mean length in tokens, when the model tokenizes.
	MeanTokens float64 `json:"mean_tokens,omitempty"`
	// PrepareNs is the mean cost of Factory.Prepare (tokenization) of one
	// item, in nanoseconds, on one core.
	PrepareNs float64 `json:"prepare_ns_per_item"`
	Points    []Point `json:"points"`
}

// Point is the measurement of one batch size.
type Point struct {
	Batch       int     `json:"batch"`
	Runs        int     `json:"runs"`
	ItemsPerSec float64 `json:"items_per_sec"`
	// Latencies of one batch, in milliseconds.
	MeanMs float64 `json:"mean_ms"`
	P50Ms  float64 `json:"p50_ms"`
	P99Ms  float64 `json:"p99_ms"`
	// PerItemNs is the model's cost per item at this batch size: the mean
	// latency over the batch size, in nanoseconds.
	PerItemNs float64 `json:"per_item_ns"`
}

// Measure prepares texts with f, then runs batches drawn from them in turn on
// one instance, for each batch size of cfg. onPoint, if not nil, gets each
// point as it is done.
func Measure(ctx context.Context, f models.Factory, texts []string, cfg Config, onPoint func(Point)) (Result, error) {
	cfg = cfg.WithDefaults()
	res := Result{Model: f.Info().Name}
	if len(texts) == 0 {
		return res, errors.New("no inputs to measure with")
	}
	ins := make([]models.Input, len(texts))
	tokens := 0
	for i, s := range texts {
		in, err := f.Prepare(s)
		if err != nil {
			return res, fmt.Errorf("prepare input %d %q: %w", i+1, s, err)
		}
		ins[i] = in
		tokens += len(in.Tokens)
	}
	res.Items = len(ins)
	res.MeanTokens = float64(tokens) / float64(len(ins))
	// Time Prepare again, warm, over enough items for a steady figure.
	n := max(len(texts), prepareRuns)
	start := time.Now()
	for i := range n {
		_, _ = f.Prepare(texts[i%len(texts)]) // each text succeeded above
	}
	res.PrepareNs = float64(time.Since(start).Nanoseconds()) / float64(n)

	m, err := f.New(ctx, 0)
	if err != nil {
		return res, fmt.Errorf("load model: %w", err)
	}
	defer m.Close()
	next := 0
	run := func(n int) (time.Duration, error) {
		batch := make([]models.Input, n)
		for i := range batch {
			batch[i] = ins[next%len(ins)]
			next++
		}
		out := make([]models.Output, n)
		t0 := time.Now()
		err := m.Predict(ctx, batch, out)
		return time.Since(t0), err
	}
	for _, n := range cfg.Batches {
		if n < 1 {
			return res, fmt.Errorf("batch size %d: want at least 1", n)
		}
		for range cfg.Warmup {
			if _, err := run(n); err != nil {
				return res, fmt.Errorf("batch %d: %w", n, err)
			}
		}
		p, err := measure(ctx, n, cfg.Duration, cfg.MinRuns, func(int) (time.Duration, bool, error) {
			d, err := run(n)
			if err != nil {
				return 0, false, fmt.Errorf("batch %d: %w", n, err)
			}
			return d, true, nil
		})
		if err != nil {
			return res, err
		}
		res.Points = append(res.Points, p)
		if onPoint != nil {
			onPoint(p)
		}
	}
	return res, nil
}

// measure times run until the runs it counts take dur in all and number at
// least minRuns, and returns their point, of batch size n. run(i) makes the
// i-th run, from 0, and says how long it took and whether that counts. An
// error of run's, or ctx's, ends the measure.
func measure(ctx context.Context, n int, dur time.Duration, minRuns int, run func(i int) (time.Duration, bool, error)) (Point, error) {
	var lat []time.Duration
	var total time.Duration
	for i := 0; total < dur || len(lat) < minRuns; i++ {
		if err := ctx.Err(); err != nil {
			return Point{}, err
		}
		d, count, err := run(i)
		if err != nil {
			return Point{}, err
		}
		if count {
			lat = append(lat, d)
			total += d
		}
	}
	return point(n, lat, total), nil
}

func point(n int, lat []time.Duration, total time.Duration) Point {
	slices.Sort(lat)
	mean := total.Seconds() / float64(len(lat))
	return Point{
		Batch:       n,
		Runs:        len(lat),
		ItemsPerSec: float64(n*len(lat)) / total.Seconds(),
		MeanMs:      mean * 1e3,
		P50Ms:       ms(quantile(lat, 0.50)),
		P99Ms:       ms(quantile(lat, 0.99)),
		PerItemNs:   mean * 1e9 / float64(n),
	}
}

// quantile of sorted d, the nearest rank.
func quantile(d []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(d)))) - 1
	return d[max(0, min(i, len(d)-1))]
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// Fit is the linear cost t(n) = Fixed + PerItem·n of a batch of n items.
type Fit struct {
	Fixed   time.Duration `json:"fixed"`
	PerItem time.Duration `json:"per_item"`
	// RMSE is the root mean square of the residuals of the points' mean
	// latencies; MaxRelErr the largest residual relative to its latency.
	RMSE      time.Duration `json:"rmse"`
	MaxRelErr float64       `json:"max_rel_err"`
}

// FitLinear fits the points' mean latencies by least squares, each point
// weighing the same, with the batcher's fit (internal/linfit): both
// coefficients are kept non-negative, a negative intercept refitting the
// slope through the origin. It needs two distinct batch sizes.
func FitLinear(points []Point) (Fit, error) {
	var sums linfit.Sums
	sizes := map[int]bool{}
	for _, p := range points {
		sums.Add(float64(p.Batch), p.MeanMs*1e6, 1)
		sizes[p.Batch] = true
	}
	if len(sizes) < 2 {
		return Fit{}, errors.New("fit needs at least two batch sizes")
	}
	k := float64(len(points))
	icept, slope, _ := sums.Line()
	var sse, maxRel float64
	for _, p := range points {
		t := p.MeanMs * 1e6
		r := t - (icept + slope*float64(p.Batch))
		sse += r * r
		if t > 0 {
			maxRel = max(maxRel, math.Abs(r)/t)
		}
	}
	return Fit{
		Fixed:     time.Duration(math.Round(icept)),
		PerItem:   time.Duration(math.Round(slope)),
		RMSE:      time.Duration(math.Round(math.Sqrt(sse / k))),
		MaxRelErr: maxRel,
	}, nil
}
