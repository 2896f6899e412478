package server

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/sim"
	"github.com/inferhq/infer/server/batch"
)

func TestFailedBatchIsolatesTheBadRequest(t *testing.T) {
	f, _ := sim.New(sim.Config{Fixed: 2 * time.Millisecond, FailOn: "poison"})
	ts := startServer(t, Config{Batch: batch.Config{MaxBatch: 16, MaxLatency: 30 * time.Millisecond}}, f)
	ts.waitReady(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := map[string]int{}
	for i := range 12 {
		text := fmt.Sprintf("request %d", i)
		if i == 5 {
			text = "a poison request"
		}
		wg.Go(func() {
			r := do(t, "POST", ts.url+"/batched", "text/plain", text)
			mu.Lock()
			got[text] = r.status
			mu.Unlock()
		})
	}
	wg.Wait()
	for text, code := range got {
		want := 200
		if strings.Contains(text, "poison") {
			want = 500
		}
		if code != want {
			t.Errorf("%q: %d, want %d", text, code, want)
		}
	}
	m := do(t, "GET", ts.url+"/metrics", "", "").raw
	if !strings.Contains(m, `infer_isolation_calls_total{endpoint="batched"}`) || strings.Contains(m, `infer_isolation_calls_total{endpoint="batched"} 0`) {
		t.Errorf("isolation cost not counted:\n%s", grep(m, "isolation"))
	}
}

func TestAdminAPI(t *testing.T) {
	f, _ := sim.New(sim.Config{Fixed: time.Millisecond})
	ts := startServer(t, Config{AdminToken: "s3cret", Batch: batch.Config{MaxBatch: 8, MaxLatency: 5 * time.Millisecond}}, f)
	ts.waitReady(t)
	url := ts.url + "/admin/batching"
	patch := `{"batch": 32, "max_latency": "20ms", "policy": "adaptive", "workers": 3}`

	if r := do(t, "PATCH", url, "application/json", patch); r.status != 401 {
		t.Errorf("without token: %d, want 401", r.status)
	}
	if r := do(t, "PATCH", url, "application/json", patch, "Authorization", "Bearer wrong"); r.status != 401 {
		t.Errorf("wrong token: %d, want 401", r.status)
	}
	if got := ts.batching(); got.Batch != 8 || got.Workers != 1 {
		t.Errorf("refused changes took effect: %+v", got)
	}
	r := do(t, "PATCH", url, "application/json", patch, "Authorization", "Bearer s3cret")
	if r.status != 200 || r.body["batch"] != float64(32) || r.body["max_latency"] != "20ms" || r.body["policy"] != "adaptive" || r.body["workers"] != float64(3) {
		t.Fatalf("PATCH = %d %s", r.status, r.raw)
	}
	b := ts.batcher()
	if c := b.Config(); c.MaxBatch != 32 || c.MaxLatency != 20*time.Millisecond || c.Policy != batch.Adaptive || b.Workers() != 3 {
		t.Errorf("batcher config %+v, %d workers", c, b.Workers())
	}
	if r := do(t, "POST", ts.url+"/batched", "text/plain", "still serving"); r.status != 200 {
		t.Errorf("inference after change: %d", r.status)
	}
	if r := do(t, "PATCH", url, "application/json", `{"workers": 1}`, "Authorization", "Bearer s3cret"); r.status != 200 || ts.batcher().Workers() != 1 {
		t.Errorf("shrinking workers: %d %s", r.status, r.raw)
	}
	for _, bad := range []string{`{"batch": 0}`, `{"policy": "sometimes"}`, `{"max_latency": "soon"}`, `{"workers": 0}`, `{"colour": 1}`} {
		if r := do(t, "PATCH", url, "application/json", bad, "Authorization", "Bearer s3cret"); r.status < 400 || r.status >= 500 {
			t.Errorf("PATCH %s = %d, want 4xx", bad, r.status)
		}
	}
	if r := do(t, "GET", url, "", "", "Authorization", "Bearer s3cret"); r.status != 200 || r.body["workers"] != float64(1) {
		t.Errorf("GET = %d %s", r.status, r.raw)
	}
	if m := do(t, "GET", ts.url+"/metrics", "", "").raw; !strings.Contains(m, `infer_batching_info{max_batch="32",max_latency="20ms",policy="adaptive",workers="1"} 1`) {
		t.Errorf("metrics do not show the new settings:\n%s", grep(m, "batching_info"))
	}
}

func TestAdminAPIAbsentWithoutToken(t *testing.T) {
	ts := startServer(t, Config{}, fastSim(t))
	ts.waitReady(t)
	if r := do(t, "PATCH", ts.url+"/admin/batching", "application/json", `{"batch": 2}`, "Authorization", "Bearer "); r.status != 404 {
		t.Errorf("admin API without --admin-token: %d, want 404", r.status)
	}
}

func TestResultCache(t *testing.T) {
	ts := startServer(t, Config{CacheSize: 2, Batch: batch.Config{MaxLatency: time.Millisecond}}, fastSim(t))
	ts.waitReady(t)
	first := do(t, "POST", ts.url+"/batched", "application/json", `{"inputs": ["a", "b"]}`)
	again := do(t, "POST", ts.url+"/batched", "application/json", `{"inputs": ["b", "a", "c"]}`)
	if first.status != 200 || again.status != 200 {
		t.Fatalf("statuses %d %d", first.status, again.status)
	}
	if got, want := labels(t, again), []string{sim.Predict("b").Label, sim.Predict("a").Label, sim.Predict("c").Label}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("outputs %v, want %v", got, want)
	}
	if st := again.header.Get("Server-Timing"); !strings.Contains(st, "cache;desc=2") {
		t.Errorf("Server-Timing %q, want cache;desc=2", st)
	}
	m := do(t, "GET", ts.url+"/metrics", "", "").raw
	for _, want := range []string{"infer_cache_hits_total 2", "infer_cache_misses_total 3", "infer_cache_entries 2"} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q:\n%s", want, grep(m, "cache"))
		}
	}
}

