package attack

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// FuzzServerTiming is a fuzz target of the parser that reads a server's
// Server-Timing header. Seeds are in testdata/fuzz/FuzzServerTiming; `make
// fuzz` runs it for a while.

// FuzzServerTiming: any header parses without panicking, and one in the
// server's documented form ("queue;dur=12.345, compute;dur=151.240,
// batch;desc=64, pad;desc=1.37, cache;desc=2") reads back within its
// rounding.
func FuzzServerTiming(f *testing.F) {
	f.Add("queue;dur=12.345, compute;dur=151.240, batch;desc=64, pad;desc=1.37", int64(12345), int64(151240), 64, 1.37)
	f.Add("queue;dur=\"1\";desc=x,,compute", int64(0), int64(1), 1, 0.0)
	f.Fuzz(func(t *testing.T, header string, queueUS, computeUS int64, batch int, pad float64) {
		parseServerTiming(header)
		if queueUS < 0 || computeUS < 0 || queueUS > 1e12 || computeUS > 1e12 || batch < 0 || !(pad == 0 || pad >= 1 && pad < 1e6) {
			return // not something a server says
		}
		h := fmt.Sprintf("queue;dur=%.3f, compute;dur=%.3f, batch;desc=%d", float64(queueUS)/1000, float64(computeUS)/1000, batch)
		if pad > 0 {
			h += fmt.Sprintf(", pad;desc=%.2f", pad)
		}
		h += ", cache;desc=3"
		st, ok := parseServerTiming(h)
		near := func(got time.Duration, us int64) bool {
			return (got - time.Duration(us)*time.Microsecond).Abs() <= time.Microsecond
		}
		if !ok || !near(st.Queue, queueUS) || !near(st.Compute, computeUS) || st.Batch != batch || math.Abs(st.Pad-pad) > 0.005+1e-9 {
			t.Fatalf("%q read back as %+v, %v", h, st, ok)
		}
	})
}
