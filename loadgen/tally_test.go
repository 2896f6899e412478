package loadgen

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/inferhq/infer/loadgen/record"
)

func TestParseServerTiming(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want serverTiming
		ok   bool
	}{
		{"queue;dur=12.345, compute;dur=151.240, batch;desc=64", serverTiming{12345 * time.Microsecond, 151240 * time.Microsecond, 64, 0}, true},
		{`batch;desc="8";dur=0, compute;dur=1`, serverTiming{0, time.Millisecond, 8, 0}, true},
		{"queue;dur=0.5, compute;dur=20, batch;desc=32, pad;desc=1.37, cache;desc=2", serverTiming{500 * time.Microsecond, 20 * time.Millisecond, 32, 1.37}, true},
		{"queue;dur=1, pad;desc=lots", serverTiming{}, false},
		{"cache;desc=hit, db;dur=53", serverTiming{}, false},
		{"", serverTiming{}, false},
		{"queue;dur=abc", serverTiming{}, false},
	} {
		got, ok := parseServerTiming(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseServerTiming(%q) = %+v, %v; want %+v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestClassify(t *testing.T) {
	tr := &traffic{items: 2}
	for _, tc := range []struct {
		name    string
		code    int
		err     string
		body    string
		timing  string
		status  string
		errText string
		batch   int
	}{
		{"ok", 200, "", `{"model":"sim","outputs":[1,2]}`, "queue;dur=1, compute;dur=2, batch;desc=16", "200", "", 16},
		{"short", 200, "", `{"outputs":[1]}`, "", StatusInvalid, "response has 1 outputs, want 2", 0},
		{"not json", 200, "", `<html>`, "", StatusInvalid, "response is not JSON", 0},
		{"refused", 0, `Post "http://127.0.0.1:9/batched": dial tcp 127.0.0.1:9: connect: connection refused`, "", "", StatusError,
			"dial tcp 127.0.0.1:9: connect: connection refused", 0},
		{"queue full", 429, "429 Too Many Requests", `{"error":{"code":"queue_full","message":"..."}}`, "", "429", "HTTP 429 queue_full", 0},
		{"v2 error", 503, "503 Service Unavailable", `{"error":"not ready"}`, "", "503", "HTTP 503 not ready", 0},
		{"plain error", 500, "500 Internal Server Error", `oops`, "", "500", "HTTP 500", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := classify(tc.code, tc.err, []byte(tc.body), tc.timing, tr.check)
			if o.status != tc.status || !strings.HasPrefix(o.errText, tc.errText) || o.timing.batch != tc.batch {
				t.Errorf("classify = %+v; want status %s, error %q, batch %d", o, tc.status, tc.errText, tc.batch)
			}
			if o.ok() != (tc.status == "200") {
				t.Errorf("ok() = %v", o.ok())
			}
		})
	}
}

// TestExpectations: how answers are checked follows payload.expect, else
// the endpoint and whether the server is infer's.
func TestExpectations(t *testing.T) {
	for _, tc := range []struct {
		expect, endpoint string
		infer            bool
		want             string
	}{
		{"", "batched", true, ExpectInfer},
		{"", "batched", false, ExpectStatus},
		{"", "/predict", false, ExpectStatus},
		{"", "v2", true, ExpectKServe},
		{"", "/v2/models/bert/infer", false, ExpectKServe},
		{ExpectStatus, "v2", true, ExpectStatus},
		{ExpectInfer, "/predict", false, ExpectInfer},
	} {
		if got := (Payload{Expect: tc.expect}).Expectation(tc.endpoint, tc.infer); got != tc.want {
			t.Errorf("expect %q on %s (infer server %v) = %s, want %s", tc.expect, tc.endpoint, tc.infer, got, tc.want)
		}
	}
	status := &traffic{items: 1, expect: ExpectStatus}
	for _, body := range []string{`{"ok": true}`, ``, `<html>`} {
		if err := status.check([]byte(body)); err != nil {
			t.Errorf("status check of %q = %v, want any body accepted", body, err)
		}
	}
	for ep, want := range map[string]string{"naive": "naive", "batched": "batched", "v2": "batched", "/v2/models/m/infer": "batched", "/predict": "", "/v2/models//infer": ""} {
		if got := metricsEndpoint(ep); got != want {
			t.Errorf("metricsEndpoint(%q) = %q, want %q", ep, got, want)
		}
	}
}

func TestCheckV2(t *testing.T) {
	tr := &traffic{items: 3, v2: true, expect: ExpectKServe}
	for body, ok := range map[string]bool{
		`{"model_name":"sim","outputs":[{"name":"classify","datatype":"BYTES","shape":[3],"data":["a","b","c"]}]}`: true,
		`{"outputs":[{"shape":[3,128],"datatype":"FP32","data":[]}]}`:                                              true,
		`{"outputs":[{"shape":[2]}]}`: false,
		`{"outputs":[]}`:              false,
	} {
		if err := tr.check([]byte(body)); (err == nil) != ok {
			t.Errorf("check(%s) = %v, want ok %v", body, err, ok)
		}
	}
}

// TestTallyMeanBatch: batches that alternate 1 and 31 items hold 16 on
// average, which is what "mean batch" says; counted by response (31
// responses say 31, one says 1) the figure is 30.1, and it is named apart.
func TestTallyMeanBatch(t *testing.T) {
	var tl tally
	for range 10 { // ten rounds of a batch of 1 and a batch of 31
		tl.add(&outcome{status: "200", timed: true, timing: serverTiming{batch: 1}})
		for range 31 {
			tl.add(&outcome{status: "200", timed: true, timing: serverTiming{batch: 31}})
		}
	}
	ss := tl.serverSide()
	if math.Abs(ss.Batch-16) > 1e-9 || math.Abs(ss.ResponseBatch-30.0625) > 1e-9 {
		t.Errorf("batch %v, response-weighted %v; want 16 and 30.06", ss.Batch, ss.ResponseBatch)
	}
	rec := record.Record{Server: ss}
	if got := rec.MeanBatch(); got != ss.Batch {
		t.Errorf("MeanBatch() without /metrics = %v, want Server-Timing's batch-weighted %v", got, ss.Batch)
	}
	rec.Server.Metrics = &record.Metrics{Batches: 20, Items: 320, MeanBatch: 16}
	row := RowOf(&rec, SLO{})
	if row.Batch != 16 || row.ResponseBatch != ss.ResponseBatch {
		t.Errorf("row mean batch %v, response batch %v; want /metrics' 16 and %v", row.Batch, row.ResponseBatch, ss.ResponseBatch)
	}
}

func TestTally(t *testing.T) {
	var a, b tally
	a.add(&outcome{status: "200", latency: 10 * time.Millisecond, timed: true, timing: serverTiming{queue: 2 * time.Millisecond, compute: 4 * time.Millisecond, batch: 8, pad: 1.5}})
	a.add(&outcome{status: "429", errText: "HTTP 429 queue_full"})
	a.add(&outcome{status: "500", errText: "HTTP 500 model_error", carrier: true})
	a.add(&outcome{status: "500", errText: "HTTP 500 model_error"})
	a.add(&outcome{status: "429", errText: "HTTP 429 queue_full", carrier: true})
	b.add(&outcome{status: "200", latency: 30 * time.Millisecond, timed: true, timing: serverTiming{queue: 4 * time.Millisecond, compute: 6 * time.Millisecond, batch: 16}})
	b.add(&outcome{status: StatusError, errText: "connection reset"})
	b.add(&outcome{status: "200", latency: 20 * time.Millisecond, carrier: true})
	a.merge(&b)
	if a.sent != 8 || a.ok != 3 || a.hist.Count() != 3 || a.status["200"] != 3 || a.status["429"] != 2 || a.status[StatusError] != 1 {
		t.Errorf("merged tally = %+v", a)
	}
	ss := a.serverSide()
	// The padding is the mean over the responses that carried one.
	want := record.ServerSide{Batch: 2 / (1.0/8 + 1.0/16), ResponseBatch: 12, MeanQueue: record.Duration(3 * time.Millisecond), MeanCompute: record.Duration(5 * time.Millisecond), Timed: 2, MeanPadding: 1.5}
	if ss != want {
		t.Errorf("serverSide() = %+v, want %+v", ss, want)
	}
	if got, want := *a.injected("poison"), (record.Injected{Text: "poison", Sent: 3, ModelFailed: 1, OthersSent: 5, OthersModelFailed: 1}); got != want {
		t.Errorf("injected = %+v, want %+v", got, want)
	}
	// Distinct error texts are bounded.
	var c tally
	for i := range record.MaxErrorKinds + 5 {
		c.add(&outcome{status: StatusError, errText: fmt.Sprintf("error %d", i)})
	}
	if len(c.errors) != record.MaxErrorKinds+1 || c.errors["other errors"] != 5 {
		t.Errorf("errors kept = %d, other = %d; want %d and 5", len(c.errors), c.errors["other errors"], record.MaxErrorKinds+1)
	}
}

func TestTraffic(t *testing.T) {
	items := []string{"a", "b", "c"}
	for _, tc := range []struct {
		endpoint, format, expect string
		n                        int
		wantURL                  string
		wantType                 string
		wantBodies               []string
	}{
		{"batched", "json", ExpectInfer, 2, "http://h:1/batched", "application/json",
			[]string{`{"inputs":["a","b"]}`, `{"inputs":["c","a"]}`, `{"inputs":["b","c"]}`}},
		{"naive", "text", ExpectInfer, 1, "http://h:1/naive", "text/plain; charset=utf-8", []string{"a", "b", "c"}},
		{"v2", "json", ExpectKServe, 1, "http://h:1/v2/models/bert%20mini/infer", "application/json",
			[]string{`{"inputs":[{"name":"text","shape":[1],"datatype":"BYTES","data":["a"]}]}`}},
		{"/predict", "json", ExpectStatus, 1, "http://h:1/predict", "application/json", []string{`{"inputs":["a"]}`}},
		{"/v2/models/m/infer", "json", ExpectKServe, 1, "http://h:1/v2/models/m/infer", "application/json",
			[]string{`{"inputs":[{"name":"text","shape":[1],"datatype":"BYTES","data":["a"]}]}`}},
		{"/triton/infer", "json", ExpectKServe, 1, "http://h:1/triton/infer", "application/json",
			[]string{`{"inputs":[{"name":"text","shape":[1],"datatype":"BYTES","data":["a"]}]}`}},
	} {
		tr, err := newTraffic([]string{"http://h:1"}, tc.endpoint, "bert mini", tc.format, tc.expect, items, tc.n, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(tr.bodies) != len(items) {
			t.Errorf("%s: %d bodies, want %d", tc.endpoint, len(tr.bodies), len(items))
		}
		for i, want := range tc.wantBodies {
			var tgt vegeta.Target
			if err := tr.targeter()(&tgt); err != nil {
				t.Fatal(err)
			}
			if tgt.URL != tc.wantURL || string(tgt.Body) != want || tgt.Header.Get("Content-Type") != tc.wantType || tgt.Method != "POST" {
				t.Errorf("%s request %d = %s %s %q (%s), want %s %q (%s)", tc.endpoint, i, tgt.Method, tgt.URL, tgt.Body,
					tgt.Header.Get("Content-Type"), tc.wantURL, want, tc.wantType)
			}
		}
	}
	// The load is spread over the targets.
	tr, _ := newTraffic([]string{"http://a:1", "http://b:2"}, "batched", "", "json", ExpectInfer, items, 1, "")
	seen := map[string]int{}
	for range 10 {
		var tgt vegeta.Target
		tr.targeter()(&tgt)
		seen[tgt.URL]++
	}
	if seen["http://a:1/batched"] != 5 || seen["http://b:2/batched"] != 5 {
		t.Errorf("requests per target = %v, want 5 each", seen)
	}
	if _, err := newTraffic([]string{"http://a:1"}, "v2", "", "json", ExpectKServe, items, 1, ""); err == nil {
		t.Error("v2 without a model name succeeded")
	}
	// Requests carrying the injected text go to a URL marked by a
	// fragment, which is never sent.
	tr, _ = newTraffic([]string{"http://a:1"}, "batched", "", "json", ExpectInfer, []string{"a", "b poison", "c", "d"}, 2, "poison")
	for i, want := range []string{"http://a:1/batched#inject", "http://a:1/batched", "http://a:1/batched#inject", "http://a:1/batched"} {
		var tgt vegeta.Target
		tr.targeter()(&tgt)
		if tgt.URL != want {
			t.Errorf("request %d (%s) URL %s, want %s", i, tgt.Body, tgt.URL, want)
		}
	}
}

func TestTimeline(t *testing.T) {
	var tl timeline
	tl.add(100*time.Millisecond, &outcome{status: "200", latency: 10 * time.Millisecond})
	tl.add(900*time.Millisecond, &outcome{status: "429"})
	tl.add(2500*time.Millisecond, &outcome{status: "200", latency: 30 * time.Millisecond})
	ramp := record.Load{Mode: "open", Pacer: "ramp", RampFrom: 0, Rate: 300}
	got := tl.ticks(ramp, 3*time.Second)
	if len(got) != 3 {
		t.Fatalf("%d ticks, want 3", len(got))
	}
	for i, want := range []record.Tick{
		{At: 0, Target: 50, Sent: 2, OK: 1, P50: record.Duration(10 * time.Millisecond), P99: record.Duration(10 * time.Millisecond)},
		{At: record.Duration(time.Second), Target: 150},
		{At: record.Duration(2 * time.Second), Target: 250, Sent: 1, OK: 1, P50: record.Duration(30 * time.Millisecond), P99: record.Duration(30 * time.Millisecond)},
	} {
		if got[i] != want {
			t.Errorf("tick %d = %+v, want %+v", i, got[i], want)
		}
	}
}

// TestPrintable: what a server sends reaches terminals without its control
// characters, and bounded.
func TestPrintable(t *testing.T) {
	o := classify(503, "", []byte(`{"error":{"code":"\u001b[2J\u001b]0;owned\u0007"}}`), "", nil)
	if strings.ContainsAny(o.errText, "\x1b\x07") || o.errText != "HTTP 503 ?[2J?]0;owned?" {
		t.Errorf("error text %q keeps control characters", o.errText)
	}
	if got := printable(strings.Repeat("é", 300)); len([]rune(got)) != maxText+1 {
		t.Errorf("printable kept %d runes of 300, want %d and an ellipsis", len([]rune(got)), maxText)
	}
}
