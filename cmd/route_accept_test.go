//go:build linux

package cmd

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferhq/infer/route"
	"github.com/inferhq/infer/server/metric"
)

// The acceptance measurements of infer route (issue 23), run by
// scripts/accept-route.sh with INFER_ROUTE_ACCEPT=1; they print ACCEPT
// lines.

func acceptRouteOnly(t *testing.T) {
	if os.Getenv("INFER_ROUTE_ACCEPT") != "1" {
		t.Skip("acceptance measurement: set INFER_ROUTE_ACCEPT=1 (scripts/accept-route.sh)")
	}
}

var simEncoder = []string{"serve", "--model", "sim", "--sim-fixed", "1ms", "--sim-per-item", "0.01ms", "--max-latency", "2ms"}

// TestAcceptRouteHash: 10,000 requests on 1,000 keys hashed on
// X-Routing-Key over 2 sim replicas land on their key's replica every time
// (one client, then 8 at once), and removing a replica moves only its own
// keys.
func TestAcceptRouteHash(t *testing.T) {
	acceptRouteOnly(t)
	a := startInfer(t, freeAddr(t), simEncoder...)
	b := startInfer(t, freeAddr(t), simEncoder...)
	balance := route.DefaultBalance
	if s := os.Getenv("INFER_ROUTE_HASH_BALANCE"); s != "" {
		if _, err := fmt.Sscan(s, &balance); err != nil {
			t.Fatalf("INFER_ROUTE_HASH_BALANCE=%q: %v", s, err)
		}
	}
	_, base := hostRouter(t, route.Config{Policy: route.Hash, Balance: balance}, a, b)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	send := func(key string) string {
		req, _ := http.NewRequest(http.MethodPost, base+"/batched", strings.NewReader("Paris is the [MASK] of France."))
		req.Header.Set(route.DefaultKeyHeader, key)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		return resp.Header.Get(route.ReplicaHeader)
	}
	const keys, requests = 1000, 10000
	for _, clients := range []int{1, 8} {
		var mu sync.Mutex
		seen := map[string]map[string]int{} // key → replica → requests
		var next atomic.Int64
		var wg sync.WaitGroup
		for range clients {
			wg.Go(func() {
				for i := next.Add(1) - 1; i < requests; i = next.Add(1) - 1 {
					key := fmt.Sprintf("tenant-%d", rand.IntN(keys))
					rep := send(key)
					mu.Lock()
					if seen[key] == nil {
						seen[key] = map[string]int{}
					}
					seen[key][rep]++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		stayed := 0
		for _, reps := range seen {
			most := 0
			for _, n := range reps {
				most = max(most, n)
			}
			stayed += most
		}
		acceptLine(t, "hash %d requests on %d keys, %d client(s): %.2f%% on their key's replica (the rest moved past the load bound, c=%.2f)",
			requests, len(seen), clients, 100*float64(stayed)/requests, balance)
		if clients == 1 && stayed != requests {
			t.Errorf("one client: %d of %d requests on their key's replica, want all", stayed, requests)
		}
	}
	// Remove b (the admin API drains it): only b's keys move.
	home := map[string]string{}
	for i := range keys {
		key := fmt.Sprintf("tenant-%d", i)
		home[key] = send(key)
	}
	req, _ := http.NewRequest(http.MethodPost, base+"/admin/replicas/"+b.addr+"/drain", nil)
	req.Header.Set("Authorization", "Bearer "+routeAdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("drain: %v %v", resp, err)
	}
	resp.Body.Close()
	moved, wrong := 0, 0
	for key, h := range home {
		if now := send(key); now != h {
			moved++
			if h != b.addr {
				wrong++
			}
		}
	}
	acceptLine(t, "hash remove 1 of 2 replicas: %d of %d keys moved (%.1f%%, limit 1/N + 5%% = 55%%), %d of them from the replica that stayed",
		moved, keys, 100*float64(moved)/keys, wrong)
	if wrong > 0 || moved > keys/2+keys/20 {
		t.Errorf("%d keys moved, %d of them from the replica that stayed", moved, wrong)
	}
}

// streamTokens runs clients closed-loop streams of 64 tokens through base
// for d and returns the tokens (content events) received.
func streamTokens(t *testing.T, base string, clients int, d time.Duration) int64 {
	var tokens atomic.Int64
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	body := `{"prompt": "Once upon a time", "max_tokens": 64, "ignore_eos": true, "stream": true}`
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for time.Now().Before(end) {
				resp, err := client.Post(base+"/v1/completions", "application/json", strings.NewReader(body))
				if err != nil {
					t.Error(err)
					return
				}
				sc := bufio.NewScanner(resp.Body)
				for sc.Scan() {
					if l := sc.Text(); strings.HasPrefix(l, "data: {") {
						tokens.Add(1)
					}
				}
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	return tokens.Load()
}

// TestAcceptRouteStreamCPU: the CPU infer route and HAProxy spend per
// streamed token, round-robin over 2 sim-lm replicas, A B A B.
func TestAcceptRouteStreamCPU(t *testing.T) {
	acceptRouteOnly(t)
	haproxy, err := exec.LookPath("haproxy")
	if err != nil {
		t.Skip("haproxy missing: apt-get install -y haproxy")
	}
	a := startInfer(t, freeAddr(t), "serve", "--model", "sim-lm")
	b := startInfer(t, freeAddr(t), "serve", "--model", "sim-lm")
	raddr, haddr := freeAddr(t), freeAddr(t)
	router := startInfer(t, raddr, "route", "--upstream", "http://"+a.addr+",http://"+b.addr)
	cfg := fmt.Sprintf(`global
	maxconn 4000
defaults
	mode http
	timeout connect 2s
	timeout client 60s
	timeout server 60s
frontend f
	bind %s
	default_backend b
	monitor-uri /readyz
backend b
	balance roundrobin
	http-reuse always
	server a %s
	server b %s
`, haddr, a.addr, b.addr)
	path := t.TempDir() + "/haproxy.cfg"
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	hp := exec.Command(haproxy, "-db", "-f", path)
	if err := hp.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hp.Process.Kill(); hp.Wait() })
	for !ready("http://" + haddr) {
		time.Sleep(20 * time.Millisecond)
	}
	clients := envIntOr(t, "INFER_ROUTE_STREAMS", 32)
	d := time.Duration(envIntOr(t, "INFER_ROUTE_SECONDS", 5)) * time.Second
	var per [2][]float64
	for round := range 3 {
		for i, f := range []struct {
			name string
			base string
			pid  int
		}{{"infer route", "http://" + raddr, router.cmd.Process.Pid}, {"haproxy", "http://" + haddr, hp.Process.Pid}} {
			c0 := cpuTime(f.pid)
			n := streamTokens(t, f.base, clients, d)
			c := cpuTime(f.pid) - c0
			us := float64(c.Microseconds()) / float64(n)
			per[i] = append(per[i], us)
			acceptLine(t, "stream CPU round %d, %s: %d tokens in %v over %d streams, front CPU %v: %.1f us/token", round+1, f.name, n, d, clients, c, us)
		}
	}
	slices.Sort(per[0])
	slices.Sort(per[1])
	acceptLine(t, "stream CPU per token, medians of 3: infer route %.1f us, haproxy %.1f us: ratio %.2f (target at most 2)", per[0][1], per[1][1], per[0][1]/per[1][1])
}

// commonWords are words GPT-2's BPE keeps whole with their leading space:
// a context of n of them is about n tokens.
var commonWords = strings.Fields("the of and to in is was for on that with as by at from his her he she it they we you are were be this which or an had not but what all when there can more one so if out about up into them some could would time only new very")

// tenantContext is tenant i's shared context of about n tokens.
func tenantContext(i, n int) string {
	r := rand.New(rand.NewPCG(uint64(i), 7))
	var b strings.Builder
	fmt.Fprintf(&b, "Tenant %d:", i)
	for range n - 3 {
		b.WriteByte(' ')
		b.WriteString(commonWords[r.IntN(len(commonWords))])
	}
	return b.String()
}

// llmdResult is one policy's figures.
type llmdResult struct {
	tokensPerSec, reqPerSec float64
	ttft                    []time.Duration
	share                   map[string]int
}

// llmdRun runs the workload through base: a closed loop of clients streams
// (rate 0) or Poisson arrivals at rate a second, for d.
func llmdRun(t *testing.T, base string, contexts []string, clients int, rate float64, d time.Duration) llmdResult {
	var mu sync.Mutex
	res := llmdResult{share: map[string]int{}}
	var tokens, done atomic.Int64
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	one := func(r *rand.Rand, tenant int) {
		q := make([]string, 32)
		for i := range q {
			q[i] = commonWords[r.IntN(len(commonWords))]
		}
		body, _ := json.Marshal(map[string]any{"prompt": contexts[tenant] + " Question:" + " " + strings.Join(q, " ") + "?",
			"max_tokens": 64, "ignore_eos": true, "stream": true})
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/completions", strings.NewReader(string(body)))
		req.Header.Set(route.DefaultKeyHeader, fmt.Sprintf("tenant-%d", tenant))
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			t.Error(err)
			return
		}
		defer resp.Body.Close()
		var first time.Duration
		n := 0
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if l := sc.Text(); strings.HasPrefix(l, "data: {\"id\"") {
				if n == 0 {
					first = time.Since(start)
				}
				n++
			}
		}
		tokens.Add(int64(n))
		if n > 0 {
			done.Add(1)
			mu.Lock()
			res.ttft = append(res.ttft, first)
			res.share[resp.Header.Get(route.ReplicaHeader)]++
			mu.Unlock()
		}
	}
	start := time.Now()
	end := start.Add(d)
	var wg sync.WaitGroup
	if rate == 0 {
		for c := range clients {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(c), 1))
				for time.Now().Before(end) {
					one(r, c%len(contexts))
				}
			})
		}
	} else {
		r := rand.New(rand.NewPCG(9, 9))
		for at := start; at.Before(end); at = at.Add(time.Duration(r.ExpFloat64() / rate * float64(time.Second))) {
			time.Sleep(time.Until(at))
			tenant := r.IntN(len(contexts))
			seed := r.Uint64()
			wg.Go(func() { one(rand.New(rand.NewPCG(seed, 2)), tenant) })
		}
	}
	wg.Wait()
	el := time.Since(start).Seconds()
	res.tokensPerSec, res.reqPerSec = float64(tokens.Load())/el, float64(done.Load())/el
	slices.Sort(res.ttft)
	return res
}

