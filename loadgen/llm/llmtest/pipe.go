package llmtest

import (
	"net/http"

	"github.com/inferhq/infer/internal/pipenet"
)

// PipeListener is an in-memory net.Listener (internal/pipenet): Dial
// connects to it through net.Pipe, so client and server run inside a
// testing/synctest bubble, where the fake server's sleeps take exactly
// their time.
type PipeListener = pipenet.Listener

// NewPipeListener returns an open listener.
func NewPipeListener() *PipeListener { return pipenet.Listen() }

// ServePipe serves h on a PipeListener. It returns an HTTP client whose
// connections go to h, the base URL to use with it (any host works), and
// a function that stops the server and closes the client's connections:
// call it before a synctest bubble ends.
func ServePipe(h http.Handler) (client *http.Client, baseURL string, stop func()) {
	l := NewPipeListener()
	srv := &http.Server{Handler: h}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(l)
	}()
	tr := &http.Transport{DialContext: l.Dial, DisableCompression: true, MaxIdleConnsPerHost: 1 << 16}
	return &http.Client{Transport: tr}, "http://fake.test", func() {
		tr.CloseIdleConnections()
		_ = srv.Close()
		<-served
	}
}
