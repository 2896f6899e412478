package loadgen

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// traffic is the prepared requests of one point: bodies built before the
// attack and cycled through, so that consecutive requests differ, and the
// URLs the load is spread over.
type traffic struct {
	urls   []string
	bodies [][]byte
	header http.Header
	items  int
	v2     bool   // bodies are KServe v2 requests
	expect string // how answers are checked: ExpectStatus, ExpectInfer or ExpectKServe
	next   atomic.Uint64
	// carries[i] tells that body i carries the injected text; such
	// requests go to urls with injectFragment appended (carrierURLs).
	carries     []bool
	carrierURLs []string
}

// injectFragment marks the URL of a request that carries the injected
// text. A fragment never goes on the wire, but vegeta hands the URL back
// with the result, so answers can be told apart without the server
// knowing.
const injectFragment = "#inject"

// endpointPath returns the URL path of an endpoint; model names the model
// for v2.
func endpointPath(endpoint, model string) string {
	switch endpoint {
	case "naive", "batched":
		return "/" + endpoint
	case "v2":
		return "/v2/models/" + url.PathEscape(model) + "/infer"
	default:
		return endpoint
	}
}

// newTraffic prepares the requests of a point: request i carries items
// [i·n, i·n+n) of the corpus, wrapping around; there are as many distinct
// bodies as corpus items. Bodies with an item containing inject (when not
// "") are marked as carriers. Bodies are KServe v2 requests for the v2
// endpoint (or path) and whenever answers are expected in KServe's shape;
// answers are checked as expect says.
func newTraffic(bases []string, endpoint, model, format, expect string, items []string, n int, inject string) (*traffic, error) {
	if len(items) == 0 {
		return nil, errors.New("empty corpus")
	}
	if endpoint == "v2" && model == "" {
		return nil, errors.New("the v2 endpoint needs the model's name: set target.model")
	}
	t := &traffic{items: n, v2: canonicalEndpoint(endpoint) == "v2" || expect == ExpectKServe, expect: expect, header: http.Header{}}
	path := endpointPath(endpoint, model)
	for _, b := range bases {
		t.urls = append(t.urls, b+path)
		if inject != "" {
			t.carrierURLs = append(t.carrierURLs, b+path+injectFragment)
		}
	}
	switch {
	case t.v2 || format == "json":
		t.header.Set("Content-Type", "application/json")
	default:
		t.header.Set("Content-Type", "text/plain; charset=utf-8")
	}
	batch := make([]string, n)
	for i := range items {
		carries := false
		for k := range n {
			batch[k] = items[(i*n+k)%len(items)]
			carries = carries || (inject != "" && strings.Contains(batch[k], inject))
		}
		t.carries = append(t.carries, carries)
		var body []byte
		var err error
		switch {
		case t.v2:
			body, err = json.Marshal(v2Request{Inputs: []v2Tensor{{Name: "text", Shape: []int{n}, Datatype: "BYTES", Data: batch}}})
		case format == "json":
			body, err = json.Marshal(struct {
				Inputs []string `json:"inputs"`
			}{batch})
		default:
			body = []byte(batch[0])
		}
		if err != nil {
			return nil, err
		}
		t.bodies = append(t.bodies, body)
	}
	return t, nil
}

type v2Tensor struct {
	Name     string   `json:"name"`
	Shape    []int    `json:"shape"`
	Datatype string   `json:"datatype"`
	Data     []string `json:"data"`
}

type v2Request struct {
	Inputs []v2Tensor `json:"inputs"`
}

// targeter returns the next request on each call; safe for concurrent use.
func (t *traffic) targeter() vegeta.Targeter {
	return func(tgt *vegeta.Target) error {
		i := t.next.Add(1) - 1
		b := i % uint64(len(t.bodies))
		tgt.Method = http.MethodPost
		tgt.URL = t.urls[i%uint64(len(t.urls))]
		if t.carries[b] {
			tgt.URL = t.carrierURLs[i%uint64(len(t.urls))]
		}
		tgt.Body = t.bodies[b]
		tgt.Header = t.header
		return nil
	}
}

// check reports whether a 200 answer has the expected shape: one output
// per item sent, in infer's or KServe v2's form; any body when only the
// status is checked.
func (t *traffic) check(body []byte) error {
	switch t.expect {
	case ExpectStatus:
		return nil
	case ExpectKServe:
		var r struct {
			Outputs []struct {
				Shape []int `json:"shape"`
			} `json:"outputs"`
		}
		if err := json.Unmarshal(body, &r); err != nil {
			return fmt.Errorf("response is not v2 JSON: %w", err)
		}
		if len(r.Outputs) == 0 || len(r.Outputs[0].Shape) == 0 || r.Outputs[0].Shape[0] != t.items {
			return fmt.Errorf("v2 response's first output does not have %d rows", t.items)
		}
		return nil
	}
	var r struct {
		Outputs []json.RawMessage `json:"outputs"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return fmt.Errorf("response is not JSON: %w", err)
	}
	if len(r.Outputs) != t.items {
		return fmt.Errorf("response has %d outputs, want %d", len(r.Outputs), t.items)
	}
	return nil
}

// serverTiming is what one response's Server-Timing header said.
type serverTiming struct {
	queue, compute time.Duration
	batch          int
	pad            float64 // 0 when absent
}

// parseServerTiming reads the queue and compute durations (milliseconds),
// the batch size and the padding from a header like
// "queue;dur=12.345, compute;dur=151.240, batch;desc=64, pad;desc=1.37".
func parseServerTiming(h string) (serverTiming, bool) {
	var st serverTiming
	var seen int
	for entry := range strings.SplitSeq(h, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(entry), ";")
		for p := range strings.SplitSeq(params, ";") {
			k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
			v = strings.Trim(v, `"`)
			switch {
			case k == "dur" && (name == "queue" || name == "compute"):
				ms, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return serverTiming{}, false
				}
				d := time.Duration(ms * float64(time.Millisecond))
				if name == "queue" {
					st.queue = d
				} else {
					st.compute = d
				}
				seen++
			case k == "desc" && name == "batch":
				n, err := strconv.Atoi(v)
				if err != nil {
					return serverTiming{}, false
				}
				st.batch = n
				seen++
			case k == "desc" && name == "pad":
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return serverTiming{}, false
				}
				st.pad = f
				seen++
			}
		}
	}
	return st, seen > 0
}
