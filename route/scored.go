package route

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/inferhq/infer/internal/setting"
)

// scoredPicker is the Gateway API Inference Extension endpoint picker's
// way: each candidate gets a weighted sum of scores in [0, 1], and the
// highest wins (ties: the less loaded, then at random).
//
//	queue   (max − q) ÷ (max − min) over the candidates, q its queue depth:
//	        the requests waiting on its /metrics plus the router's requests
//	        sent to it since that sample, or, without a fresh sample, the
//	        router's in-flight requests to it (1 for all when all are equal)
//	kv      1 − its KV cache use, from a fresh sample (0.5 without one)
//	prefix  the fraction of the prompt's leading blocks it holds (the
//	        prefix index's estimate)
//
// A sample is fresh while younger than ScoreConfig.MaxAge; samples are read
// every ScoreConfig.Interval. The prompt's blocks are recorded for the
// replica picked.
type scoredPicker struct {
	cfg   ScoreConfig
	index *prefixIndex
	rnd   rng
	now   func() time.Time
}

// ScoreConfig configures the scored policy. Zero values take the defaults.
type ScoreConfig struct {
	// Queue, KV and Prefix weigh the scorers. All three zero: 1, 1 and 3
	// (the endpoint picker's default profile); otherwise a zero weight
	// turns its scorer off.
	Queue, KV, Prefix float64
	// Interval between reads of each replica's /metrics. Default 100ms.
	Interval time.Duration
	// MaxAge is the age past which a sample is stale and not used.
	// Default 3 × Interval.
	MaxAge time.Duration
}

// Bounds of ScoreConfig.
const (
	MinScrapeInterval = 10 * time.Millisecond
	MaxScrapeInterval = 10 * time.Second
	MaxScoreWeight    = 100
)

func (c ScoreConfig) withDefaults() ScoreConfig {
	if c.Queue == 0 && c.KV == 0 && c.Prefix == 0 {
		c.Queue, c.KV, c.Prefix = 1, 1, 3
	}
	if c.Interval <= 0 {
		c.Interval = 100 * time.Millisecond
	}
	if c.MaxAge <= 0 {
		c.MaxAge = 3 * c.Interval
	}
	return c
}

func (c ScoreConfig) validate() error {
	for _, w := range []float64{c.Queue, c.KV, c.Prefix} {
		if w < 0 || w > MaxScoreWeight || w != w {
			return setting.Errorf(SettingScoreWeight, w, "want 0 to %d", MaxScoreWeight)
		}
	}
	switch {
	case c.Interval < 0 || c.Interval != 0 && (c.Interval < MinScrapeInterval || c.Interval > MaxScrapeInterval):
		return setting.Errorf(SettingMetricsInterval, c.Interval, "want %v to %v", MinScrapeInterval, MaxScrapeInterval)
	case c.MaxAge < 0:
		return setting.Errorf(SettingSampleMaxAge, c.MaxAge, "must not be negative")
	}
	return nil
}

// ParseWeights reads scorer weights like "queue=1,kv=1,prefix=3" into c;
// scorers not named get weight 0.
func ParseWeights(s string) (ScoreConfig, error) {
	var c ScoreConfig
	for part := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		w, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil || w < 0 || w > MaxScoreWeight || w != w {
			return ScoreConfig{}, fmt.Errorf("%q: want queue=W,kv=W,prefix=W with weights 0 to %d", s, MaxScoreWeight)
		}
		switch k {
		case "queue":
			c.Queue = w
		case "kv":
			c.KV = w
		case "prefix":
			c.Prefix = w
		default:
			return ScoreConfig{}, fmt.Errorf("%q: unknown scorer %q: want queue, kv or prefix", s, k)
		}
	}
	if c.Queue == 0 && c.KV == 0 && c.Prefix == 0 {
		return ScoreConfig{}, fmt.Errorf("%q: at least one weight must be positive", s)
	}
	return c, nil
}

func (p *scoredPicker) Pick(req *Request, cands []*Replica) (*Replica, Reason) {
	var blocks []uint64
	if p.cfg.Prefix > 0 {
		blocks = p.index.blocks(req)
	}
	pick, reason := p.choose(blocks, cands)
	if p.cfg.Prefix > 0 {
		p.index.record(blocks, pick)
	}
	return pick, reason
}

func (p *scoredPicker) choose(blocks []uint64, cands []*Replica) (*Replica, Reason) {
	now := p.now()
	var qbuf [16]float64
	var mbuf [16]int
	queue, matched := qbuf[:0], mbuf[:0]
	if len(cands) > len(qbuf) {
		queue, matched = make([]float64, 0, len(cands)), make([]int, 0, len(cands))
	}
	queue, matched = queue[:len(cands)], matched[:len(cands)]
	if len(blocks) > 0 {
		p.index.match(blocks, cands, matched)
	} else {
		clear(matched)
	}
	qmin, qmax := 0.0, 0.0
	for i, c := range cands {
		queue[i] = p.queueDepth(c, now)
		if i == 0 || queue[i] < qmin {
			qmin = queue[i]
		}
		if i == 0 || queue[i] > qmax {
			qmax = queue[i]
		}
	}
	best, bestScore, ties, longest := -1, 0.0, 0, 0
	for i, c := range cands {
		longest = max(longest, matched[i])
		score := 0.0
		if qmax > qmin {
			score += p.cfg.Queue * (qmax - queue[i]) / (qmax - qmin)
		} else {
			score += p.cfg.Queue
		}
		score += p.cfg.KV * p.kvFree(c, now)
		if len(blocks) > 0 {
			score += p.cfg.Prefix * float64(matched[i]) / float64(len(blocks))
		}
		switch {
		case best < 0 || score > bestScore+1e-9 || score > bestScore-1e-9 && loadLess(c, cands[best]):
			best, bestScore, ties = i, score, 1
		case score > bestScore-1e-9 && loadEqual(c, cands[best]):
			if ties++; p.rnd(ties) == 0 {
				best = i
			}
		}
	}
	switch {
	case longest == 0:
		return cands[best], ReasonPolicy
	case matched[best] == longest:
		return cands[best], ReasonAffinity
	default:
		return cands[best], ReasonFallback
	}
}

// queueDepth is c's queue as the scorer counts it.
func (p *scoredPicker) queueDepth(c *Replica, now time.Time) float64 {
	s := c.Sample()
	if s == nil || !s.HasQueue || now.Sub(s.At) > p.cfg.MaxAge {
		return float64(c.InFlight())
	}
	return s.Waiting + float64(max(0, c.InFlight()-s.InFlight))
}

// kvFree is 1 − c's KV use from a fresh sample, 0.5 without one.
func (p *scoredPicker) kvFree(c *Replica, now time.Time) float64 {
	s := c.Sample()
	if s == nil || !s.HasKV || now.Sub(s.At) > p.cfg.MaxAge {
		return 0.5
	}
	return 1 - min(1, max(0, s.KV))
}

func (p *scoredPicker) SetReplicas(all []*Replica) {
	if p.index != nil {
		p.index.SetReplicas(all)
	}
}
