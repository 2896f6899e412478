package loadgen

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

// sample is one line of the Prometheus text format.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// parseMetrics reads the Prometheus text exposition format, keeping the
// samples whose name starts with prefix. Lines it cannot read are skipped.
func parseMetrics(r io.Reader, prefix string) ([]sample, error) {
	var out []sample
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

func parseSample(line string) (sample, bool) {
	s := sample{labels: map[string]string{}}
	rest := line
	if i := strings.IndexAny(rest, "{ "); i < 0 {
		return s, false
	} else {
		s.name, rest = rest[:i], rest[i:]
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
			s.labels[name] = val.String()
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
	s.value = v
	return s, true
}

// scrape reads base's /metrics.
func scrape(ctx context.Context, client *http.Client, base string) ([]sample, error) {
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

// counters are the batching counters of one endpoint, summed over targets.
type counters struct {
	batches, items, queueSum, queueN, dropped float64
}

// countersOf picks the endpoint's counters out of samples.
func countersOf(samples []sample, endpoint string) counters {
	var c counters
	for _, s := range samples {
		if s.labels["endpoint"] != endpoint {
			continue
		}
		switch s.name {
		case metric.BatchSize + metric.Count:
			c.batches += s.value
		case metric.BatchSize + metric.Sum:
			c.items += s.value
		case metric.QueueDuration + metric.Sum:
			c.queueSum += s.value
		case metric.QueueDuration + metric.Count:
			c.queueN += s.value
		case metric.DroppedItems:
			c.dropped += s.value
		}
	}
	return c
}

func (c counters) add(o counters) counters {
	return counters{c.batches + o.batches, c.items + o.items, c.queueSum + o.queueSum, c.queueN + o.queueN, c.dropped + o.dropped}
}

// delta returns the metrics of the interval from c to end.
func (c counters) delta(end counters) *record.Metrics {
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

// metricsEndpoint is the endpoint label under which the server counts a
// sweep endpoint's batches: v2 requests (also by their path) run in the
// batched endpoint's batches. Other paths have none.
func metricsEndpoint(endpoint string) string {
	switch canonicalEndpoint(endpoint) {
	case "naive":
		return "naive"
	case "batched", "v2":
		return "batched"
	}
	return ""
}

// serverInfo is what a server's info metrics say about it: the model
// (infer_model_info) and the batching settings in effect
// (infer_batching_info; older servers put them on infer_model_info).
type serverInfo struct {
	model, backend, policy string
	batch, workers         int
	latency                time.Duration
	ok                     bool
}

func infoOf(samples []sample) serverInfo {
	var in serverInfo
	for _, s := range samples {
		if s.name != metric.ModelInfo && s.name != metric.BatchingInfo {
			continue
		}
		in.ok = true
		l := s.labels
		if v, ok := l["model"]; ok {
			in.model, in.backend = v, l["backend"]
		}
		if v, ok := l["policy"]; ok {
			in.policy = v
			in.batch, _ = strconv.Atoi(l["max_batch"])
			in.workers, _ = strconv.Atoi(l["workers"])
			in.latency, _ = time.ParseDuration(l["max_latency"])
		}
	}
	return in
}
