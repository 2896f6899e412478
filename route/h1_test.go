package route

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// countingServer is an HTTP server that answers "ok" (or with h) and
// counts the connections opened to it.
func countingServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	var conns atomic.Int64
	if h == nil {
		h = func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }
	}
	s := httptest.NewUnstartedServer(h)
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s, &conns
}

// h1Get sends a GET through tr and returns the body read to its end
// (unless keepOpen) and closed.
func h1Get(t *testing.T, tr http.RoundTripper, url string, readAll bool) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("RoundTrip(%s): %v", url, err)
	}
	var b []byte
	if readAll {
		b, err = io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("read answer: %v", err)
		}
	}
	resp.Body.Close()
	return resp, string(b)
}

func TestH1ReusesConnections(t *testing.T) {
	s, conns := countingServer(t, nil)
	tr := newH1(nil, time.Second)
	for i := range 20 {
		if _, body := h1Get(t, tr, s.URL+"/x", true); body != "ok" {
			t.Fatalf("answer %d = %q, want ok", i, body)
		}
	}
	if got := conns.Load(); got != 1 {
		t.Errorf("20 requests one after another opened %d connections, want 1", got)
	}
}

func TestH1DoesNotReuseUnfinishedAnswers(t *testing.T) {
	s, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, strings.Repeat("x", 100<<10))
	})
	tr := newH1(nil, time.Second)
	h1Get(t, tr, s.URL, false) // closed before its end
	h1Get(t, tr, s.URL, true)
	h1Get(t, tr, s.URL, true)
	if got := conns.Load(); got != 2 {
		t.Errorf("connections = %d, want 2 (the unfinished answer's connection closed, the next one reused)", got)
	}
}

func TestH1HonoursConnectionClose(t *testing.T) {
	s, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		io.WriteString(w, "ok")
	})
	tr := newH1(nil, time.Second)
	h1Get(t, tr, s.URL, true)
	h1Get(t, tr, s.URL, true)
	if got := conns.Load(); got != 2 {
		t.Errorf("connections = %d, want 2 (Connection: close is not reused)", got)
	}
}

// rawServer accepts connections and serves each with serve.
func rawServer(t *testing.T, serve func(c net.Conn)) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); serve(c) }()
		}
	}()
	return "http://" + ln.Addr().String()
}

// readHead reads a request's head from br.
func readHead(br *bufio.Reader) error {
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return err
		}
		if line == "\r\n" {
			return nil
		}
	}
}

func TestH1SkipsAConnectionTheReplicaClosedWhileIdle(t *testing.T) {
	closed := make(chan struct{}, 10)
	url := rawServer(t, func(c net.Conn) {
		// One answer per connection, then a close without Connection:
		// close, as a server whose keep-alive timeout passed does.
		if readHead(bufio.NewReader(c)) != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		c.Close()
		closed <- struct{}{}
	})
	tr := newH1(nil, time.Second)
	for i := range 3 {
		if _, body := h1Get(t, tr, url, true); body != "ok" {
			t.Fatalf("answer %d = %q, want ok", i, body)
		}
		<-closed
	}
}

func TestH1SkipsInterimAnswers(t *testing.T) {
	url := rawServer(t, func(c net.Conn) {
		if readHead(bufio.NewReader(c)) != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	})
	resp, body := h1Get(t, newH1(nil, time.Second), url, true)
	if resp.StatusCode != http.StatusOK || body != "ok" {
		t.Errorf("answer %d %q, want 200 ok", resp.StatusCode, body)
	}
}

