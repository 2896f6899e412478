//go:build linux

package cmd

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/inferhq/infer/route"
	"github.com/inferhq/infer/server"
)

// Faults through infer route with real `infer serve` replicas in child
// processes (the test binary runs infer's command line, see TestMain).

// freeAddr returns a free 127.0.0.1 address.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// syncBuffer is a buffer safe for a child's two streams.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// child is an infer process.
type child struct {
	cmd  *exec.Cmd
	addr string
	log  *syncBuffer
	done chan struct{}
}

// startInfer runs `infer args… --addr addr` and waits until its /readyz
// answers 200.
func startInfer(t *testing.T, addr string, args ...string) *child {
	t.Helper()
	c := &child{addr: addr, log: &syncBuffer{}, done: make(chan struct{})}
	c.cmd = exec.Command(os.Args[0], append(args, "--addr", addr, "--log-level", "warn")...)
	c.cmd.Env = append(os.Environ(), mainEnv+"=1")
	c.cmd.Stdout, c.cmd.Stderr = c.log, c.log
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.cmd.Wait(); close(c.done) }()
	t.Cleanup(func() {
		c.cmd.Process.Signal(syscall.SIGCONT)
		c.cmd.Process.Kill()
		<-c.done
	})
	deadline := time.Now().Add(60 * time.Second)
	for !ready("http://" + addr) {
		select {
		case <-c.done:
			t.Fatalf("infer %v exited:\n%s", args, c.log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("infer %v not ready within 60s:\n%s", args, c.log.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return c
}

// kill sends SIGKILL and waits for the process to end.
func (c *child) kill() {
	c.cmd.Process.Kill()
	<-c.done
}

func ready(base string) bool {
	cl := http.Client{Timeout: time.Second}
	resp, err := cl.Get(base + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// routeAdminToken is the admin token of hostRouter's host.
const routeAdminToken = "test-admin"

// hostRouter runs a router over the replicas in this process, hosted as
// infer route hosts it; it returns the router and its base URL.
func hostRouter(t *testing.T, cfg route.Config, replicas ...*child) (*route.Router, string) {
	t.Helper()
	for _, c := range replicas {
		u, err := route.ParseUpstream("http://" + c.addr)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Upstreams = append(cfg.Upstreams, u)
	}
	rt, err := route.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{DrainTimeout: 5 * time.Second, AdminToken: routeAdminToken}, rt)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { defer close(stopped); srv.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-stopped })
	for !srv.Ready() {
		time.Sleep(5 * time.Millisecond)
	}
	return rt, "http://" + ln.Addr().String()
}

// replicaOf returns the router's replica at addr.
func replicaOf(rt *route.Router, addr string) *route.Replica {
	for _, r := range rt.Replicas() {
		if r.Name() == addr {
			return r
		}
	}
	return nil
}

// waitState polls until the replica at addr is in state s and returns
// when that was first seen.
func waitState(t *testing.T, rt *route.Router, addr string, s route.State, within time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if r := replicaOf(rt, addr); r != nil && r.State() == s {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %s not %v within %v", addr, s, within)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// outcome is what a client got for one request.
type outcome struct {
	status  int
	replica string
	done    bool // a stream ended with [DONE]
	cut     bool // … after an error event
	err     error
}

// streamOnce sends one streamed completion through the router.
func streamOnce(client *http.Client, base, body string) outcome {
	resp, err := client.Post(base+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		return outcome{err: err}
	}
	defer resp.Body.Close()
	o := outcome{status: resp.StatusCode, replica: resp.Header.Get(route.ReplicaHeader)}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "data: [DONE]":
			o.done = true
		case strings.HasPrefix(line, `data: {"error"`):
			o.cut = true
		}
	}
	if sc.Err() != nil {
		o.err = sc.Err()
	}
	return o
}

// TestRouteKillReplicaUnderLoad kills one of two sim-lm replicas under a
// closed loop of streams: requests that had no answer yet are retried on
// the other (none is lost), open streams end with an error event then
// [DONE], the replica is ejected within 1s, and readmitted within 2s of
// being ready again.
func TestRouteKillReplicaUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("starts infer processes")
	}
	a := startInfer(t, freeAddr(t), "serve", "--model", "sim-lm")
	b := startInfer(t, freeAddr(t), "serve", "--model", "sim-lm")
	rt, base := hostRouter(t, route.Config{Policy: route.LeastRequest}, a, b)

	const clients = 16
	body := `{"prompt": "Once upon a time", "max_tokens": 40, "ignore_eos": true, "stream": true}`
	var mu sync.Mutex
	var outcomes []outcome
	stop := make(chan struct{})
	var wg sync.WaitGroup
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	for range clients {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				o := streamOnce(client, base, body)
				mu.Lock()
				outcomes = append(outcomes, o)
				mu.Unlock()
			}
		})
	}
	time.Sleep(time.Second)
	killed := time.Now()
	a.kill()
	ejected := waitState(t, rt, a.addr, route.StateDown, 5*time.Second)
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()

	var ok, cut, lost int
	for _, o := range outcomes {
		switch {
		case o.err == nil && o.status == http.StatusOK && o.done && !o.cut:
			ok++
		case o.err == nil && o.status == http.StatusOK && o.done && o.cut && o.replica == a.addr:
			cut++
		default:
			lost++
			t.Errorf("lost: %+v", o)
		}
	}
	t.Logf("ROUTE kill -9 under %d streams: %d completed, %d streams cut with an error event, %d lost; ejected %v after the kill",
		clients, ok, cut, lost, ejected.Sub(killed).Round(time.Millisecond))
	if cut == 0 {
		t.Error("no stream was open on the killed replica: the test did not test it")
	}
	if d := ejected.Sub(killed); d > time.Second {
		t.Errorf("ejected %v after the kill, want within 1s", d)
	}

	// Back: readmitted within 2s of its /readyz answering 200.
	a2 := startInfer(t, a.addr, "serve", "--model", "sim-lm")
	readyAt := time.Now()
	readmitted := waitState(t, rt, a2.addr, route.StateReady, 10*time.Second)
	t.Logf("ROUTE readmitted %v after the replica was ready again", readmitted.Sub(readyAt).Round(time.Millisecond))
	if d := readmitted.Sub(readyAt); d > 2*time.Second {
		t.Errorf("readmitted %v after being ready, want within 2s", d)
	}
}

