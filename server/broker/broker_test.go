package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/sim"
	"github.com/inferhq/infer/server/batch"
	"github.com/inferhq/infer/server/broker"
)

// Two frontends and two workers under concurrent load: every request is
// answered with the outputs of its own items, multi-item requests span
// batches, and each item is computed exactly once.
func TestFrontendsAndWorkers(t *testing.T) {
	r := startRedis(t)
	bc := broker.Config{URL: r.url, Prefix: t.Name()}
	f := simFactory(t, 2*time.Millisecond, 50*time.Microsecond)
	var workers []*worker
	for i := range 2 {
		workers = append(workers, startWorker(t, broker.WorkerConfig{
			Config: bc, Name: fmt.Sprintf("w%d", i),
			Batch: batch.Config{MaxBatch: 4, MaxLatency: 5 * time.Millisecond},
		}, f))
	}
	url1, _ := startFrontend(t, broker.FrontendConfig{Config: bc}, f)
	url2, _ := startFrontend(t, broker.FrontendConfig{Config: bc}, f)

	outs, texts := load([]string{url1, url2}, 8, 40, 6, 10*time.Second, nil)
	items := 0
	for i, o := range outs {
		items += len(texts[i])
		if o.err != nil || o.status != http.StatusOK {
			t.Fatalf("request %d: status %d, err %v", i, o.status, o.err)
		}
		if err := checkOutputs(texts[i], o.outputs); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if !strings.Contains(o.timing, "batch;desc=") || strings.Contains(o.timing, "batch;desc=0") {
			t.Errorf("request %d: Server-Timing %q has no batch size", i, o.timing)
		}
	}
	if len(outs) != 8*40 {
		t.Errorf("%d requests answered, want %d", len(outs), 8*40)
	}
	var computed float64
	for i, w := range workers {
		n, _ := metric(t, w.Handler(), "infer_items_total")
		if n == 0 {
			t.Errorf("worker %d computed nothing", i)
		}
		if max, _ := metric(t, w.Handler(), `infer_batch_size_bucket{le="4"}`); max == 0 {
			t.Errorf("worker %d: no batch of at most 4 items", i)
		}
		computed += n
	}
	if computed != float64(items) {
		t.Errorf("workers computed %v items, want the %d sent", computed, items)
	}
	if backlog, _ := metric(t, workers[0].Handler(), "infer_broker_backlog_items"); backlog != 0 {
		t.Errorf("backlog after the load = %v, want 0 (answered entries are deleted)", backlog)
	}
}

// A worker killed with SIGKILL in the middle of the load loses nothing: the
// entries it held are claimed by the other worker after the visibility
// timeout, and every request is answered correctly within its deadline.
func TestWorkerKilled(t *testing.T) {
	r := startRedis(t)
	bc := broker.Config{URL: r.url, Prefix: t.Name()}
	const (
		fixed, perItem = 20 * time.Millisecond, 500 * time.Microsecond
		visibility     = 500 * time.Millisecond
		deadline       = 5 * time.Second
	)
	f := simFactory(t, fixed, perItem)
	victim := startWorkerProcess(t, workerSpec{URL: r.url, Prefix: t.Name(), Name: "victim",
		Fixed: fixed, PerItem: perItem, MaxBatch: 16, MaxLatency: 10 * time.Millisecond, Visibility: visibility})
	survivor := startWorker(t, broker.WorkerConfig{Config: bc, Name: "survivor", Visibility: visibility,
		Batch: batch.Config{MaxBatch: 16, MaxLatency: 10 * time.Millisecond}}, f)
	url1, _ := startFrontend(t, broker.FrontendConfig{Config: bc}, f)
	url2, _ := startFrontend(t, broker.FrontendConfig{Config: bc}, f)

	stop := make(chan struct{})
	time.AfterFunc(500*time.Millisecond, func() { victim.Signal(syscall.SIGKILL) })
	time.AfterFunc(2*time.Second, func() { close(stop) })
	outs, texts := load([]string{url1, url2}, 16, 0, 4, deadline, stop)

	ok := 0
	for i, o := range outs {
		switch {
		case o.err != nil:
			t.Errorf("request %d: no answer: %v", i, o.err)
		case o.status == http.StatusOK:
			if err := checkOutputs(texts[i], o.outputs); err != nil {
				t.Errorf("request %d: %v", i, err)
			}
			ok++
		default:
			t.Errorf("request %d: status %d (%s) after %v", i, o.status, o.code, o.took)
		}
	}
	claims, _ := metric(t, survivor.Handler(), "infer_broker_claims_total")
	t.Logf("%d requests, %d answered 200; the survivor claimed %v entries of the killed worker", len(outs), ok, claims)
	if claims == 0 {
		t.Error("the survivor claimed nothing: the killed worker held no entry")
	}
}

