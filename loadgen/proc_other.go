//go:build !linux

package loadgen

import (
	"errors"
	"os/exec"
	"time"
)

var errNoProc = errors.New("process statistics need Linux's /proc")

func procCPU(int) (time.Duration, error) { return 0, errNoProc }

func procRSS(int) (int64, error) { return 0, errNoProc }

func detach(*exec.Cmd) {}