// cacheTokens sums the replicas' prefix cache counters: prompt tokens
// found cached, and prompt tokens looked up.
func cacheTokens(reps []*child) (hits, queries float64) {
	for _, r := range reps {
		resp, err := http.Get("http://" + r.addr + "/metrics")
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			name, v, ok := strings.Cut(sc.Text(), " ")
			var f float64
			if !ok || strings.HasPrefix(name, "#") {
				continue
			}
			fmt.Sscan(v, &f)
			switch {
			case strings.HasPrefix(name, metric.GenPrefixCacheHits):
				hits += f
			case strings.HasPrefix(name, metric.GenPrefixCacheQueries):
				queries += f
			}
		}
		resp.Body.Close()
	}
	return hits, queries
}

// picksByReason sums infer_route_picks_total by reason, read from the
// router host's /metrics.
func picksByReason(t *testing.T, base string) string {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	by := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if !ok || !strings.HasPrefix(name, "infer_route_picks_total{") {
			continue
		}
		_, reason, _ := strings.Cut(name, `reason="`)
		reason, _, _ = strings.Cut(reason, `"`)
		var f float64
		fmt.Sscan(v, &f)
		by[reason] += f
	}
	var parts []string
	for _, r := range []string{"policy", "affinity", "fallback", "retry"} {
		if by[r] > 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f", r, by[r]))
		}
	}
	return strings.Join(parts, ", ")
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return ds[min(len(ds)-1, int(math.Ceil(q*float64(len(ds))))-1)]
}