// Redis killed and restarted in the middle of the load: requests are refused
// quickly with 503 while it is away, and served again afterwards without
// restarting frontends or workers.
func TestRedisRestart(t *testing.T) {
	r := startRedis(t)
	bc := broker.Config{URL: r.url, Prefix: t.Name(), Heartbeat: beat}
	f := simFactory(t, 5*time.Millisecond, 100*time.Microsecond)
	for i := range 2 {
		startWorker(t, broker.WorkerConfig{Config: bc, Name: fmt.Sprintf("w%d", i),
			Batch: batch.Config{MaxBatch: 8, MaxLatency: 5 * time.Millisecond}}, f)
	}
	url1, _ := startFrontend(t, broker.FrontendConfig{Config: bc}, f)
	url2, _ := startFrontend(t, broker.FrontendConfig{Config: bc}, f)

	stop := make(chan struct{})
	var down, up atomic.Int64 // Unix nanoseconds
	go func() {
		time.Sleep(500 * time.Millisecond)
		down.Store(time.Now().UnixNano())
		r.kill()
		time.Sleep(time.Second)
		r.start()
		up.Store(time.Now().UnixNano())
		time.Sleep(1500 * time.Millisecond)
		close(stop)
	}()
	outs, texts := load([]string{url1, url2}, 8, 0, 3, 2*time.Second, stop)

	counts := map[int]int{}
	var lastFailure time.Time
	for i, o := range outs {
		if o.err != nil {
			t.Fatalf("request %d: no answer: %v", i, o.err)
		}
		counts[o.status]++
		switch o.status {
		case http.StatusOK:
			if err := checkOutputs(texts[i], o.outputs); err != nil {
				t.Errorf("request %d: %v", i, err)
			}
		case http.StatusServiceUnavailable:
			if o.code != "unavailable" {
				t.Errorf("request %d: 503 with code %q, want unavailable", i, o.code)
			}
			if o.took > time.Second {
				t.Errorf("request %d: 503 after %v, want a quick refusal", i, o.took)
			}
			if end := o.at.Add(o.took); end.After(lastFailure) {
				lastFailure = end
			}
		default:
			t.Errorf("request %d: status %d (%s) after %v", i, o.status, o.code, o.took)
		}
	}
	t.Logf("statuses %v; last 503 answered %v after Redis was back", counts,
		lastFailure.Sub(time.Unix(0, up.Load())).Round(time.Millisecond))
	if counts[http.StatusServiceUnavailable] == 0 {
		t.Error("no 503 while Redis was away")
	}
	// Service is back within a second (about 150 ms on a quiet machine,
	// 543 ms seen under -race with the whole tree's tests beside it), and
	// the rest of the load, 0.5 s, was all 200.
	if end := time.Unix(0, up.Load()).Add(time.Second); lastFailure.After(end) {
		t.Errorf("503s until %v after Redis was back, want service within 1s",
			lastFailure.Sub(time.Unix(0, up.Load())))
	}
	ok := 0
	for _, o := range outs {
		if o.status == http.StatusOK && o.at.UnixNano() > up.Load() {
			ok++
		}
	}
	if ok == 0 {
		t.Error("no request served after Redis was back")
	}
}

