package bert

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"

	"github.com/inferhq/infer/models/onnxgraph"
)

// CacheDirEnv names the environment variable that overrides
// DefaultCacheDir.
const CacheDirEnv = onnxgraph.CacheDirEnv

// DefaultCacheDir returns where Ensure keeps generated models: $INFER_CACHE_DIR
// when set, else infer/models under the user's cache directory
// (~/.cache/infer/models on Linux), else under the system's temporary
// directory.
func DefaultCacheDir() string { return onnxgraph.DefaultCacheDir() }

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
func Ensure(cacheDir string, s Spec) (string, error) {
	s = s.withDefaults()
	if err := s.validate(); err != nil {
		return "", fmt.Errorf("generate %s %s: %w", s.Arch, s.Task, err)
	}
	return onnxgraph.EnsureFile(cacheDir, s.FileName(), func(w io.Writer) error { return Generate(w, s) })
}
