//go:build !linux

package target

import (
	"errors"
	"os/exec"
	"time"
)

var errNoProc = errors.New("process statistics need Linux's /proc")

func ProcCPU(int) (time.Duration, error) { return 0, errNoProc }

func ProcRSS(int) (int64, error) { return 0, errNoProc }

func detach(*exec.Cmd) {}