// Admission is bounded by the stream's backlog: beyond QueueCap requests
// are refused with 429 and nothing is trimmed. A request whose deadline
// passes withdraws its entries.
func TestQueueFullAndWithdraw(t *testing.T) {
	r := startRedis(t)
	bc := broker.Config{URL: r.url, Prefix: t.Name(), Heartbeat: beat}
	// A worker busy on a hanging item holds one more entry (one batch of
	// one computing, one forming); the others wait in the stream.
	q := &quirky{release: make(chan struct{}), hanging: make(chan struct{}, 1)}
	startWorker(t, broker.WorkerConfig{Config: bc, Batch: batch.Config{MaxBatch: 1}}, q)
	var once sync.Once
	release := func() { once.Do(func() { close(q.release) }) }
	t.Cleanup(release) // before the worker stops
	url, _ := startFrontend(t, broker.FrontendConfig{Config: bc, QueueCap: 4}, q)
	waitReadyz(t, url, http.StatusOK, "", 5*time.Second)

	hung, first := make(chan outcome), make(chan outcome)
	go func() { hung <- post(http.DefaultClient, url, []string{"hang:a"}, 2*time.Second) }()
	<-q.hanging
	go func() { first <- post(http.DefaultClient, url, []string{"b", "c"}, 2*time.Second) }()
	for n := 0; backlog(t, url) != 3; n++ {
		if n == 500 {
			t.Fatalf("backlog = %v, want 3", backlog(t, url))
		}
		time.Sleep(time.Millisecond)
	}
	refused := post(http.DefaultClient, url, []string{"d", "e"}, time.Second)
	if refused.status != http.StatusTooManyRequests || refused.code != "queue_full" {
		t.Errorf("over the cap: status %d (%s), want 429 queue_full", refused.status, refused.code)
	}
	if n := backlog(t, url); n != 3 {
		t.Errorf("backlog after the refusal = %v, want the 3 admitted items, none trimmed", n)
	}
	for _, o := range []outcome{<-first, <-hung} {
		if o.status != http.StatusGatewayTimeout {
			t.Errorf("behind a hanging item: status %d (%s), want 504", o.status, o.code)
		}
	}
	if n := backlog(t, url); n != 0 {
		t.Errorf("backlog after the deadlines = %v, want 0: the entries are withdrawn", n)
	}
	release()
	if o := post(http.DefaultClient, url, []string{"f"}, time.Second); o.status != http.StatusOK {
		t.Errorf("with the worker free again: status %d (%s), want 200", o.status, o.code)
	}
}

// Entries whose deadline has passed when a worker reads them are answered
// with a deadline error and acknowledged, without compute.
func TestExpiredEntries(t *testing.T) {
	r := startRedis(t)
	bc := broker.Config{URL: r.url, Prefix: t.Name()}
	stream := t.Name() + ":sim:classify:requests"
	past := strconv.FormatInt(time.Now().Add(-time.Second).UnixMilli(), 10)
	for i := range 3 {
		r.do("XADD", stream, "*", "req", "7", "item", strconv.Itoa(i), "reply", "replies", "deadline", past, "input", `{"Text":"late"}`)
	}
	w := startWorker(t, broker.WorkerConfig{Config: bc}, simFactory(t, time.Millisecond, 0))
	var codes []string
	for range 500 {
		if len(codes) == 3 {
			break
		}
		v := r.do("LPOP", "replies")
		if v == "" {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		var res struct{ Req, Code string }
		if err := json.Unmarshal([]byte(v), &res); err != nil || res.Req != "7" {
			t.Fatalf("result %s: %v", v, err)
		}
		codes = append(codes, res.Code)
	}
	if fmt.Sprint(codes) != "[expired expired expired]" {
		t.Errorf("result codes = %v, want 3 × expired", codes)
	}
	dropped, _ := metric(t, w.Handler(), "infer_dropped_items_total")
	computed, _ := metric(t, w.Handler(), "infer_items_total")
	if dropped != 3 || computed != 0 {
		t.Errorf("dropped %v, computed %v; want 3, 0", dropped, computed)
	}
	if n := r.do("XLEN", stream); n != "0" {
		t.Errorf("stream length = %s, want 0: answered entries are acknowledged and deleted", n)
	}
}

// An entry whose deadline passes while it waits in a busy worker's batcher
// is dropped there, not computed.
func TestExpiredInWorkerQueue(t *testing.T) {
	r := startRedis(t)
	w, fe, release, hung := busyWorker(t, broker.Config{URL: r.url, Prefix: t.Name()})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, _, err := fe.Do(ctx, []models.Input{{Text: "b"}}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do() behind a busy worker = %v, want DeadlineExceeded", err)
	}
	release()
	if err := <-hung; err != nil {
		t.Fatalf("Do(hang) = %v", err)
	}
	waitMetric(t, w.Handler(), "infer_dropped_items_total", 1)
	dropped, _ := metric(t, w.Handler(), "infer_dropped_items_total")
	computed, _ := metric(t, w.Handler(), "infer_items_total")
	if dropped != 1 || computed != 1 {
		t.Errorf("dropped %v, computed %v; want 1, 1 (only the hanging item ran)", dropped, computed)
	}
}

// backlog reads infer_broker_backlog_items from the frontend's /metrics.
func backlog(t *testing.T, url string) float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	v, ok := sumSamples(string(body), "infer_broker_backlog_items")
	if !ok {
		t.Fatalf("no infer_broker_backlog_items in /metrics:\n%s", body)
	}
	return v
}

