//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package route

import (
	"net"
	"syscall"
)

// alive reports whether an idle connection may carry another request: the
// peer has neither closed it nor written to it. One peek that does not
// wait.
func alive(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	ok = false
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		ok = err == syscall.EAGAIN || err == syscall.EWOULDBLOCK // nothing to read: still open, and quiet
		return true
	})
	return err == nil && ok
}
