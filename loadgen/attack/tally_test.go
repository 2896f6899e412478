package attack

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/inferhq/infer/loadgen/record"
	"github.com/inferhq/infer/loadgen/target"
)

func TestParseServerTiming(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want ServerTiming
		ok   bool
	}{
		{"queue;dur=12.345, compute;dur=151.240, batch;desc=64", ServerTiming{12345 * time.Microsecond, 151240 * time.Microsecond, 64, 0}, true},
		{`batch;desc="8";dur=0, compute;dur=1`, ServerTiming{0, time.Millisecond, 8, 0}, true},
		{"queue;dur=0.5, compute;dur=20, batch;desc=32, pad;desc=1.37, cache;desc=2", ServerTiming{500 * time.Microsecond, 20 * time.Millisecond, 32, 1.37}, true},
		{"queue;dur=1, pad;desc=lots", ServerTiming{}, false},
		{"cache;desc=hit, db;dur=53", ServerTiming{}, false},
		{"", ServerTiming{}, false},
		{"queue;dur=abc", ServerTiming{}, false},
	} {
		got, ok := parseServerTiming(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseServerTiming(%q) = %+v, %v; want %+v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestClassify(t *testing.T) {
	tr := &Traffic{items: 2}
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
			if o.Status != tc.status || !strings.HasPrefix(o.ErrText, tc.errText) || o.Timing.Batch != tc.batch {
				t.Errorf("classify = %+v; want status %s, error %q, batch %d", o, tc.status, tc.errText, tc.batch)
			}
			if o.OK() != (tc.status == "200") {
				t.Errorf("OK() = %v", o.OK())
			}
		})
	}
}

// TestCheckStatus: with expect status, any 200 answer counts.
func TestCheckStatus(t *testing.T) {
	status := &Traffic{items: 1, expect: target.ExpectStatus}
	for _, body := range []string{`{"ok": true}`, ``, `<html>`} {
		if err := status.check([]byte(body)); err != nil {
			t.Errorf("status check of %q = %v, want any body accepted", body, err)
		}
	}
}

func TestCheckV2(t *testing.T) {
	tr := &Traffic{items: 3, v2: true, expect: target.ExpectKServe}
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
	var tl Tally
	for range 10 { // ten rounds of a batch of 1 and a batch of 31
		tl.Add(&Outcome{Status: "200", Timed: true, Timing: ServerTiming{Batch: 1}})
		for range 31 {
			tl.Add(&Outcome{Status: "200", Timed: true, Timing: ServerTiming{Batch: 31}})
		}
	}
	ss := tl.ServerSide()
	if math.Abs(ss.Batch-16) > 1e-9 || math.Abs(ss.ResponseBatch-30.0625) > 1e-9 {
		t.Errorf("batch %v, response-weighted %v; want 16 and 30.06", ss.Batch, ss.ResponseBatch)
	}
}

