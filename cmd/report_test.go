package cmd

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReportFlags(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		check   func(t *testing.T, o *reportOptions)
		wantErr string
	}{
		{args: []string{"runs/a"}, check: func(t *testing.T, o *reportOptions) {
			if o.Run != "runs/a" || o.Baseline != "" || o.Out != "" || o.FailOnRegression || o.NoiseThroughput != 10 || o.NoiseP99 != 20 {
				t.Errorf("defaults = %+v", o)
			}
		}},
		{args: []string{"runs/a", "--baseline", "base", "--out", "ci", "--fail-on-regression", "--noise-throughput", "5", "--noise-p99", "30"},
			check: func(t *testing.T, o *reportOptions) {
				if o.Baseline != "base" || o.Out != "ci" || !o.FailOnRegression || o.NoiseThroughput != 5 || o.NoiseP99 != 30 {
					t.Errorf("options = %+v", o)
				}
			}},
		{args: nil, wantErr: "takes one argument"},
		{args: []string{"a", "b"}, wantErr: "takes one argument"},
		{args: []string{"a", "--noise-p99", "-1"}, wantErr: "must not be negative"},
		{args: []string{"a", "--fail-on-regresion"}, wantErr: "unknown flag"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var got *reportOptions
			cmd := newCmdReport(func(_ context.Context, o *reportOptions) error { got = o; return nil })
			if !execFlags(t, cmd, tc.args, tc.wantErr) {
				return
			}
			tc.check(t, got)
		})
	}
}

// TestReportRun runs infer report on the report package's fixture runs:
// the output names the folder and prints the verdict, and a regression
// fails only with --fail-on-regression.
func TestReportRun(t *testing.T) {
	const fixtures = "../report/testdata/"
	for _, tc := range []struct {
		name string
		args []string
		code int
		out  []string
	}{
		{"one point, no manifest", []string{fixtures + "one-point"}, exitOK,
			[]string{"summary.md", "throughput.png: not drawn: no batched point with a known batch size", "best under the SLO: naive rate=10"}},
		{"as good as the baseline", []string{fixtures + "partial", "--baseline", fixtures + "sim", "--fail-on-regression"}, exitOK,
			[]string{"comparison.png", "verdict against " + fixtures + "sim: pass: 0 regression, 0 warn, 41 pass; 104 points unmatched"}},
		{"regression: warns by default", []string{fixtures + "failed", "--baseline", fixtures + "sim"}, exitOK,
			[]string{"verdict against " + fixtures + "sim: regression: 4 regression, 0 warn, 2 pass", "not failing: add --fail-on-regression"}},
		{"regression: fails when asked", []string{fixtures + "failed", "--baseline", fixtures + "sim", "--fail-on-regression"}, exitRegression,
			[]string{"regression: 4 regression", "infer: regression against the baseline"}},
		{"no such run", []string{"testdata/no-such-run"}, exitUsage, []string{"read run testdata/no-such-run: no such folder"}},
		{"not a run", []string{"testdata"}, exitUsage, []string{"no results.jsonl there"}},
		{"no such baseline", []string{fixtures + "sim", "--baseline", "testdata/nothing"}, exitUsage, []string{"read baseline testdata/nothing: no such folder"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "report")
			var buf bytes.Buffer
			root := newCmdRoot(&buf, &buf)
			root.SetArgs(append([]string{"report", "--out", out}, tc.args...))
			if code := exitCode(root.Execute(), &buf); code != tc.code {
				t.Errorf("exit code = %d, want %d; output:\n%s", code, tc.code, buf.String())
			}
			for _, want := range tc.out {
				if !strings.Contains(buf.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, buf.String())
				}
			}
			if tc.code != exitUsage {
				if !strings.Contains(buf.String(), "report: "+out) {
					t.Errorf("output does not name the folder %s:\n%s", out, buf.String())
				}
				if _, err := os.Stat(filepath.Join(out, "summary.md")); err != nil {
					t.Error(err)
				}
			}
		})
	}
}
