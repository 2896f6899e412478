package generate

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/inferhq/infer/internal/setting"
	"github.com/inferhq/infer/models"
)

func TestWithModelDefaults(t *testing.T) {
	cpu := models.EngineDefaults{MaxSeqs: 16, MaxBatchedTokens: 256}
	for _, tc := range []struct {
		name      string
		c         Config
		d         models.EngineDefaults
		seqs, mbt int
	}{
		{"the engine's", Config{}, models.EngineDefaults{}, DefaultMaxSeqs, DefaultMaxBatchedTokens},
		{"the model's", Config{}, cpu, 16, 256},
		{"the model's seqs only", Config{}, models.EngineDefaults{MaxSeqs: 8}, 8, DefaultMaxBatchedTokens},
		{"a budget of at least the rows", Config{MaxSeqs: 300}, cpu, 300, 300},
		{"given values stay", Config{MaxSeqs: 4, MaxBatchedTokens: 64}, cpu, 4, 64},
		{"negative values stay for Validate", Config{MaxSeqs: -1, MaxBatchedTokens: -2}, cpu, -1, -2},
	} {
		got := tc.c.WithModelDefaults(tc.d)
		if got.MaxSeqs != tc.seqs || got.MaxBatchedTokens != tc.mbt {
			t.Errorf("%s: WithModelDefaults(%+v) = seqs %d, budget %d; want %d, %d", tc.name, tc.d, got.MaxSeqs, got.MaxBatchedTokens, tc.seqs, tc.mbt)
		}
	}
}

// Each range check runs in Validate, and names its setting so that a front
// end shows it under its own name.
func TestValidateNamesTheSetting(t *testing.T) {
	for _, tc := range []struct {
		c    Config
		name setting.Name
		want string
	}{
		{Config{MaxSeqs: -1}, SettingMaxSeqs, "max seqs -1: want 1 to 4096"},
		{Config{MaxSeqs: MaxMaxSeqs + 1}, SettingMaxSeqs, "max seqs 4097: want 1 to 4096"},
		{Config{MaxBatchedTokens: -1}, SettingMaxBatchedTokens, "max batched tokens -1: want 1 to 1048576"},
		{Config{MaxSeqs: 64, MaxBatchedTokens: 32}, SettingMaxBatchedTokens,
			"max batched tokens 32: want at least max seqs (64): every running sequence needs a token each step"},
		{Config{MaxBatchedTokens: 16}, SettingMaxBatchedTokens,
			"max batched tokens 16: want at least max seqs (32): every running sequence needs a token each step"},
		{Config{KVTokens: -1}, SettingKVTokens, "KV tokens -1: must not be negative"},
		{Config{MaxLatency: -time.Millisecond}, SettingMaxLatency, "max latency -1ms: must not be negative"},
		{Config{QueueCap: MaxQueueCap + 1}, SettingQueueCap, "queue capacity 65537: want 0 (default) to 65536"},
		{Config{StreamBuffer: -1}, SettingStreamBuffer, "stream buffer -1: want 0 (default) to 65536"},
	} {
		err := tc.c.Validate()
		var se *setting.Error
		if !errors.As(err, &se) || se.Name != tc.name || err.Error() != tc.want {
			t.Errorf("Validate(%+v) = %v, want %q naming %q", tc.c, err, tc.want, tc.name)
		}
	}
	if err := (Config{MaxSeqs: 8, MaxBatchedTokens: 8}).Validate(); err != nil {
		t.Errorf("Validate(8 seqs, 8 tokens) = %v", err)
	}
}

// New and Reconfigure take the model's engine defaults for the settings
// left at 0.
func TestModelEngineDefaults(t *testing.T) {
	info := fakeInfo
	info.Engine = models.EngineDefaults{MaxSeqs: 16, MaxBatchedTokens: 256}
	e, err := New(Config{}, newFake(), info, letters{})
	if err != nil {
		t.Fatal(err)
	}
	if got := e.Config(); got.MaxSeqs != 16 || got.MaxBatchedTokens != 256 {
		t.Errorf("New: seqs %d, budget %d; want the model's 16, 256", got.MaxSeqs, got.MaxBatchedTokens)
	}
	// A budget the engine's default rows (32) would refuse fits the model's.
	if _, err := New(Config{MaxBatchedTokens: 20}, newFake(), info, letters{}); err != nil {
		t.Errorf("New(budget 20) with the model's 16 rows = %v", err)
	}
	if err := e.Reconfigure(Config{MaxSeqs: 4}); err != nil {
		t.Fatal(err)
	}
	if got := e.Config(); got.MaxSeqs != 4 || got.MaxBatchedTokens != 256 {
		t.Errorf("Reconfigure(4 seqs): seqs %d, budget %d; want 4, the model's 256", got.MaxSeqs, got.MaxBatchedTokens)
	}
	if err := e.Reconfigure(Config{}); err != nil {
		t.Fatal(err)
	}
	if got := e.Config(); got.MaxSeqs != 16 {
		t.Errorf("Reconfigure(defaults): seqs %d, want the model's 16", got.MaxSeqs)
	}
}

func TestCheckModel(t *testing.T) {
	full := models.DecoderInfo{Context: 1024, KVTokens: 16384}
	for _, tc := range []struct {
		c    Config
		info models.DecoderInfo
		want string
	}{
		{Config{}, full, ""},
		{Config{KVTokens: 4096}, full, ""},
		{Config{KVTokens: 20000}, full, "KV tokens 20000: want at most the capacity of the model instance (16384)"},
		{Config{KVTokens: 512}, full, "KV tokens 512: want at least the model's context (1024 tokens): a long sequence could never run"},
		{Config{}, models.DecoderInfo{Context: 1024, KVTokens: 100}, "KV tokens 100: want at least the model's context"},
		// Before loading only the context may be known.
		{Config{KVTokens: 512}, models.DecoderInfo{Context: 1024}, "KV tokens 512: want at least the model's context"},
		{Config{KVTokens: 512}, models.DecoderInfo{}, ""},
		{Config{}, models.DecoderInfo{Context: 1024}, ""},
	} {
		err := tc.c.CheckModel(tc.info)
		var se *setting.Error
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("CheckModel(%+v, %+v) = %v, want nil", tc.c, tc.info, err)
		case tc.want != "" && (err == nil || !errors.As(err, &se) || se.Name != SettingKVTokens || !strings.HasPrefix(err.Error(), tc.want)):
			t.Errorf("CheckModel(%+v, %+v) = %v, want %q naming KV tokens", tc.c, tc.info, err, tc.want)
		}
	}
}
