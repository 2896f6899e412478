package broker_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/sim"
	"github.com/inferhq/infer/server"
	"github.com/inferhq/infer/server/batch"
	"github.com/inferhq/infer/server/broker"
	"github.com/inferhq/infer/server/encoder"
	"github.com/inferhq/infer/server/servertest"
)

// The test binary doubles as a worker process, so that a test can kill one
// with SIGKILL: see startWorkerProcess.
const workerEnv = "INFER_BROKER_TEST_WORKER"

func TestMain(m *testing.M) {
	broker.LogClientTo(nil)
	if spec := os.Getenv(workerEnv); spec != "" {
		os.Exit(workerProcess(spec))
	}
	os.Exit(m.Run())
}

// redisServer is a redis-server of the test's own on a loopback port,
// without persistence.
type redisServer struct {
	t    *testing.T
	bin  string
	dir  string
	port int
	url  string
	cmd  *exec.Cmd
	log  bytes.Buffer
}

// startRedis starts a redis-server for t, stopped when t ends. It skips t
// when redis-server is not installed, unless INFER_REQUIRE_REDIS=1 (CI).
func startRedis(t *testing.T) *redisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("INFER_REQUIRE_REDIS") == "1" {
			t.Fatal("redis-server not found and INFER_REQUIRE_REDIS=1: apt-get install redis-server")
		}
		t.Skip("redis-server not installed: apt-get install redis-server to run this test")
	}
	r := &redisServer{t: t, bin: bin, dir: t.TempDir(), port: freePort(t)}
	r.url = fmt.Sprintf("redis://127.0.0.1:%d/0", r.port)
	r.start()
	t.Cleanup(r.kill)
	return r
}

