//go:build unix

package loadgen

import (
	"syscall"
	"time"
)

// selfCPU returns the CPU time this process has used, user and system.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
