package onnx

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	ort "github.com/yalue/onnxruntime_go"
)

// SetupPath is where scripts/setup-ort.sh puts the runtime, relative to the
// project's root.
const SetupPath = ".cache/onnxruntime/lib/libonnxruntime.so.1"

// ErrNoRuntime means the ONNX Runtime shared library was found nowhere. Its
// message names the fix.
var ErrNoRuntime = errors.New("onnx runtime library not found (looked at --ort-lib, $ONNXRUNTIME_LIB, " +
	SetupPath + " and the system library paths): run scripts/setup-ort.sh (or make setup), or use --model sim")

// systemNames are tried last, through the dynamic loader's own search (the
// system paths, LD_LIBRARY_PATH, the ld.so cache).
var systemNames = []string{"libonnxruntime.so.1", "libonnxruntime.so"}

// FindLibrary returns the ONNX Runtime library to load: explicit if set, else
// $ONNXRUNTIME_LIB, else the project's set-up folder found by walking up from
// the working directory and from the executable's directory. An explicit or
// environment path that does not exist is an error. When none is found it
// returns "" and no error: the system's loader search comes last, in
// loadRuntime.
func FindLibrary(explicit string) (string, error) {
	for _, c := range []struct{ path, from string }{
		{explicit, "--ort-lib"},
		{os.Getenv("ONNXRUNTIME_LIB"), "$ONNXRUNTIME_LIB"},
	} {
		if c.path == "" {
			continue
		}
		if _, err := os.Stat(c.path); err != nil {
			return "", fmt.Errorf("onnx runtime library from %s: %w", c.from, err)
		}
		return c.path, nil
	}
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(exe))
	}
	for _, dir := range starts {
		if p := findUp(dir, SetupPath); p != "" {
			return p, nil
		}
	}
	return "", nil
}

// findUp returns dir/rel or the same under the nearest parent of dir where it
// exists, or "".
func findUp(dir, rel string) string {
	for {
		p := filepath.Join(dir, rel)
		if _, err := os.Stat(p); err == nil {
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// The ONNX Runtime environment is process-wide: it is created once, by the
// first factory, from the first library found, and lives until the process
// exits (destroying it while another factory's sessions run would crash).
var ortEnv struct {
	mu      sync.Mutex
	lib     string // the library the environment was created from
	version string
}

// loadRuntime initialises the ONNX Runtime environment from the library that
// FindLibrary(explicit) names, or from the system's, once per process. Later
// calls return at once; they fail if they name a different library.
func loadRuntime(explicit string) (string, error) {
	ortEnv.mu.Lock()
	defer ortEnv.mu.Unlock()
	path, err := FindLibrary(explicit)
	if err != nil {
		return "", err
	}
	if ort.IsInitialized() {
		if path != "" && path != ortEnv.lib {
			return "", fmt.Errorf("onnx runtime already loaded from %s; cannot also load %s", ortEnv.lib, path)
		}
		return ortEnv.lib, nil
	}
	candidates := []string{path}
	if path == "" {
		candidates = systemNames
	}
	var errs []error
	for _, c := range candidates {
		ort.SetSharedLibraryPath(c)
		err := ort.InitializeEnvironment(ort.WithLogLevelError())
		if err == nil {
			ortEnv.lib = c
			ortEnv.version = ort.GetVersion()
			return c, nil
		}
		errs = append(errs, err)
	}
	if path == "" {
		return "", ErrNoRuntime
	}
	return "", fmt.Errorf("load onnx runtime %s: %w", path, errors.Join(errs...))
}

// RuntimeVersion returns the version of the loaded ONNX Runtime, e.g.
// "1.30.0", or "" before any factory loaded it.
func RuntimeVersion() string {
	ortEnv.mu.Lock()
	defer ortEnv.mu.Unlock()
	return ortEnv.version
}
