//go:build !unix

package loadgen

import "time"

// selfCPU is unknown on this system.
func selfCPU() time.Duration { return 0 }
