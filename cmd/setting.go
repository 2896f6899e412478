package cmd

import (
	"errors"
	"reflect"

	"github.com/inferhq/infer/internal/setting"
	"github.com/inferhq/infer/models/onnx"
	"github.com/inferhq/infer/models/registry"
	"github.com/inferhq/infer/models/sim"
	"github.com/inferhq/infer/models/simlm"
	"github.com/inferhq/infer/route"
	"github.com/inferhq/infer/server"
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
	server.SettingTimeout:            "--timeout",
	server.SettingMaxBody:            "--max-body",
	server.SettingDrainTimeout:       "--drain-timeout",
	server.SettingMaxConns:           "--max-conns",
	server.SettingMaxConnsPerAddr:    "--max-conns-per-addr",
	server.SettingHeaderTimeout:      "--header-timeout",
	server.SettingIdleTimeout:        "--idle-timeout",
	route.SettingBalance:             "--hash-balance",
	route.SettingAttempts:            "--attempts",
	route.SettingConnectTimeout:      "--connect-timeout",
	route.SettingWriteTimeout:        "--write-timeout",
	route.SettingResolveInterval:     "--resolve-interval",
	route.SettingPrefixBlock:         "--prefix-block",
	route.SettingPrefixCapacity:      "--prefix-capacity",
	route.SettingPrefixThreshold:     "--prefix-threshold",
	route.SettingBalanceAbs:          "--balance-abs",
	route.SettingBalanceRel:          "--balance-rel",
	route.SettingScoreWeight:         "--score-weights",
	route.SettingMetricsInterval:     "--metrics-interval",
	route.SettingHealthPath:          "--health-path",
	route.SettingHealthInterval:      "--health-interval",
	route.SettingHealthTimeout:       "--health-timeout",
	route.SettingEjectFailures:       "--eject-failures",
	route.SettingEjectTime:           "--eject-time",
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

// flagValue is a flag's value, for notZero.
type flagValue struct {
	name  string
	value any // a number or a time.Duration
}

// notZero refuses the first of flags set to 0 where its library would read
// 0 as its default: on the command line the default is the flag left out.
// The bounds of the values are their libraries' to check (settingError).
func notZero(flags ...flagValue) error {
	for _, f := range flags {
		if reflect.ValueOf(f.value).IsZero() {
			return usageErrorf("%s %v: must not be 0 (leave the flag out for its default)", f.name, f.value)
		}
	}
	return nil
}