// Redis unreachable: Do fails at once with ErrUnavailable, which the server
// answers with 503.
func TestUnreachable(t *testing.T) {
	bc := broker.Config{URL: fmt.Sprintf("redis://127.0.0.1:%d/0", freePort(t)), Prefix: t.Name()}
	url, fe := startFrontend(t, broker.FrontendConfig{Config: bc}, simFactory(t, 0, 0))
	start := time.Now()
	_, _, err := fe.Do(context.Background(), []models.Input{{Text: "a"}})
	if !errors.Is(err, broker.ErrUnavailable) || !errors.Is(err, batch.ErrClosed) {
		t.Errorf("Do() = %v, want ErrUnavailable matching batch.ErrClosed", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("Do() took %v, want a quick failure", took)
	}
	o := post(http.DefaultClient, url, []string{"a"}, time.Second)
	if o.status != http.StatusServiceUnavailable || o.code != "unavailable" || o.took > time.Second {
		t.Errorf("POST = %d (%s) after %v, want a quick 503 unavailable", o.status, o.code, o.took)
	}
}

// quirky is a model whose items behave by the prefix of their text: "str:"
// answers a string, "vec:" a []float32 made of its tokens, "bad:" fails as
// invalid input, "boom:" fails the model, "hang:" blocks until release is
// closed (it signals hanging first, if set); anything else answers as sim.
type quirky struct{ release, hanging chan struct{} }

func (q *quirky) Info() models.Info {
	return models.Info{Name: "quirky", Task: "test", Backend: "test"}
}
func (q *quirky) Prepare(text string) (models.Input, error) {
	return models.Input{Text: text, Tokens: []int32{int32(len(text)), -7}}, nil
}
func (q *quirky) New(context.Context, int) (models.Model, error) { return q, nil }
func (q *quirky) Close() error                                   { return nil }

func (q *quirky) Predict(_ context.Context, in []models.Input, out []models.Output) error {
	var errs []error
	fail := func(i int, err error) {
		if errs == nil {
			errs = make([]error, len(in))
		}
		errs[i] = err
	}
	for i, x := range in {
		switch prefix, rest, _ := strings.Cut(x.Text, ":"); prefix {
		case "str":
			out[i] = rest
		case "vec":
			out[i] = []float32{1.5, float32(x.Tokens[0]), float32(x.Tokens[1])}
		case "bad":
			fail(i, fmt.Errorf("%q: %w", rest, models.ErrInvalidInput))
		case "boom":
			fail(i, errors.New("boom"))
		case "hang":
			if q.hanging != nil {
				q.hanging <- struct{}{}
			}
			<-q.release
			out[i] = sim.Predict(x.Text)
		default:
			out[i] = sim.Predict(x.Text)
		}
	}
	if errs != nil {
		return &batch.ItemsError{Errs: errs}
	}
	return nil
}

// busyWorker starts a worker of one instance and batches of one, and a
// frontend, and keeps the worker busy on a hanging item until release is
// called or t ends; hung receives that item's Do error.
func busyWorker(t *testing.T, bc broker.Config) (w *worker, fe *broker.Frontend, release func(), hung <-chan error) {
	t.Helper()
	q := &quirky{release: make(chan struct{}), hanging: make(chan struct{}, 1)}
	w = startWorker(t, broker.WorkerConfig{Config: bc, Batch: batch.Config{MaxBatch: 1}}, q)
	var once sync.Once
	release = func() { once.Do(func() { close(q.release) }) }
	t.Cleanup(release) // before the worker stops
	_, fe = startFrontend(t, broker.FrontendConfig{Config: bc}, q)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _, err := fe.Do(ctx, []models.Input{{Text: "hang:a"}})
		done <- err
	}()
	<-q.hanging
	return w, fe, release, done
}

