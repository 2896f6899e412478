// Package minilm locates the tokenizer.json of the Go module
// github.com/clems4ever/all-minilm-l6-v2-go: the source of package
// wordpiece's vocabulary and the configuration its reference tests load.
package minilm

import (
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
)

// Module is the Go module that ships tokenizer.json (all-MiniLM-L6-v2 uses
// the bert-base-uncased vocabulary).
const Module = "github.com/clems4ever/all-minilm-l6-v2-go"

// Version is the module version holding the vocabulary the package embeds.
// It is named here rather than in go.mod, which no Go import keeps it in.
const Version = "v0.0.9"

// TokenizerJSON returns the path of the module's tokenizer.json at Version.
// It runs "go mod download", which fetches the module if the module cache
// lacks it.
func TokenizerJSON() (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", Module+"@"+Version)
	out, err := cmd.Output()
	var m struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &m); jerr != nil && err == nil {
		err = jerr
	}
	if err == nil && m.Dir == "" {
		err = errors.New(m.Error)
	}
	if err != nil {
		return "", fmt.Errorf("go mod download %s: %w", Module, err)
	}
	return filepath.Join(m.Dir, "all_minilm_l6_v2", "tokenizer.json"), nil
}
