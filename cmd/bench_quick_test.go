package cmd

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/inferhq/infer/loadgen/llm/llmtest"
	"github.com/inferhq/infer/loadgen/scenario"
	"github.com/inferhq/infer/loadgen/target"
)

// benchArgs runs infer bench with args (a terminal-less run) and returns
// its exit code, stdout and stderr.
func benchArgs(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	var got *benchOptions
	cmd := newCmdBench(func(_ context.Context, o *benchOptions) error { got = o; return nil })
	cmd.SetArgs(args)
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usageErrorf("%s", flagError(err)) })
	if err := cmd.Execute(); err != nil {
		return exitCode(err, &stderr), stdout.String(), stderr.String()
	}
	got.Launcher = target.ExecLauncher{Path: os.Args[0], Env: []string{mainEnv + "=1"}}
	got.Log.Level = "warn"
	return exitCode(runBench(context.Background(), got), &stderr), stdout.String(), stderr.String()
}

// numbers matches the measured figures of a summary, which differ from run
// to run.
var (
	numbers = regexp.MustCompile(`[0-9]+(\.[0-9]+)?(µs|ms|s|%)?`)
	lagNote = regexp.MustCompile(`\s+(NOTES|schedule-lag)$`)
)

// TestBenchWithoutScenario: infer bench --target URL --api completions
// --rate 2,4 builds the scenario the equivalent YAML holds, and prints the
// same summary (the same rows and columns; only the measured figures
// differ), against infer serve --model sim-lm and against a foreign
// OpenAI-compatible double. --save writes that YAML.
func TestBenchWithoutScenario(t *testing.T) {
	fake := httptest.NewServer(llmtest.New(llmtest.Config{Timing: llmtest.Timing{FirstToken: 5 * time.Millisecond, Interval: time.Millisecond}, Tokens: 8}))
	t.Cleanup(fake.Close)
	for _, tc := range []struct{ name, url string }{
		{"sim-lm", serveTarget(t, "--model", "sim-lm", "--sim-step", "1ms")},
		{"foreign", fake.URL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			saved := filepath.Join(dir, "saved.yaml")
			code, quick, stderr := benchArgs(t, "--target", tc.url, "--api", "completions", "--rate", "2,4", "--duration", "1s", "--warmup", "200ms",
				"--report=false", "-o", filepath.Join(dir, "quick"), "--save", saved)
			if code != 0 {
				t.Fatalf("exit %d\n%s", code, stderr)
			}
			yaml := writeScenario(t, `
name: bench
target:
  urls: [`+tc.url+`]
payload:
  api: completions
load:
  rate: [2, 4]
  arrival: poisson
  warmup: 200ms
  duration: 1s
`)
			code, file, stderr := benchArgs(t, yaml, "--report=false", "-o", filepath.Join(dir, "file"))
			if code != 0 {
				t.Fatalf("exit %d\n%s", code, stderr)
			}
			// The shape of a summary: its lines with the figures and the
			// run directory taken out, and without the notes that timing
			// on a busy machine adds (a schedule lag).
			shape := func(s string) string {
				var out []string
				for _, line := range strings.Split(s, "\n") {
					if strings.HasPrefix(line, "  ↳") || strings.HasPrefix(line, "behind schedule") || strings.HasPrefix(line, "results in") {
						continue
					}
					line = lagNote.ReplaceAllString(line, "")
					out = append(out, strings.Join(strings.Fields(numbers.ReplaceAllString(line, "N")), " "))
				}
				return strings.Join(out, "\n")
			}
			if shape(quick) != shape(file) || !strings.Contains(quick, "rate=2/s") || !strings.Contains(quick, "rate=4/s") {
				t.Errorf("summaries differ:\nflags:\n%s\nfile:\n%s", quick, file)
			}
			a, err := scenario.LoadFile(saved)
			if err != nil {
				t.Fatal(err)
			}
			b, err := scenario.LoadFile(yaml)
			if err != nil {
				t.Fatal(err)
			}
			a.File, a.Source, a.Description, b.File, b.Source, b.Description = "", nil, "", "", nil, ""
			if !reflect.DeepEqual(a, b) {
				t.Errorf("--save wrote\n%+v\nthe YAML is\n%+v", a, b)
			}
		})
	}
}

// TestBenchScenarioArgs: a scenario as an argument or a name in
// scenarios/; the flags without a file refused beside one; nothing at all
// says what to give.
func TestBenchScenarioArgs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"../scenarios/quick.yaml", "--dry-run"}, 0, "7 points"},
		{[]string{"--dry-run"}, exitUsage, "infer bench --target http://127.0.0.1:8000 --rate 2,4"},
		{[]string{"a.yaml", "-s", "b.yaml"}, exitUsage, "give one"},
		{[]string{"a.yaml", "b.yaml"}, exitUsage, "takes one scenario file"},
		{[]string{"../scenarios/quick.yaml", "--rate", "2"}, exitUsage, "--rate builds a scenario without a file"},
		{[]string{"--target", "http://127.0.0.1:1", "--rate", "2", "--concurrency", "4"}, exitUsage, "give one"},
		{[]string{"--target", "http://127.0.0.1:1", "--api", "grpc"}, exitUsage, `--api "grpc": want completions, chat, http`},
		{[]string{"--target", "http://127.0.0.1:1", "--api", "http", "--prompts", "p.jsonl"}, exitUsage, "--prompts is for --api completions or chat"},
		{[]string{"--target", "http://127.0.0.1:1/predict", "--api", "http", "--rate", "5", "--dry-run"}, 0, "1 points"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errOut := benchArgs(t, tc.args...)
			if code != tc.code || !strings.Contains(out+errOut, tc.want) {
				t.Errorf("exit %d, output:\n%s%s\nwant exit %d and %q", code, out, errOut, tc.code, tc.want)
			}
		})
	}
	wd, _ := os.Getwd()
	t.Chdir(filepath.Dir(wd)) // the repository root, where scenarios/ is
	if got := findScenario("quick"); got != filepath.Join("scenarios", "quick.yaml") {
		t.Errorf("findScenario(quick) = %s, want scenarios/quick.yaml", got)
	}
	if got := findScenario("nope"); got != "nope" {
		t.Errorf("findScenario(nope) = %s, want nope (for the error to name)", got)
	}
}

// TestQuickYAML: the http API's path becomes the endpoint, an LLM target's
// /v1 is dropped, and the YAML is a valid scenario.
func TestQuickYAML(t *testing.T) {
	src, err := scenario.Quick{Targets: []string{"http://h:9000/predict"}, API: "http", Concurrency: []int{1, 8}, Warmup: -1}.YAML()
	if err != nil {
		t.Fatal(err)
	}
	sc, err := scenario.Parse("q.yaml", ".", src)
	if err != nil {
		t.Fatalf("%v\n%s", err, src)
	}
	if sc.Targets[0] != "http://h:9000" || sc.Sweep.Endpoints[0] != "/predict" || len(sc.Load.Concurrency) != 2 || sc.Load.Warmup != scenario.DefaultWarmup {
		t.Errorf("scenario %+v from\n%s", sc, src)
	}
	src, _ = scenario.Quick{Targets: []string{"http://h:8000/v1/"}, API: "chat", Rates: []float64{2.5}}.YAML()
	sc, err = scenario.Parse("q.yaml", ".", src)
	if err != nil || sc.Targets[0] != "http://h:8000" || sc.Payload.LLM == nil || sc.Load.Rates[0] != 2.5 || sc.Load.Arrival != "poisson" {
		t.Errorf("scenario %+v, %v from\n%s", sc, err, src)
	}
}
