package cmd

import (
	"errors"
	"net"
	"syscall"
)

// listen binds addr for a server command, before it loads anything: a
// port in use or not ours to take is a usage error that says what to do.
func listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	switch {
	case err == nil:
		return ln, nil
	case errors.Is(err, syscall.EADDRINUSE):
		return nil, usageErrorf("--addr %s: address already in use (another infer, or another server?): stop it, or pick a free port, e.g. --addr 127.0.0.1:0 for any", addr)
	case errors.Is(err, syscall.EACCES):
		return nil, usageErrorf("--addr %s: permission denied (ports below 1024 need privileges): pick a port above 1024", addr)
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return nil, usageErrorf("--addr %s: no such address on this machine: use 127.0.0.1:PORT, or 0.0.0.0:PORT for every interface", addr)
	}
	return nil, usageErrorf("--addr %s: %v", addr, err)
}
