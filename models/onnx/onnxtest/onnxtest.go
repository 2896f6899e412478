// Package onnxtest helps tests that need ONNX Runtime, as httptest helps
// those that need a server.
package onnxtest

import (
	"errors"
	"os"
	"testing"

	"github.com/inferhq/infer/models/onnx"
)

// RequireEnv names the variable that makes a missing runtime fail tests
// instead of skipping them: INFER_REQUIRE_ORT=1, as CI sets it.
const RequireEnv = "INFER_REQUIRE_ORT"

// SkipWithoutRuntime skips t when err says the ONNX Runtime is missing
// (onnx.ErrNoRuntime), naming the setup step; with RequireEnv=1 it fails t
// instead. Other errors, and nil, it leaves to the caller.
func SkipWithoutRuntime(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, onnx.ErrNoRuntime) {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatal(err)
		}
		t.Skip("no ONNX Runtime (run scripts/setup-ort.sh)")
	}
}
