//go:build !linux

package sim

import "time"

// waiter falls back to time.Sleep where clock_nanosleep is not available; it
// may overshoot by up to a millisecond.
type waiter struct{}

func (waiter) wait(d time.Duration) { time.Sleep(d) }
