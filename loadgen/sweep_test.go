package loadgen

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/inferhq/infer/loadgen/record"
)

// TestInterleaveOrder: with load.interleave, the repeats of one endpoint
// and level run in rounds over the server configurations; without it,
// each point's repeats run together, in plan order.
func TestInterleaveOrder(t *testing.T) {
	const src = `
server:
  model: sim
load:
  concurrency: [1, 2]
  repeats: 2
  interleave: %v
sweep:
  endpoints: [naive, batched]
  policy: [fixed, immediate]
`
	for _, tc := range []struct {
		interleave bool
		want       []unit
	}{
		{false, []unit{{0, 1}, {0, 2}, {1, 1}, {1, 2}, {2, 1}, {2, 2}, {3, 1}, {3, 2}, {4, 1}, {4, 2}, {5, 1}, {5, 2}}},
		// Plans: naive c1, naive c2, fixed c1, fixed c2 (group 0), then
		// immediate c1, c2 (group 1): naive is measured once per level.
		{true, []unit{{0, 1}, {0, 2}, {1, 1}, {1, 2}, {2, 1}, {4, 1}, {2, 2}, {4, 2}, {3, 1}, {5, 1}, {3, 2}, {5, 2}}},
	} {
		sc := mustParse(t, fmt.Sprintf(src, tc.interleave))
		plans := Plans(sc)
		if len(plans) != 6 || plans[4].Point.Policy != "immediate" || plans[4].Point.Load.Concurrency != 1 {
			t.Fatalf("plans: %+v", plans)
		}
		if got := units(sc, blocks(sc, plans)); !slices.Equal(got, tc.want) {
			t.Errorf("interleave %v: units %v, want %v", tc.interleave, got, tc.want)
		}
	}
}

// TestRunInterleave runs an interleaved sweep against real server
// processes: the server is restarted at every change of configuration,
// each point keeps its own repeats, and the records are those of a
// sequential run.
func TestRunInterleave(t *testing.T) {
	sc := mustParse(t, `
server:
  model: sim
  sim_fixed: 1ms
load:
  concurrency: [1, 4]
  warmup: 50ms
  duration: 300ms
  repeats: 2
  interleave: true
sweep:
  batch: 8
  policy: [fixed, immediate]
`)
	dir := t.TempDir()
	var snaps snapshots
	out, err := Run(context.Background(), sc, Config{Dir: dir, Launcher: testLauncher(), Progress: snaps.put, Tick: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if out.Interrupted || len(out.Records) != 4 {
		t.Fatalf("interrupted %v, %d records; want 4", out.Interrupted, len(out.Records))
	}
	log, err := os.ReadFile(filepath.Join(dir, ServerLog))
	if err != nil {
		t.Fatal(err)
	}
	var starts []string
	for _, m := range regexp.MustCompile(`infer serve \[.*--policy (\w+)`).FindAllStringSubmatch(string(log), -1) {
		starts = append(starts, m[1])
	}
	want := []string{"fixed", "immediate", "fixed", "immediate", "fixed", "immediate", "fixed", "immediate"}
	if !slices.Equal(starts, want) {
		t.Errorf("servers started with policies %v, want %v", starts, want)
	}
	var order []int
	for _, r := range out.Records {
		order = append(order, r.Index)
		wantPolicy := []string{"fixed", "fixed", "immediate", "immediate"}[r.Index]
		wantC := []int{1, 4, 1, 4}[r.Index]
		if r.Point.Policy != wantPolicy || r.Point.Load.Concurrency != wantC || r.Partial {
			t.Errorf("record %d: policy %s, concurrency %d, partial %v; want %s, %d, whole", r.Index, r.Point.Policy, r.Point.Load.Concurrency, r.Partial, wantPolicy, wantC)
		}
		if len(r.Repeats) != 2 || r.Duration.D() != 600*time.Millisecond || r.Status["200"] != r.Sent || r.Sent == 0 {
			t.Errorf("record %d: %d repeats over %v, sent %d, status %v; want 2 over 600ms, all 200", r.Index, len(r.Repeats), r.Duration.D(), r.Sent, r.Status)
		}
	}
	if !slices.Equal(order, []int{0, 2, 1, 3}) {
		t.Errorf("records written in the order %v, want each level's together: [0 2 1 3]", order)
	}
	run, err := record.ReadRun(dir)
	if err != nil || len(run.Records) != 4 {
		t.Fatalf("run directory: %d records, %v", len(run.Records), err)
	}
	if last := snaps.last(); last.Done != 4 || len(last.Finished) != 4 {
		t.Errorf("last snapshot: done %d, finished %d", last.Done, len(last.Finished))
	}
}

// TestRunInterleaveStopped stops an interleaved run in the second round:
// both points of the level keep what they measured, marked partial, the
// one stopped mid-repeat and the one short of its second repeat.
func TestRunInterleaveStopped(t *testing.T) {
	sc := mustParse(t, `
server:
  model: sim
  sim_fixed: 1ms
load:
  concurrency: 2
  warmup: 50ms
  duration: 1s
  repeats: 2
  interleave: true
sweep:
  policy: [fixed, immediate]
`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	progress := func(s Snapshot) {
		if s.Index == 0 && s.Repeat == 2 && measuredSome(s) {
			cancel()
		}
	}
	out, err := Run(ctx, sc, Config{Dir: t.TempDir(), Launcher: testLauncher(), Progress: progress, Tick: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if !out.Interrupted || len(out.Records) != 2 {
		t.Fatalf("interrupted %v, %d records; want true, 2", out.Interrupted, len(out.Records))
	}
	for _, r := range out.Records {
		reps := max(len(r.Repeats), 1) // one repeat is not listed
		if !r.Partial || r.Sent == 0 || r.Status["200"] != r.Sent {
			t.Errorf("record %d: partial %v, sent %d, status %v; want partial, all 200", r.Index, r.Partial, r.Sent, r.Status)
		}
		if want := []int{2, 1}[r.Index]; reps != want {
			t.Errorf("record %d: %d repeats, want %d", r.Index, reps, want)
		}
	}
	if d := out.Records[0].Duration.D(); d <= time.Second || d >= 2*time.Second {
		t.Errorf("stopped point measured %v, want its first 1s and part of its second", d)
	}
}
