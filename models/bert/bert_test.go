package bert

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/inferhq/infer/models/onnxgraph"
)

func TestLookup(t *testing.T) {
	tests := []struct {
		name      string
		wantShape string
		wantErr   string
	}{
		{"tiny", "L2/H128/A2", ""},
		{"mini", "L4/H256/A4", ""},
		{"bert-mini", "L4/H256/A4", ""},
		{"BERT-Small", "L4/H512/A8", ""},
		{"medium", "L8/H512/A8", ""},
		{"bert-base", "L12/H768/A12", ""},
		{"large", "", "known: bert-tiny, bert-mini, bert-small, bert-medium, bert-base"},
		{"", "", "unknown BERT architecture"},
	}
	for _, tt := range tests {
		a, err := Lookup(tt.name)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Lookup(%q) error = %v, want one containing %q", tt.name, err, tt.wantErr)
			}
			continue
		}
		if err != nil || a.Shape() != tt.wantShape {
			t.Errorf("Lookup(%q) = %s, %v, want %s", tt.name, a.Shape(), err, tt.wantShape)
		}
		if a.Intermediate != 4*a.Hidden || a.Vocab != 30522 || a.MaxPositions != 512 || a.TypeVocab != 2 {
			t.Errorf("Lookup(%q) = %+v, want I=4H, V=30522, P=512, T=2", tt.name, a)
		}
	}
}

