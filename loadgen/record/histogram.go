package record

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"
)

// Histogram is a latency histogram with logarithmic buckets 1 % wide, from
// 1 µs to over an hour: percentiles read from it are within 1 % of the true
// values. Histograms merge by adding counts, so repeats and runs can be
// combined and compared after the fact. The zero value is empty and usable;
// it is not safe for concurrent use.
type Histogram struct {
	counts map[int]uint64
	n      uint64
	sum    float64 // ns
	min    time.Duration
	max    time.Duration
}

const (
	histBase  = 1.01
	histFloor = float64(time.Microsecond)
)

var logBase = math.Log(histBase)

func bucketOf(d time.Duration) int {
	if float64(d) <= histFloor {
		return 0
	}
	return int(math.Log(float64(d)/histFloor)/logBase) + 1
}

// upper returns the upper bound of bucket i.
func upper(i int) time.Duration {
	if i == 0 {
		return time.Duration(histFloor)
	}
	return time.Duration(histFloor * math.Pow(histBase, float64(i)))
}

// Record adds one observation.
func (h *Histogram) Record(d time.Duration) {
	if h.counts == nil {
		h.counts = make(map[int]uint64)
	}
	h.counts[bucketOf(d)]++
	if h.n == 0 || d < h.min {
		h.min = d
	}
	if d > h.max {
		h.max = d
	}
	h.n++
	h.sum += float64(d)
}

// Merge adds o's observations to h.
func (h *Histogram) Merge(o *Histogram) {
	if o == nil || o.n == 0 {
		return
	}
	if h.counts == nil {
		h.counts = make(map[int]uint64)
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
	h.sum += o.sum
}

// Count returns the number of observations.
func (h *Histogram) Count() uint64 { return h.n }

// Mean returns the mean observation.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.n))
}

// Max returns the largest observation.
func (h *Histogram) Max() time.Duration { return h.max }

// Quantile returns the q-quantile (0 ≤ q ≤ 1): the upper bound of the bucket
// holding it, capped by the largest observation.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = max(rank, 1)
	keys := h.sortedKeys()
	var seen uint64
	for _, i := range keys {
		seen += h.counts[i]
		if seen >= rank {
			return min(max(upper(i), h.min), h.max)
		}
	}
	return h.max
}

// Percentiles summarises h.
func (h *Histogram) Percentiles() Percentiles {
	return Percentiles{
		Mean: Duration(h.Mean()),
		P50:  Duration(h.Quantile(0.50)),
		P90:  Duration(h.Quantile(0.90)),
		P99:  Duration(h.Quantile(0.99)),
		P999: Duration(h.Quantile(0.999)),
		Max:  Duration(h.max),
	}
}

func (h *Histogram) sortedKeys() []int {
	keys := make([]int, 0, len(h.counts))
	for i := range h.counts {
		keys = append(keys, i)
	}
	slices.Sort(keys)
	return keys
}

// histJSON is the wire form: parallel arrays of bucket indexes and counts.
type histJSON struct {
	Base    float64  `json:"base"`
	FloorNs float64  `json:"floor_ns"`
	Buckets []int    `json:"buckets"`
	Counts  []uint64 `json:"counts"`
	SumNs   float64  `json:"sum_ns"`
	MinNs   int64    `json:"min_ns"`
	MaxNs   int64    `json:"max_ns"`
}

func (h *Histogram) MarshalJSON() ([]byte, error) {
	j := histJSON{Base: histBase, FloorNs: histFloor, SumNs: h.sum, MinNs: int64(h.min), MaxNs: int64(h.max),
		Buckets: []int{}, Counts: []uint64{}}
	for _, i := range h.sortedKeys() {
		j.Buckets = append(j.Buckets, i)
		j.Counts = append(j.Counts, h.counts[i])
	}
	return json.Marshal(j)
}

func (h *Histogram) UnmarshalJSON(b []byte) error {
	var j histJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	if j.Base != histBase || j.FloorNs != histFloor {
		return fmt.Errorf("histogram with base %v floor %v: want base %v floor %v", j.Base, j.FloorNs, histBase, histFloor)
	}
	if len(j.Buckets) != len(j.Counts) {
		return fmt.Errorf("histogram: %d buckets but %d counts", len(j.Buckets), len(j.Counts))
	}
	*h = Histogram{counts: make(map[int]uint64, len(j.Buckets)), sum: j.SumNs, min: time.Duration(j.MinNs), max: time.Duration(j.MaxNs)}
	for k, i := range j.Buckets {
		h.counts[i] += j.Counts[k]
		h.n += j.Counts[k]
	}
	return nil
}
