//go:build linux

package llmtest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A fake in a child process, so that the test process's CPU is the load
// client's alone: the test binary runs itself again as a server.

// ChildEnv is the environment variable that makes a test binary a fake
// server (ServeChild): its value is the Config as JSON.
const ChildEnv = "INFER_LLMTEST_SERVE"

// ServeChild makes this process a fake server when ChildEnv is set: it
// prints the address it listens on (127.0.0.1, a free port) and serves
// until killed, never returning. Call it first in TestMain (or an init).
func ServeChild() {
	cfgJSON := os.Getenv(ChildEnv)
	if cfgJSON == "" {
		return
	}
	var cfg Config
	if err := json.Unmarshal([]byte(cfgJSON), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(l.Addr().String())
	srv := &http.Server{Handler: New(cfg), ReadHeaderTimeout: 10 * time.Second}
	_ = srv.Serve(l) // until killed
	os.Exit(0)
}

// StartChild runs the test binary as a fake of cfg in a child process
// (killed with its parent, and at the test's end) and returns its base
// URL. The binary must call ServeChild first.
func StartChild(t testing.TB, cfg Config) string {
	t.Helper()
	b, _ := json.Marshal(cfg)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), ChildEnv+"="+string(b))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("fake server: %v", err)
	}
	return "http://" + strings.TrimSpace(addr)
}
