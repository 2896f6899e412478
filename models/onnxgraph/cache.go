package onnxgraph

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// CacheDirEnv names the environment variable that overrides DefaultCacheDir.
const CacheDirEnv = "INFER_CACHE_DIR"

// DefaultSeed is the seed of the random weights of the built-in models that
// are generated (models/bert, models/gpt2) when none is given.
const DefaultSeed = 1

// DefaultCacheDir returns where generated models are kept: $INFER_CACHE_DIR
// when set, else infer/models under the user's cache directory
// (~/.cache/infer/models on Linux), else under the system's temporary
// directory.
func DefaultCacheDir() string {
	if dir := os.Getenv(CacheDirEnv); dir != "" {
		return dir
	}
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	return filepath.Join(base, "infer", "models")
}

// EnsureFile returns dir/name, calling write to produce the file first if it
// is not there. Callers name files by a hash of everything that determines
// their content, so an existing file is never stale. See WriteFile for why
// concurrent callers are safe.
func EnsureFile(dir, name string, write func(io.Writer) error) (string, error) {
	path := filepath.Join(dir, name)
	if _, err := os.Stat(path); err == nil {
		return path, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("model cache: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("model cache: %w", err)
	}
	if err := WriteFile(path, write); err != nil {
		return "", err
	}
	return path, nil
}

// WriteFile writes path through write: under a temporary name in the same
// directory, synced, then renamed into place, so that a reader never sees a
// partial file and concurrent writers, in one process or several, are safe
// (the last rename wins, with identical content). On error nothing is left
// behind.
func WriteFile(path string, write func(io.Writer) error) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := write(f); err != nil {
		return err
	}
	// Sync before the rename, so that a crash cannot leave a complete name
	// on incomplete content.
	if err := errors.Join(f.Sync(), f.Chmod(0o644)); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
