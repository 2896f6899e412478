package route_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/inferhq/infer/route"
	"github.com/inferhq/infer/server"
)

// A router over two replicas with the hash policy: every request with the
// same X-Routing-Key lands on the same replica.
func Example() {
	var urls []string
	for _, name := range []string{"a", "b"} {
		rep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, name) // answers its name; /readyz answers 200 too
		}))
		defer rep.Close()
		urls = append(urls, rep.URL)
	}
	ups, err := route.ParseUpstreams([]string{strings.Join(urls, ",")})
	if err != nil {
		panic(err)
	}
	rt, err := route.New(route.Config{Upstreams: ups, Policy: route.Hash})
	if err != nil {
		panic(err)
	}
	// The router is a service of the host, as infer route runs it.
	host, err := server.New(server.Config{}, rt)
	if err != nil {
		panic(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- host.Serve(ctx, ln) }()
	for !host.Ready() { // every replica checked once
		time.Sleep(time.Millisecond)
	}
	front := "http://" + ln.Addr().String()

	first := map[string]string{}
	sticky := true
	for i := range 40 {
		key := fmt.Sprintf("user-%d", i%8)
		req, _ := http.NewRequest(http.MethodPost, front+"/v1/completions", strings.NewReader(`{"prompt": "Hi"}`))
		req.Header.Set("X-Routing-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if f, ok := first[key]; ok && f != string(body) {
			sticky = false
		}
		first[key] = string(body)
	}
	fmt.Println("ready:", rt.Ready() == nil)
	fmt.Println("every key stayed on its replica:", sticky)
	stop()
	fmt.Println(<-done)
	// Output:
	// ready: true
	// every key stayed on its replica: true
	// <nil>
}

func ExampleParseUpstream() {
	for _, s := range []string{"http://10.0.0.1:8000;w=2", "dns://vllm-headless.default.svc:8000", "10.0.0.1:8000"} {
		u, err := route.ParseUpstream(s)
		if err != nil {
			fmt.Println("error:", err)
			continue
		}
		fmt.Println(u.URL, "dns:", u.DNS, "weight:", u.Weight)
	}
	// Output:
	// http://10.0.0.1:8000 dns: false weight: 2
	// http://vllm-headless.default.svc:8000 dns: true weight: 1
	// error: "10.0.0.1:8000": want a URL like http://127.0.0.1:8081 or dns://name:port
}
