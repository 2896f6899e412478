package route

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferhq/infer/server"
)

func TestProxiesEveryEndpointAndNamesTheReplica(t *testing.T) {
	a, b := newFake(t), newFake(t)
	tr := startRouter(t, Config{}, a, b)
	for _, path := range []string{"/batched", "/naive", "/v2/models/sim/infer", "/v1/completions", "/v1/chat/completions",
		"/v1/embeddings", "/static/v1/completions", "/naive/v1/chat/completions", "/static/v1/embeddings"} {
		resp, body := tr.post(t, path+"?x=1", `{"inputs": ["a"]}`)
		var got struct{ Replica, Path string }
		if err := json.Unmarshal([]byte(body), &got); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, body)
		}
		if got.Path != path || resp.Header.Get(ReplicaHeader) != got.Replica {
			t.Errorf("%s: replica saw %s, %s = %q, want the path and %q", path, got.Path, ReplicaHeader, resp.Header.Get(ReplicaHeader), got.Replica)
		}
		if st, want := resp.Header.Get("Server-Timing"), `batch;desc=1, route;desc="`+got.Replica+`"`; !strings.HasSuffix(st, want) {
			t.Errorf("%s: Server-Timing %q, want the replica's with %s", path, st, want)
		}
	}
	if a.hits.Load() == 0 || b.hits.Load() == 0 {
		t.Errorf("round-robin: %d and %d requests, want both used", a.hits.Load(), b.hits.Load())
	}
	// GET /v2/health/ready passes through too; a GET on a POST route is 405.
	resp, err := http.Get(tr.URL + "/v2/health/ready")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("GET /v2/health/ready: %v %v", resp, err)
	}
	resp, err = http.Get(tr.URL + "/v1/completions")
	if err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /v1/completions: %v %v, want 405", resp, err)
	}
}

func TestForwardsHeadersAndTheShrinkingDeadline(t *testing.T) {
	a := newFake(t)
	tr := startRouterOn(t, server.Config{Timeout: 10 * time.Second}, Config{}, a)
	tr.post(t, "/batched", `{}`, "Authorization", "Bearer k", "Connection", "X-Drop", "X-Drop", "1", "X-Request-Timeout", "2s")
	if got := a.lastHeader("Authorization"); got != "Bearer k" {
		t.Errorf("Authorization %q, want passed on", got)
	}
	if got := a.lastHeader("X-Drop"); got != "" {
		t.Errorf("a header named in Connection was passed on: %q", got)
	}
	if got := a.lastHeader("X-Forwarded-For"); got != "127.0.0.1" {
		t.Errorf("X-Forwarded-For %q, want 127.0.0.1", got)
	}
	left, err := strconv.ParseFloat(a.lastHeader("X-Request-Timeout"), 64)
	if err != nil || left <= 1.9 || left >= 2 {
		t.Errorf("X-Request-Timeout at the replica %q, want just under 2s", a.lastHeader("X-Request-Timeout"))
	}
	tr.post(t, "/batched", `{}`)
	if left, _ := strconv.ParseFloat(a.lastHeader("X-Request-Timeout"), 64); left <= 9.9 || left >= 10 {
		t.Errorf("X-Request-Timeout at the replica %v, want just under the router's 10s", left)
	}
	resp, body := tr.post(t, "/batched", `{}`, "X-Request-Timeout", "soon")
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "bad_timeout") {
		t.Errorf("a bad X-Request-Timeout: %d %s, want 400 bad_timeout", resp.StatusCode, body)
	}
}

func TestBodiesAreBounded(t *testing.T) {
	a := newFake(t)
	tr := startRouterOn(t, server.Config{MaxBody: 1000}, Config{}, a)
	resp, body := tr.post(t, "/v1/completions", `{"prompt": "`+strings.Repeat("x", 1000)+`"}`)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(body, "body_too_large") {
		t.Errorf("a body over the limit: %d %s, want 413", resp.StatusCode, body)
	}
	if a.hits.Load() != 0 {
		t.Error("a body over the limit reached a replica")
	}
	// Without a Content-Length (chunked), the same.
	pr, pw := io.Pipe()
	go func() { pw.Write([]byte(strings.Repeat("y", 2000))); pw.Close() }()
	r, err := http.Post(tr.URL+"/batched", "text/plain", pr)
	if err != nil || r.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("a chunked body over the limit: %v %v, want 413", r, err)
	}
}

