//go:build linux

package cmd

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// sseReplica is a replica that streams X-Events events of X-Event-Bytes
// bytes, one every X-Interval, as an OpenAI server streams tokens.
func sseReplica(t *testing.T) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			io.WriteString(w, "{}")
			return
		}
		io.Copy(io.Discard, r.Body)
		n, _ := strconv.Atoi(r.Header.Get("X-Events"))
		size, _ := strconv.Atoi(r.Header.Get("X-Event-Bytes"))
		every, _ := time.ParseDuration(r.Header.Get("X-Interval"))
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		ev := []byte("data: {\"text\":\"" + strings.Repeat("x", size) + "\"}\n\n")
		for i := 0; i < n; i++ {
			if every > 0 {
				select {
				case <-time.After(every):
				case <-r.Context().Done():
					return
				}
			}
			if _, err := w.Write(ev); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
		io.WriteString(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(s.Close)
	return s
}

// vmRSS returns a process's resident set, in bytes.
func vmRSS(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// cpuTime returns the CPU time a process has used (user and system).
func cpuTime(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command's closing parenthesis: utime and stime are
	// the 12th and 13th, in clock ticks (100 a second on Linux).
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * 10 * time.Millisecond
}

// TestRouteHoldsManyStreams opens 1,000 streams through an infer route
// process (300 under the race detector) beside a client that never reads
// its stream: every stream gets every event, none waits on the slow
// reader (a stall would last its write timeout, 10s; the bound is 5s, as
// a busy machine delays events by seconds under the race detector), and the router's
// resident memory stays under 300 MiB.
func TestRouteHoldsManyStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an infer route process and opens many streams")
	}
	streams := 1000
	if raceEnabled {
		streams = 300
	}
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil && lim.Cur < lim.Max {
		lim.Cur = lim.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	if lim.Cur < uint64(4*streams+256) {
		t.Skipf("open-file limit %d: want at least %d (ulimit -n)", lim.Cur, 4*streams+256)
	}
	a, b := sseReplica(t), sseReplica(t)
	addr := freeAddr(t)
	router := startInfer(t, addr, "route", "--upstream", a.URL+","+b.URL, "--policy", "least-request")
	base := "http://" + addr

	// A client that never reads a stream of 64 MiB.
	slow, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	fmt.Fprintf(slow, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Events: 4096\r\nX-Event-Bytes: 16384\r\nContent-Length: 2\r\n\r\n{}")

	const events, every = 25, 200 * time.Millisecond
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: streams, MaxConnsPerHost: 0}}
	var wg sync.WaitGroup
	var complete, incomplete atomic.Int32
	var worstGap atomic.Int64
	var open atomic.Int32
	var peak atomic.Int64
	start := time.Now()
	for i := range streams {
		time.Sleep(time.Millisecond) // a ramp of about a second
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, base+"/v1/completions", strings.NewReader(`{"stream":true}`))
			req.Header.Set("X-Events", strconv.Itoa(events))
			req.Header.Set("X-Event-Bytes", "100")
			req.Header.Set("X-Interval", every.String())
			resp, err := client.Do(req)
			if err != nil {
				t.Errorf("stream %d: %v", i, err)
				return
			}
			defer resp.Body.Close()
			open.Add(1)
			defer open.Add(-1)
			sc := bufio.NewScanner(resp.Body)
			last, got, done := time.Now(), 0, false
			for sc.Scan() {
				line := sc.Text()
				if line == "" {
					continue
				}
				if now := time.Now(); got > 0 {
					if gap := int64(now.Sub(last)); gap > worstGap.Load() {
						worstGap.Store(gap)
					}
					last = now
				} else {
					last = now
				}
				if line == "data: [DONE]" {
					done = true
				} else {
					got++
				}
			}
			if got == events && done {
				complete.Add(1)
			} else if incomplete.Add(1) <= 3 {
				t.Logf("stream %d: %d of %d events, [DONE] %v, read error %v, status %d", i, got, events, done, sc.Err(), resp.StatusCode)
			}
		})
	}
	// The router's memory while the streams are open.
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if open.Load() > 0 {
				if rss := vmRSS(router.cmd.Process.Pid, "VmRSS"); rss > peak.Load() {
					peak.Store(rss)
				}
			}
			select {
			case <-stopSampling:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	wg.Wait()
	close(stopSampling)
	<-sampled
	hwm := vmRSS(router.cmd.Process.Pid, "VmHWM")
	t.Logf("ROUTE %d streams (+1 never read) through infer route: %d complete in %v, worst gap between events %v (sent every %v), router RSS %.0f MiB with them open, peak %.0f MiB, router CPU %v",
		streams, complete.Load(), time.Since(start).Round(time.Millisecond), time.Duration(worstGap.Load()).Round(time.Millisecond), every,
		float64(peak.Load())/(1<<20), float64(hwm)/(1<<20), cpuTime(router.cmd.Process.Pid).Round(time.Millisecond))
	if int(complete.Load()) != streams {
		t.Errorf("%d of %d streams complete", complete.Load(), streams)
	}
	if g := time.Duration(worstGap.Load()); g > 5*time.Second {
		t.Errorf("worst gap between events %v, want under 5s (they are sent every %v; the slow reader would stall a stream for its 10s write timeout)", g, every)
	}
	if !raceEnabled && hwm > 300<<20 {
		t.Errorf("router peak RSS %.0f MiB, want under 300 MiB", float64(hwm)/(1<<20))
	}
}
