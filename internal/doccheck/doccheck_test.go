package doccheck

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestRepositoryLinks checks every relative link of README.md, docs/ and the
// other Markdown files of the repository: each file exists, and each anchor
// is a heading of its file as GitHub renders it.
func TestRepositoryLinks(t *testing.T) {
	problems, err := CheckLinks("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
	// The walk reached the pages it is for.
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(Links(readme)); n < 10 {
		t.Errorf("README.md has %d links; the walk did not read it", n)
	}
}

// TestREADMEIsAPage keeps README.md the short product page: the details
// belong in docs/.
func TestREADMEIsAPage(t *testing.T) {
	src, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(src), "\n"); n > 250 {
		t.Errorf("README.md has %d lines; keep it to 250 and move the details to docs/", n)
	}
}

func TestCheckLinksFindsBrokenLinks(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		t.Helper()
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(".gitignore", "/results/\n*.out\n")
	write("README.md", strings.Join([]string{
		"# Top",
		"[ok](docs/a.md#the-a-page) [ok](#top) [ok](docs/) [ok](https://example.com/x) [ok](docs/a.md#more-1)",
		"[missing file](docs/b.md)",
		"[missing anchor](docs/a.md#nope)",
		"[outside](../elsewhere.md)",
		"`[in code](nowhere.md)`",
		"```sh",
		"[in a block](nowhere.md)",
		"```",
		"[missing here](#bottom)",
	}, "\n"))
	write("docs/a.md", "# The A page\n## More\n## More\n")
	write("results/run/summary.md", "[a chart](throughput.png)\n")
	write("x/testdata/t.md", "[gone](gone.md)\n")

	problems, err := CheckLinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.Error())
	}
	want := []string{
		"README.md:3: link docs/b.md: no such file or folder",
		"README.md:4: link docs/a.md#nope: no heading with the anchor #nope in a.md",
		"README.md:5: link ../elsewhere.md: points outside the repository",
		"README.md:10: link #bottom: no heading with the anchor #bottom in README.md",
	}
	if !slices.Equal(got, want) {
		t.Errorf("CheckLinks =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestSlug(t *testing.T) {
	for _, tc := range []struct{ heading, want string }{
		{"`infer serve`", "infer-serve"},
		{"Serving GPT-2 on ONNX Runtime", "serving-gpt-2-on-onnx-runtime"},
		{"Live changes: the admin API", "live-changes-the-admin-api"},
		{"sim, the simulated accelerator", "sim-the-simulated-accelerator"},
		{"Why — the ¾ threshold", "why--the--threshold"},
		{"Bench and scenarios: `infer bench`", "bench-and-scenarios-infer-bench"},
		{"[Linked](x.md) **bold** snake_case", "linked-bold-snake_case"},
		{"Réglages", "réglages"},
	} {
		if got := Slug(headingText(tc.heading)); got != tc.want {
			t.Errorf("Slug(%q) = %q, want %q", tc.heading, got, tc.want)
		}
	}
}

func TestAnchors(t *testing.T) {
	src := "# Title #\n## Part\n```\n# not a heading\n```\n## Part\n#hashtag\n<a id=\"here\"></a>\n####### seven\n"
	got := Anchors([]byte(src))
	for _, a := range []string{"title", "part", "part-1", "here"} {
		if !got[a] {
			t.Errorf("Anchors lacks %q: %v", a, got)
		}
	}
	for _, a := range []string{"not-a-heading", "hashtag", "seven", "part-2"} {
		if got[a] {
			t.Errorf("Anchors has %q: %v", a, got)
		}
	}
}

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		line string
		want [][]string
	}{
		{`infer serve &`, [][]string{{"infer", "serve"}}},
		{`INFER_ADMIN_TOKEN=T infer bench -s x.yaml  # a comment`, [][]string{{"infer", "bench", "-s", "x.yaml"}}},
		{`curl -d 'Paris is the [MASK] of France.' 127.0.0.1:8080/batched`,
			[][]string{{"curl", "-d", "Paris is the [MASK] of France.", "127.0.0.1:8080/batched"}}},
		{`step "a \"b\"" '"outputs"' -d "$TEXT" "$URL/naive"`,
			[][]string{{"step", `a "b"`, `"outputs"`, "-d", "$TEXT", "$URL/naive"}}},
		{`redis-server & infer worker --model sim && echo ok | cat; true`,
			[][]string{{"redis-server"}, {"infer", "worker", "--model", "sim"}, {"echo", "ok"}, {"cat"}, {"true"}}},
		{`echo a\ b x#y`, [][]string{{"echo", "a b", "x#y"}}},
	} {
		got, err := Split(tc.line)
		if err != nil {
			t.Errorf("Split(%q): %v", tc.line, err)
			continue
		}
		if !slices.EqualFunc(got, tc.want, slices.Equal) {
			t.Errorf("Split(%q) = %q, want %q", tc.line, got, tc.want)
		}
	}
	for _, bad := range []string{`echo 'open`, `echo "open`} {
		if _, err := Split(bad); err == nil {
			t.Errorf("Split(%q) = nil error, want one", bad)
		}
	}
}

