package openai_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/inferhq/infer/models/simlm"
	"github.com/inferhq/infer/server"
	"github.com/inferhq/infer/server/openai"
)

// discard is a streaming ResponseWriter that drops what it is given.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}
func (d *discard) Flush()                      {}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// The server's CPU per streamed token without the network: 32 concurrent
// streams of 200 tokens (prompts of 100 words) through the host's handler, the
// engine and sim-lm's 8 ms steps, written to a discarding ResponseWriter.
// What a socket write adds comes on top (scripts/accept-gen.sh cpu measures
// the whole).
func BenchmarkStreamedTokenServerPath(b *testing.B) {
	f, _ := simlm.New(simlm.Config{Step: 8 * time.Millisecond})
	svc, _ := openai.New(openai.Config{}, f)
	host, err := server.New(server.Config{}, svc)
	if err != nil {
		b.Fatal(err)
	}
	ready := make(chan struct{})
	go svc.Run(b.Context(), func() { close(ready) })
	<-ready
	h := host.Handler()
	const streams, tokens = 32, 200
	var used time.Duration
	n := 0
	for b.Loop() {
		c0 := cpuTime()
		var wg sync.WaitGroup
		for c := range streams {
			wg.Go(func() {
				body := fmt.Sprintf(`{"prompt":"%s","max_tokens":%d,"ignore_eos":true,"stream":true}`, strings.Repeat(fmt.Sprintf("w%d ", c*1000+n), 100), tokens)
				req, _ := http.NewRequest(http.MethodPost, "/v1/completions", strings.NewReader(body))
				h.ServeHTTP(&discard{h: http.Header{}}, req)
			})
		}
		wg.Wait()
		used += cpuTime() - c0
		n++
	}
	b.ReportMetric(float64(used.Nanoseconds())/1000/float64(n*streams*tokens), "cpu-µs/token")
}
