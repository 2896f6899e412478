package openai_test

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/inferhq/infer/models/simlm"
	"github.com/inferhq/infer/server"
	"github.com/inferhq/infer/server/generate"
	"github.com/inferhq/infer/server/openai"
	"github.com/inferhq/infer/server/servertest"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// testServer serves sim-lm through the real server and its Service hook.
type testServer struct {
	URL string
	svc *openai.Service
}

// host configures the host (a drain of 10 s unless it says otherwise).
func startServer(t *testing.T, sim simlm.Config, cfg openai.Config, host server.Config) *testServer {
	t.Helper()
	f, err := simlm.New(sim)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := openai.New(cfg, f)
	if err != nil {
		t.Fatal(err)
	}
	if host.DrainTimeout == 0 {
		host.DrainTimeout = 10 * time.Second
	}
	srv := servertest.Start(t, host, svc)
	ts := &testServer{URL: srv.URL, svc: svc}
	return ts
}

func post(t *testing.T, url, body string, hdr ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var (
	idRE      = regexp.MustCompile(`"id":"(chat)?cmpl-[0-9a-f]{24}"`)
	createdRE = regexp.MustCompile(`"created":\d+`)
)

func normalize(s string) string {
	s = idRE.ReplaceAllString(s, `"id":"${1}cmpl-ID"`)
	return createdRE.ReplaceAllString(s, `"created":0`)
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

// The SSE wire format, byte for byte (ids and timestamps normalized).
func TestSSEWireFormatGolden(t *testing.T) {
	ts := startServer(t, simlm.Config{}, openai.Config{}, server.Config{})
	for _, tc := range []struct {
		name, path, body string
	}{
		{"completion.sse", "/v1/completions", `{"model":"sim-lm","prompt":"Once upon a time","max_tokens":5,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}`},
		{"chat.sse", "/v1/chat/completions", `{"model":"sim-lm","messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"temperature":0,"stream":true}`},
		{"completion-stop.sse", "/static/v1/completions", `{"prompt":"Say it","max_tokens":3,"temperature":0,"stream":true,"stop":["\u0000never"]}`},
		{"completion.json", "/naive/v1/completions", `{"model":"sim-lm","prompt":"Once upon a time","max_tokens":5,"temperature":0}`},
		{"chat.json", "/v1/chat/completions", `{"model":"sim-lm","messages":[{"role":"user","content":"Hi"}],"max_completion_tokens":4,"temperature":0}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(t, ts.URL+tc.path, tc.body)
			body := readAll(t, resp)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			wantType := "application/json"
			if strings.HasSuffix(tc.name, ".sse") {
				wantType = "text/event-stream"
			}
			if ct := resp.Header.Get("Content-Type"); ct != wantType {
				t.Errorf("Content-Type %q, want %q", ct, wantType)
			}
			if st := resp.Header.Get("Server-Timing"); !regexp.MustCompile(`^queue;dur=[\d.]+, ttft;dur=[\d.]+, batch;desc=\d+, cached;desc=\d+$`).MatchString(st) {
				t.Errorf("Server-Timing %q", st)
			}
			golden(t, tc.name, normalize(body))
		})
	}
}

// sse reads a stream's data payloads.
func sse(t *testing.T, r io.Reader) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

func TestErrorAfterTheStreamStarted(t *testing.T) {
	ts := startServer(t, simlm.Config{Step: 10 * time.Millisecond}, openai.Config{}, server.Config{})
	resp := post(t, ts.URL+"/v1/completions", `{"prompt":"x","max_tokens":1000,"ignore_eos":true,"stream":true}`, "X-Request-Timeout", "100ms")
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	events := sse(t, resp.Body)
	n := len(events)
	if n < 4 || events[n-1] != "[DONE]" || !strings.Contains(events[n-2], `"error":{`) || !strings.Contains(events[n-2], `"code":"deadline_exceeded"`) {
		t.Errorf("stream ends with %q, want an error event then [DONE]", events[max(0, n-2):])
	}
}

func TestBadInputGetsItsErrorWhileAValidLoadRuns(t *testing.T) {
	ts := startServer(t, simlm.Config{Step: 2 * time.Millisecond}, openai.Config{}, server.Config{MaxBody: 4096})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var mu sync.Mutex
	var bad []string
	ok := 0
	for c := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				resp := post(t, ts.URL+"/v1/completions", fmt.Sprintf(`{"prompt":"client %d request %d","max_tokens":20,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`, c, i))
				events := sse(t, resp.Body)
				resp.Body.Close()
				n := len(events)
				mu.Lock()
				if resp.StatusCode != http.StatusOK || n < 3 || events[n-1] != "[DONE]" || !strings.Contains(events[n-2], `"completion_tokens":20,`) {
					bad = append(bad, fmt.Sprintf("status %d, %d events", resp.StatusCode, len(events)))
				} else {
					ok++
				}
				mu.Unlock()
			}
		})
	}
	for _, tc := range []struct {
		name, path, body string
		status           int
		code             string
	}{
		{"non-JSON", "/v1/completions", `not json`, 400, "malformed_json"},
		{"missing prompt", "/v1/completions", `{"model":"sim-lm"}`, 422, "missing_prompt"},
		{"empty prompt array", "/v1/completions", `{"prompt":[]}`, 422, "empty_prompt"},
		{"invalid UTF-8", "/v1/completions", "{\"prompt\":\"caf\xe9\"}", 400, "invalid_utf8"},
		{"negative max_tokens", "/v1/completions", `{"prompt":"x","max_tokens":-1}`, 422, "invalid_value"},
		{"huge max_tokens", "/v1/completions", `{"prompt":"x","max_tokens":100000000}`, 422, "invalid_value"},
		{"wrong type", "/v1/completions", `{"prompt":"x","max_tokens":"ten"}`, 422, "invalid_type"},
		{"unknown model", "/v1/completions", `{"model":"gpt-4","prompt":"x"}`, 404, "model_not_found"},
		{"oversize body", "/v1/completions", `{"prompt":"` + strings.Repeat("a", 5000) + `"}`, 413, "body_too_large"},
		{"prompt over the context", "/v1/completions", `{"prompt":[` + strings.TrimSuffix(strings.Repeat("1,", 4096), ",") + `]}`, 413, "body_too_large"},
		{"n > 1", "/v1/completions", `{"prompt":"x","n":2}`, 422, "unsupported"},
		{"too many stops", "/v1/completions", `{"prompt":"x","stop":[` + strings.TrimSuffix(strings.Repeat(`"a",`, 17), ",") + `]}`, 422, "invalid_value"},
		{"chat without messages", "/v1/chat/completions", `{"model":"sim-lm"}`, 422, "missing_messages"},
		{"chat bad role", "/v1/chat/completions", `{"messages":[{"role":"wizard","content":"x"}]}`, 422, "invalid_value"},
		{"temperature out of range", "/naive/v1/completions", `{"prompt":"x","temperature":9}`, 422, "invalid_value"},
		{"min over max", "/static/v1/completions", `{"prompt":"x","max_tokens":2,"min_tokens":3}`, 422, "invalid_value"},
		{"unknown path", "/v1/embeddings", `{}`, 404, "not_found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(t, ts.URL+tc.path, tc.body)
			body := readAll(t, resp)
			var e struct {
				Error struct {
					Message, Type, Code string
					Param               *string
				}
			}
			if err := json.Unmarshal([]byte(body), &e); err != nil {
				t.Fatalf("body %q: %v", body, err)
			}
			if resp.StatusCode != tc.status || e.Error.Code != tc.code || e.Error.Message == "" || e.Error.Type == "" {
				t.Errorf("got %d %s; want %d %s", resp.StatusCode, body, tc.status, tc.code)
			}
		})
	}
	// A prompt over the context that fits the body limit.
	ts2 := startServer(t, simlm.Config{Context: 64, KVTokens: 64}, openai.Config{}, server.Config{})
	resp := post(t, ts2.URL+"/v1/completions", `{"prompt":"`+strings.Repeat("word ", 100)+`"}`)
	if body := readAll(t, resp); resp.StatusCode != 413 || !strings.Contains(body, "context_length_exceeded") {
		t.Errorf("prompt over the context: %d %s", resp.StatusCode, body)
	}
	close(stop)
	wg.Wait()
	if len(bad) > 0 || ok == 0 {
		t.Errorf("valid load: %d ok, %d bad: %v", ok, len(bad), bad[:min(len(bad), 5)])
	}
}

// waitFor polls cond for up to 15s (a bound for a loaded machine, not a
// timing assertion).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 15s", what)
		}
	}
}

func metric(t *testing.T, url, name string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(readAll(t, resp), "\n") {
		if strings.HasPrefix(line, name+" ") {
			return strings.TrimPrefix(line, name+" ")
		}
	}
	return ""
}

func TestDisconnectMidStreamFreesTheKV(t *testing.T) {
	ts := startServer(t, simlm.Config{Step: 5 * time.Millisecond}, openai.Config{}, server.Config{})
	req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/completions", strings.NewReader(`{"prompt":"tell me everything","max_tokens":2000,"ignore_eos":true,"stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	for range 3 {
		if _, err := br.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	if got := metric(t, ts.URL, `infer_gen_num_requests_running{endpoint="v1"}`); got != "1" {
		t.Fatalf("running = %q mid-stream, want 1", got)
	}
	resp.Body.Close() // the client goes away
	waitFor(t, "running back to 0", func() bool {
		return metric(t, ts.URL, `infer_gen_num_requests_running{endpoint="v1"}`) == "0"
	})
	if got := metric(t, ts.URL, `infer_gen_kv_cache_usage_perc{endpoint="v1"}`); got != "0" {
		t.Errorf("KV usage %s after the disconnect, want 0", got)
	}
	// The handler sees the client gone from its context or from a write.
	waitFor(t, "aborted counted", func() bool {
		return metric(t, ts.URL, `infer_gen_requests_aborted_total{endpoint="v1",reason="client_gone"}`) == "1" ||
			metric(t, ts.URL, `infer_gen_requests_aborted_total{endpoint="v1",reason="write_failed"}`) == "1"
	})
}

func TestQueueFullIs429WithRetryAfter(t *testing.T) {
	ts := startServer(t, simlm.Config{Step: 5 * time.Millisecond}, openai.Config{Engine: generate.Config{QueueCap: 1}}, server.Config{})
	hold := func() *http.Response {
		return post(t, ts.URL+"/naive/v1/completions", `{"prompt":"x","max_tokens":400,"ignore_eos":true,"stream":true}`)
	}
	running := hold() // runs: naive has one slot
	defer running.Body.Close()
	waiting := make(chan *http.Response, 1)
	go func() { waiting <- hold() }()
	waitFor(t, "one waiting", func() bool {
		return metric(t, ts.URL, `infer_gen_num_requests_waiting{endpoint="naive"}`) == "1"
	})
	resp := post(t, ts.URL+"/naive/v1/completions", `{"prompt":"x","max_tokens":4}`)
	body := readAll(t, resp)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, `"code":"queue_full"`) {
		t.Errorf("third request: %d Retry-After %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	// The continuous endpoint is not affected.
	if resp := post(t, ts.URL+"/v1/completions", `{"prompt":"x","max_tokens":4}`); resp.StatusCode != 200 {
		t.Errorf("/v1 while /naive is full: %d %s", resp.StatusCode, readAll(t, resp))
	} else {
		resp.Body.Close()
	}
	running.Body.Close()
	(<-waiting).Body.Close()
}

func TestAdminSetsMaxSeqsAndPolicy(t *testing.T) {
	ts := startServer(t, simlm.Config{}, openai.Config{}, server.Config{AdminToken: "secret"})
	patch := func(body, token string) (int, string) {
		req, _ := http.NewRequest(http.MethodPatch, ts.URL+"/admin/batching", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, readAll(t, resp)
	}
	for _, tc := range []struct {
		body, token string
		status      int
		want        string
	}{
		{`{"max_seqs":8}`, "wrong", 401, "unauthorized"},
		{`{"max_seqs":0}`, "secret", 422, "invalid_max_seqs"},
		{`{"max_seqs":9223372036854775807}`, "secret", 422, "invalid_max_seqs"},
		{`{"max_seqs":4000,"max_batched_tokens":100}`, "secret", 422, "invalid_max_batched_tokens"},
		{`{"block_size":100000}`, "secret", 422, "invalid_block_size"},
		{`{"policy":"magic"}`, "secret", 422, "invalid_policy"},
		{`{"batch":3}`, "secret", 400, "malformed_json"},
		{`{"max_seqs":8,"policy":"static","max_latency":"20ms"}`, "secret", 200, `"policy":"static","max_seqs":8`},
	} {
		if status, body := patch(tc.body, tc.token); status != tc.status || !strings.Contains(body, tc.want) {
			t.Errorf("PATCH %s: %d %s; want %d %s", tc.body, status, body, tc.status, tc.want)
		}
	}
	// Nothing of the refused PATCHes applied; the last one did.
	req, _ := http.NewRequest(http.MethodGet, ts.URL+"/admin/batching", nil)
	req.Header.Set("Authorization", "Bearer secret")
	resp, _ := http.DefaultClient.Do(req)
	if body := readAll(t, resp); !strings.Contains(body, `"policy":"static","max_seqs":8,"max_batched_tokens":2048`) || !strings.Contains(body, `"max_latency":"20ms"`) {
		t.Errorf("GET /admin/batching = %s", body)
	}
	if resp := post(t, ts.URL+"/v1/completions", `{"prompt":"x","max_tokens":3}`); resp.StatusCode != 200 {
		t.Errorf("request after the switch: %d %s", resp.StatusCode, readAll(t, resp))
	} else {
		resp.Body.Close()
	}
}

func TestModelsList(t *testing.T) {
	ts := startServer(t, simlm.Config{}, openai.Config{}, server.Config{})
	for _, p := range []string{"/v1/models", "/static/v1/models", "/naive/v1/models", "/v1/models/sim-lm"} {
		resp, err := http.Get(ts.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		if body := readAll(t, resp); resp.StatusCode != 200 || !strings.Contains(body, `"id":"sim-lm"`) {
			t.Errorf("GET %s: %d %s", p, resp.StatusCode, body)
		}
	}
	resp, _ := http.Get(ts.URL + "/v1/models/other")
	if body := readAll(t, resp); resp.StatusCode != 404 || !strings.Contains(body, "model_not_found") {
		t.Errorf("GET /v1/models/other: %d %s", resp.StatusCode, body)
	}
	resp, _ = http.Get(ts.URL + "/v1/completions")
	if body := readAll(t, resp); resp.StatusCode != 405 || resp.Header.Get("Allow") != "POST" {
		t.Errorf("GET /v1/completions: %d %s", resp.StatusCode, body)
	}
}

// A client that stops reading does not stall the others, and its stream is
// cut: by the write deadline once the socket's buffers are full, or by the
// engine once it holds StreamBuffer tokens the handler could not write.
func TestSlowReaderIsCutWithoutStallingOthers(t *testing.T) {
	// Tokens come fast (10k/s per stream) and the answer is long (up to
	// 60,000 tokens), so that the socket buffers (up to tcp_wmem's max)
	// fill in seconds; readers may lag 4,096 tokens before they count as
	// slow.
	ts := startServer(t, simlm.Config{Step: 100 * time.Microsecond, Context: 65536, KVTokens: 65536},
		openai.Config{Engine: generate.Config{StreamBuffer: 4096}, WriteTimeout: 300 * time.Millisecond}, server.Config{})
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 2048) })
	}}
	conn, err := d.Dial("tcp", strings.TrimPrefix(ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"prompt":"never read","max_tokens":60000,"ignore_eos":true,"stream":true}`
	fmt.Fprintf(conn, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	// Others are served meanwhile, at full speed.
	for i := range 5 {
		resp := post(t, ts.URL+"/v1/completions", fmt.Sprintf(`{"prompt":"reader %d","max_tokens":200,"ignore_eos":true,"stream":true}`, i))
		if events := sse(t, resp.Body); resp.StatusCode != 200 || events[len(events)-1] != "[DONE]" {
			t.Errorf("a reading client: %d, %d events", resp.StatusCode, len(events))
		}
		resp.Body.Close()
	}
	waitFor(t, "the slow stream cut", func() bool {
		return metric(t, ts.URL, `infer_gen_requests_aborted_total{endpoint="v1",reason="slow_reader"}`) == "1" ||
			metric(t, ts.URL, `infer_gen_requests_aborted_total{endpoint="v1",reason="write_failed"}`) == "1"
	})
	waitFor(t, "its sequence gone", func() bool {
		return metric(t, ts.URL, `infer_gen_num_requests_running{endpoint="v1"}`) == "0"
	})
}

func TestModelInfoMetric(t *testing.T) {
	ts := startServer(t, simlm.Config{Step: 5 * time.Millisecond}, openai.Config{}, server.Config{})
	for _, want := range []string{
		`infer_gen_model_info{backend="sim",model="sim-lm",params="step=5ms per_seq=0s per_prefill_token=0s kv_tokens=65536 context=4096"}`,
		`infer_model_info{backend="sim",model="sim-lm",task="generate"}`, // the server's, for the service's model
	} {
		if got := metric(t, ts.URL, want); got != "1" {
			t.Errorf("%s = %q, want 1", want, got)
		}
	}
	// The server has no encoder model: none of the encoder endpoints' metrics.
	resp, err := http.Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m := readAll(t, resp)
	for _, name := range []string{"infer_batching_info{", "infer_batch_size_", "infer_queue_depth{", "infer_requests_total{"} {
		if strings.Contains(m, name) {
			t.Errorf("/metrics has %s, want no such metric", name)
		}
	}
}

// With a stream interval, the first token goes out at once, and every
// later write (one HTTP chunk: the server flushes each) carries the
// interval's tokens, up to the last.
func TestStreamIntervalGathersTokensAfterTheFirst(t *testing.T) {
	for _, interval := range []int{1, 4} {
		t.Run(fmt.Sprint(interval), func(t *testing.T) {
			// 20 ms steps: the reader keeps up with each token.
			ts := startServer(t, simlm.Config{Step: 20 * time.Millisecond}, openai.Config{StreamInterval: interval}, server.Config{})
			conn, err := net.Dial("tcp", strings.TrimPrefix(ts.URL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			body := `{"prompt":"Once upon a time","max_tokens":10,"ignore_eos":true,"stream":true}`
			fmt.Fprintf(conn, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil || resp.StatusCode != http.StatusOK || resp.TransferEncoding == nil {
				t.Fatalf("response %v, %v: want a 200 in chunks", resp, err)
			}
			// Read the chunked body by hand: one chunk per write.
			var chunks []int // token events per chunk
			done := false
			for !done {
				var n int
				line, err := br.ReadString('\n')
				if _, serr := fmt.Sscanf(line, "%x", &n); err != nil || serr != nil {
					t.Fatalf("chunk header %q: %v %v", line, err, serr)
				}
				if n == 0 {
					break
				}
				data := make([]byte, n+2)
				if _, err := io.ReadFull(br, data); err != nil {
					t.Fatal(err)
				}
				events := strings.Count(string(data), `"text":`)
				done = strings.Contains(string(data), "[DONE]")
				chunks = append(chunks, events)
			}
			// 10 tokens: the first, then 9 in writes of at least the
			// interval's (a token whose text is held back, e.g. inside a
			// UTF-8 character, has its event with the next).
			switch {
			case chunks[0] >= max(interval, 2):
				t.Errorf("chunks %v: the first token must go out at once", chunks)
			case interval == 4 && len(chunks) > 4:
				t.Errorf("chunks %v: want at most 4 writes of 10 tokens at interval 4", chunks)
			case interval == 1 && len(chunks) < 6:
				t.Errorf("chunks %v: with interval 1 the tokens go out as they come", chunks)
			}
		})
	}
}

func TestStreamIntervalBounds(t *testing.T) {
	f, err := simlm.New(simlm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{-1, openai.MaxStreamInterval + 1} {
		if _, err := openai.New(openai.Config{StreamInterval: n}, f); err == nil {
			t.Errorf("stream interval %d accepted", n)
		}
	}
	if _, err := openai.New(openai.Config{StreamInterval: 8, Engine: generate.Config{StreamBuffer: 8}}, f); err == nil {
		t.Error("a stream interval of the whole stream buffer accepted")
	}
}

// A body that stops arriving is answered 408 in OpenAI's error shape once
// the host's read timeout (30 s) has passed, quoting no network error
// (those name the client's and the server's addresses).
func TestSlowBodyAnswered408(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, err := simlm.New(simlm.Config{Step: time.Millisecond, Wait: time.Sleep})
		if err != nil {
			t.Fatal(err)
		}
		svc, err := openai.New(openai.Config{}, f)
		if err != nil {
			t.Fatal(err)
		}
		ts := servertest.StartWith(t, server.Config{}, servertest.Options{InMemory: true}, svc)
		for _, path := range []string{"/v1/completions", "/naive/v1/chat/completions"} {
			r, took, err := ts.DoStalled(http.MethodPost, path, "application/json", `{"prompt": "Once upon`, 100)
			if err != nil {
				t.Fatal(err)
			}
			want := `{"error":{"message":"the body did not arrive in time","type":"invalid_request_error","param":null,"code":"body_timeout"}}`
			if r.Status != 408 || strings.TrimSpace(r.Body) != want {
				t.Errorf("%s: a stalled body: %d %s, want 408 %s", path, r.Status, r.Body, want)
			}
			if took != 30*time.Second {
				t.Errorf("%s: answered after %v, want the read timeout, 30s", path, took)
			}
		}
	})
}

// A client that half-closes after its request never gets an empty 200, on
// any endpoint: an answer, or the connection closed without one.
func TestHalfClosedClientNeverGetsAnEmpty200(t *testing.T) {
	ts := startServer(t, simlm.Config{}, openai.Config{}, server.Config{})
	for _, tc := range []struct{ path, body string }{
		{"/v1/completions", `{"prompt":"Once upon a time","max_tokens":8}`},
		{"/v1/completions", `{"prompt":"Once upon a time","max_tokens":8,"stream":true}`},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":8}`},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":8,"stream":true}`},
		{"/naive/v1/completions", `{"prompt":"Once upon a time","max_tokens":8}`},
		{"/static/v1/completions", `{"prompt":"Once upon a time","max_tokens":8,"stream":true}`},
	} {
		raw := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", tc.path, len(tc.body), tc.body)
		if r := servertest.HalfClosed(t, ts.URL, raw); r != nil && r.Status != 200 {
			t.Errorf("%s %s: %d %s, want an answer or none", tc.path, tc.body, r.Status, r.Body)
		}
	}
}

// Chat without max_tokens, forced to its length, still finishes within its
// deadline: the default is what the model generates in half of it.
func TestChatDefaultMaxTokensFitsTheDeadline(t *testing.T) {
	ts := startServer(t, simlm.Config{Step: 10 * time.Millisecond}, openai.Config{}, server.Config{})
	resp := post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"ignore_eos":true}`, "X-Request-Timeout", "1s")
	body := readAll(t, resp)
	var got struct {
		Choices []struct {
			FinishReason string `json:"finish_reason"`
		}
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		}
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %s, want 200", resp.StatusCode, body)
	}
	if n := got.Usage.CompletionTokens; n < 10 || n > 60 || got.Choices[0].FinishReason != "length" {
		t.Errorf("%d tokens, finish %q; want about 50 (half of 1s at 10ms a step), finish length", n, got.Choices[0].FinishReason)
	}
}

// Field names are exact and a known field comes once, as on the encoder
// API; unknown fields are ignored.
func TestJSONKeysAreStrict(t *testing.T) {
	ts := startServer(t, simlm.Config{Step: time.Millisecond}, openai.Config{}, server.Config{})
	for _, tc := range []struct {
		path, body string
		status     int
		code       string
	}{
		{"/v1/completions", `{"PROMPT":"x","max_tokens":2}`, 422, "unknown_field"},
		{"/v1/completions", `{"prompt":"a","prompt":"b","max_tokens":2}`, 400, "duplicate_field"},
		{"/v1/completions", `{"prompt":"a","max_tokens":2,"Max_Tokens":2}`, 422, "unknown_field"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","Content":"x"}],"max_tokens":2}`, 422, "unknown_field"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"x","role":"system"}],"max_tokens":2}`, 400, "duplicate_field"},
		{"/v1/completions", `{"prompt":"x","max_tokens":2,"stream":true,"stream_options":{"include_usage":true,"Include_Usage":false}}`, 422, "unknown_field"},
		{"/v1/completions", `{"prompt":"x","max_tokens":2,"foo":1,"foo":2,"user":"u"}`, 200, ""},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"x","name":"n"}],"max_tokens":2}`, 200, ""},
	} {
		resp := post(t, ts.URL+tc.path, tc.body)
		body := readAll(t, resp)
		if resp.StatusCode != tc.status || (tc.code != "" && !strings.Contains(body, `"code":"`+tc.code+`"`)) {
			t.Errorf("%s %s: %d %s; want %d %s", tc.path, tc.body, resp.StatusCode, body, tc.status, tc.code)
		}
	}
}
