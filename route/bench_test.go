package route

import (
	"io"
	"net/http"
	"strings"
	"testing"
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
