package attack

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/inferhq/infer/loadgen/target"
)

// Traffic is the prepared requests of one point: bodies built before the
// attack and cycled through, so that consecutive requests differ, and the
// URLs the load is spread over.
type Traffic struct {
	urls   []string
	bodies [][]byte
	header http.Header
	items  int
	v2     bool   // bodies are KServe v2 requests
	expect string // how answers are checked: target.ExpectStatus, ExpectInfer or ExpectKServe
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

// TrafficConfig describes the requests of a point.
type TrafficConfig struct {
	URLs     []string // the servers' base URLs
	Endpoint string   // a sweep endpoint (target.Path)
	Model    string   // the model's name, for the v2 endpoint
	Format   string   // "json" or "text" (one item per request)
	Expect   string   // how 200 answers are checked: target.ExpectStatus, ExpectInfer or ExpectKServe
	Items    []string // the corpus
	N        int      // items per request
	// Inject, when not "", is a text that some items carry: their
	// requests are told apart in the tally (Tally.Injected).
	Inject string
}

// NewTraffic prepares the requests of a point: request i carries items
// [i·n, i·n+n) of the corpus, wrapping around; there are as many distinct
// bodies as corpus items. Bodies with an item containing the injected text
// are marked as carriers. Bodies are KServe v2 requests for the v2
// endpoint (or path) and whenever answers are expected in KServe's shape.
func NewTraffic(c TrafficConfig) (*Traffic, error) {
	bases, endpoint, format, expect, items, n, inject := c.URLs, c.Endpoint, c.Format, c.Expect, c.Items, c.N, c.Inject
	if len(items) == 0 {
		return nil, errors.New("empty corpus")
	}
	if endpoint == "v2" && c.Model == "" {
		return nil, errors.New("the v2 endpoint needs the model's name: set target.model")
	}
	t := &Traffic{items: n, v2: target.Canonical(endpoint) == "v2" || expect == target.ExpectKServe, expect: expect, header: http.Header{}}
	path := target.Path(endpoint, c.Model)
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

// URLs returns the URLs the requests go to.
func (t *Traffic) URLs() []string { return t.urls }

// targeter returns the next request on each call; safe for concurrent use.
func (t *Traffic) targeter() vegeta.Targeter {
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
func (t *Traffic) check(body []byte) error {
	switch t.expect {
	case target.ExpectStatus:
		return nil
	case target.ExpectKServe:
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

// ServerTiming is what one response's Server-Timing header said: the
// server's queue and compute time, the size of the batch the request ran
// in, and its padding ratio (0 when absent).
type ServerTiming struct {
	Queue, Compute time.Duration
	Batch          int
	Pad            float64
}

// parseServerTiming reads the queue and compute durations (milliseconds),
// the batch size and the padding from a header like
// "queue;dur=12.345, compute;dur=151.240, batch;desc=64, pad;desc=1.37".
func parseServerTiming(h string) (ServerTiming, bool) {
	var st ServerTiming
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
					return ServerTiming{}, false
				}
				d := time.Duration(ms * float64(time.Millisecond))
				if name == "queue" {
					st.Queue = d
				} else {
					st.Compute = d
				}
				seen++
			case k == "desc" && name == "batch":
				n, err := strconv.Atoi(v)
				if err != nil {
					return ServerTiming{}, false
				}
				st.Batch = n
				seen++
			case k == "desc" && name == "pad":
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return ServerTiming{}, false
				}
				st.Pad = f
				seen++
			}
		}
	}
	return st, seen > 0
}