// TestAcceptRouteLLMD is the llm-d experiment in miniature: 4 sim-lm
// replicas (--max-seqs 32 --kv-tokens 16384), 16 tenants each with a
// 3,072-token context, 32-token questions, 64 tokens out, the tenant in
// X-Routing-Key; per policy, a closed loop of 128 streams, then Poisson
// arrivals at 70% of round-robin's closed-loop rate. Without prefix
// caching in the engine, every policy computes every prompt in full: the
// figures then show the router's balance and affinity, not a cache's
// gain.
func TestAcceptRouteLLMD(t *testing.T) {
	acceptRouteOnly(t)
	d := time.Duration(envIntOr(t, "INFER_ROUTE_SECONDS", 20)) * time.Second
	clients := envIntOr(t, "INFER_ROUTE_STREAMS", 128)
	contexts := make([]string, 16)
	for i := range contexts {
		contexts[i] = tenantContext(i, 3072)
	}
	extra := strings.Fields(os.Getenv("INFER_ROUTE_SERVE_FLAGS")) // e.g. the prefix cache's flag
	args := append([]string{"serve", "--model", "sim-lm", "--max-seqs", "32", "--kv-tokens", "16384"}, extra...)
	// INFER_ROUTE_POLICIES runs some policies only (round-robin's closed-loop
	// rate, which sets the Poisson rate, is then INFER_ROUTE_RR_RATE);
	// INFER_ROUTE_BALANCE_ABS and _REL set prefix's balance rule.
	policies := []route.Policy{route.RoundRobin, route.LeastRequest, route.PowerOfTwo, route.Hash, route.Prefix, route.Scored}
	if s := os.Getenv("INFER_ROUTE_POLICIES"); s != "" {
		policies = nil
		for f := range strings.SplitSeq(s, ",") {
			p, err := route.ParsePolicy(f)
			if err != nil {
				t.Fatal(err)
			}
			policies = append(policies, p)
		}
	}
	var rrRate float64
	fmt.Sscan(os.Getenv("INFER_ROUTE_RR_RATE"), &rrRate)
	var prefix route.PrefixConfig
	fmt.Sscan(os.Getenv("INFER_ROUTE_BALANCE_ABS"), &prefix.BalanceAbs)
	fmt.Sscan(os.Getenv("INFER_ROUTE_BALANCE_REL"), &prefix.BalanceRel)
	for _, p := range policies {
		reps := make([]*child, 4)
		for i := range reps {
			reps[i] = startInfer(t, freeAddr(t), args...)
		}
		_, base := hostRouter(t, route.Config{Policy: p, Prefix: prefix}, reps...)
		h0, q0 := cacheTokens(reps)
		closed := llmdRun(t, base, contexts, clients, 0, d)
		h1, q1 := cacheTokens(reps)
		if p == route.RoundRobin {
			rrRate = closed.reqPerSec
		}
		if rrRate == 0 {
			t.Fatal("no round-robin rate for the Poisson arrivals: run round-robin first, or set INFER_ROUTE_RR_RATE")
		}
		open := llmdRun(t, base, contexts, clients, 0.7*rrRate, d)
		var shares []string
		for _, r := range reps {
			shares = append(shares, fmt.Sprint(closed.share[r.addr]))
		}
		acceptLine(t, "llmd %-13s closed loop %d streams: %.0f tokens/s, %.2f req/s, TTFT p50 %v p90 %v, prompt tokens cached %.1f%%; share %s; picks %s; Poisson %.2f req/s: TTFT p50 %v p90 %v",
			p, clients, closed.tokensPerSec, closed.reqPerSec, quantile(closed.ttft, 0.5).Round(time.Millisecond), quantile(closed.ttft, 0.9).Round(time.Millisecond),
			100*(h1-h0)/max(1, q1-q0), strings.Join(shares, "/"), picksByReason(t, base), open.reqPerSec, quantile(open.ttft, 0.5).Round(time.Millisecond), quantile(open.ttft, 0.9).Round(time.Millisecond))
		for _, r := range reps {
			r.kill()
		}
	}
}
