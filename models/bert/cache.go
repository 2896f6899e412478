package bert

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// CacheDirEnv names the environment variable that overrides
// DefaultCacheDir.
const CacheDirEnv = "INFER_CACHE_DIR"

// DefaultCacheDir returns where Ensure keeps generated models: $INFER_CACHE_DIR
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

// FileName returns the name Ensure gives the model of s:
// "bert-mini-fill-mask-<hash>.onnx", where the hash covers everything that
// determines the file's content (shape, task, seed and generator version).
func (s Spec) FileName() string {
	s = s.withDefaults()
	a := s.Arch
	key := fmt.Sprintf("generator=%s name=%s L=%d H=%d A=%d I=%d V=%d P=%d T=%d task=%s seed=%d",
		generatorVersion, a.Name, a.Layers, a.Hidden, a.Heads, a.Intermediate, a.Vocab, a.MaxPositions,
		a.TypeVocab, s.Task, s.Seed)
	sum := sha256.Sum256([]byte(key))
	return fmt.Sprintf("%s-%s-%s.onnx", a, s.Task, hex.EncodeToString(sum[:6]))
}

// Ensure returns the path of the model of s in cacheDir, generating it
// first if it is not there. The file is written under a temporary name and
// renamed into place once complete, so a reader never sees a partial file
// and concurrent callers, in one process or several, are safe: each may
// generate, and the last rename wins with identical content.
func Ensure(cacheDir string, s Spec) (path string, err error) {
	s = s.withDefaults()
	if err := s.validate(); err != nil {
		return "", fmt.Errorf("generate %s %s: %w", s.Arch, s.Task, err)
	}
	path = filepath.Join(cacheDir, s.FileName())
	if _, err := os.Stat(path); err == nil {
		return path, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("model cache: %w", err)
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", fmt.Errorf("model cache: %w", err)
	}
	f, err := os.CreateTemp(cacheDir, "."+s.FileName()+".*.tmp")
	if err != nil {
		return "", fmt.Errorf("model cache: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := Generate(f, s); err != nil {
		return "", err
	}
	// Sync before the rename, so that a crash cannot leave a complete name
	// on incomplete content.
	if err := f.Sync(); err != nil {
		return "", fmt.Errorf("model cache: %w", err)
	}
	if err := f.Chmod(0o644); err != nil {
		return "", fmt.Errorf("model cache: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("model cache: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return "", fmt.Errorf("model cache: %w", err)
	}
	return path, nil
}
