package server_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/inferhq/infer/server"
	"github.com/inferhq/infer/server/servertest"
)

// At the cap, the longest idle keep-alive connection is closed so that a new
// client gets in; when every connection is busy, the new one is refused.
func TestConnectionCapClosesIdleFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newProbe()
		ts := start(t, server.Config{MaxConns: 3}, p)
		var idle []*rawConn
		for range 3 {
			c := dial(t, ts)
			if resp, _, err := c.send(get("/healthz")); err != nil || resp.StatusCode != 200 {
				t.Fatalf("healthz: %v %v", resp, err)
			}
			idle = append(idle, c)
			time.Sleep(time.Second) // the first is the longest idle
		}
		c := dial(t, ts)
		if resp, _, err := c.send(get("/healthz")); err != nil || resp.StatusCode != 200 {
			t.Fatalf("a new client at the cap: %v %v, want 200", resp, err)
		}
		synctest.Wait()
		if !idle[0].closedByServer() || idle[1].closedByServer() || idle[2].closedByServer() {
			t.Error("want the longest idle connection closed to make room, and only it")
		}
		if got := c.metric(t, `infer_connections_closed_total{reason="idle_evicted"}`); got != 1 {
			t.Errorf("idle_evicted = %v, want 1", got)
		}

		// Three connections busy with requests: a fourth is refused.
		var wg sync.WaitGroup
		busy := []*rawConn{idle[1], idle[2], c}
		for _, b := range busy {
			wg.Go(func() {
				if resp, _, err := b.send(post("/wait", "")); err != nil || resp.StatusCode != 200 {
					t.Errorf("busy request: %v %v", resp, err)
				}
			})
		}
		for range busy {
			<-p.started
		}
		synctest.Wait()
		refused := dial(t, ts)
		if _, _, err := refused.send(get("/healthz")); err == nil {
			t.Error("a connection past the cap with none idle was answered, want it closed")
		}
		close(p.gate)
		wg.Wait()
		if got := c.metric(t, `infer_connections_closed_total{reason="over_cap"}`); got != 1 {
			t.Errorf("over_cap = %v, want 1", got)
		}
		if got := c.metric(t, `infer_connections_open`); got != 3 {
			t.Errorf("connections_open = %v, want 3", got)
		}
	})
}

func TestIdleTimeoutClosesParkedConnections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := start(t, server.Config{IdleTimeout: 10 * time.Second}, newProbe())
		c := dial(t, ts)
		if resp, _, err := c.send(get("/healthz")); err != nil || resp.StatusCode != 200 {
			t.Fatalf("healthz: %v %v", resp, err)
		}
		time.Sleep(9 * time.Second)
		if c.closedByServer() {
			t.Fatal("closed before the idle timeout")
		}
		time.Sleep(2 * time.Second)
		if !c.closedByServer() {
			t.Error("still open past the idle timeout")
		}
	})
}

// net/http's own answers to requests it cannot parse come in the JSON error
// shape too; a request with a transfer coding closes its connection after
// the answer (a Content-Length beside it may be request smuggling).
func TestMalformedRequestsAnsweredInJSON(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := start(t, server.Config{}, newProbe())
		for _, tc := range []struct {
			name, raw string
			status    int
			code      string
		}{
			{"headers too large", "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 70<<10) + "\r\n\r\n", 431, "headers_too_large"},
			{"no Host", "GET /healthz HTTP/1.1\r\n\r\n", 400, "bad_request"},
			{"unknown transfer coding", "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501, "unsupported_transfer_encoding"},
		} {
			resp, body, err := dial(t, ts).send(tc.raw)
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
				continue
			}
			if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != "application/json" || !strings.Contains(body, `"code":"`+tc.code+`"`) {
				t.Errorf("%s: %d %q %s, want %d in JSON with code %s", tc.name, resp.StatusCode, resp.Header.Get("Content-Type"), body, tc.status, tc.code)
			}
		}
		c := dial(t, ts)
		resp, _, err := c.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n")
		if err != nil || resp.StatusCode != 200 || !resp.Close {
			t.Errorf("Content-Length with Transfer-Encoding: %v %v, want 200 with Connection: close", resp, err)
		}
		synctest.Wait()
		if !c.closedByServer() {
			t.Error("connection kept open after a request with both Content-Length and Transfer-Encoding")
		}
	})
}

// From the first signal every answer carries Connection: close, and a
// keep-alive connection idle at the signal is not closed under a client
// about to reuse it: its next request is answered (503 draining).
func TestDrainNeverClosesUnderAClient(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := start(t, server.Config{}, newProbe())
		parked, reused := dial(t, ts), dial(t, ts)
		for _, c := range []*rawConn{parked, reused} {
			if resp, _, err := c.send(get("/healthz")); err != nil || resp.StatusCode != 200 || resp.Close {
				t.Fatalf("before the drain: %v %v, want 200 keep-alive", resp, err)
			}
		}
		inflight := dial(t, ts)
		var wg sync.WaitGroup
		wg.Go(func() { // admitted before the signal, answered during the drain
			resp, _, err := inflight.send(post("/sleep", ""))
			if err != nil || resp.StatusCode != 200 || !resp.Close {
				t.Errorf("admitted request: %v %v, want 200 with Connection: close", resp, err)
			}
		})
		synctest.Wait()
		stopped := make(chan error, 1)
		go func() { stopped <- ts.Stop() }()
		synctest.Wait()
		time.Sleep(50 * time.Millisecond)
		resp, body, err := reused.send(get("/sleep"))
		if err != nil {
			t.Fatalf("a request on a connection idle at the signal: %v, want an answer", err)
		}
		if resp.StatusCode != 405 || !resp.Close {
			t.Errorf("during the drain: %d %s close=%v, want an answer with Connection: close", resp.StatusCode, body, resp.Close)
		}
		if _, err := ts.Client.Transport.(*http.Transport).DialContext(context.Background(), "tcp", "x"); err == nil {
			t.Error("a new connection during the drain was accepted, want refused")
		}
		wg.Wait()
		if err := <-stopped; err != nil {
			t.Errorf("Stop() = %v", err)
		}
		if !parked.closedByServer() {
			t.Error("parked connection left open after the drain")
		}
	})
}

