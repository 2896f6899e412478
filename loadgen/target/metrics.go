package target

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/inferhq/infer/loadgen/record"
	"github.com/inferhq/infer/server/metric"
)

// Sample is one line of the Prometheus text format.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// parseMetrics reads the Prometheus text exposition format, keeping the
// samples whose name starts with prefix. Lines it cannot read are skipped.
func parseMetrics(r io.Reader, prefix string) ([]Sample, error) {
	var out []Sample
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		s, ok := parseSample(line)
		if ok {
			out = append(out, s)
		}
	}
	return out, sc.Err()
}

func parseSample(line string) (Sample, bool) {
	s := Sample{Labels: map[string]string{}}
	rest := line
	if i := strings.IndexAny(rest, "{ "); i < 0 {
		return s, false
	} else {
		s.Name, rest = rest[:i], rest[i:]
	}
	if strings.HasPrefix(rest, "{") {
		rest = rest[1:]
		for {
			rest = strings.TrimLeft(rest, ", ")
			if strings.HasPrefix(rest, "}") {
				rest = rest[1:]
				break
			}
			eq := strings.Index(rest, `="`)
			if eq < 0 {
				return s, false
			}
			name := rest[:eq]
			rest = rest[eq+2:]
			var val strings.Builder
			for {
				if rest == "" {
					return s, false
				}
				c := rest[0]
				rest = rest[1:]
				if c == '"' {
					break
				}
				if c == '\\' && rest != "" {
					switch rest[0] {
					case 'n':
						c = '\n'
					default:
						c = rest[0]
					}
					rest = rest[1:]
				}
				val.WriteByte(c)
			}
			s.Labels[name] = val.String()
		}
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return s, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return s, false
	}
	s.Value = v
	return s, true
}

// Scrape reads base's /metrics: its infer_ samples.
func Scrape(ctx context.Context, client *http.Client, base string) ([]Sample, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/metrics: %s", base, resp.Status)
	}
	return parseMetrics(io.LimitReader(resp.Body, 8<<20), metric.Prefix)
}

// Counters are an encoder server's batching counters of one endpoint,
// summed over servers.
type Counters struct {
	batches, items, queueSum, queueN, dropped float64
}

// CountersOf picks the counters of the endpoint label (BatchLabel) out
// of samples.
func CountersOf(samples []Sample, endpoint string) Counters {
	var c Counters
	for _, s := range samples {
		if s.Labels["endpoint"] != endpoint {
			continue
		}
		switch s.Name {
		case metric.BatchSize + metric.Count:
			c.batches += s.Value
		case metric.BatchSize + metric.Sum:
			c.items += s.Value
		case metric.QueueDuration + metric.Sum:
			c.queueSum += s.Value
		case metric.QueueDuration + metric.Count:
			c.queueN += s.Value
		case metric.DroppedItems:
			c.dropped += s.Value
		}
	}
	return c
}

// Add returns the sum of c and o.
func (c Counters) Add(o Counters) Counters {
	return Counters{c.batches + o.batches, c.items + o.items, c.queueSum + o.queueSum, c.queueN + o.queueN, c.dropped + o.dropped}
}

// Delta returns the metrics of the interval from c to end.
func (c Counters) Delta(end Counters) *record.Metrics {
	m := &record.Metrics{
		Batches: end.batches - c.batches,
		Items:   end.items - c.items,
		Dropped: end.dropped - c.dropped,
	}
	if m.Batches > 0 {
		m.MeanBatch = m.Items / m.Batches
	}
	if n := end.queueN - c.queueN; n > 0 {
		m.MeanQueue = record.Duration((end.queueSum - c.queueSum) / n * float64(time.Second))
	}
	return m
}

// Info is what an encoder server's info metrics say about it: the model
// (infer_model_info) and the batching settings in effect
// (infer_batching_info; older servers put them on infer_model_info).
type Info struct {
	Model, Backend, Policy string
	Batch, Workers         int
	MaxLatency             time.Duration
	OK                     bool // the server has infer's info metrics
}

// InfoOf reads the info metrics out of samples.
func InfoOf(samples []Sample) Info {
	var in Info
	for _, s := range samples {
		if s.Name != metric.ModelInfo && s.Name != metric.BatchingInfo {
			continue
		}
		in.OK = true
		l := s.Labels
		if v, ok := l["model"]; ok {
			in.Model, in.Backend = v, l["backend"]
		}
		if v, ok := l["policy"]; ok {
			in.Policy = v
			in.Batch, _ = strconv.Atoi(l["max_batch"])
			in.Workers, _ = strconv.Atoi(l["workers"])
			in.MaxLatency, _ = time.ParseDuration(l["max_latency"])
		}
	}
	return in
}
