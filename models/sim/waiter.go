package sim

import "time"

// Waiter blocks the calling goroutine's thread for a duration without using
// the CPU, as precisely as the platform allows (see waiter): the clock of
// this package's Model, for other simulated backends such as models/simlm.
// The zero value is ready; it is not safe for concurrent use.
type Waiter struct{ w waiter }

// Wait blocks for d.
func (w *Waiter) Wait(d time.Duration) { w.w.wait(d) }