func TestTally(t *testing.T) {
	var a, b Tally
	a.Add(&Outcome{Status: "200", Latency: 10 * time.Millisecond, Timed: true, Timing: ServerTiming{Queue: 2 * time.Millisecond, Compute: 4 * time.Millisecond, Batch: 8, Pad: 1.5}})
	a.Add(&Outcome{Status: "429", ErrText: "HTTP 429 queue_full"})
	a.Add(&Outcome{Status: "500", ErrText: "HTTP 500 model_error", carrier: true})
	a.Add(&Outcome{Status: "500", ErrText: "HTTP 500 model_error"})
	a.Add(&Outcome{Status: "429", ErrText: "HTTP 429 queue_full", carrier: true})
	b.Add(&Outcome{Status: "200", Latency: 30 * time.Millisecond, Timed: true, Timing: ServerTiming{Queue: 4 * time.Millisecond, Compute: 6 * time.Millisecond, Batch: 16}})
	b.Add(&Outcome{Status: StatusError, ErrText: "connection reset"})
	b.Add(&Outcome{Status: "200", Latency: 20 * time.Millisecond, carrier: true})
	a.Merge(&b)
	if a.sent != 8 || a.ok != 3 || a.hist.Count() != 3 || a.status["200"] != 3 || a.status["429"] != 2 || a.status[StatusError] != 1 {
		t.Errorf("merged tally = %+v", a)
	}
	ss := a.ServerSide()
	// The padding is the mean over the responses that carried one.
	want := record.ServerSide{Batch: 2 / (1.0/8 + 1.0/16), ResponseBatch: 12, MeanQueue: record.Duration(3 * time.Millisecond), MeanCompute: record.Duration(5 * time.Millisecond), Timed: 2, MeanPadding: 1.5}
	if ss != want {
		t.Errorf("ServerSide() = %+v, want %+v", ss, want)
	}
	if got, want := *a.Injected("poison"), (record.Injected{Text: "poison", Sent: 3, ModelFailed: 1, OthersSent: 5, OthersModelFailed: 1}); got != want {
		t.Errorf("injected = %+v, want %+v", got, want)
	}
	// Distinct error texts are bounded.
	var c Tally
	for i := range record.MaxErrorKinds + 5 {
		c.Add(&Outcome{Status: StatusError, ErrText: fmt.Sprintf("error %d", i)})
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
		{"batched", "json", target.ExpectInfer, 2, "http://h:1/batched", "application/json",
			[]string{`{"inputs":["a","b"]}`, `{"inputs":["c","a"]}`, `{"inputs":["b","c"]}`}},
		{"naive", "text", target.ExpectInfer, 1, "http://h:1/naive", "text/plain; charset=utf-8", []string{"a", "b", "c"}},
		{"v2", "json", target.ExpectKServe, 1, "http://h:1/v2/models/bert%20mini/infer", "application/json",
			[]string{`{"inputs":[{"name":"text","shape":[1],"datatype":"BYTES","data":["a"]}]}`}},
		{"/predict", "json", target.ExpectStatus, 1, "http://h:1/predict", "application/json", []string{`{"inputs":["a"]}`}},
		{"/v2/models/m/infer", "json", target.ExpectKServe, 1, "http://h:1/v2/models/m/infer", "application/json",
			[]string{`{"inputs":[{"name":"text","shape":[1],"datatype":"BYTES","data":["a"]}]}`}},
		{"/triton/infer", "json", target.ExpectKServe, 1, "http://h:1/triton/infer", "application/json",
			[]string{`{"inputs":[{"name":"text","shape":[1],"datatype":"BYTES","data":["a"]}]}`}},
	} {
		tr, err := NewTraffic(TrafficConfig{URLs: []string{"http://h:1"}, Endpoint: tc.endpoint, Model: "bert mini", Format: tc.format, Expect: tc.expect, Items: items, N: tc.n})
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
	tr, _ := NewTraffic(TrafficConfig{URLs: []string{"http://a:1", "http://b:2"}, Endpoint: "batched", Format: "json", Expect: target.ExpectInfer, Items: items, N: 1})
	seen := map[string]int{}
	for range 10 {
		var tgt vegeta.Target
		tr.targeter()(&tgt)
		seen[tgt.URL]++
	}
	if seen["http://a:1/batched"] != 5 || seen["http://b:2/batched"] != 5 {
		t.Errorf("requests per target = %v, want 5 each", seen)
	}
	if _, err := NewTraffic(TrafficConfig{URLs: []string{"http://a:1"}, Endpoint: "v2", Format: "json", Expect: target.ExpectKServe, Items: items, N: 1}); err == nil {
		t.Error("v2 without a model name succeeded")
	}
	// Requests carrying the injected text go to a URL marked by a
	// fragment, which is never sent.
	tr, _ = NewTraffic(TrafficConfig{URLs: []string{"http://a:1"}, Endpoint: "batched", Format: "json", Expect: target.ExpectInfer,
		Items: []string{"a", "b poison", "c", "d"}, N: 2, Inject: "poison"})
	for i, want := range []string{"http://a:1/batched#inject", "http://a:1/batched", "http://a:1/batched#inject", "http://a:1/batched"} {
		var tgt vegeta.Target
		tr.targeter()(&tgt)
		if tgt.URL != want {
			t.Errorf("request %d (%s) URL %s, want %s", i, tgt.Body, tgt.URL, want)
		}
	}
}

func TestTimeline(t *testing.T) {
	var tl Timeline
	tl.add(100*time.Millisecond, &Outcome{Status: "200", Latency: 10 * time.Millisecond})
	tl.add(900*time.Millisecond, &Outcome{Status: "429"})
	tl.add(2500*time.Millisecond, &Outcome{Status: "200", Latency: 30 * time.Millisecond})
	ramp := record.Load{Mode: "open", Pacer: "ramp", RampFrom: 0, Rate: 300}
	got := tl.Ticks(ramp, 3*time.Second)
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

// TestClassifyPrintable: what a server sends reaches terminals without its
// control characters.
func TestClassifyPrintable(t *testing.T) {
	o := classify(503, "", []byte(`{"error":{"code":"\u001b[2J\u001b]0;owned\u0007"}}`), "", nil)
	if strings.ContainsAny(o.ErrText, "\x1b\x07") || o.ErrText != "HTTP 503 ?[2J?]0;owned?" {
		t.Errorf("error text %q keeps control characters", o.ErrText)
	}
}