func TestH1BoundsTheAnswersHeader(t *testing.T) {
	url := rawServer(t, func(c net.Conn) {
		if readHead(bufio.NewReader(c)) != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\n")
		for range 100 {
			if _, err := io.WriteString(c, "X-Filler: "+strings.Repeat("y", 100)+"\r\n"); err != nil {
				return
			}
		}
		io.WriteString(c, "Content-Length: 2\r\n\r\nok")
	})
	tr := newH1(nil, time.Second)
	tr.maxHeader = 4 << 10
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if resp, err := tr.RoundTrip(req); !errors.Is(err, errHeaderTooLarge) {
		if resp != nil {
			resp.Body.Close()
		}
		t.Fatalf("RoundTrip of a 10 KiB header with a 4 KiB bound: %v, want errHeaderTooLarge", err)
	}
	tr.maxHeader = 64 << 10
	if resp, body := h1Get(t, tr, url, true); resp.StatusCode != http.StatusOK || body != "ok" {
		t.Errorf("with a 64 KiB bound: %d %q, want 200 ok", resp.StatusCode, body)
	}
}

func TestH1ContextEndsTheWait(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	url := rawServer(t, func(c net.Conn) {
		readHead(bufio.NewReader(c))
		<-release // never answers
	})
	tr := newH1(nil, time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	done := make(chan error, 1)
	go func() {
		_, err := tr.RoundTrip(req)
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("RoundTrip after cancel: %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("RoundTrip still waiting 5s after its context was cancelled")
	}
}

func TestH1DialErrorIsADialError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr, nil)
	if _, err := newH1(nil, time.Second).RoundTrip(req); !isDial(err) {
		t.Errorf("RoundTrip to a closed port: %v, want a dial error (retried elsewhere)", err)
	}
}

type recordingTransport struct{ urls []string }

func (r *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r.urls = append(r.urls, req.URL.String())
	return nil, errors.New("recorded")
}

func TestH1PassesOtherSchemesOn(t *testing.T) {
	next := &recordingTransport{}
	req, _ := http.NewRequest(http.MethodGet, "https://replica.example:8443/v1/models", nil)
	newH1(next, time.Second).RoundTrip(req)
	if len(next.urls) != 1 || next.urls[0] != "https://replica.example:8443/v1/models" {
		t.Errorf("https request reached next as %v, want it once", next.urls)
	}
}

func TestH1ClosesIdleConnections(t *testing.T) {
	s, conns := countingServer(t, nil)
	tr := newH1(nil, time.Second)
	now := time.Unix(1000, 0)
	tr.now = func() time.Time { return now }
	h1Get(t, tr, s.URL, true)
	now = now.Add(30 * time.Second)
	tr.closeIdle(now.Add(-time.Minute)) // not idle that long: kept
	h1Get(t, tr, s.URL, true)
	if got := conns.Load(); got != 1 {
		t.Fatalf("connections = %d, want 1", got)
	}
	now = now.Add(2 * time.Minute)
	tr.closeIdle(now.Add(-time.Minute))
	if n := len(tr.idle); n != 0 {
		t.Fatalf("%d addresses keep idle connections after closeIdle, want 0", n)
	}
	h1Get(t, tr, s.URL, true)
	now = now.Add(tr.idleTimeout + time.Second) // too old to reuse
	h1Get(t, tr, s.URL, true)
	if got := conns.Load(); got != 3 {
		t.Errorf("connections = %d, want 3 (one after closeIdle, one after the idle timeout)", got)
	}
}

// A replica that answers before it has read the whole body (a 413 for a
// body above its own limit) has its answer passed on, as http.Transport
// does, rather than the broken write.
func TestH1PassesAnEarlyAnswerOn(t *testing.T) {
	s, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<10)); err != nil {
			http.Error(w, "too large", http.StatusRequestEntityTooLarge)
			return
		}
		io.WriteString(w, "ok")
	})
	tr := newH1(nil, time.Second)
	for range 3 {
		req, _ := http.NewRequest(http.MethodPost, s.URL, strings.NewReader(strings.Repeat("x", 8<<20)))
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatalf("RoundTrip of an 8 MiB body to a replica that takes 1 KiB: %v, want its 413", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("status %d, want 413", resp.StatusCode)
		}
	}
}
