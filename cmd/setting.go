package cmd

import (
	"errors"

	"github.com/inferhq/infer/internal/setting"
	"github.com/inferhq/infer/models/onnx"
	"github.com/inferhq/infer/models/registry"
	"github.com/inferhq/infer/models/sim"
	"github.com/inferhq/infer/models/simlm"
	"github.com/inferhq/infer/server/generate"
)

// flagOf names the libraries' settings by the flags that set them, for
// their errors: each library checks its settings once, in its own words
// (*setting.Error), and the command line says which flag to fix.
var flagOf = map[setting.Name]string{
	generate.SettingMaxSeqs:          "--max-seqs",
	generate.SettingMaxBatchedTokens: "--max-batched-tokens",
	generate.SettingKVTokens:         "--kv-tokens", // and onnx's, simlm's
	generate.SettingMaxLatency:       "--max-latency",
	generate.SettingQueueCap:         "--queue-cap",
	generate.SettingBlockSize:        "--block-size",
	onnx.SettingMaxSeqLen:            "--max-seq-len",
	onnx.SettingThreads:              "--threads",
	sim.SettingFixed:                 "--sim-fixed",
	sim.SettingPerItem:               "--sim-per-item",
	simlm.SettingStep:                "--sim-step",
	simlm.SettingPerSeq:              "--sim-per-seq",
	simlm.SettingPerPrefillToken:     "--sim-per-prefill-token",
	registry.SettingTask:             "--task",
	registry.SettingTokenizer:        "--tokenizer",
}

// flagName is the flag of setting n, or n in its library's words when no
// flag sets it.
func flagName(n setting.Name) string {
	if f, ok := flagOf[n]; ok {
		return f
	}
	return string(n)
}

// settingError returns err as a usage error naming the flag to fix when it
// is a setting's (*setting.Error); other errors as they are.
func settingError(err error) error {
	var se *setting.Error
	if errors.As(err, &se) {
		return &usageError{msg: se.Render(flagName)}
	}
	return err
}