func TestParseTask(t *testing.T) {
	tests := []struct {
		in      string
		want    Task
		wantErr bool
	}{
		{"fill-mask", FillMask, false},
		{"embed", Embed, false},
		{"Embed", Embed, false},
		{"classify", "", true},
		{"", "", true},
	}
	for _, tt := range tests {
		got, err := ParseTask(tt.in)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("ParseTask(%q) = %q, %v, want %q (error: %t)", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

// TestParams checks the parameter counts against the published sizes of the
// BERT miniatures (Turc et al., 2019) and BERT-base, and against the graphs.
func TestParams(t *testing.T) {
	published := map[string]float64{"tiny": 4.4e6, "mini": 11.3e6, "small": 29.1e6, "medium": 41.7e6, "base": 110e6}
	for _, a := range Archs() {
		// The published sizes count the whole pre-training model.
		got, want := float64(a.PretrainingParams()), published[a.Name]
		if math.Abs(got-want)/want > 0.01 {
			t.Errorf("%s: PretrainingParams() = %.0f, want within 1%% of the published %.0f", a, got, want)
		}
		for _, task := range Tasks() {
			s := Spec{Arch: a, Task: task, Seed: DefaultSeed}
			if got, want := model(s).Graph.Params(), a.Params(task); got != want {
				t.Errorf("%s %s: graph holds %d parameters, Params() = %d", a, task, got, want)
			}
			t.Logf("%s %s: %d parameters, %+.2f%% from the published %.1fM",
				a, task, a.Params(task), 100*(float64(a.Params(task))-want)/want, want/1e6)
		}
		if got, want := a.Params(FillMask)-a.Params(Embed), int64(a.Hidden*a.Hidden+3*a.Hidden+a.Vocab); got != want {
			t.Errorf("%s: the fill-mask head holds %d parameters, want %d (H² + 3H + V)", a, got, want)
		}
	}
}

func TestGenerateInvalid(t *testing.T) {
	mini, _ := Lookup("mini")
	with := func(f func(*Arch)) Arch { a := mini; f(&a); return a }
	tests := []struct {
		name string
		spec Spec
		want string
	}{
		{"heads", Spec{Arch: with(func(a *Arch) { a.Heads = 3 }), Task: Embed}, "3 heads do not divide hidden size 256"},
		{"zero layers", Spec{Arch: with(func(a *Arch) { a.Layers = 0 }), Task: Embed}, "at least 1"},
		{"name", Spec{Arch: with(func(a *Arch) { a.Name = "../x" }), Task: Embed}, "architecture name"},
		{"small vocab", Spec{Arch: with(func(a *Arch) { a.Vocab = 100 }), Task: FillMask}, "vocabulary"},
		{"task", Spec{Arch: mini, Task: "classify"}, `unknown task "classify"`},
	}
	for _, tt := range tests {
		var buf bytes.Buffer
		err := Generate(&buf, tt.spec)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Generate error = %v, want one containing %q", tt.name, err, tt.want)
		}
		if _, err := Ensure(t.TempDir(), tt.spec); err == nil {
			t.Errorf("%s: Ensure error = nil, want one", tt.name)
		}
	}
}

// micro is a small custom architecture for tests that need a model but not
// a built-in size.
var micro = Arch{Name: "micro", Layers: 2, Hidden: 32, Heads: 4, Intermediate: 64, Vocab: 30522, MaxPositions: 64, TypeVocab: 2}

func generate(t *testing.T, s Spec) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Generate(&buf, s); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestGenerateDeterministic(t *testing.T) {
	a := generate(t, Spec{Arch: micro, Task: FillMask})
	b := generate(t, Spec{Arch: micro, Task: FillMask, Seed: DefaultSeed})
	c := generate(t, Spec{Arch: micro, Task: FillMask, Seed: 2})
	if !bytes.Equal(a, b) {
		t.Errorf("two generations of the same spec differ")
	}
	if len(a) != len(c) || bytes.Equal(a, c) {
		t.Errorf("seeds 1 and 2: %d and %d bytes, equal = %t; want the same size and different weights",
			len(a), len(c), bytes.Equal(a, c))
	}
}

func TestInspectGenerated(t *testing.T) {
	ids := onnxgraph.Tensor{Name: InputIDs, Type: "int64", Shape: []int64{-1, -1}, Dims: []string{"batch", "sequence"}}
	input := func(name string) onnxgraph.Tensor { in := ids; in.Name = name; return in }
	masks := []int64{-1, TopK}
	masksDims := []string{"masks", ""}
	tests := []struct {
		arch        Arch
		task        Task
		wantOutputs []onnxgraph.Tensor
	}{
		{micro, FillMask, []onnxgraph.Tensor{
			{Name: MaskPositions, Type: "int64", Shape: []int64{-1, 2}, Dims: masksDims},
			{Name: TopScores, Type: "float32", Shape: masks, Dims: masksDims},
			{Name: TopIDs, Type: "int64", Shape: masks, Dims: masksDims},
		}},
		{micro, Embed, []onnxgraph.Tensor{
			{Name: Embedding, Type: "float32", Shape: []int64{-1, 32}, Dims: []string{"batch", ""}},
		}},
	}
	for _, tt := range tests {
		a := tt.arch
		info, err := onnxgraph.InspectBytes(generate(t, Spec{Arch: a, Task: tt.task, Seed: 7}))
		if err != nil {
			t.Fatal(err)
		}
		wantInputs := []onnxgraph.Tensor{ids, input(AttentionMask), input(TokenTypeIDs)}
		if !slices.EqualFunc(info.Inputs, wantInputs, tensorEqual) {
			t.Errorf("%s %s: inputs %v, want %v", a, tt.task, info.Inputs, wantInputs)
		}
		if !slices.EqualFunc(info.Outputs, tt.wantOutputs, tensorEqual) {
			t.Errorf("%s %s: outputs %v, want %v", a, tt.task, info.Outputs, tt.wantOutputs)
		}
		if info.Params != a.Params(tt.task) {
			t.Errorf("%s %s: Inspect counts %d parameters, Params() = %d", a, tt.task, info.Params, a.Params(tt.task))
		}
		if info.Opset < 17 {
			t.Errorf("%s %s: opset %d, want at least 17", a, tt.task, info.Opset)
		}
		for k, want := range map[string]string{MetaArch: a.String(), MetaTask: string(tt.task), MetaSeed: "7"} {
			if got := info.Metadata[k]; got != want {
				t.Errorf("%s %s: metadata %s = %q, want %q", a, tt.task, k, got, want)
			}
		}
	}
}

func tensorEqual(a, b onnxgraph.Tensor) bool {
	return a.Name == b.Name && a.Type == b.Type && slices.Equal(a.Shape, b.Shape) && slices.Equal(a.Dims, b.Dims)
}

func TestEnsure(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "models")
	s := Spec{Arch: micro, Task: Embed}

	// Concurrent first uses all get the complete file.
	const callers = 3
	paths := make([]string, callers)
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() { paths[i], errs[i] = Ensure(dir, s) })
	}
	wg.Wait()
	want := generate(t, s)
	for i := range callers {
		if errs[i] != nil {
			t.Fatalf("Ensure #%d: %v", i, errs[i])
		}
		if paths[i] != paths[0] {
			t.Errorf("Ensure #%d = %s, want %s", i, paths[i], paths[0])
		}
	}
	got, err := os.ReadFile(paths[0])
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("cached file (err %v) differs from Generate's output", err)
	}
	if name := filepath.Base(paths[0]); !strings.HasPrefix(name, "bert-micro-embed-") || filepath.Ext(name) != ".onnx" {
		t.Errorf("cached file name %s, want bert-micro-embed-<hash>.onnx", name)
	}

	// A later call reuses the file rather than writing it again.
	before, _ := os.Stat(paths[0])
	again, err := Ensure(dir, Spec{Arch: micro, Task: Embed, Seed: DefaultSeed})
	after, _ := os.Stat(paths[0])
	if err != nil || again != paths[0] || !os.SameFile(before, after) || !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("second Ensure = %s, %v; want the same untouched file %s", again, err, paths[0])
	}

	// Another seed or task is another file.
	otherArch := micro
	otherArch.Layers = 1
	for _, other := range []Spec{{Arch: micro, Task: Embed, Seed: 2}, {Arch: micro, Task: FillMask}, {Arch: otherArch, Task: Embed}} {
		p, err := Ensure(dir, other)
		if err != nil || p == paths[0] {
			t.Errorf("Ensure(%v) = %s, %v; want a file other than %s", other, p, err, paths[0])
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 4 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("cache holds %v, want 4 models and no temporary files", names)
	}
}

func TestDefaultCacheDir(t *testing.T) {
	t.Setenv(CacheDirEnv, "/srv/models")
	if got := DefaultCacheDir(); got != "/srv/models" {
		t.Errorf("DefaultCacheDir() = %s with %s set, want /srv/models", got, CacheDirEnv)
	}
	t.Setenv(CacheDirEnv, "")
	t.Setenv("XDG_CACHE_HOME", "/home/u/.cache")
	if got := DefaultCacheDir(); got != "/home/u/.cache/infer/models" {
		t.Errorf("DefaultCacheDir() = %s, want /home/u/.cache/infer/models", got)
	}
}
