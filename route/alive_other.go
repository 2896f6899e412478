//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package route

import "net"

// alive reports whether an idle connection may carry another request;
// where it cannot peek, it trusts the connection (a reused one that turns
// out closed fails as a broken connection, retried as such).
func alive(net.Conn) bool { return true }
