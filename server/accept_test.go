package server

import (
	"bytes"
	"errors"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
)

// failing is a listener whose Accept fails with errs first.
type failing struct {
	net.Listener
	errs []error
	conn net.Conn
}

func (l *failing) Accept() (net.Conn, error) {
	if len(l.errs) > 0 {
		err := l.errs[0]
		l.errs = l.errs[1:]
		return nil, err
	}
	return l.conn, nil
}

// Accept errors are logged at warn (at most once a second) and retried,
// never handed to net/http (which logs them at debug and may stall).
func TestAcceptErrorsLoggedAtWarnAndRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs bytes.Buffer
		cs := newConns(10, 0, slog.New(slog.NewTextHandler(&logs, nil)))
		emfile := &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}
		c, _ := net.Pipe()
		defer c.Close()
		l := cs.listen(&failing{errs: []error{emfile, emfile, emfile}, conn: c})
		got, err := l.Accept()
		if err != nil || got.(*trackedConn).Conn != c {
			t.Fatalf("Accept() = %v, %v; want the connection after the errors", got, err)
		}
		if n := strings.Count(logs.String(), "level=WARN"); n != 1 || !strings.Contains(logs.String(), "too many open files") {
			t.Errorf("logs:\n%s\nwant one warning naming the error", logs.String())
		}
		closed := cs.listen(&failing{errs: []error{net.ErrClosed}})
		if _, err := closed.Accept(); !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept() on a closed listener = %v, want net.ErrClosed", err)
		}
	})
}
