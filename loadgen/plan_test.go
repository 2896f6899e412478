package loadgen

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/inferhq/infer/loadgen/scenario"
)

func TestPlans(t *testing.T) {
	sc, err := scenario.Parse("s.yaml", ".", []byte(`
server:
  model: sim
  sim_fixed: 1ms
load:
  concurrency: [4, 16]
  warmup: 1s
  duration: 2s
  repeats: 2
sweep:
  endpoints: [naive, batched]
  batch: [1, 8]
  workers: [1, 2]
  max_latency: 5ms
`))
	if err != nil {
		t.Fatal(err)
	}
	plans := Plans(sc)
	var got []string
	for _, p := range plans {
		got = append(got, p.Point.Name)
	}
	want := []string{
		"naive c=4", "naive c=16",
		"batched b=1 w=1 c=4", "batched b=1 w=1 c=16",
		"batched b=8 w=1 c=4", "batched b=8 w=1 c=16",
		"batched b=1 w=2 c=4", "batched b=1 w=2 c=16",
		"batched b=8 w=2 c=4", "batched b=8 w=2 c=16",
	}
	if !slices.Equal(got, want) {
		t.Errorf("points =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := Shared(sc); got != "lat=5ms" {
		t.Errorf("Shared() = %q, want lat=5ms (the one setting every batched point has)", got)
	}
	for i, p := range plans {
		if p.Index != i {
			t.Errorf("plans[%d].Index = %d", i, p.Index)
		}
		if p.Point.Endpoint == "naive" && (p.Point.Batch != 0 || p.Point.Workers != 0 || p.Group != 0) {
			t.Errorf("naive point %+v carries batching settings or a later group", p)
		}
	}
	groups := []int{0, 0, 0, 0, 1, 1, 2, 2, 3, 3}
	for i, g := range groups {
		if plans[i].Group != g {
			t.Errorf("plans[%d].Group = %d, want %d", i, plans[i].Group, g)
		}
	}
	wantServe := []string{"--model", "sim", "--sim-fixed", "1ms", "--batch", "8", "--workers", "2", "--max-latency", "5ms"}
	if !slices.Equal(plans[8].Serve, wantServe) {
		t.Errorf("plans[8].Serve = %q, want %q", plans[8].Serve, wantServe)
	}
	if got := sc.Estimate(); got != 6*time.Second {
		t.Errorf("Estimate() = %v, want 6s (2 repeats × (1s + 2s))", got)
	}
}

func TestPlansOpenLoopAndTargets(t *testing.T) {
	sc, err := scenario.Parse("s.yaml", ".", []byte(`
target:
  urls: [http://a:1, http://b:2]
payload:
  items: 4
load:
  rate: [10, 2.5]
  pacer: ramp
  ramp_from: 1
sweep:
  endpoints: [v2, /predict]
`))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range Plans(sc) {
		got = append(got, p.Point.Name)
		if p.Serve != nil || p.Point.Items != 4 || p.Point.Load.Mode != "open" || p.Point.Load.RampFrom != 1 {
			t.Errorf("plan %+v", p)
		}
	}
	want := []string{"v2 ramp=1→10/s items=4", "v2 ramp=1→2.5/s items=4", "/predict ramp=1→10/s items=4", "/predict ramp=1→2.5/s items=4"}
	if !slices.Equal(got, want) {
		t.Errorf("points = %q, want %q", got, want)
	}
}

// TestPlansPerWorker: with load.per_worker, each level is a share per
// worker, so every configuration is loaded at the same share of its
// capacity; the naive endpoint, with one instance, at the level itself.
func TestPlansPerWorker(t *testing.T) {
	sc := mustParse(t, `
server:
  model: sim
load:
  rate: [10, 100]
  per_worker: true
sweep:
  endpoints: [naive, batched]
  workers: [1, 4]
  policy: [fixed, adaptive]
`)
	var got []string
	for _, p := range Plans(sc) {
		got = append(got, p.Point.Name)
	}
	want := []string{
		"naive rate=10/s", "naive rate=100/s",
		"batched w=1 fixed rate=10/s", "batched w=1 fixed rate=100/s",
		"batched w=4 fixed rate=40/s", "batched w=4 fixed rate=400/s",
		"batched w=1 adaptive rate=10/s", "batched w=1 adaptive rate=100/s",
		"batched w=4 adaptive rate=40/s", "batched w=4 adaptive rate=400/s",
	}
	if !slices.Equal(got, want) {
		t.Errorf("points =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A sweep of models starts one server per model, each with its own naive
// points; the points are named by their model.
func TestPlansModels(t *testing.T) {
	sc, err := scenario.Parse("s.yaml", ".", []byte(`
server:
  devices: cpu
load:
  concurrency: 8
sweep:
  model: [bert-base, bert-base-int8]
  endpoints: [naive, batched]
  batch: [8, 32]
`))
	if err != nil {
		t.Fatal(err)
	}
	plans := Plans(sc)
	var got []string
	for _, p := range plans {
		got = append(got, fmt.Sprintf("%d %s: %s", p.Group, p.Point.Name, strings.Join(p.Serve[:2], " ")))
	}
	want := []string{
		"0 bert-base naive c=8: --model bert-base",
		"0 bert-base batched b=8 c=8: --model bert-base",
		"1 bert-base batched b=32 c=8: --model bert-base",
		"2 bert-base-int8 naive c=8: --model bert-base-int8",
		"2 bert-base-int8 batched b=8 c=8: --model bert-base-int8",
		"3 bert-base-int8 batched b=32 c=8: --model bert-base-int8",
	}
	if !slices.Equal(got, want) {
		t.Errorf("points =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if plans[3].Point.Model != "bert-base-int8" {
		t.Errorf("point %+v: want its model", plans[3].Point)
	}
	one, err := scenario.Parse("s.yaml", ".", []byte("server: {}\nload:\n  concurrency: 8\nsweep:\n  model: bert-mini-int8\n  batch: [8, 32]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := Shared(one); got != "bert-mini-int8" {
		t.Errorf("Shared(one model) = %q, want the model", got)
	}
	if got := Plans(one)[0].Point.Name; got != "batched b=8 c=8" {
		t.Errorf("point of one model = %q, want it named without the model", got)
	}
}