// Outputs keep the Go types the server packs specially, tokens travel with
// the input, and item errors keep their kind, as in-process.
func TestItemResults(t *testing.T) {
	r := startRedis(t)
	bc := broker.Config{URL: r.url, Prefix: t.Name()}
	q := &quirky{}
	// A full batch is the request's 5 items, sent as soon as they are all
	// in: with a 1 ms max latency a loaded machine split them (3 + 2).
	startWorker(t, broker.WorkerConfig{Config: bc, Batch: batch.Config{MaxBatch: 5, MaxLatency: 200 * time.Millisecond, Policy: batch.Fixed}}, q)
	url, fe := startFrontend(t, broker.FrontendConfig{Config: bc}, q)

	var ins []models.Input
	for _, text := range []string{"str:hello", "vec:ab", "bad:x", "boom:y", "plain"} {
		in, _ := q.Prepare(text)
		ins = append(ins, in)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	outs, st, err := fe.Do(ctx, ins)
	var ie *batch.ItemsError
	if !errors.As(err, &ie) || len(ie.Errs) != len(ins) {
		t.Fatalf("Do() error = %v, want an *ItemsError with %d entries", err, len(ins))
	}
	if got, ok := outs[0].(string); !ok || got != "hello" {
		t.Errorf("string output = %#v, want \"hello\"", outs[0])
	}
	if got, ok := outs[1].([]float32); !ok || fmt.Sprint(got) != "[1.5 6 -7]" {
		t.Errorf("vector output = %#v, want []float32{1.5, 6, -7}", outs[1])
	}
	want, _ := json.Marshal(sim.Predict("plain"))
	if got := fmt.Sprintf("%s", outs[4]); got != string(want) {
		t.Errorf("JSON output = %s, want %s", got, want)
	}
	for i, wantErr := range []bool{false, false, true, true, false} {
		if (ie.Errs[i] != nil) != wantErr {
			t.Errorf("item %d error = %v, want error: %v", i, ie.Errs[i], wantErr)
		}
	}
	if !errors.Is(ie.Errs[2], models.ErrInvalidInput) || errors.Is(ie.Errs[3], models.ErrInvalidInput) {
		t.Errorf("item errors %v, %v: want only the first to be ErrInvalidInput", ie.Errs[2], ie.Errs[3])
	}
	if st.BatchSize != len(ins) || st.Compute <= 0 || st.Queue <= 0 {
		t.Errorf("stats = %+v, want batch %d and positive queue and compute times", st, len(ins))
	}
	if o := post(http.DefaultClient, url, []string{"bad:z"}, time.Second); o.status != http.StatusUnprocessableEntity {
		t.Errorf("POST bad item: status %d (%s), want 422", o.status, o.code)
	}
}

// An entry whose workers keep stopping on it is answered with an error
// after MaxDeliveries instead of taking down every worker in turn.
func TestAbandonedAfterMaxDeliveries(t *testing.T) {
	r := startRedis(t)
	bc := broker.Config{URL: r.url, Prefix: t.Name()}
	q := &quirky{release: make(chan struct{})}
	var workers []*worker
	for i := range 2 {
		workers = append(workers, startWorker(t, broker.WorkerConfig{Config: bc, Name: fmt.Sprintf("w%d", i),
			Visibility: 300 * time.Millisecond, MaxDeliveries: 1, Batch: batch.Config{MaxLatency: time.Millisecond}}, q))
	}
	t.Cleanup(func() { close(q.release) }) // before the workers stop
	_, fe := startFrontend(t, broker.FrontendConfig{Config: bc}, q)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _, err := fe.Do(ctx, []models.Input{{Text: "hang:forever"}})
	var ie *batch.ItemsError
	if !errors.As(err, &ie) || !strings.Contains(ie.Errs[0].Error(), "abandoned after 2 deliveries") {
		t.Fatalf("Do() = %v, want the item abandoned after 2 deliveries", err)
	}
	var claims, abandoned float64
	for _, w := range workers {
		n, _ := metric(t, w.Handler(), "infer_broker_claims_total")
		a, _ := metric(t, w.Handler(), "infer_broker_abandoned_items_total")
		claims, abandoned = claims+n, abandoned+a
	}
	if claims < 1 || abandoned != 1 {
		t.Errorf("claims %v, abandoned %v; want at least 1 and 1", claims, abandoned)
	}
}

// A frozen Redis (SIGSTOP) is noticed within about CommandTimeout: the
// request in flight and the next ones get 503 unavailable, not a hang.
func TestFrozenRedisNoticedWithinASecond(t *testing.T) {
	r := startRedis(t)
	bc := broker.Config{URL: r.url, Prefix: t.Name()}
	url, _ := startFrontend(t, broker.FrontendConfig{Config: bc}, simFactory(t, 0, 0))
	startWorker(t, broker.WorkerConfig{Config: bc}, simFactory(t, 0, 0))
	if o := post(http.DefaultClient, url, []string{"a"}, 5*time.Second); o.status != 200 {
		t.Fatalf("before the freeze: %d %s %v", o.status, o.code, o.err)
	}
	if err := r.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer r.cmd.Process.Signal(syscall.SIGCONT)
	o := post(http.DefaultClient, url, []string{"a"}, 10*time.Second)
	if o.status != http.StatusServiceUnavailable || o.took > 2*broker.CommandTimeout {
		t.Errorf("with Redis frozen: %d %s after %v, want 503 within %v", o.status, o.code, o.took, 2*broker.CommandTimeout)
	}
}
