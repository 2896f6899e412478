package use

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestReferenceRegenerated runs the JavaScript reference again
// (scripts/use-reference: npm ci, then node reference.js) and checks that it
// gives testdata/reference.json: the same ids, and vectors within float32
// rounding. So the committed expectations stay what the reference computes,
// and a change of node or of the reference's dependencies that moved them
// would be seen. It needs node and npm (CI has them): without them it
// skips, and with INFER_REQUIRE_NPM=1 it fails instead.
func TestReferenceRegenerated(t *testing.T) {
	node, errNode := exec.LookPath("node")
	npmBin, errNpm := exec.LookPath("npm")
	if errNode != nil || errNpm != nil {
		if os.Getenv("INFER_REQUIRE_NPM") == "1" {
			t.Fatalf("INFER_REQUIRE_NPM=1 but node or npm is missing: %v %v", errNode, errNpm)
		}
		t.Skip("no node or npm: the committed reference.json is used as it is")
	}
	committed, err := os.ReadFile("testdata/reference.json")
	if err != nil {
		t.Fatal(err)
	}
	var want jsReference
	if err := json.Unmarshal(committed, &want); err != nil {
		t.Fatal(err)
	}
	sentences, err := filepath.Abs("testdata/sentences.json")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, name := range []string{"package.json", "package-lock.json", "reference.js"} {
		data, err := os.ReadFile(filepath.Join("..", "..", "scripts", "use-reference", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	install := exec.CommandContext(ctx, npmBin, "ci", "--ignore-scripts", "--no-audit", "--no-fund")
	install.Dir = dir
	if out, err := install.CombinedOutput(); err != nil {
		if os.Getenv("INFER_REQUIRE_NPM") != "1" {
			t.Skipf("npm ci failed (no registry?; INFER_REQUIRE_NPM=1 makes this fail): %v\n%s", err, out)
		}
		t.Fatalf("npm ci: %v\n%s", err, out)
	}
	run := exec.CommandContext(ctx, node, "reference.js", sentences)
	run.Dir = dir
	var stderr bytes.Buffer
	run.Stderr = &stderr
	out, err := run.Output()
	if err != nil {
		t.Fatalf("node reference.js: %v\n%s", err, stderr.Bytes())
	}
	var got jsReference
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("node reference.js wrote %.200q: %v", out, err)
	}
	if len(got.Sentences) != len(want.Sentences) || len(got.Tokens) != len(want.Tokens) {
		t.Fatalf("regenerated: %d sentences and %d texts, committed: %d and %d: run make use-reference",
			len(got.Sentences), len(got.Tokens), len(want.Sentences), len(want.Tokens))
	}
	for i, g := range got.Sentences {
		w := want.Sentences[i]
		if g.Text != w.Text || !slices.Equal(g.IDs, w.IDs) {
			t.Errorf("sentence %d %.40q: regenerated ids %v, committed %.40q %v", i, g.Text, g.IDs, w.Text, w.IDs)
		}
		if cos := cosine(g.Embedding, w.Embedding); cos < 0.999999 {
			t.Errorf("sentence %d %.40q: the regenerated vector has cosine %.7f to the committed one", i, g.Text, cos)
		}
	}
	for i, g := range got.Tokens {
		if w := want.Tokens[i]; g.Text != w.Text || !slices.Equal(g.IDs, w.IDs) {
			t.Errorf("text %d %q: regenerated ids %v, committed %q %v", i, g.Text, g.IDs, w.Text, w.IDs)
		}
	}
	t.Logf("the JS reference (%v) regenerated reference.json's %d sentences and %d texts", got.Packages, len(got.Sentences), len(got.Tokens))
}