// Sockets that never send a request cannot hold the cap: at the cap the one
// quiet for longest, new or idle, makes room, so a client that sends a
// request is served while an attacker reopens every socket it loses; and a
// socket that sends no complete header is closed after HeaderTimeout.
func TestSilentConnectionsCannotHoldTheCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const cap = 64
		ts := start(t, server.Config{MaxConns: cap, HeaderTimeout: 3 * time.Second}, newProbe())
		var silent []*rawConn
		for i := range cap {
			c := dial(t, ts)
			if i%2 == 1 {
				go io.WriteString(c.Conn, "GET /healthz HTTP/1.1\r\n") // half a header: slowloris
			}
			silent = append(silent, c)
			time.Sleep(10 * time.Millisecond)
		}
		synctest.Wait()
		served := 0
		for i := range 20 {
			// The attacker reopens at once what it lost, keeping the cap full.
			silent = append(silent, dial(t, ts))
			c := dial(t, ts)
			resp, _, err := c.send(get("/healthz"))
			if err == nil && resp.StatusCode == 200 {
				served++
			} else {
				t.Logf("request %d at a cap of silent sockets: %v %v", i, resp, err)
			}
			c.Close()
			time.Sleep(10 * time.Millisecond)
		}
		if served != 20 {
			t.Errorf("%d of 20 requests served at a cap held by silent sockets, want 20", served)
		}
		synctest.Wait()
		if !silent[0].closedByServer() || silent[len(silent)-1].closedByServer() {
			t.Error("want the oldest silent socket evicted and the newest kept")
		}
		c := dial(t, ts)
		if got := c.metric(t, `infer_connections_closed_total{reason="new_evicted"}`); got < 20 {
			t.Errorf("new_evicted = %v, want at least 20 (one per client served)", got)
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if !silent[len(silent)-1].closedByServer() {
			t.Error("a socket that sent nothing is still open past HeaderTimeout")
		}
	})
}

// A client address holding MaxConnsPerAddr connections gets no more.
func TestConnectionCapPerAddress(t *testing.T) {
	ts := servertest.Start(t, server.Config{MaxConnsPerAddr: 2}, newProbe())
	addr := strings.TrimPrefix(ts.URL, "http://")
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	over, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	over.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(over, get("/healthz"))
	if n, err := over.Read(make([]byte, 1)); err == nil {
		t.Errorf("a third connection from one address read %d bytes, want it closed", n)
	}
	held[0].Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := ts.Client.Get(ts.URL + "/metrics")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			// At least the third; the metrics' own tries count too while
			// the server has not yet seen the first close.
			if got := servertest.Sample(string(body), `infer_connections_closed_total{reason="over_addr_cap"}`); got < 1 {
				t.Errorf("over_addr_cap = %v, want at least 1", got)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after one connection closed, a new one from the address is still refused: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Past the drain timeout, every request still running is answered (503
// draining, through its context's cause) before its connection closes, and
// Serve says the drain timed out.
func TestDrainTimeoutAnswersRunningRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newProbe()
		ts := start(t, server.Config{DrainTimeout: 2 * time.Second}, p)
		const n = 5
		var wg sync.WaitGroup
		var answered, drained sync.Map
		for i := range n {
			c := dial(t, ts)
			wg.Go(func() {
				resp, body, err := c.send(post("/hold", ""))
				if err == nil {
					answered.Store(i, true)
					if resp.StatusCode == 503 && strings.Contains(body, `"draining"`) {
						drained.Store(i, true)
					}
				}
			})
		}
		for range n {
			<-p.started
		}
		err := ts.Stop()
		wg.Wait()
		count := func(m *sync.Map) (k int) {
			m.Range(func(any, any) bool { k++; return true })
			return k
		}
		if a, d := count(&answered), count(&drained); a != n || d != n {
			t.Errorf("past the drain timeout: %d of %d requests answered, %d with 503 draining; want all", a, n, d)
		}
		if !errors.Is(err, server.ErrDrainTimeout) || !strings.Contains(err.Error(), "5 requests still running") {
			t.Errorf("Stop() = %v, want ErrDrainTimeout naming 5 requests", err)
		}
	})
}

// A client that half-closes its connection after its request is never
// answered with an empty 200: a handler that wrote nothing because its
// context ended has its connection closed without an answer.
func TestHalfClosedClientNeverGetsAnEmpty200(t *testing.T) {
	p := newProbe()
	ts := servertest.Start(t, server.Config{}, p)
	c, err := net.Dial("tcp", strings.TrimPrefix(ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, post("/hold", ""))
	<-p.started
	c.(*net.TCPConn).CloseWrite()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(c)
	if len(got) > 0 || err != nil {
		t.Errorf("after a half-close with nothing written: %q, %v; want the connection closed without an answer", got, err)
	}
}