func TestNoReplicaReadyIs503AtOnce(t *testing.T) {
	a, b := newFake(t), newFake(t)
	a.ready.Store(false)
	b.ready.Store(false)
	tr := startRouter(t, Config{}, a, b)
	start := time.Now()
	resp, body := tr.post(t, "/v1/completions", `{"prompt": "hi"}`)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, `"code":"no_replica"`) ||
		!strings.Contains(body, "no replica is ready (2 known: 2 down)") || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("no replica ready: %d %s (Retry-After %q), want 503 no_replica naming the states", resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the 503 took %v", d)
	}
	if err := tr.Ready(); err == nil {
		t.Error("Ready() = nil with no replica ready")
	}
	b.ready.Store(true)
	eventually(t, "a replica turns ready", func() bool { return tr.Ready() == nil })
	if resp, _ := tr.post(t, "/v1/completions", `{}`); resp.StatusCode != http.StatusOK {
		t.Errorf("with one replica ready: %d", resp.StatusCode)
	}
}

func TestRetriesOnlyRefusalsAndUnreachableReplicas(t *testing.T) {
	for _, tc := range []struct {
		name       string
		status     int  // what replica a answers; 0: it closes the connection without an answer
		unreached  bool // a is not listening
		strict     bool // Config.StrictRetries
		retried    bool
		wantStatus int
	}{
		{"a crash before the answer is retried", 0, false, false, true, 200},
		{"strictly, a crash before the answer is not", 0, false, true, false, 502},
		{"503 is retried", http.StatusServiceUnavailable, false, false, true, 200},
		{"429 is retried", http.StatusTooManyRequests, false, true, true, 200},
		{"a refused connection is retried", 0, true, true, true, 200},
		{"500 is not", http.StatusInternalServerError, false, false, false, 500},
		{"504 is not", http.StatusGatewayTimeout, false, false, false, 504},
		{"400 is not", http.StatusBadRequest, false, false, false, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newFake(t), newFake(t)
			a.setHandler(func(w http.ResponseWriter, r *http.Request) {
				if tc.status == 0 {
					panic(http.ErrAbortHandler) // the connection closes, no answer
				}
				w.Header().Set("Retry-After", "3")
				w.WriteHeader(tc.status)
				io.WriteString(w, `{"error":{"code":"from_a"}}`)
			})
			tr := startRouter(t, Config{Policy: Hash, StrictRetries: tc.strict}, a, b)
			if tc.unreached {
				a.Close()
			}
			key := keyFor(t, tr, a)
			resp, body := tr.post(t, "/v1/completions", `{}`, DefaultKeyHeader, key)
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("answer %d %s, want %d", resp.StatusCode, body, tc.wantStatus)
			}
			want := a.name()
			if tc.retried {
				want = b.name()
			}
			if got := resp.Header.Get(ReplicaHeader); got != want {
				t.Errorf("answered by %s, want %s", got, want)
			}
			if tc.retried != (b.hits.Load() == 1) {
				t.Errorf("b got %d requests; retried %v", b.hits.Load(), tc.retried)
			}
		})
	}
}

// keyFor returns a routing key whose home is f, asked of the router's
// hash ring without sending a request.
func keyFor(t *testing.T, tr *testRouter, f *fake) string {
	t.Helper()
	home := tr.replica(f)
	for _, k := range keys(1000) {
		if r, _ := tr.picker.Pick(&Request{Key: k}, tr.Replicas()); r == home {
			return k
		}
	}
	t.Fatal("no key's home is the replica")
	return ""
}

