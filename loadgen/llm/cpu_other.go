//go:build !unix

package llm

import (
	"errors"
	"time"
)

// selfCPU is unknown here.
func selfCPU() (time.Duration, error) {
	return 0, errors.New("process CPU time unknown on this system")
}
