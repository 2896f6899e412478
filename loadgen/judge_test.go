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
			Latency: record.Percentiles{P99: lat(51)}, ScheduleLag: &record.Percentiles{P99: lat(1400), Max: lat(1500)},
			FromSchedule: &record.Percentiles{P99: lat(1450)}},
			[]string{record.FlagScheduleLag}, false},
		{"open, lag within jitter", record.Record{TargetRate: 200, AchievedRate: 200, Sent: 10, Status: map[string]int{"200": 10},
			Latency: record.Percentiles{P99: lat(51)}, ScheduleLag: &record.Percentiles{P99: lat(3), Max: lat(40)},
			FromSchedule: &record.Percentiles{P99: lat(53)}}, nil, true},
		{"open, lag that barely moves slow answers' p99", record.Record{TargetRate: 300, AchievedRate: 300, Sent: 10, Status: map[string]int{"200": 10},
			Latency: record.Percentiles{P99: lat(44.2)}, ScheduleLag: &record.Percentiles{P99: lat(15.9), Max: lat(35)},
			FromSchedule: &record.Percentiles{P99: lat(45.1)}}, nil, true},
		{"open, lag within a tenth of slow answers", record.Record{TargetRate: 200, AchievedRate: 200, Sent: 10, Status: map[string]int{"200": 10},
			Latency: record.Percentiles{P99: lat(2000)}, ScheduleLag: &record.Percentiles{P99: lat(150)},
			FromSchedule: &record.Percentiles{P99: lat(2150)}}, nil, true},
		{"open, lag past a tenth of slow answers", record.Record{TargetRate: 200, AchievedRate: 200, Sent: 10, Status: map[string]int{"200": 10},
			Latency: record.Percentiles{P99: lat(2000)}, ScheduleLag: &record.Percentiles{P99: lat(250)},
			FromSchedule: &record.Percentiles{P99: lat(2250)}}, []string{record.FlagScheduleLag}, false},
		{"open, fast answers, late sends", record.Record{TargetRate: 200, AchievedRate: 200, Sent: 10, Status: map[string]int{"200": 10},
			Latency: record.Percentiles{P99: lat(1.3)}, ScheduleLag: &record.Percentiles{P99: lat(39)},
			FromSchedule: &record.Percentiles{P99: lat(40)}}, []string{record.FlagScheduleLag}, false},
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