func TestCacheLRUAndTTL(t *testing.T) {
	c := newCache(2, time.Second)
	t0 := time.Now()
	c.put("a", 1, t0)
	c.put("b", 2, t0)
	c.get("a", t0) // a is now the most recent
	c.put("c", 3, t0)
	if _, ok := c.get("b", t0); ok {
		t.Error("b survived eviction, want the least recently used evicted")
	}
	if v, ok := c.get("a", t0); !ok || v != 1 {
		t.Errorf("get(a) = %v, %v", v, ok)
	}
	if _, ok := c.get("a", t0.Add(2*time.Second)); ok {
		t.Error("a outlived its TTL")
	}
}

// tokens is a factory whose inputs carry one token per word, so batches
// have padding.
type tokens struct{ models.Factory }

func (f tokens) Prepare(text string) (models.Input, error) {
	return models.Input{Text: text, Tokens: make([]int32, len(strings.Fields(text)))}, nil
}

func TestPaddingReported(t *testing.T) {
	f, _ := sim.New(sim.Config{Fixed: time.Millisecond})
	ts := startServer(t, Config{Batch: batch.Config{MaxBatch: 8, MaxLatency: time.Second}}, tokens{f})
	ts.waitReady(t)
	r := do(t, "POST", ts.url+"/batched", "application/json", `{"inputs": ["one", "one two three four"]}`)
	if st := r.header.Get("Server-Timing"); !strings.Contains(st, "pad;desc=1.60") { // 2 × 4 ÷ 5
		t.Errorf("Server-Timing %q, want pad;desc=1.60", st)
	}
	if m := do(t, "GET", ts.url+"/metrics", "", "").raw; !strings.Contains(m, `infer_padding_ratio_count{endpoint="batched"} 1`) {
		t.Errorf("padding not in metrics:\n%s", grep(m, "padding"))
	}
}

func TestDeadlineUnreachableIs429(t *testing.T) {
	f, _ := sim.New(sim.Config{Fixed: 200 * time.Millisecond})
	ts := startServer(t, Config{Batch: batch.Config{MaxBatch: 1, Policy: batch.Immediate}}, f)
	ts.waitReady(t)
	// The warm-up taught the batcher the batch cost; now fill the queue.
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() { do(t, "POST", ts.url+"/batched", "text/plain", fmt.Sprint("load ", i)) })
	}
	for ts.batcher().Len() < 4 {
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	r := do(t, "POST", ts.url+"/batched", "text/plain", "hurry", "X-Request-Timeout", "300ms")
	if r.status != 429 || r.header.Get("Retry-After") == "" || r.body["error"].(map[string]any)["code"] != "deadline_unreachable" {
		t.Errorf("status %d Retry-After %q body %s; want 429 deadline_unreachable", r.status, r.header.Get("Retry-After"), r.raw)
	}
	if took := time.Since(start); took > 150*time.Millisecond {
		t.Errorf("refusal took %v, want at once", took)
	}
	wg.Wait()
}