func (r *redisServer) start() {
	r.t.Helper()
	r.cmd = exec.Command(r.bin, "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", r.dir)
	r.cmd.Stdout, r.cmd.Stderr = &r.log, &r.log
	if err := r.cmd.Start(); err != nil {
		r.t.Fatalf("start redis-server: %v", err)
	}
	for range 500 {
		if r.ping() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.t.Fatalf("redis-server did not answer on port %d:\n%s", r.port, r.log.String())
}

// kill stops redis-server abruptly, as a crash would.
func (r *redisServer) kill() {
	if r.cmd == nil {
		return
	}
	r.cmd.Process.Kill()
	r.cmd.Wait()
	r.cmd = nil
}

func (r *redisServer) ping() bool {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", r.port), 100*time.Millisecond)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, _ := bufio.NewReader(c).ReadString('\n')
	return strings.HasPrefix(line, "+PONG")
}

// do sends one command to r and returns its reply: a string, an integer in
// decimal, or "" for nil.
func (r *redisServer) do(args ...string) string {
	r.t.Helper()
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", r.port))
	if err != nil {
		r.t.Fatal(err)
	}
	defer c.Close()
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c, b.String()); err != nil {
		r.t.Fatal(err)
	}
	rd := bufio.NewReader(c)
	line, err := rd.ReadString('\n')
	line = strings.TrimRight(line, "\r\n")
	if err != nil || line == "" {
		r.t.Fatalf("redis %v: %v", args, err)
	}
	switch line[0] {
	case '+', ':':
		return line[1:]
	case '$':
		n, _ := strconv.Atoi(line[1:])
		if n < 0 {
			return ""
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(rd, buf); err != nil {
			r.t.Fatal(err)
		}
		return string(buf[:n])
	}
	r.t.Fatalf("redis %v: %s", args, line)
	return ""
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func simFactory(t *testing.T, fixed, perItem time.Duration) models.Factory {
	t.Helper()
	f, err := sim.New(sim.Config{Fixed: fixed, PerItem: perItem})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// startFrontend serves factory's model through a Frontend on a loopback
// port, and returns its base URL.
func startFrontend(t *testing.T, cfg broker.FrontendConfig, factory models.Factory) (string, *broker.Frontend) {
	t.Helper()
	cfg.Poll = 100 * time.Millisecond
	f, err := broker.NewFrontend(cfg, factory.Info())
	if err != nil {
		t.Fatal(err)
	}
	svc, err := encoder.New(encoder.Config{Scheduler: f, Batch: batch.Config{QueueCap: cfg.QueueCap}}, factory)
	if err != nil {
		t.Fatal(err)
	}
	srv := servertest.Start(t, server.Config{Timeout: 10 * time.Second}, svc)
	return srv.URL, f
}

// worker is a Worker mounted on a host, as infer worker runs it.
type worker struct {
	*broker.Worker
	host *servertest.Server
}

// Handler is the host's: the worker's /metrics, /healthz and /readyz.
func (w *worker) Handler() http.Handler { return w.host.Handler() }

// startWorker runs a Worker on a host in this process until t ends, and
// returns it once its /readyz says it is ready.
func startWorker(t *testing.T, cfg broker.WorkerConfig, factory models.Factory) *worker {
	t.Helper()
	cfg.Poll = 100 * time.Millisecond
	w, err := broker.NewWorker(cfg, factory)
	if err != nil {
		t.Fatal(err)
	}
	host := servertest.Start(t, server.Config{}, w)
	waitReady(t, host.Handler())
	return &worker{Worker: w, host: host}
}

func waitReady(t *testing.T, h http.Handler) {
	t.Helper()
	for range 500 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
		if rec.Code == http.StatusOK {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("worker not ready after 5s")
}

// workerSpec configures a worker process.
type workerSpec struct {
	URL, Prefix, Name, MetricsAddr    string
	Fixed, PerItem                    time.Duration
	MaxBatch                          int
	MaxLatency, Visibility, Heartbeat time.Duration
}

// startWorkerProcess runs a sim worker in a child process (this test binary)
// and returns it once ready; it is killed when t ends.
func startWorkerProcess(t *testing.T, spec workerSpec) *os.Process {
	t.Helper()
	spec.MetricsAddr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	b, _ := json.Marshal(spec)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), workerEnv+"="+string(b))
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for range 500 {
		resp, err := http.Get("http://" + spec.MetricsAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return cmd.Process
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("worker process not ready after 5s:\n%s", log.String())
	return nil
}

func workerProcess(specJSON string) int {
	var spec workerSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	f, err := sim.New(sim.Config{Fixed: spec.Fixed, PerItem: spec.PerItem})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	w, err := broker.NewWorker(broker.WorkerConfig{
		Config:     broker.Config{URL: spec.URL, Prefix: spec.Prefix, Poll: 100 * time.Millisecond, Heartbeat: spec.Heartbeat},
		Batch:      batch.Config{MaxBatch: spec.MaxBatch, MaxLatency: spec.MaxLatency},
		Name:       spec.Name,
		Visibility: spec.Visibility,
	}, f)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	host, err := server.New(server.Config{Addr: spec.MetricsAddr}, w)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := host.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// metric returns the sum of the samples of the metric named name that h
// serves at /metrics, and whether there was any.
func metric(t *testing.T, h http.Handler, name string) (float64, bool) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return sumSamples(rec.Body.String(), name)
}

func sumSamples(exposition, name string) (float64, bool) {
	var sum float64
	found := false
	for _, line := range strings.Split(exposition, "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest == "" || (rest[0] != ' ' && rest[0] != '{')) {
			continue
		}
		fields := strings.Fields(rest[strings.LastIndex(rest, "}")+1:])
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		sum += v
		found = true
	}
	return sum, found
}

// outcome is how one HTTP request went.
type outcome struct {
	status  int
	code    string // error code, for errors
	retry   string // Retry-After
	took    time.Duration
	at      time.Time // when it was sent
	outputs []json.RawMessage
	timing  string
	err     error // transport error: no answer
}

// post sends texts to url's /batched endpoint with the given request timeout.
func post(client *http.Client, url string, texts []string, timeout time.Duration) outcome {
	body, _ := json.Marshal(map[string]any{"inputs": texts})
	req, _ := http.NewRequest("POST", url+"/batched", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Timeout", timeout.String())
	o := outcome{at: time.Now()}
	resp, err := client.Do(req)
	if err != nil {
		o.err = err
		return o
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	o.took, o.status, o.timing = time.Since(o.at), resp.StatusCode, resp.Header.Get("Server-Timing")
	o.retry = resp.Header.Get("Retry-After")
	if err != nil {
		o.err = err
		return o
	}
	var v struct {
		Outputs []json.RawMessage `json:"outputs"`
		Error   struct{ Code string }
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		o.err = fmt.Errorf("decode %q: %w", raw, err)
	}
	o.outputs, o.code = v.Outputs, v.Error.Code
	return o
}

// checkOutputs reports whether outs are sim's predictions for texts.
func checkOutputs(texts []string, outs []json.RawMessage) error {
	if len(outs) != len(texts) {
		return fmt.Errorf("%d outputs for %d inputs", len(outs), len(texts))
	}
	for i, text := range texts {
		var got sim.Prediction
		if err := json.Unmarshal(outs[i], &got); err != nil {
			return fmt.Errorf("output %d: %w", i, err)
		}
		if want := sim.Predict(text); got != want {
			return fmt.Errorf("output %d for %q = %+v, want %+v", i, text, got, want)
		}
	}
	return nil
}

// load sends requests of 1..maxItems items round-robin to urls from clients
// goroutines until each has sent perClient requests or stop is closed, and
// returns every outcome with its texts.
func load(urls []string, clients, perClient, maxItems int, timeout time.Duration, stop <-chan struct{}) ([]outcome, [][]string) {
	var mu sync.Mutex
	var outs []outcome
	var texts [][]string
	var wg sync.WaitGroup
	client := &http.Client{Timeout: timeout + 5*time.Second}
	for c := range clients {
		wg.Go(func() {
			for n := 0; perClient <= 0 || n < perClient; n++ {
				select {
				case <-stop:
					return
				default:
				}
				items := make([]string, 1+(c+n)%maxItems)
				for i := range items {
					items[i] = fmt.Sprintf("client %d request %d item %d", c, n, i)
				}
				o := post(client, urls[(c+n)%len(urls)], items, timeout)
				mu.Lock()
				outs, texts = append(outs, o), append(texts, items)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return outs, texts
}
