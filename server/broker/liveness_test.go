package broker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/server/batch"
	"github.com/inferhq/infer/server/broker"
)

// beat is the heartbeat of these tests: announcements expire after four,
// so a frontend notices within about half a second that its workers are
// gone. (Shorter, the heartbeats of a contended machine under -race may come
// later than an expiry.)
const beat = 100 * time.Millisecond

// logBuffer collects log lines, for tests that check what was logged.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// line returns the first line of b that holds every one of parts, waiting up
// to 5s for it.
func (b *logBuffer) line(t *testing.T, parts ...string) string {
	t.Helper()
	for range 500 {
		for _, l := range strings.Split(b.String(), "\n") {
			all := true
			for _, p := range parts {
				all = all && strings.Contains(l, p)
			}
			if all {
				return l
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("no log line with %q in:\n%s", parts, b.String())
	return ""
}

// waitMetric waits up to 5s for the metric name of h to sum to want.
func waitMetric(t *testing.T, h http.Handler, name string, want float64) {
	t.Helper()
	for range 500 {
		if n, _ := metric(t, h, name); n == want {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// readyz returns the status code and "status" of url's /readyz.
func readyz(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct{ Status string }
	body, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("/readyz body %q: %v", body, err)
	}
	return resp.StatusCode, v.Status
}

// waitReadyz waits up to within for url's /readyz to answer code with
// status ("": any).
func waitReadyz(t *testing.T, url string, code int, status string, within time.Duration) {
	t.Helper()
	start := time.Now()
	for {
		got, st := readyz(t, url)
		if got == code && (status == "" || st == status) {
			return
		}
		if time.Since(start) > within {
			t.Fatalf("/readyz = %d (%s) after %v, want %d (%s)", got, st, within, code, status)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A frontend whose only worker serves another model is not ready and
// answers 503 no_workers at once instead of a 504 after the deadline; both
// sides log the mismatch. A worker of its model makes it ready.
func TestMismatchedModel(t *testing.T) {
	r := startRedis(t)
	bc := broker.Config{URL: r.url, Prefix: t.Name(), Heartbeat: beat}
	var wlog, flog logBuffer
	wc, fc := bc, bc
	wc.Logger, fc.Logger = wlog.logger(), flog.logger()
	startWorker(t, broker.WorkerConfig{Config: wc, Name: "other", Batch: batch.Config{MaxLatency: time.Millisecond}}, &quirky{})
	url, _ := startFrontend(t, broker.FrontendConfig{Config: fc}, simFactory(t, time.Millisecond, 0))

	waitReadyz(t, url, http.StatusServiceUnavailable, "no_workers", 5*time.Second)
	o := post(http.DefaultClient, url, []string{"a"}, 3*time.Second)
	if o.status != http.StatusServiceUnavailable || o.code != "no_workers" || o.took > time.Second || o.retry == "" {
		t.Errorf("POST = %d (%s) after %v with Retry-After %q, want a quick 503 no_workers with Retry-After", o.status, o.code, o.took, o.retry)
	}
	flog.line(t, "level=WARN", "sim:classify", "quirky:test")
	wlog.line(t, "level=WARN", "quirky:test", "sim:classify")

	startWorker(t, broker.WorkerConfig{Config: bc, Name: "right", Batch: batch.Config{MaxLatency: time.Millisecond}},
		simFactory(t, time.Millisecond, 0))
	waitReadyz(t, url, http.StatusOK, "", 5*time.Second)
	if o := post(http.DefaultClient, url, []string{"a"}, 3*time.Second); o.status != http.StatusOK {
		t.Errorf("with a worker of its model: POST = %d (%s), want 200", o.status, o.code)
	}
	flog.line(t, "level=INFO", "sim:classify", "workers=1")
}

// When the last worker is killed, the requests waiting for it are answered
// 503 no_workers as soon as its announcement expires, and so are new ones;
// /readyz turns 503.
func TestLastWorkerKilled(t *testing.T) {
	r := startRedis(t)
	bc := broker.Config{URL: r.url, Prefix: t.Name(), Heartbeat: beat}
	victim := startWorkerProcess(t, workerSpec{URL: r.url, Prefix: t.Name(), Name: "victim", Heartbeat: beat,
		Fixed: 2 * time.Second, MaxBatch: 1, Visibility: time.Minute})
	url, _ := startFrontend(t, broker.FrontendConfig{Config: bc}, simFactory(t, 0, 0))
	waitReadyz(t, url, http.StatusOK, "", 5*time.Second)

	waiting := make(chan outcome)
	go func() { waiting <- post(http.DefaultClient, url, []string{"a"}, 8*time.Second) }()
	waitMetric(t, startedHandler(url), "infer_broker_pending_items", 1)
	killed := time.Now()
	victim.Signal(syscall.SIGKILL)
	o := <-waiting
	if after := time.Since(killed); o.status != http.StatusServiceUnavailable || o.code != "no_workers" || after > 3*time.Second {
		t.Errorf("request waiting for the killed worker: %d (%s) %v after the kill, want 503 no_workers within ~%v",
			o.status, o.code, after.Round(time.Millisecond), 5*beat)
	}
	waitReadyz(t, url, http.StatusServiceUnavailable, "no_workers", time.Second)
	if o := post(http.DefaultClient, url, []string{"b"}, 8*time.Second); o.status != http.StatusServiceUnavailable || o.code != "no_workers" || o.took > time.Second {
		t.Errorf("new request: %d (%s) after %v, want a quick 503 no_workers", o.status, o.code, o.took)
	}
	if n := backlog(t, url); n != 0 {
		t.Errorf("backlog = %v, want 0: the entries of the request answered 503 are withdrawn", n)
	}
}

// startedHandler proxies /metrics of a started server at url.
func startedHandler(url string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, err := http.Get(url + r.URL.Path)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		io.Copy(w, resp.Body)
	})
}

// Redis down: the frontend's /readyz turns 503 and comes back to 200 once
// Redis is back, without restarting anything.
func TestReadyzFollowsRedis(t *testing.T) {
	r := startRedis(t)
	bc := broker.Config{URL: r.url, Prefix: t.Name(), Heartbeat: beat}
	startWorker(t, broker.WorkerConfig{Config: bc, Batch: batch.Config{MaxLatency: time.Millisecond}}, simFactory(t, time.Millisecond, 0))
	url, _ := startFrontend(t, broker.FrontendConfig{Config: bc}, simFactory(t, time.Millisecond, 0))
	waitReadyz(t, url, http.StatusOK, "", 5*time.Second)

	r.kill()
	waitReadyz(t, url, http.StatusServiceUnavailable, "unavailable", 3*time.Second)
	if v, _ := sumMetric(t, url, "infer_ready"); v != 0 {
		t.Errorf("infer_ready = %v with Redis down, want 0", v)
	}
	r.start()
	waitReadyz(t, url, http.StatusOK, "", 10*time.Second)
	if o := post(http.DefaultClient, url, []string{"a"}, 3*time.Second); o.status != http.StatusOK {
		t.Errorf("after Redis came back: POST = %d (%s), want 200", o.status, o.code)
	}
}

// sumMetric reads a metric from the /metrics of the server at url.
func sumMetric(t *testing.T, url, name string) (float64, bool) {
	t.Helper()
	return metric(t, startedHandler(url), name)
}

// When the queue is full, Retry-After says how long the backlog needs to
// drain at the rate the stream was measured to drain, not a fixed second.
func TestRetryAfterFromDrainRate(t *testing.T) {
	r := startRedis(t)
	bc := broker.Config{URL: r.url, Prefix: t.Name(), Heartbeat: beat}
	// One item per 200ms: 5 items/s. A full queue of 20 needs about 4s.
	startWorker(t, broker.WorkerConfig{Config: bc, Batch: batch.Config{MaxBatch: 1, Policy: batch.Immediate}},
		simFactory(t, 200*time.Millisecond, 0))
	url, _ := startFrontend(t, broker.FrontendConfig{Config: bc, QueueCap: 20}, simFactory(t, 0, 0))
	waitReadyz(t, url, http.StatusOK, "", 5*time.Second)

	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		codes = map[string]int{}
	)
	t.Cleanup(wg.Wait)
	send := func(n int) {
		for range n {
			wg.Go(func() {
				o := post(http.DefaultClient, url, []string{"x"}, 30*time.Second)
				mu.Lock()
				codes[fmt.Sprintf("%d %s %v", o.status, o.code, o.err)]++
				mu.Unlock()
			})
		}
	}
	waitBacklog := func(ok func(float64) bool) int {
		t.Helper()
		for start := time.Now(); time.Since(start) < 10*time.Second; {
			if n := backlog(t, url); ok(n) {
				return int(n)
			}
			time.Sleep(10 * time.Millisecond)
		}
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("backlog stuck at %v; answers so far: %v", backlog(t, url), codes)
		return 0
	}
	send(20)
	waitBacklog(func(n float64) bool { return n >= 19 })
	n := waitBacklog(func(n float64) bool { return n <= 15 }) // a second of draining measured
	send(20 - n + 2)                                          // back to the cap; two refused
	waitBacklog(func(n float64) bool { return n >= 19 })

	// Five items: refused unless four drained since the backlog was seen.
	o := post(http.DefaultClient, url, []string{"v", "w", "x", "y", "z"}, 30*time.Second)
	secs, _ := strconv.Atoi(o.retry)
	if o.status != http.StatusTooManyRequests || secs < 2 || secs > 10 {
		t.Errorf("over the cap: %d (%s) with Retry-After %q, want 429 with about 4 (20 items at 5/s)", o.status, o.code, o.retry)
	}
}

// An entry a worker has read and not computed yet is skipped when its
// client goes away: it is acknowledged without compute.
func TestCancelledEntrySkipped(t *testing.T) {
	r := startRedis(t)
	w, fe, release, hung := busyWorker(t, broker.Config{URL: r.url, Prefix: t.Name(), Heartbeat: beat})
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error, 1)
	go func() {
		_, _, err := fe.Do(ctx, []models.Input{{Text: "b"}})
		gone <- err
	}()
	waitMetric(t, w.Handler(), "infer_broker_pending_items", 2) // the worker has read b: it holds two entries
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("Do(b) = %v, want Canceled", err)
	}
	waitMetric(t, w.Handler(), "infer_broker_cancelled_items_total", 1) // the worker has heard that b's client is gone
	release()
	if err := <-hung; err != nil {
		t.Fatalf("Do(hang) = %v", err)
	}
	waitMetric(t, w.Handler(), "infer_broker_pending_items", 0)
	computed, _ := metric(t, w.Handler(), "infer_items_total")
	cancelled, _ := metric(t, w.Handler(), "infer_broker_cancelled_items_total")
	pending, _ := metric(t, w.Handler(), "infer_broker_pending_items")
	if computed != 1 || cancelled != 1 || pending != 0 {
		t.Errorf("computed %v, cancelled %v, pending %v; want 1, 1, 0 (b skipped and acknowledged)", computed, cancelled, pending)
	}
}
