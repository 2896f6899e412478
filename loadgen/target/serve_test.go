package target

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func dur(d time.Duration) *time.Duration { return &d }

// TestServeFlags: the spec and a configuration's settings render as infer
// serve's flags, in a fixed order (the one dry runs and server.log show),
// a zero field left out.
func TestServeFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec Serve
		set  Settings
		want string
	}{
		{"model only", Serve{Model: "sim"}, Settings{}, "--model sim"},
		{"encoder", Serve{Model: "sim", SimFixed: dur(4 * time.Millisecond), SimPerItem: dur(100 * time.Microsecond), SimFailOn: "poison",
			Devices: "cpu", QueueCap: 512, Timeout: 5 * time.Second, Args: []string{"--max-items", "64"}},
			Settings{Batch: 8, Workers: 2, MaxLatency: 0, MaxLatencySet: true, Policy: "fixed", BucketsSet: true},
			"--model sim --sim-fixed 4ms --sim-per-item 100µs --sim-fail-on poison --devices cpu --queue-cap 512 --timeout 5s --max-items 64 " +
				"--batch 8 --workers 2 --max-latency 0s --policy fixed --buckets none"},
		{"zero sim cost", Serve{Model: "sim", SimFixed: dur(0)}, Settings{Buckets: []int{16, 64}, BucketsSet: true}, "--model sim --sim-fixed 0s --buckets 16,64"},
		{"generation", Serve{Model: "sim-lm", SimStep: dur(2 * time.Millisecond), SimPerSeq: dur(100 * time.Microsecond),
			SimPerPrefillToken: dur(2 * time.Microsecond), KVTokens: 4096, Timeout: 10 * time.Minute},
			Settings{MaxSeqs: 8, MaxBatchedTokens: 512, MaxLatency: 20 * time.Millisecond, MaxLatencySet: true},
			"--model sim-lm --sim-step 2ms --sim-per-seq 100µs --sim-per-prefill-token 2µs --kv-tokens 4096 --timeout 10m0s " +
				"--max-latency 20ms --max-seqs 8 --max-batched-tokens 512"},
	} {
		if got := strings.Join(tc.spec.Flags(tc.set), " "); got != tc.want {
			t.Errorf("%s: flags\n%s\nwant\n%s", tc.name, got, tc.want)
		}
	}
	if got := (Settings{}).Flags(); got != nil {
		t.Errorf("no settings: flags %q, want none", got)
	}
}

func TestSetByBench(t *testing.T) {
	for _, tc := range []struct {
		arg          string
		buckets, gen bool
		want         string
	}{
		{"--batch", false, false, "--batch"},
		{"--batch=8", false, false, "--batch"},
		{"--batching", false, false, ""},
		{"--addr=:1", false, false, "--addr"},
		{"--model", false, true, "--model"},
		{"--max-items", false, false, ""},
		{"--buckets=16", false, false, ""},
		{"--buckets=16", true, false, "--buckets"},
		{"--max-seqs", false, false, ""},
		{"--max-seqs", false, true, "--max-seqs"},
		{"--max-batched-tokens=64", false, true, "--max-batched-tokens"},
	} {
		if got := SetByBench(tc.arg, tc.buckets, tc.gen); got != tc.want {
			t.Errorf("SetByBench(%q, %v, %v) = %q, want %q", tc.arg, tc.buckets, tc.gen, got, tc.want)
		}
	}
	// Every flag a configuration's settings render is one the bench sets.
	all := Settings{Batch: 1, Workers: 1, MaxLatencySet: true, Policy: "fixed", MaxSeqs: 1, MaxBatchedTokens: 1, BucketsSet: true}
	for _, f := range all.Flags() {
		if strings.HasPrefix(f, "--") && SetByBench(f, true, true) != f {
			t.Errorf("settings flag %s may be set again by server.args", f)
		}
	}
	if !slices.Contains((&Serve{Model: "m"}).Flags(Settings{}), "--model") {
		t.Error("the spec's flags do not name the model")
	}
}
