// Command ssefloor is the least a Go net/http server can do to stream
// OpenAI completion chunks at sim-lm's pace, as a floor to measure infer
// serve's CPU per streamed token against (scripts/accept-gen.sh floor): no
// engine, tokenizer, metrics or validation, only what any such server must
// do. It runs -slots streams at a time (the others wait for a slot); a step
// every -step wakes every running stream, and each writes and flushes one
// chunk, the last one with usage and [DONE]. /readyz answers 200, and
// /metrics counts the chunks streamed as ssefloor_tokens_total.
//
//	go run ./internal/ssefloor -addr 127.0.0.1:23100
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// steps wakes every stream waiting on the current step when it ends.
type steps struct {
	mu  sync.Mutex
	cur chan struct{}
}

func (s *steps) run(every time.Duration) {
	for {
		time.Sleep(every)
		s.mu.Lock()
		close(s.cur)
		s.cur = make(chan struct{})
		s.mu.Unlock()
	}
}

func (s *steps) next() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

func main() {
	addr := flag.String("addr", "127.0.0.1:23100", "listen address")
	slots := flag.Int("slots", 32, "streams at a time (sim-lm's --max-seqs)")
	every := flag.Duration("step", 16*time.Millisecond, "a step's time (sim-lm's 8ms + 32 × 0.25ms)")
	flag.Parse()

	st := &steps{cur: make(chan struct{})}
	go st.run(*every)
	var tokens atomic.Int64
	free := make(chan struct{}, *slots)

	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			MaxTokens int `json:"max_tokens"`
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil || json.Unmarshal(body, &req) != nil || req.MaxTokens <= 0 || req.MaxTokens > 1<<16 {
			http.Error(w, `{"error":{"message":"want a JSON body with max_tokens"}}`, http.StatusBadRequest)
			return
		}
		select {
		case free <- struct{}{}:
		case <-r.Context().Done():
			return
		}
		defer func() { <-free }()
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		buf := make([]byte, 0, 512)
		for i := range req.MaxTokens {
			select {
			case <-st.next():
			case <-r.Context().Done():
				return
			}
			last := i == req.MaxTokens-1
			buf = append(buf[:0], `data: {"id":"cmpl-floor","object":"text_completion","created":1,"model":"sim-lm","choices":[{"index":0,"text":" tok","logprobs":null,"finish_reason":`...)
			if last {
				buf = append(buf, `"length"}]}`+"\n\n"...)
				buf = append(buf, `data: {"id":"cmpl-floor","object":"text_completion","created":1,"model":"sim-lm","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":`...)
				buf = strconv.AppendInt(buf, int64(req.MaxTokens), 10)
				buf = append(buf, `,"total_tokens":`...)
				buf = strconv.AppendInt(buf, int64(req.MaxTokens+1), 10)
				buf = append(buf, "}}\n\ndata: [DONE]\n\n"...)
			} else {
				buf = append(buf, "null}]}\n\n"...)
			}
			if _, err := w.Write(buf); err != nil {
				return
			}
			if rc.Flush() != nil {
				return
			}
			tokens.Add(1)
		}
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, `{"object":"list","data":[{"id":"sim-lm","object":"model","created":1,"owned_by":"ssefloor"}]}`)
	})
	mux.HandleFunc("GET /readyz", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "ssefloor_tokens_total %d\n", tokens.Load())
	})
	log.Fatal(http.ListenAndServe(*addr, mux))
}