func TestCommands(t *testing.T) {
	src := "text `infer no`\n```sh\ninfer serve --model sim-lm \\\n  --max-seqs 32 &\ncurl -N x \\\n  -d '{}'\n```\n```text\ninfer not-a-command\n```\n"
	got, err := Commands([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := []Command{
		{Line: 3, Words: []string{"infer", "serve", "--model", "sim-lm", "--max-seqs", "32"}},
		{Line: 5, Words: []string{"curl", "-N", "x", "-d", "{}"}},
	}
	if !slices.EqualFunc(got, want, func(a, b Command) bool { return a.Line == b.Line && slices.Equal(a.Words, b.Words) }) {
		t.Errorf("Commands = %v, want %v", got, want)
	}
}

// TestDocCurlsAreTried keeps the HTTP examples of README.md and docs/ true:
// each curl command of their sh blocks is a step of scripts/try.sh (make
// try), which sends it to a real server and checks the answer. A command
// matches a step when their arguments are the same, the URL reduced to its
// path (127.0.0.1:8080/batched in the docs, "$URL/batched" in the script).
func TestDocCurlsAreTried(t *testing.T) {
	script, err := os.ReadFile("../../scripts/try.sh")
	if err != nil {
		t.Fatal(err)
	}
	steps, err := trySteps(string(script))
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) < 5 {
		t.Fatalf("found %d steps in scripts/try.sh", len(steps))
	}
	cmds, err := DocCommands("../..")
	if err != nil {
		t.Fatal(err)
	}
	curls := 0
	for _, c := range cmds {
		if c.Words[0] != "curl" {
			continue
		}
		curls++
		args := requestArgs(c.Words[1:])
		if !slices.ContainsFunc(steps, func(s []string) bool { return slices.Equal(s, args) }) {
			t.Errorf("%s:%d: %q is not a step of scripts/try.sh (want a step with the arguments %q)",
				c.Page, c.Line, strings.Join(c.Words, " "), args)
		}
	}
	if curls == 0 {
		t.Error("no curl command in README.md or docs/: the check checks nothing")
	}
}

// trySteps returns the curl arguments of every `step TITLE WANT ARGS...`
// call in try.sh, each reduced by requestArgs.
func trySteps(script string) ([][]string, error) {
	var steps [][]string
	ls := strings.Split(script, "\n")
	for i := 0; i < len(ls); i++ {
		text := strings.TrimSpace(ls[i])
		if !strings.HasPrefix(text, "step ") {
			continue
		}
		for strings.HasSuffix(text, `\`) && i+1 < len(ls) {
			i++
			text = strings.TrimSuffix(text, `\`) + " " + strings.TrimSpace(ls[i])
		}
		cmds, err := Split(text)
		if err != nil {
			return nil, err
		}
		if len(cmds) != 1 || len(cmds[0]) < 4 {
			continue
		}
		steps = append(steps, requestArgs(cmds[0][3:]))
	}
	return steps, nil
}

// A URL of a server as the docs write it, or as try.sh does.
var serverURL = regexp.MustCompile(`^(?:https?://)?(?:127\.0\.0\.1:[0-9]+|localhost:[0-9]+|\$\{?[A-Z_]*URL\}?)(/.*)?$`)

// requestArgs reduces every server URL of a curl command's arguments to its
// path.
func requestArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if m := serverURL.FindStringSubmatch(a); m != nil {
			a = m[1]
		}
		out[i] = a
	}
	return out
}

func TestBlankCodeSpans(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"a `b` c", "a xxx c"},
		{"``a`b`` [x](y)", "xxxxxxx [x](y)"},
		{"`open [x](y)", "`open [x](y)"},
		{"`a` and ``b``", "xxx and xxxxx"},
		{"```a`` b```", "xxxxxxxxxxx"},
	} {
		if got := blankCodeSpans(tc.in); got != tc.want {
			t.Errorf("blankCodeSpans(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
