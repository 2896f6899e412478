package cmd

import (
	"bytes"
	"net"
	"strings"
	"testing"
	"time"
)

// TestServeBusyPort: serve and route bind their address before anything
// else: a busy port is a usage error naming --addr, found before the model
// loads (bert-mini would need ONNX Runtime first; a missing replica list
// would be route's error).
func TestServeBusyPort(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()
	t.Setenv("ONNXRUNTIME_LIB", "/nonexistent/libonnxruntime.so")
	for _, args := range [][]string{
		{"serve", "--model", "bert-mini", "--addr", addr},
		{"serve", "--model", "sim-lm", "--addr", addr},
		{"route", "--upstream", "http://127.0.0.1:1", "--addr", addr},
	} {
		var out bytes.Buffer
		root := newCmdRoot(&out, &out)
		root.SetArgs(args)
		start := time.Now()
		code := exitCode(root.Execute(), &out)
		if code != exitUsage || !strings.Contains(out.String(), "--addr "+addr+": address already in use") || !strings.Contains(out.String(), "pick a free port") {
			t.Errorf("infer %s: exit %d\n%s", strings.Join(args, " "), code, out.String())
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("infer %s: %v to find the port busy", strings.Join(args, " "), took)
		}
	}
}
