// Package report turns a bench run's records into PNG charts and a markdown
// summary, and compares a run with a baseline run to give a verdict a CI
// job can act on. It is made of pure functions of the records (package
// loadgen/record): a run can be reported again at any time without
// running it again. It is the only importer of gonum.org/v1/plot.
//
// Write produces, in one folder:
//
//	summary.md              run facts, warnings, the best configuration under the SLO,
//	                        every point, served vs offline, the comparison
//	throughput.png          throughput vs batch size, a line per worker count, naive as a reference
//	latency.png             p50 and p99 vs batch size, a panel per load level
//	naive-vs-batched.png    the naive endpoint against the best batched configuration, per load level
//	throughput-latency.png  every point's throughput vs its p99, the frontier, its knee, the SLO
//	server-time.png         the server's queue vs compute time per request, by batch size
//	policy.png              when points differ only by batching policy: p50/p99 and throughput
//	                        vs offered load, a line per policy
//	comparison.png          with a baseline: a row per point, its changes against its own
//	                        noise band, coloured by what they do to the verdict
//
// summary.md also compares policies (each one's latency and throughput per
// load level, and adaptive's ratios to the others), length buckets
// (throughput, p99 and padding with and without), and, with payload.inject,
// the failures of requests carrying the injected text against the others.
//
// A chart without data to draw (no batched points, no Server-Timing) is
// left out and the summary says why. Every chart's axes end on labelled
// ticks beyond its data, its legend lists what it draws, and a marker
// that would hide another moves aside on a leader line.
package report

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/inferhq/infer/loadgen/record"
)

// SummaryFile is the markdown summary's name in the report folder.
const SummaryFile = "summary.md"

// Options configures Write. The zero value is valid.
type Options struct {
	// Width and Height are the charts' size in pixels. Default 1200×800.
	Width, Height int
	// Noise is the band within which a change against the baseline is
	// noise, where the records carry no repeats. Zero fields take the
	// defaults documented on Noise.
	Noise Noise
}

func (o Options) withDefaults() Options {
	if o.Width <= 0 {
		o.Width = 1200
	}
	if o.Height <= 0 {
		o.Height = 800
	}
	o.Noise = o.Noise.withDefaults()
	return o
}

// Chart is one chart of a report.
type Chart struct {
	File    string // name in the report folder, e.g. "throughput.png"
	Title   string
	Skipped string // why it was not drawn; "" when it was
}

// Result is what Write produced.
type Result struct {
	Dir     string  // the report folder
	Summary string  // path of summary.md
	Charts  []Chart // in the summary's order, drawn or not
	// Best is the point with the highest throughput among those meeting
	// the scenario's SLO (every trusted point when no SLO is set), or nil.
	Best *record.Record
	// Comparison is the run against the baseline; nil without one.
	Comparison *Comparison
}

// DefaultDir is where a run's report goes when no folder is given: the
// folder "report" inside the run's folder, so that a run carries its
// pictures and reporting again replaces them.
func DefaultDir(runDir string) string { return filepath.Join(runDir, "report") }

// Write draws the charts of run and writes them with summary.md into dir
// (DefaultDir(run.Dir) when empty), comparing run with baseline when
// baseline is not nil. Files of an earlier report in dir are replaced; a
// chart not drawn this time is removed. It works from whatever the run
// left: no manifest, a run cut short, failed points, a single point. It
// takes about a second for a sweep of a hundred points.
func Write(ctx context.Context, run, baseline *record.Run, dir string, opts Options) (*Result, error) {
	if run == nil {
		return nil, errors.New("report: no run")
	}
	opts = opts.withDefaults()
	if dir == "" {
		dir = DefaultDir(run.Dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	v := newView(run)
	res := &Result{Dir: dir, Summary: filepath.Join(dir, SummaryFile)}
	if best := ranked(v.recs, run.Manifest.SLO); len(best) > 0 {
		res.Best = best[0]
	}
	if baseline != nil {
		res.Comparison = Compare(run, baseline, opts.Noise)
	}
	charts := v.charts(res.Comparison)
	for _, c := range charts {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		ch := Chart{File: c.file, Title: c.title}
		path := filepath.Join(dir, c.file)
		fig, why := c.build()
		if fig == nil {
			ch.Skipped = why
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("report: %w", err)
			}
		} else {
			b, err := fig.png(opts.Width, opts.Height)
			if err == nil {
				err = os.WriteFile(path, b, 0o644)
			}
			if err != nil {
				return nil, fmt.Errorf("report: chart %s: %w", c.file, err)
			}
		}
		res.Charts = append(res.Charts, ch)
	}
	for _, file := range optionalCharts {
		if slices.ContainsFunc(charts, func(c chart) bool { return c.file == file }) {
			continue
		}
		if err := os.Remove(filepath.Join(dir, file)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("report: %w", err)
		}
	}
	if err := os.WriteFile(res.Summary, []byte(v.summary(res)), 0o644); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	return res, nil
}
