package loadgen

import (
	"slices"
	"testing"

	"github.com/inferhq/infer/loadgen/record"
)

func TestJudge(t *testing.T) {
	for _, tc := range []struct {
		name      string
		rec       record.Record
		wantFlags []string
		wantValid bool
	}{
		{"open, on target", record.Record{TargetRate: 1000, AchievedRate: 996, Sent: 10, Status: map[string]int{"200": 10}, GeneratorCPU: 0.3}, nil, true},
		{"open, just enough", record.Record{TargetRate: 1000, AchievedRate: 950, Sent: 10, Status: map[string]int{"200": 10}}, nil, true},
		{"open, held back", record.Record{TargetRate: 1000, AchievedRate: 949, Sent: 10, Status: map[string]int{"200": 10}},
			[]string{record.FlagCoordinatedOmission}, false},
		{"closed loop has no target", record.Record{AchievedRate: 5, Sent: 10, Status: map[string]int{"200": 10}}, nil, true},
		{"generator busy", record.Record{Sent: 10, Status: map[string]int{"200": 10}, GeneratorCPU: 1.8},
			[]string{record.FlagGeneratorSaturated}, false},
		{"some errors", record.Record{Sent: 10, Status: map[string]int{"200": 9, "429": 1}}, []string{record.FlagErrors}, true},
		{"nothing worked", record.Record{Sent: 10, Status: map[string]int{"503": 10}},
			[]string{record.FlagErrors, record.FlagNoSuccess}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.rec
			judge(&r, 2)
			if !slices.Equal(r.Flags, tc.wantFlags) || r.Valid != tc.wantValid {
				t.Errorf("judge = %v valid %v; want %v valid %v", r.Flags, r.Valid, tc.wantFlags, tc.wantValid)
			}
		})
	}
}
