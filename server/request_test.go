package server

import (
	"errors"
	"net"
	"os"
	"strings"
	"testing"
)

// A body that cannot be read is answered without quoting the network error:
// it names the server's and the client's addresses.
func TestBodyErrorNamesNoAddress(t *testing.T) {
	addr := func(s string) net.Addr { a, _ := net.ResolveTCPAddr("tcp", s); return a }
	for _, err := range []error{
		&net.OpError{Op: "read", Net: "tcp", Source: addr("127.0.0.1:8080"), Addr: addr("10.1.2.3:5555"), Err: os.ErrDeadlineExceeded},
		&net.OpError{Op: "read", Net: "tcp", Source: addr("127.0.0.1:8080"), Addr: addr("10.1.2.3:5555"), Err: errors.New("connection reset by peer")},
	} {
		e := bodyError(err)
		if strings.Contains(e.Message, "127.0.0.1") || strings.Contains(e.Message, "10.1.2.3") {
			t.Errorf("bodyError(%v) = %q, leaks an address", err, e.Message)
		}
		if e.Status != 408 && e.Status != 400 {
			t.Errorf("bodyError(%v) status %d", err, e.Status)
		}
	}
	if e := bodyError(&net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}); e.Status != 408 {
		t.Errorf("timeout reading the body: %d, want 408", e.Status)
	}
}
