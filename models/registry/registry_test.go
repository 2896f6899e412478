package registry

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/inferhq/infer/internal/setting"
	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/bert"
	"github.com/inferhq/infer/models/gpt2"
	"github.com/inferhq/infer/models/onnx"
	"github.com/inferhq/infer/models/onnx/onnxtest"
	"github.com/inferhq/infer/models/onnxgraph"
	"github.com/inferhq/infer/models/sim"
	"github.com/inferhq/infer/models/simlm"
)

func TestLookupBuiltins(t *testing.T) {
	for _, tc := range []struct {
		ref, name string
		kind      Kind
		engine    models.EngineDefaults
		context   int
	}{
		{"sim", "sim", Encoder, models.EngineDefaults{}, 0},
		{"bert-tiny", "bert-tiny", Encoder, models.EngineDefaults{}, 0},
		{"bert-base", "bert-base", Encoder, models.EngineDefaults{}, 0},
		{"mini", "bert-mini", Encoder, models.EngineDefaults{}, 0},
		{"BERT-Mini", "bert-mini", Encoder, models.EngineDefaults{}, 0},
		{"sim-lm", "sim-lm", Decoder, models.EngineDefaults{}, simlm.DefaultContext},
		{"gpt2-tiny", "gpt2-tiny", Decoder, onnx.DecoderEngine(), 1024},
		{"GPT2-SMALL", "gpt2-small", Decoder, onnx.DecoderEngine(), 1024},
		{"use-lite", "use-lite", Encoder, models.EngineDefaults{}, 0},
		{"Stories260K", "stories260k", Decoder, onnx.DecoderEngine(), 512},
	} {
		m, err := Lookup(tc.ref)
		if err != nil {
			t.Errorf("Lookup(%q) = %v", tc.ref, err)
			continue
		}
		if m.String() != tc.name || m.Kind != tc.kind || m.Engine != tc.engine || m.Context != tc.context || m.Path != "" {
			t.Errorf("Lookup(%q) = %s %v engine %+v context %d path %q; want %s %v %+v %d", tc.ref, m, m.Kind, m.Engine, m.Context, m.Path,
				tc.name, tc.kind, tc.engine, tc.context)
		}
	}
	// Every built-in resolves by its name, and no two share one.
	seen := map[string]bool{}
	for _, name := range Builtins(nil) {
		if seen[name] {
			t.Errorf("two built-ins called %s", name)
		}
		seen[name] = true
		if m, err := Lookup(name); err != nil || m.Name != name {
			t.Errorf("Lookup(%q) = %v, %v", name, m, err)
		}
	}
	for _, want := range []string{"sim", "bert-mini", "sim-lm", "gpt2-tiny"} {
		if !seen[want] {
			t.Errorf("Builtins() = %v, want %s among them", Builtins(nil), want)
		}
	}
}

func TestLookupUnknown(t *testing.T) {
	for _, tc := range []struct{ ref, suggestion string }{
		{"bert-mni", "bert-mini"},
		{"BERT-MNI", "bert-mini"},
		{"simlm", "sim-lm"},
		{"gpt2tiny", "gpt2-tiny"},
		{"gpt3", ""},
		{"nope", ""},
	} {
		_, err := Lookup(tc.ref)
		var nf *NotFoundError
		if !errors.As(err, &nf) || nf.Suggestion != tc.suggestion || nf.Err != nil || nf.Ref != tc.ref {
			t.Errorf("Lookup(%q) = %#v, want a NotFoundError suggesting %q", tc.ref, err, tc.suggestion)
			continue
		}
		want := `unknown model "` + tc.ref + `"`
		if tc.suggestion != "" {
			want += ` (did you mean "` + tc.suggestion + `"?)`
		}
		if err.Error() != want {
			t.Errorf("Lookup(%q) = %q, want %q", tc.ref, err, want)
		}
	}
}