// TestRouteStalledReplicaIsEjectedByDeadline SIGSTOPs one of two sim
// replicas: requests to it run into their deadline (504), which ejects it;
// then every request goes to the other; after SIGCONT it is readmitted.
func TestRouteStalledReplicaIsEjectedByDeadline(t *testing.T) {
	if testing.Short() {
		t.Skip("starts infer processes")
	}
	args := []string{"serve", "--model", "sim", "--sim-fixed", "1ms", "--sim-per-item", "0.01ms", "--max-latency", "1ms"}
	a := startInfer(t, freeAddr(t), args...)
	b := startInfer(t, freeAddr(t), args...)
	rt, base := hostRouter(t, route.Config{}, a, b)
	post := func() outcome {
		req, _ := http.NewRequest(http.MethodPost, base+"/batched", strings.NewReader("Paris is the [MASK] of France."))
		req.Header.Set("X-Request-Timeout", "500ms")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return outcome{err: err}
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return outcome{status: resp.StatusCode, replica: resp.Header.Get(route.ReplicaHeader)}
	}
	for range 10 {
		if o := post(); o.status != http.StatusOK {
			t.Fatalf("before the stall: %+v", o)
		}
	}
	a.cmd.Process.Signal(syscall.SIGSTOP)
	stopped := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	timedOut := 0
	for range 4 {
		wg.Go(func() {
			for time.Since(stopped) < 3*time.Second {
				o := post()
				mu.Lock()
				if o.status == http.StatusGatewayTimeout {
					timedOut++
					if o.replica != a.addr {
						t.Errorf("a 504 from %s, want only from the stalled replica", o.replica)
					}
				} else if o.status != http.StatusOK {
					t.Errorf("during the stall: %+v", o)
				}
				mu.Unlock()
			}
		})
	}
	ejected := waitState(t, rt, a.addr, route.StateDown, 5*time.Second)
	wg.Wait()
	t.Logf("ROUTE SIGSTOP: ejected %v after the stall, %d requests ran into their 500ms deadline", ejected.Sub(stopped).Round(time.Millisecond), timedOut)
	for range 20 {
		if o := post(); o.status != http.StatusOK || o.replica != b.addr {
			t.Fatalf("after the ejection: %+v, want 200 from the other replica", o)
		}
	}
	a.cmd.Process.Signal(syscall.SIGCONT)
	waitState(t, rt, a.addr, route.StateReady, 10*time.Second)
}

// TestRouteStreamsFromSimLM sends streams of four tenants through the
// prefix policy to two sim-lm replicas: each tenant stays on one replica,
// and every stream arrives whole.
func TestRouteStreamsFromSimLM(t *testing.T) {
	if testing.Short() {
		t.Skip("starts infer processes")
	}
	a := startInfer(t, freeAddr(t), "serve", "--model", "sim-lm")
	b := startInfer(t, freeAddr(t), "serve", "--model", "sim-lm")
	_, base := hostRouter(t, route.Config{Policy: route.Prefix}, a, b)
	home := map[int]string{}
	for q := range 3 {
		for tenant := range 4 {
			ctx := strings.Repeat(fmt.Sprintf("Tenant %d's long shared context. ", tenant), 40)
			body := fmt.Sprintf(`{"prompt": %q, "max_tokens": 8, "stream": true}`, ctx+"Question "+strconv.Itoa(q))
			o := streamOnce(http.DefaultClient, base, body)
			if o.status != http.StatusOK || !o.done || o.cut || o.err != nil {
				t.Fatalf("tenant %d: %+v", tenant, o)
			}
			if h, ok := home[tenant]; ok && h != o.replica {
				t.Errorf("tenant %d went to %s, then %s", tenant, h, o.replica)
			}
			home[tenant] = o.replica
		}
	}
	resp, err := http.Get(base + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b2), `"id":"sim-lm"`) || strings.Count(string(b2), `"id"`) != 1 {
		t.Errorf("/v1/models = %s, want sim-lm once", b2)
	}
}