func TestEveryReplicaRefusingPassesTheLastRefusalOn(t *testing.T) {
	a, b := newFake(t), newFake(t)
	for _, f := range []*fake{a, b} {
		f.setHandler(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, `{"error":{"code":"queue_full"}}`)
		})
	}
	tr := startRouter(t, Config{}, a, b)
	resp, body := tr.post(t, "/batched", `{}`)
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, "queue_full") || resp.Header.Get("Retry-After") != "7" {
		t.Errorf("all refusing: %d %s Retry-After %q, want the replicas' 429", resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
	if a.hits.Load()+b.hits.Load() != 2 {
		t.Errorf("%d requests to replicas, want 2 (each tried once)", a.hits.Load()+b.hits.Load())
	}
	// Attempts bounds the tries.
	c := newFake(t)
	c.setHandler(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTooManyRequests) })
	tr1 := startRouter(t, Config{Attempts: 1}, c, newFake(t))
	tr1.post(t, "/batched", `{}`)
	tr1.post(t, "/batched", `{}`)
	if c.hits.Load() != 1 {
		t.Errorf("with 1 attempt, the refusing replica got %d of 2 requests, want 1 (round-robin, no retry)", c.hits.Load())
	}
}

// sse writes n events, each when next says so, then [DONE].
func sseHandler(n int, next <-chan struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		for i := range n {
			select {
			case <-next:
			case <-r.Context().Done():
				return
			}
			fmt.Fprintf(w, "data: {\"i\":%d}\n\n", i)
			w.(http.Flusher).Flush()
		}
		io.WriteString(w, "data: [DONE]\n\n")
	}
}

func TestStreamsPassThroughEventByEvent(t *testing.T) {
	a := newFake(t)
	next := make(chan struct{})
	a.setHandler(sseHandler(5, next))
	tr := startRouter(t, Config{}, a)
	resp, err := http.Post(tr.URL+"/v1/completions", "application/json", strings.NewReader(`{"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Type") != "text/event-stream" || resp.Header.Get(ReplicaHeader) != a.name() {
		t.Errorf("headers %v", resp.Header)
	}
	rd := bufio.NewReader(resp.Body)
	for i := range 5 {
		next <- struct{}{} // the replica sends event i only now
		got := make(chan string, 1)
		go func() {
			line, _ := rd.ReadString('\n')
			rd.ReadString('\n')
			got <- line
		}()
		select {
		case line := <-got:
			if want := fmt.Sprintf("data: {\"i\":%d}\n", i); line != want {
				t.Fatalf("event %d: %q, want %q", i, line, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("event %d did not reach the client before the next was sent: the router buffers", i)
		}
	}
	rest, _ := io.ReadAll(rd)
	if string(rest) != "data: [DONE]\n\n" {
		t.Errorf("stream ended with %q", rest)
	}
}

func TestEventsSplitAcrossReadsAreJoined(t *testing.T) {
	a := newFake(t)
	a.setHandler(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		for _, part := range []string{"data: {\"a\":", "1}\r\n", "\r\n", ": comment\n\ndata: [DO", "NE]\n\n"} {
			io.WriteString(w, part)
			w.(http.Flusher).Flush()
			time.Sleep(2 * time.Millisecond)
		}
	})
	tr := startRouter(t, Config{}, a)
	_, body := tr.post(t, "/v1/completions", `{}`)
	if want := "data: {\"a\":1}\r\n\r\n: comment\n\ndata: [DONE]\n\n"; body != want {
		t.Errorf("stream %q, want %q", body, want)
	}
}

func TestABrokenStreamEndsWithAnErrorEventAndIsNotRetried(t *testing.T) {
	a, b := newFake(t), newFake(t)
	a.setHandler(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"i\":0}\n\ndata: {\"half")
		w.(http.Flusher).Flush()
		time.Sleep(10 * time.Millisecond)
		panic(http.ErrAbortHandler) // the replica dies mid-stream
	})
	tr := startRouter(t, Config{Policy: Hash}, a, b)
	resp, body := tr.post(t, "/v1/completions", `{"stream":true}`, DefaultKeyHeader, keyFor(t, tr, a))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	events := strings.Split(strings.TrimSuffix(body, "\n\n"), "\n\n")
	if len(events) != 3 || events[0] != `data: {"i":0}` || !strings.Contains(events[1], `"code":"upstream_failed"`) || events[2] != "data: [DONE]" {
		t.Errorf("stream %q, want the whole event, an error event (no half event), then [DONE]", body)
	}
	if b.hits.Load() != 0 {
		t.Error("a stream that started was retried on another replica")
	}
}

func TestAClientThatLeavesCancelsTheReplicasRequest(t *testing.T) {
	for _, stream := range []bool{false, true} {
		a := newFake(t)
		started, cancelled := make(chan struct{}), make(chan struct{})
		a.setHandler(func(w http.ResponseWriter, r *http.Request) {
			if stream {
				w.Header().Set("Content-Type", "text/event-stream")
				io.WriteString(w, "data: {}\n\n")
				w.(http.Flusher).Flush()
			}
			close(started)
			<-r.Context().Done()
			close(cancelled)
		})
		tr := startRouter(t, Config{}, a)
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, tr.URL+"/v1/completions", strings.NewReader(`{}`))
		go func() {
			<-started
			if stream {
				time.Sleep(10 * time.Millisecond) // the client has the first event
			}
			cancel()
		}()
		if resp, err := http.DefaultClient.Do(req); err == nil {
			io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		select {
		case <-cancelled:
		case <-time.After(2 * time.Second):
			t.Fatalf("stream %v: the replica's request was not cancelled within 2s of the client leaving", stream)
		}
		eventually(t, "in flight back to 0", func() bool { return tr.replica(a).InFlight() == 0 })
	}
}

func TestASlowReaderStallsNoOtherStream(t *testing.T) {
	a := newFake(t)
	big := strings.Repeat("x", 16<<10)
	a.setHandler(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		n, _ := strconv.Atoi(r.Header.Get("X-Events"))
		for i := 0; i < n && r.Context().Err() == nil; i++ {
			fmt.Fprintf(w, "data: %s\n\n", big)
			w.(http.Flusher).Flush()
		}
		io.WriteString(w, "data: [DONE]\n\n")
	})
	tr := startRouter(t, Config{WriteTimeout: 500 * time.Millisecond}, a)
	// A client that never reads a stream of 64 MiB: its connection's
	// buffers fill.
	conn, err := net.Dial("tcp", strings.TrimPrefix(tr.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Events: 4096\r\nContent-Length: 2\r\n\r\n{}")
	eventually(t, "the slow reader's stream starts", func() bool { return tr.replica(a).InFlight() == 1 })
	// Meanwhile other streams run to their end.
	var wg sync.WaitGroup
	var ok atomic.Int32
	for range 4 {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, tr.URL+"/v1/completions", strings.NewReader(`{}`))
			req.Header.Set("X-Events", "64")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.HasSuffix(string(b), "data: [DONE]\n\n") {
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	if ok.Load() != 4 {
		t.Errorf("%d of 4 streams beside a slow reader completed", ok.Load())
	}
	// The slow reader is cut after the write timeout, and its request to
	// the replica cancelled.
	eventually(t, "the slow reader's request ends", func() bool { return tr.replica(a).InFlight() == 0 })
}

func TestModelsAreMergedAcrossReplicas(t *testing.T) {
	a, b := newFake(t), newFake(t)
	list := func(ids ...string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			var data []string
			for _, id := range ids {
				data = append(data, fmt.Sprintf(`{"id":%q,"object":"model","owned_by":%q}`, id, r.Host))
			}
			fmt.Fprintf(w, `{"object":"list","data":[%s]}`, strings.Join(data, ","))
		}
	}
	a.setHandler(list("llama", "qwen"))
	b.setHandler(list("qwen", "phi"))
	tr := startRouter(t, Config{}, a, b)
	resp, err := http.Get(tr.URL + "/static/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Object string
		Data   []struct{ ID string }
	}
	json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	var ids []string
	for _, d := range got.Data {
		ids = append(ids, d.ID)
	}
	if got.Object != "list" || len(ids) != 3 || strings.Join(ids, ",") == "" || !strings.Contains(strings.Join(ids, ","), "phi") {
		t.Errorf("merged models %q %v, want llama, qwen, phi once each", got.Object, ids)
	}
	if a.lastHeader("X-Request-Timeout") != "" || len(a.seen) == 0 || a.seen[0].URL.Path != "/static/v1/models" {
		t.Errorf("asked a for %v", a.seen)
	}
	resp, _ = http.Get(tr.URL + "/v1/models/phi")
	var one struct{ ID string }
	json.NewDecoder(resp.Body).Decode(&one)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || one.ID != "phi" {
		t.Errorf("GET /v1/models/phi: %d %+v", resp.StatusCode, one)
	}
	resp, _ = http.Get(tr.URL + "/v1/models/gpt-5")
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("an unknown model: %d, want 404", resp.StatusCode)
	}
}