func TestLookupPaths(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, gen func(io.Writer) error) string {
		path := filepath.Join(dir, name)
		if err := onnxgraph.WriteFile(path, gen); err != nil {
			t.Fatal(err)
		}
		return path
	}
	tiny, _ := bert.Lookup("bert-tiny")
	encoderFile := write("enc.onnx", func(w io.Writer) error { return bert.Generate(w, bert.Spec{Arch: tiny, Task: bert.Embed}) })
	gtiny, _ := gpt2.Lookup("gpt2-tiny")
	decoderFile := write("dec.onnx", func(w io.Writer) error { return gpt2.Generate(w, gpt2.Spec{Arch: gtiny}) })
	export := filepath.Join(dir, "export")
	if err := os.Mkdir(export, 0o755); err != nil {
		t.Fatal(err)
	}
	write("export/decoder_model_merged.onnx", func(w io.Writer) error { return gpt2.Generate(w, gpt2.Spec{Arch: gtiny, CacheBranch: true}) })
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	text := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(text, []byte("not a graph"), 0o644); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		ref  string
		kind Kind
	}{
		{encoderFile, Encoder},
		{decoderFile, Decoder},
		{export, Decoder},
		{export + "/", Decoder},
		// A file the formats cannot tell is an encoder's: ONNX Runtime
		// says what is wrong with it when it is loaded.
		{text, Encoder},
	} {
		m, err := Lookup(tc.ref)
		if err != nil || m.Kind != tc.kind || m.Path != tc.ref || m.String() != tc.ref {
			t.Errorf("Lookup(%q) = %v %v path %q, %v; want a %v", tc.ref, m, m.Kind, m.Path, err, tc.kind)
		}
		if tc.kind == Decoder && m.Engine != onnx.DecoderEngine() {
			t.Errorf("Lookup(%q).Engine = %+v, want ONNX Runtime's", tc.ref, m.Engine)
		}
	}

	for _, tc := range []struct {
		ref, want string
		notExist  bool
	}{
		{filepath.Join(dir, "no", "such.onnx"), "no such file", true},
		{"no-such-model.onnx", "no such file", true}, // its extension makes it a path
		{"./bert-mini", "no such file", true},
		{empty, "holds none of decoder_model_merged.onnx", false},
	} {
		_, err := Lookup(tc.ref)
		var nf *NotFoundError
		if !errors.As(err, &nf) || nf.Err == nil || !strings.Contains(err.Error(), tc.want) || errors.Is(err, fs.ErrNotExist) != tc.notExist {
			t.Errorf("Lookup(%q) = %v, want a NotFoundError saying %q", tc.ref, err, tc.want)
		}
	}

	// A file in the working directory named like a built-in is not the
	// built-in's: names come first.
	t.Chdir(dir)
	if err := os.WriteFile("gpt2-tiny", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if m, err := Lookup("gpt2-tiny"); err != nil || m.Path != "" || m.Name != "gpt2-tiny" {
		t.Errorf("Lookup(gpt2-tiny) beside a file of that name = %+v, %v", m, err)
	}
	// A file named without a separator is a path when it is there.
	if m, err := Lookup("dec.onnx"); err != nil || m.Kind != Decoder || m.Path != "dec.onnx" {
		t.Errorf("Lookup(dec.onnx) = %v, %v", m, err)
	}
}

func TestFormats(t *testing.T) {
	if got, want := Formats(nil), "a llama2.c checkpoint (.bin), a decoder export directory or an .onnx file"; got != want {
		t.Errorf("Formats(nil) = %q, want %q", got, want)
	}
	if got, want := Formats(func(e Entry) bool { return e.Kind == Encoder }), "an .onnx file"; got != want {
		t.Errorf("Formats(encoders) = %q, want %q", got, want)
	}
	encoders := Builtins(func(e Entry) bool { return e.Kind == Encoder && !e.Simulated && e.Of == "" })
	if got := strings.Join(encoders, "|"); got != "bert-tiny|bert-mini|bert-small|bert-medium|bert-base|use-lite" {
		t.Errorf("Builtins(encoders) = %s", got)
	}
}

// The simulated models open with their settings; a setting out of range
// is an error naming it, from the backend's own check.
func TestOpenSimulated(t *testing.T) {
	m, _ := Lookup("sim")
	f, err := m.Encoder(Settings{Sim: sim.Config{Fixed: 2 * time.Millisecond}})
	if err != nil || f.Info().Name != "sim" || !strings.Contains(f.Info().Params, "fixed=2ms") {
		t.Fatalf("sim = %v, %v", f, err)
	}
	if f, err := m.Encoder(Settings{Sim: sim.Config{PerItem: -1}}); f != nil || !isSetting(err, sim.SettingPerItem) {
		t.Errorf("sim with a negative cost = %v, %v; want a per-item cost error", f, err)
	}
	if _, err := m.Decoder(Settings{}); err == nil || !strings.Contains(err.Error(), "sim is an encoder, not a decoder") {
		t.Errorf("sim as a decoder = %v", err)
	}

	lm, _ := Lookup("sim-lm")
	d, err := lm.Decoder(Settings{KVTokens: 8192, SimLM: simlm.Config{Step: time.Millisecond}})
	if err != nil || d.Info().Name != "sim-lm" || d.Decoder().KVTokens != 8192 {
		t.Fatalf("sim-lm = %v, %v", d, err)
	}
	// What the table says before loading is what the model says after.
	if info := d.Decoder(); info.Engine != lm.Engine || info.Context != lm.Context {
		t.Errorf("sim-lm: engine %+v, context %d; the table says %+v, %d", info.Engine, info.Context, lm.Engine, lm.Context)
	}
	if d, err := lm.Decoder(Settings{KVTokens: 100}); d != nil || !isSetting(err, simlm.SettingKVTokens) {
		t.Errorf("sim-lm with 100 KV tokens = %v, %v; want a KV tokens error", d, err)
	}
	if _, err := lm.Encoder(Settings{}); err == nil || !strings.Contains(err.Error(), "sim-lm is a decoder, not an encoder") {
		t.Errorf("sim-lm as an encoder = %v", err)
	}
}

