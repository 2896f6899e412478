package loadgen

import (
	"slices"
	"testing"
	"time"

	"github.com/inferhq/infer/loadgen/record"
)

func lat(ms float64) record.Duration { return record.Duration(ms * float64(time.Millisecond)) }

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
		{"open, caught-up stall", record.Record{TargetRate: 200, AchievedRate: 199, Sent: 10, Status: map[string]int{"200": 10},
			Latency: record.Percentiles{P99: lat(51)}, ScheduleLag: &record.Percentiles{P99: lat(1400), Max: lat(1500)}},
			[]string{record.FlagScheduleLag}, false},
		{"open, lag within jitter", record.Record{TargetRate: 200, AchievedRate: 200, Sent: 10, Status: map[string]int{"200": 10},
			Latency: record.Percentiles{P99: lat(51)}, ScheduleLag: &record.Percentiles{P99: lat(3), Max: lat(40)}}, nil, true},
		{"open, lag small against slow answers", record.Record{TargetRate: 200, AchievedRate: 200, Sent: 10, Status: map[string]int{"200": 10},
			Latency: record.Percentiles{P99: lat(2000)}, ScheduleLag: &record.Percentiles{P99: lat(150)}}, nil, true},
		{"open, lag past a tenth of slow answers", record.Record{TargetRate: 200, AchievedRate: 200, Sent: 10, Status: map[string]int{"200": 10},
			Latency: record.Percentiles{P99: lat(2000)}, ScheduleLag: &record.Percentiles{P99: lat(250)}}, []string{record.FlagScheduleLag}, false},
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
