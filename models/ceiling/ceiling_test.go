package ceiling

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/sim"
)

func TestFitLinear(t *testing.T) {
	line := func(fixed, perItem float64, sizes ...int) []Point {
		var ps []Point
		for _, n := range sizes {
			ps = append(ps, Point{Batch: n, MeanMs: fixed + perItem*float64(n)})
		}
		return ps
	}
	for _, tc := range []struct {
		name        string
		points      []Point
		wantFixed   time.Duration
		wantPerItem time.Duration
		wantErr     string
	}{
		{name: "exact line", points: line(4, 0.5, 1, 8, 32, 64), wantFixed: 4 * time.Millisecond, wantPerItem: 500 * time.Microsecond},
		{name: "no fixed cost", points: line(0, 2, 1, 64), wantFixed: 0, wantPerItem: 2 * time.Millisecond},
		{name: "negative intercept clamped", points: []Point{{Batch: 1, MeanMs: 0.5}, {Batch: 10, MeanMs: 20}}, wantFixed: 0,
			wantPerItem: 1985149}, // (1·0.5 + 10·20) / (1 + 100) ms, rounded to ns
		{name: "negative slope flattened", points: []Point{{Batch: 1, MeanMs: 30}, {Batch: 10, MeanMs: 10}},
			wantFixed: 20 * time.Millisecond, wantPerItem: 0},
		{name: "one size", points: line(4, 1, 8, 8), wantErr: "two batch sizes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FitLinear(tc.points)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("FitLinear() error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Fixed != tc.wantFixed || got.PerItem != tc.wantPerItem {
				t.Errorf("FitLinear() = fixed %v per item %v, want %v and %v", got.Fixed, got.PerItem, tc.wantFixed, tc.wantPerItem)
			}
		})
	}
	if got, _ := FitLinear(line(4, 0.5, 1, 8, 32)); got.RMSE != 0 || got.MaxRelErr > 1e-12 {
		t.Errorf("exact line: RMSE %v, max rel err %v; want 0", got.RMSE, got.MaxRelErr)
	}
}

func TestMeasure(t *testing.T) {
	f, err := sim.New(sim.Config{Fixed: 100 * time.Microsecond, PerItem: 10 * time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	var seen []int
	res, err := Measure(context.Background(), f, []string{"a", "b", "c"},
		Config{Batches: []int{1, 4}, Duration: time.Millisecond, MinRuns: 5}, func(p Point) { seen = append(seen, p.Batch) })
	if err != nil {
		t.Fatal(err)
	}
	if res.Model != "sim" || res.Items != 3 || len(res.Points) != 2 || len(seen) != 2 {
		t.Fatalf("Measure() = %+v, seen %v", res, seen)
	}
	for i, p := range res.Points {
		if p.Batch != []int{1, 4}[i] || p.Runs < 5 || p.ItemsPerSec <= 0 || p.P50Ms <= 0 || p.P99Ms < p.P50Ms {
			t.Errorf("point %d = %+v", i, p)
		}
	}
}

type refusing struct{ *sim.Factory }

func (refusing) Prepare(text string) (models.Input, error) {
	return models.Input{}, models.ErrInvalidInput
}

func TestMeasureErrors(t *testing.T) {
	f, _ := sim.New(sim.Config{})
	if _, err := Measure(context.Background(), f, nil, Config{}, nil); err == nil {
		t.Error("Measure with no inputs succeeded")
	}
	if _, err := Measure(context.Background(), f, []string{"a"}, Config{Batches: []int{0}}, nil); err == nil {
		t.Error("Measure with batch 0 succeeded")
	}
	if _, err := Measure(context.Background(), refusing{f}, []string{"a"}, Config{}, nil); !errors.Is(err, models.ErrInvalidInput) {
		t.Errorf("Measure of a refused input: %v, want ErrInvalidInput", err)
	}
}