func isSetting(err error, name setting.Name) bool {
	var se *setting.Error
	return errors.As(err, &se) && se.Name == name
}

// Settings are checked before a built-in is generated: a bad one leaves
// the cache empty.
func TestOpenChecksSettingsFirst(t *testing.T) {
	cache := t.TempDir()
	for _, tc := range []struct {
		ref  string
		s    Settings
		name setting.Name
	}{
		{"bert-mini", Settings{MaxSeqLen: 2}, onnx.SettingMaxSeqLen},
		{"bert-mini", Settings{MaxSeqLen: -1}, onnx.SettingMaxSeqLen},
		{"bert-mini", Settings{Threads: -1}, onnx.SettingThreads},
		{"bert-mini", Settings{Task: "translate"}, SettingTask},
		{"gpt2-tiny", Settings{KVTokens: -1}, onnx.SettingKVTokens},
		{"gpt2-tiny", Settings{Threads: -2}, onnx.SettingThreads},
	} {
		m, err := Lookup(tc.ref)
		if err != nil {
			t.Fatal(err)
		}
		tc.s.CacheDir = cache
		if m.Kind == Encoder {
			_, err = m.Encoder(tc.s)
		} else {
			_, err = m.Decoder(tc.s)
		}
		if !isSetting(err, tc.name) {
			t.Errorf("%s with %+v = %v, want an error naming %q", tc.ref, tc.s, err, tc.name)
		}
	}
	if files, _ := os.ReadDir(cache); len(files) > 0 {
		t.Errorf("the cache holds %v: a model was generated before its settings were checked", files)
	}
	m, _ := Lookup("bert-mini")
	if _, err := m.Encoder(Settings{Task: "translate", CacheDir: cache}); err == nil || err.Error() != "task translate: unknown task of bert-mini (want fill-mask or embed)" {
		t.Errorf("bert-mini --task translate = %v", err)
	}
}

// The built-ins on ONNX Runtime are generated into the cache on first use,
// and say after loading what the table says before.
func TestOpenBuiltins(t *testing.T) {
	cache := t.TempDir()
	var logs bytes.Buffer
	s := Settings{CacheDir: cache, Task: "EMBED", Logger: slogTo(&logs)}

	m, _ := Lookup("bert-tiny")
	if got := m.Cached(cache); len(got) != 0 {
		t.Errorf("Cached of an empty cache = %v", got)
	}
	f, err := m.Encoder(s)
	onnxtest.SkipWithoutRuntime(t, err)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if info := f.Info(); info.Name != "bert-tiny" || info.Task != "embed" {
		t.Errorf("bert-tiny embed = %+v", info)
	}
	if got := m.Cached(cache); !slices.Equal(got, []string{"embed"}) {
		t.Errorf("Cached after opening bert-tiny embed = %v", got)
	}
	if !strings.Contains(logs.String(), "built-in model") || !strings.Contains(logs.String(), "task=embed") {
		t.Errorf("log = %s", logs.String())
	}

	g, _ := Lookup("gpt2-tiny")
	d, err := g.Decoder(Settings{CacheDir: cache, KVTokens: 2048})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	info := d.Decoder()
	if d.Info().Name != "gpt2-tiny" || info.KVTokens != 2048 || info.Engine != g.Engine || info.Context != g.Context {
		t.Errorf("gpt2-tiny = %s %+v; the table says engine %+v, context %d", d.Info().Name, info, g.Engine, g.Context)
	}
	if got := g.Cached(cache); !slices.Equal(got, []string{gpt2.Task}) {
		t.Errorf("Cached after opening gpt2-tiny = %v", got)
	}
	// infer models gen writes the same graph as the cache holds.
	var buf bytes.Buffer
	if err := g.Write(&buf, gpt2.Task, 0); err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile(filepath.Join(cache, gpt2.Spec{Arch: mustGPT2(t, "gpt2-tiny"), InPlaceKV: true}.FileName()))
	if err != nil || !bytes.Equal(buf.Bytes(), file) {
		t.Errorf("Write(gpt2-tiny) differs from the cached graph (%v)", err)
	}
}

func mustGPT2(t *testing.T, name string) gpt2.Arch {
	t.Helper()
	a, err := gpt2.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func slogTo(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }
