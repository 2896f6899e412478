//go:build !unix

package server

// openFileLimit returns 0: unknown on this system.
func openFileLimit() int { return 0 }
