package route

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/inferhq/infer/server/metric"
)

// The load gauges the scored policy reads from a replica's /metrics, in
// Prometheus's text format: infer's (server/openai), vLLM's and SGLang's.
// Series of one name are summed (queue depths, one series per infer
// endpoint) or their maximum taken (KV use).
var (
	waitingNames = []string{metric.GenWaiting, "vllm:num_requests_waiting", "sglang:num_queue_reqs"}
	runningNames = []string{metric.GenRunning, "vllm:num_requests_running", "sglang:num_running_reqs"}
	kvNames      = []string{metric.GenKVUsage, "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"}
)

// maxMetricsBody bounds the /metrics answer read from a replica.
const maxMetricsBody = 8 << 20

// parseLoad reads a replica's load from its /metrics text.
func parseLoad(body []byte) Sample {
	var s Sample
	for len(body) > 0 {
		line := body
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i], body[i+1:]
		} else {
			body = nil
		}
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		end := bytes.IndexAny(line, "{ \t")
		if end <= 0 {
			continue
		}
		name := line[:end]
		if !nameIn(name, waitingNames) && !nameIn(name, runningNames) && !nameIn(name, kvNames) {
			continue
		}
		v, ok := sampleValue(line[end:])
		if !ok {
			continue
		}
		switch {
		case nameIn(name, waitingNames):
			s.Waiting += v
			s.HasQueue = true
		case nameIn(name, runningNames):
			s.Running += v
		case nameIn(name, kvNames):
			if !s.HasKV || v > s.KV {
				s.KV = v
			}
			s.HasKV = true
		}
	}
	return s
}

func nameIn(name []byte, names []string) bool {
	for _, n := range names {
		if string(name) == n {
			return true
		}
	}
	return false
}

// sampleValue reads the value of a sample line after its name:
// `{labels} value [timestamp]`. It reports false for anything else, or a
// value that is not a finite number.
func sampleValue(rest []byte) (float64, bool) {
	if rest[0] == '{' {
		n := labelsEnd(rest)
		if n < 0 {
			return 0, false
		}
		rest = rest[n:]
	}
	fields := bytes.Fields(rest)
	if len(fields) == 0 || len(fields) > 2 {
		return 0, false
	}
	v, err := strconv.ParseFloat(string(fields[0]), 64)
	if err != nil || v != v || v > 1e15 || v < -1e15 {
		return 0, false
	}
	return v, true
}

// labelsEnd returns the length of the {labels} that start b, -1 if they
// do not end. Label values are quoted and may hold } or escaped quotes.
func labelsEnd(b []byte) int {
	inQuote := false
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case inQuote && c == '\\':
			i++
		case c == '"':
			inQuote = !inQuote
		case !inQuote && c == '}':
			return i + 1
		}
	}
	return -1
}

// scrape reads r's /metrics into a sample.
func scrape(ctx context.Context, client *http.Client, r *Replica, now func() time.Time) (*Sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.url.String()+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain")
	inFlight := r.InFlight()
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics answered %d", resp.StatusCode)
	}
	body, err := io.ReadAll(bufio.NewReader(io.LimitReader(resp.Body, maxMetricsBody)))
	if err != nil {
		return nil, err
	}
	s := parseLoad(body)
	s.At, s.InFlight = now(), inFlight
	return &s, nil
}
