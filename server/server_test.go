package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/sim"
	"github.com/inferhq/infer/server/batch"
)

// testServer is a Server listening on a loopback port.
type testServer struct {
	*Server
	url  string
	stop func() error // cancels Serve's context and returns its error
}

func startServer(t *testing.T, cfg Config, f models.Factory) *testServer {
	t.Helper()
	s, err := New(cfg, f)
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	var once sync.Once
	var serveErr error
	ts := &testServer{Server: s, url: "http://" + ln.Addr().String(), stop: func() error {
		once.Do(func() { cancel(); serveErr = <-done })
		return serveErr
	}}
	t.Cleanup(func() { ts.stop() })
	return ts
}

// waitReady polls /readyz until the server is ready.
func (ts *testServer) waitReady(t *testing.T) {
	t.Helper()
	for range 1500 {
		if ts.Ready() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("server not ready after 15s")
}

type reply struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

func do(t *testing.T, method, url, contentType, body string, hdr ...string) reply {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := reply{status: resp.StatusCode, header: resp.Header, raw: string(raw)}
	_ = json.Unmarshal(raw, &r.body)
	return r
}

func fastSim(t *testing.T) models.Factory {
	f, err := sim.New(sim.Config{Fixed: time.Millisecond, PerItem: 10 * time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func labels(t *testing.T, r reply) []string {
	t.Helper()
	outs, ok := r.body["outputs"].([]any)
	if !ok {
		t.Fatalf("no outputs in %s", r.raw)
	}
	var ls []string
	for _, o := range outs {
		ls = append(ls, o.(map[string]any)["label"].(string))
	}
	return ls
}

func TestBodiesOnBothEndpoints(t *testing.T) {
	ts := startServer(t, Config{Batch: batch.Config{MaxLatency: time.Millisecond}}, fastSim(t))
	ts.waitReady(t)
	want := []string{sim.Predict("Paris is the [MASK] of France.").Label, sim.Predict("a & b = c").Label}
	for _, ep := range []string{"/naive", "/batched"} {
		for _, tc := range []struct {
			name, ctype, body string
			want              []string
		}{
			{"json", "application/json", `{"inputs": ["Paris is the [MASK] of France.", "a & b = c"]}`, want},
			{"json one string", "application/json; charset=utf-8", `{"inputs": "Paris is the [MASK] of France."}`, want[:1]},
			{"text", "text/plain", "Paris is the [MASK] of France.\n", want[:1]},
			{"form", "application/x-www-form-urlencoded", "s=" + url.QueryEscape("Paris is the [MASK] of France.") + "&s=" + url.QueryEscape("a & b = c"), want},
			{"curl -d text", "application/x-www-form-urlencoded", "Paris is the [MASK] of France.", want[:1]},
			{"no content type, json", "", `{"inputs": ["a & b = c"]}`, want[1:]},
		} {
			t.Run(ep+" "+tc.name, func(t *testing.T) {
				r := do(t, "POST", ts.url+ep, tc.ctype, tc.body)
				if r.status != 200 {
					t.Fatalf("status %d: %s", r.status, r.raw)
				}
				if got := labels(t, r); fmt.Sprint(got) != fmt.Sprint(tc.want) {
					t.Errorf("labels = %v, want %v", got, tc.want)
				}
				if r.body["model"] != "sim" {
					t.Errorf("model = %v, want sim", r.body["model"])
				}
				st := r.header.Get("Server-Timing")
				for _, part := range []string{"queue;dur=", "compute;dur=", "batch;desc="} {
					if !strings.Contains(st, part) {
						t.Errorf("Server-Timing %q lacks %s", st, part)
					}
				}
			})
		}
	}
}

func TestErrorContract(t *testing.T) {
	ts := startServer(t, Config{MaxBody: 1024, MaxItems: 3, Batch: batch.Config{MaxLatency: time.Millisecond}}, fastSim(t))
	ts.waitReady(t)
	for _, tc := range []struct {
		name, method, path, ctype, body string
		hdr                             []string
		status                          int
		code                            string
	}{
		{"malformed json", "POST", "/batched", "application/json", `{"inputs": [`, nil, 400, "malformed_json"},
		{"not an object", "POST", "/batched", "application/json", `["a"]`, nil, 422, "invalid_body"},
		{"no inputs", "POST", "/naive", "application/json", `{"input": ["a"]}`, nil, 422, "missing_inputs"},
		{"empty inputs", "POST", "/batched", "application/json", `{"inputs": []}`, nil, 422, "no_inputs"},
		{"non-string item", "POST", "/batched", "application/json", `{"inputs": ["a", 3]}`, nil, 422, "invalid_inputs"},
		{"empty item", "POST", "/batched", "application/json", `{"inputs": ["a", " "]}`, nil, 422, "empty_input"},
		{"empty text", "POST", "/batched", "text/plain", ``, nil, 422, "empty_input"},
		{"too many items", "POST", "/batched", "application/json", `{"inputs": ["a","b","c","d"]}`, nil, 422, "too_many_items"},
		{"body too large", "POST", "/batched", "text/plain", strings.Repeat("x", 2000), nil, 413, "body_too_large"},
		{"bad utf-8", "POST", "/naive", "text/plain", "\xff\xfe", nil, 400, "bad_encoding"},
		{"unsupported type", "POST", "/batched", "application/xml", `<a/>`, nil, 415, "unsupported_media_type"},
		{"bad timeout", "POST", "/batched", "text/plain", "a", []string{"X-Request-Timeout", "soon"}, 400, "bad_timeout"},
		{"wrong method", "GET", "/batched", "", "", nil, 405, "method_not_allowed"},
		{"unknown path", "GET", "/nope", "", "", nil, 404, "not_found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, tc.method, ts.url+tc.path, tc.ctype, tc.body, tc.hdr...)
			if r.status != tc.status {
				t.Fatalf("status = %d, want %d (%s)", r.status, tc.status, r.raw)
			}
			e, _ := r.body["error"].(map[string]any)
			if e == nil || e["code"] != tc.code || e["message"] == "" {
				t.Errorf("body = %s, want error code %q with a message", r.raw, tc.code)
			}
			if strings.Contains(r.raw, "goroutine") {
				t.Errorf("body leaks a stack trace: %s", r.raw)
			}
		})
	}
	if r := do(t, "GET", ts.url+"/batched", "", ""); r.header.Get("Allow") != "POST" {
		t.Errorf("405 Allow = %q, want POST", r.header.Get("Allow"))
	}
}

func TestKServeV2(t *testing.T) {
	ts := startServer(t, Config{Batch: batch.Config{MaxLatency: time.Millisecond}}, fastSim(t))
	ts.waitReady(t)
	for _, p := range []string{"/v2", "/v2/health/live", "/v2/health/ready", "/v2/models/sim", "/v2/models/sim/ready", "/v2/models/sim/versions/1/ready"} {
		if r := do(t, "GET", ts.url+p, "", ""); r.status != 200 {
			t.Errorf("GET %s = %d: %s", p, r.status, r.raw)
		}
	}
	r := do(t, "GET", ts.url+"/v2/models/sim", "", "")
	if r.body["name"] != "sim" || r.body["inputs"] == nil {
		t.Errorf("model metadata = %s", r.raw)
	}

	body := `{"id": "req-1", "inputs": [{"name": "text", "shape": [2, 1], "datatype": "BYTES", "data": [["a"], ["b"]]}]}`
	r = do(t, "POST", ts.url+"/v2/models/sim/infer", "application/json", body)
	if r.status != 200 {
		t.Fatalf("infer = %d: %s", r.status, r.raw)
	}
	if r.body["id"] != "req-1" || r.body["model_name"] != "sim" {
		t.Errorf("response = %s", r.raw)
	}
	out := r.body["outputs"].([]any)[0].(map[string]any)
	data := out["data"].([]any)
	var p sim.Prediction
	if err := json.Unmarshal([]byte(data[1].(string)), &p); err != nil || p != sim.Predict("b") {
		t.Errorf("output 1 = %v (%v), want %+v", data[1], err, sim.Predict("b"))
	}
	if out["datatype"] != "BYTES" || fmt.Sprint(out["shape"]) != "[2]" {
		t.Errorf("output tensor = %v", out)
	}
	if r.header.Get("Server-Timing") == "" {
		t.Error("no Server-Timing on v2 infer")
	}

	for _, tc := range []struct {
		name, path, body string
		status           int
	}{
		{"unknown model", "/v2/models/other/infer", body, 404},
		{"unknown version", "/v2/models/sim/versions/7/infer", body, 404},
		{"wrong datatype", "/v2/models/sim/infer", `{"inputs": [{"name": "text", "shape": [1], "datatype": "FP32", "data": [1.0]}]}`, 400},
		{"shape mismatch", "/v2/models/sim/infer", `{"inputs": [{"name": "text", "shape": [3], "datatype": "BYTES", "data": ["a"]}]}`, 400},
		{"non-string data", "/v2/models/sim/infer", `{"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": [1]}]}`, 422},
		{"malformed", "/v2/models/sim/infer", `{"inputs": [`, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, "POST", ts.url+tc.path, "application/json", tc.body)
			if r.status != tc.status {
				t.Fatalf("status = %d, want %d: %s", r.status, tc.status, r.raw)
			}
			if msg, _ := r.body["error"].(string); msg == "" {
				t.Errorf("body = %s, want {\"error\": message}", r.raw)
			}
		})
	}
}

// gated is a model whose batches wait for a token, to hold the queue full.
type gated struct {
	gate    chan struct{}
	started chan struct{}
	fail    string // items with this text fail
	panicOn string
}

func newGated() *gated {
	return &gated{gate: make(chan struct{}, 1000), started: make(chan struct{}, 1000)}
}

func (g *gated) Info() models.Info {
	return models.Info{Name: "gated", Task: "classify", Backend: "test"}
}
func (g *gated) Prepare(s string) (models.Input, error) {
	if strings.Contains(s, "[TOO LONG]") {
		return models.Input{}, fmt.Errorf("%w: 999 tokens, limit 128", models.ErrInputTooLong)
	}
	return models.Input{Text: s}, nil
}
func (g *gated) New(context.Context, int) (models.Model, error) { return g, nil }
func (g *gated) Close() error                                   { return nil }
func (g *gated) Predict(_ context.Context, in []models.Input, out []models.Output) error {
	if in[0].Text == "Warm up the [MASK] before serving." {
		return nil
	}
	g.started <- struct{}{}
	<-g.gate
	errs := make([]error, len(in))
	failed := false
	for i, x := range in {
		if x.Text == g.panicOn {
			panic("model exploded")
		}
		if x.Text == g.fail {
			errs[i], failed = errors.New("cannot compute this item"), true
		}
		out[i] = x.Text
	}
	if failed {
		return &batch.ItemsError{Errs: errs}
	}
	return nil
}

func TestQueueFullIs429WithRetryAfter(t *testing.T) {
	g := newGated()
	ts := startServer(t, Config{Batch: batch.Config{MaxBatch: 2, QueueCap: 4, Policy: batch.Immediate}, MaxItems: 4}, g)
	ts.waitReady(t)

	var wg sync.WaitGroup
	codes := make(chan int, 10)
	post := func(body string) {
		wg.Go(func() { codes <- do(t, "POST", ts.url+"/batched", "application/json", body).status })
	}
	post(`{"inputs": ["a", "b"]}`) // running
	<-g.started
	post(`{"inputs": ["c", "d", "e", "f"]}`) // fills the queue
	for ts.batched.Load().Len() != 4 {
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	r := do(t, "POST", ts.url+"/batched", "text/plain", "one too many")
	if took := time.Since(start); took > time.Second {
		t.Errorf("refusal took %v, want at once", took)
	}
	if r.status != 429 || r.header.Get("Retry-After") == "" {
		t.Errorf("status = %d, Retry-After = %q; want 429 with Retry-After", r.status, r.header.Get("Retry-After"))
	}
	close(g.gate)
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != 200 {
			t.Errorf("admitted request got %d, want 200", c)
		}
	}
}

func TestModelFailureOnlyFailsItsItems(t *testing.T) {
	g := newGated()
	close(g.gate)
	g.fail, g.panicOn = "bad", "explode"
	ts := startServer(t, Config{Batch: batch.Config{MaxBatch: 8, MaxLatency: 50 * time.Millisecond}}, g)
	ts.waitReady(t)
	var wg sync.WaitGroup
	results := make(map[string]int)
	var mu sync.Mutex
	for _, text := range []string{"good1", "bad", "good2", "good3"} {
		wg.Go(func() {
			r := do(t, "POST", ts.url+"/batched", "text/plain", text)
			mu.Lock()
			results[text] = r.status
			mu.Unlock()
		})
	}
	wg.Wait()
	for text, code := range results {
		want := 200
		if text == "bad" {
			want = 500
		}
		if code != want {
			t.Errorf("%q got %d, want %d", text, code, want)
		}
	}
	r := do(t, "POST", ts.url+"/naive", "text/plain", "explode")
	if r.status != 500 || strings.Contains(r.raw, "goroutine") {
		t.Errorf("panicking model: %d %s, want a clean 500", r.status, r.raw)
	}
	if r := do(t, "POST", ts.url+"/naive", "text/plain", "[TOO LONG] text"); r.status != 413 {
		t.Errorf("too long input: %d, want 413", r.status)
	}
}

func TestDeadlineIs504(t *testing.T) {
	f, _ := sim.New(sim.Config{Fixed: 600 * time.Millisecond})
	// AdmitLate: otherwise the late request is refused at once with 429.
	ts := startServer(t, Config{Batch: batch.Config{Policy: batch.Immediate, AdmitLate: true}}, f)
	ts.waitReady(t)
	var wg sync.WaitGroup
	wg.Go(func() { do(t, "POST", ts.url+"/batched", "text/plain", "occupies the worker") })
	time.Sleep(20 * time.Millisecond)
	for _, ep := range []string{"/batched", "/naive"} {
		if ep == "/naive" {
			wg.Go(func() { do(t, "POST", ts.url+"/naive", "text/plain", "occupies the naive instance") })
			time.Sleep(20 * time.Millisecond)
		}
		start := time.Now()
		r := do(t, "POST", ts.url+ep, "text/plain", "late", "X-Request-Timeout", "100ms")
		if r.status != 504 {
			t.Errorf("%s: status = %d, want 504: %s", ep, r.status, r.raw)
		}
		if took := time.Since(start); took > 450*time.Millisecond {
			t.Errorf("%s: 504 took %v, want about the 100ms deadline, not the 600ms batch", ep, took)
		}
	}
	wg.Wait()
	// The expired item is dropped when the worker reaches it, just after the
	// batch ahead of it is answered.
	var dropped string
	for range 100 {
		if dropped = do(t, "GET", ts.url+"/metrics", "", "").raw; strings.Contains(dropped, `infer_dropped_items_total{endpoint="batched"} 1`) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("expired item not counted as dropped:\n%s", grep(dropped, "infer_dropped"))
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// slowFactory delays New until release is closed: the server is loading.
type slowFactory struct {
	models.Factory
	release chan struct{}
}

func (f slowFactory) New(ctx context.Context, i int) (models.Model, error) {
	<-f.release
	return f.Factory.New(ctx, i)
}

func TestReadinessAndDrain(t *testing.T) {
	release := make(chan struct{})
	f, _ := sim.New(sim.Config{Fixed: 100 * time.Millisecond})
	ts := startServer(t, Config{Batch: batch.Config{MaxLatency: 10 * time.Millisecond}}, slowFactory{f, release})

	if r := do(t, "GET", ts.url+"/healthz", "", ""); r.status != 200 {
		t.Errorf("healthz while loading = %d, want 200", r.status)
	}
	if r := do(t, "GET", ts.url+"/readyz", "", ""); r.status != 503 {
		t.Errorf("readyz while loading = %d, want 503", r.status)
	}
	if r := do(t, "POST", ts.url+"/batched", "text/plain", "early"); r.status != 503 || r.body["error"].(map[string]any)["code"] != "not_ready" {
		t.Errorf("request while loading = %d %s, want 503 not_ready", r.status, r.raw)
	}
	close(release)
	ts.waitReady(t)
	if r := do(t, "GET", ts.url+"/readyz", "", ""); r.status != 200 {
		t.Errorf("readyz when loaded = %d, want 200", r.status)
	}

	// Admit a load, then drain in the middle of it.
	var wg sync.WaitGroup
	var ok, refused, other atomic.Int64
	for i := range 40 {
		wg.Go(func() {
			r := do(t, "POST", ts.url+"/batched", "text/plain", fmt.Sprint("item ", i))
			switch r.status {
			case 200:
				ok.Add(1)
			case 503:
				refused.Add(1)
			default:
				other.Add(1)
				t.Errorf("during drain: %d %s", r.status, r.raw)
			}
		})
	}
	for ts.batched.Load().Len() == 0 && ok.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- ts.stop() }()
	for !ts.draining.Load() {
		time.Sleep(time.Millisecond)
	}
	if err := <-stopped; err != nil {
		t.Errorf("Serve() = %v, want nil after a clean drain", err)
	}
	wg.Wait()
	if ok.Load() == 0 || ok.Load()+refused.Load() != 40 {
		t.Errorf("ok %d + refused %d != 40 (other %d)", ok.Load(), refused.Load(), other.Load())
	}
}

func TestBadInputDuringLoad(t *testing.T) {
	ts := startServer(t, Config{Batch: batch.Config{MaxLatency: 2 * time.Millisecond}}, fastSim(t))
	ts.waitReady(t)
	var wg sync.WaitGroup
	var good, bad atomic.Int64
	for i := range 8 {
		wg.Go(func() {
			for j := range 25 {
				text := fmt.Sprintf("valid %d %d", i, j)
				r := do(t, "POST", ts.url+"/batched", "application/json", fmt.Sprintf(`{"inputs": [%q]}`, text))
				if r.status != 200 || labels(t, r)[0] != sim.Predict(text).Label {
					t.Errorf("valid request: %d %s", r.status, r.raw)
				}
				good.Add(1)
			}
		})
	}
	bodies := []string{`{`, `{"inputs": [1]}`, `{"inputs": []}`, `null`, `{"inputs": "` + strings.Repeat("x", 2<<20) + `"}`}
	for i := range 8 {
		wg.Go(func() {
			for j := range 10 {
				r := do(t, "POST", ts.url+"/batched", "application/json", bodies[(i+j)%len(bodies)])
				if r.status < 400 || r.status >= 500 {
					t.Errorf("bad request got %d", r.status)
				}
				bad.Add(1)
			}
		})
	}
	wg.Wait()
	if good.Load() != 200 || bad.Load() != 80 {
		t.Errorf("good %d bad %d", good.Load(), bad.Load())
	}
}

func TestMetricsExposed(t *testing.T) {
	ts := startServer(t, Config{Batch: batch.Config{MaxLatency: time.Millisecond}}, fastSim(t))
	ts.waitReady(t)
	do(t, "POST", ts.url+"/batched", "text/plain", "hello")
	do(t, "POST", ts.url+"/naive", "text/plain", "hello")
	m := do(t, "GET", ts.url+"/metrics", "", "").raw
	for _, want := range []string{
		`infer_requests_total{code="200",endpoint="batched"} 1`,
		`infer_requests_total{code="200",endpoint="naive"} 1`,
		`infer_batch_size_count{endpoint="batched"}`,
		`infer_queue_duration_seconds_count{endpoint="batched"} 1`,
		`infer_compute_duration_seconds_count{endpoint="naive"}`,
		`infer_queue_depth{endpoint="batched"} 0`,
		`infer_in_flight_requests{endpoint="batched"} 0`,
		`infer_ready 1`,
		`infer_model_info{`,
		`go_goroutines`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{MaxItems: 100, Batch: batch.Config{QueueCap: 10}}).Validate(); err == nil {
		t.Error("MaxItems > QueueCap accepted")
	}
	if err := (Config{Batch: batch.Config{Policy: "never"}}).Validate(); err == nil {
		t.Error("unknown policy accepted")
	}
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("zero Config: %v", err)
	}
}
