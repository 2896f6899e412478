package route

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/inferhq/infer/server"
)

// BenchmarkProxy sends small encoder requests through a router to a
// replica in the same process, 8 at a time: client, router and replica
// share the CPU, so compare runs, not absolutes (go test -bench Proxy
// -cpuprofile to see the router's part).
func BenchmarkProxy(b *testing.B) {
	for _, p := range []Policy{RoundRobin, Hash, Prefix} {
		b.Run(string(p), func(b *testing.B) {
			t := &testing.T{}
			a := newFake(t)
			a.setHandler(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, `{"model":"sim","outputs":[{"label":"LABEL_1","score":0.019876}]}`)
			})
			defer a.Close()
			tr := startRouter(t, Config{Policy: p}, a)
			defer func() { tr.cancel(); <-tr.done }()
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			b.ReportAllocs()
			b.SetParallelism(4)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req, _ := http.NewRequest(http.MethodPost, tr.URL+"/batched", strings.NewReader(`{"inputs": ["Paris is the [MASK] of France."]}`))
					req.Header.Set(DefaultKeyHeader, "tenant-7")
					resp, err := client.Do(req)
					if err != nil {
						b.Fatal(err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		})
	}
}

// BenchmarkProxyHop measures the router's own part of a request: one
// small encoder request at a time, over one kept-alive connection, from a
// client and to a replica that each only write canned bytes and read
// what comes back, so that nearly every allocation and most of the time
// per op are the router's (net/http's server, the proxying, the
// connection to the replica). Compare runs A B A B (-count 6).
func BenchmarkProxyHop(b *testing.B) {
	for _, p := range []Policy{RoundRobin, LeastRequest, Hash} {
		b.Run(string(p), func(b *testing.B) {
			t := &testing.T{}
			up := rawReplica(b, `{"model":"sim","outputs":[{"label":"LABEL_1","score":0.019876}]}`)
			u, err := ParseUpstream(up)
			if err != nil {
				b.Fatal(err)
			}
			tr := startRouterOn(t, server.Config{}, Config{Policy: p, Upstreams: []Upstream{u}})
			defer func() { tr.cancel(); <-tr.done }()
			c, err := net.Dial("tcp", strings.TrimPrefix(tr.URL, "http://"))
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			body := `Paris is the [MASK] of France.`
			req := []byte("POST /batched HTTP/1.1\r\nHost: router\r\nContent-Type: text/plain\r\nX-Routing-Key: tenant-7\r\nContent-Length: " +
				strconv.Itoa(len(body)) + "\r\n\r\n" + body)
			br := bufio.NewReader(c)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := c.Write(req); err != nil {
					b.Fatal(err)
				}
				if code, err := readRawAnswer(br); err != nil || code != http.StatusOK {
					b.Fatalf("answer %d, %v", code, err)
				}
			}
		})
	}
}

// rawReplica is a replica that answers every request (health checks
// included) 200 with answer, reading only the request's head and its
// Content-Length of body; it returns its URL.
func rawReplica(b *testing.B, answer string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	resp := []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(answer)) + "\r\n\r\n" + answer)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					n, err := readRawHead(br)
					if err != nil {
						return
					}
					if _, err := br.Discard(n); err != nil {
						return
					}
					if _, err := c.Write(resp); err != nil {
						return
					}
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// readRawHead reads a message's head and returns its Content-Length (0
// when it has none).
func readRawHead(br *bufio.Reader) (int, error) {
	n := 0
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		if len(line) <= 2 {
			return n, nil
		}
		if k, v, ok := bytes.Cut(line, []byte(":")); ok && bytes.EqualFold(k, []byte("Content-Length")) {
			n, _ = strconv.Atoi(string(bytes.TrimSpace(v)))
		}
	}
}

// readRawAnswer reads an answer of known length and returns its status.
func readRawAnswer(br *bufio.Reader) (int, error) {
	status, err := br.Peek(12)
	if err != nil {
		return 0, err
	}
	code, _ := strconv.Atoi(string(status[9:12]))
	n, err := readRawHead(br)
	if err != nil {
		return 0, err
	}
	_, err = br.Discard(n)
	return code, err
}
