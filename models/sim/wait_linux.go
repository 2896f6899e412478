package sim

import (
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// waiter blocks the calling thread for a duration without spinning, and
// precisely: Go's timers wake up to ~1 ms late here, and even a raw
// clock_nanosleep wakes 50–150 µs late on a VM. The waiter sleeps on an
// absolute deadline with the thread's timer slack at its minimum, and starts
// each sleep early by the lateness it has measured (an exponential average),
// so that waits are exact on average. It is not safe for concurrent use.
type waiter struct {
	lead int64 // ns to wake early
}

const maxLead = int64(time.Millisecond)

func (w *waiter) wait(d time.Duration) {
	if d <= 0 {
		return
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0) // best effort

	var now unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &now)
	deadline := now.Nano() + int64(d)
	target := deadline - w.lead
	ts := unix.NsecToTimespec(target)
	for unix.ClockNanosleep(unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME, &ts, nil) == unix.EINTR {
	}
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &now)
	late := now.Nano() - target
	w.lead += (late - w.lead) / 8
	w.lead = min(max(w.lead, 0), maxLead)
}
