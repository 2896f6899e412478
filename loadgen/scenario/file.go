package scenario

import (
	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"

	"github.com/inferhq/infer/loadgen/llm"
)

// The file's shape. Durations are read as text and parsed by validate, so
// that a bad one is reported at its line.
type (
	fileScenario struct {
		Name        string       `yaml:"name"`
		Description string       `yaml:"description"`
		Target      *fileTarget  `yaml:"target"`
		Server      *fileServer  `yaml:"server"`
		Payload     *filePayload `yaml:"payload"`
		Load        *fileLoad    `yaml:"load"`
		Sweep       *fileSweep   `yaml:"sweep"`
		SLO         *fileSLO     `yaml:"slo"`
	}
	fileTarget struct {
		URLs          list[string] `yaml:"urls"`
		Model         string       `yaml:"model"`
		AdminTokenEnv string       `yaml:"admin_token_env"`
		// Replicas are the model servers behind a front (HAProxy), whose
		// /metrics tell each one's share.
		Replicas list[string] `yaml:"replicas"`
	}
	fileServer struct {
		Model        string   `yaml:"model"`
		SimFixed     *string  `yaml:"sim_fixed"`
		SimPerItem   *string  `yaml:"sim_per_item"`
		SimFailOn    string   `yaml:"sim_fail_on"`
		Devices      string   `yaml:"devices"`
		QueueCap     *int     `yaml:"queue_cap"`
		Timeout      *string  `yaml:"timeout"`
		Args         []string `yaml:"args"`
		ReadyTimeout *string  `yaml:"ready_timeout"`
		// Generative models.
		SimStep            *string `yaml:"sim_step"`
		SimPerSeq          *string `yaml:"sim_per_seq"`
		SimPerPrefillToken *string `yaml:"sim_per_prefill_token"`
		KVTokens           *int    `yaml:"kv_tokens"`
		BlockSize          *int    `yaml:"block_size"`
		// Replicas behind an infer route.
		Replicas *int       `yaml:"replicas"`
		Route    *fileRoute `yaml:"route"`
	}
	fileRoute struct {
		Args []string `yaml:"args"`
	}
	filePayload struct {
		Corpus string      `yaml:"corpus"`
		Items  *int        `yaml:"items"`
		Format string      `yaml:"format"`
		Expect string      `yaml:"expect"`
		Inject *fileInject `yaml:"inject"`
		// Streaming LLM endpoints.
		API          string               `yaml:"api"`
		Stream       *bool                `yaml:"stream"`
		PromptTokens *located[llm.Length] `yaml:"prompt_tokens"`
		OutputTokens *located[llm.Length] `yaml:"output_tokens"`
		IgnoreEOS    bool                 `yaml:"ignore_eos"`
		Temperature  *float64             `yaml:"temperature"`
		Prompts      string               `yaml:"prompts"`
		KeyHeader    string               `yaml:"key_header"`
		// Prefix-caching workloads (validate_prefix.go).
		SharedPrefix *fileSharedPrefix `yaml:"shared_prefix"`
		MultiTurn    *fileMultiTurn    `yaml:"multi_turn"`
		Trace        *fileTrace        `yaml:"trace"`
	}
	fileSharedPrefix struct {
		Groups         int                  `yaml:"groups"`
		PrefixTokens   int                  `yaml:"prefix_tokens"`
		QuestionTokens *located[llm.Length] `yaml:"question_tokens"`
		Pick           string               `yaml:"pick"`
	}
	fileMultiTurn struct {
		Turns         int                  `yaml:"turns"`
		ThinkTime     *string              `yaml:"think_time"`
		FirstTokens   *located[llm.Length] `yaml:"first_tokens"`
		MessageTokens *located[llm.Length] `yaml:"message_tokens"`
	}
	fileTrace struct {
		File     string   `yaml:"file"`
		Speed    *float64 `yaml:"speed"`
		Start    *string  `yaml:"start"`
		Duration *string  `yaml:"duration"`
		Scale    *float64 `yaml:"scale"`
	}
	fileInject struct {
		Text  string `yaml:"text"`
		Every int    `yaml:"every"`
	}
	fileLoad struct {
		Concurrency list[int]     `yaml:"concurrency"`
		Rate        list[float64] `yaml:"rate"`
		Pacer       string        `yaml:"pacer"`
		RampFrom    *float64      `yaml:"ramp_from"`
		MaxInFlight *int          `yaml:"max_in_flight"`
		PerWorker   bool          `yaml:"per_worker"`
		Warmup      *string       `yaml:"warmup"`
		Duration    *string       `yaml:"duration"`
		Repeats     *int          `yaml:"repeats"`
		Interleave  bool          `yaml:"interleave"`
		Timeout     *string       `yaml:"timeout"`
		Arrival     string        `yaml:"arrival"`
		Burstiness  *float64      `yaml:"burstiness"`
		Drain       *string       `yaml:"drain"`
		// A capacity search instead of levels.
		Search *fileSearch `yaml:"search"`
	}
	fileSweep struct {
		Model      list[string] `yaml:"model"`
		Endpoints  list[string] `yaml:"endpoints"`
		Batch      list[int]    `yaml:"batch"`
		Workers    list[int]    `yaml:"workers"`
		MaxLatency list[string] `yaml:"max_latency"`
		Policy     list[string] `yaml:"policy"`
		Buckets    list[[]int]  `yaml:"buckets"`
		// Generative models.
		MaxSeqs          list[int]  `yaml:"max_seqs"`
		MaxBatchedTokens list[int]  `yaml:"max_batched_tokens"`
		PrefixCache      list[bool] `yaml:"prefix_cache"`
		// The policies of infer route (server.replicas).
		RoutePolicy list[string] `yaml:"route_policy"`
	}
	fileSLO struct {
		P99           *string  `yaml:"p99"`
		MaxErrorRate  *float64 `yaml:"max_error_rate"`
		MinThroughput *float64 `yaml:"min_throughput"`
		Require       string   `yaml:"require"`
		TTFTP99       *string  `yaml:"ttft_p99"`
		TPOTP99       *string  `yaml:"tpot_p99"`
		E2ELP99       *string  `yaml:"e2el_p99"`
		MinGoodput    *float64 `yaml:"min_goodput"`
		// The least share of good requests.
		MinGoodputFraction *float64 `yaml:"min_goodput_fraction"`
	}
)

// located is a value with a decoder of its own (an UnmarshalYAML), whose
// errors goccy/go-yaml returns without a position: it keeps the error for
// the validator, which reports it at the key's path (and line).
type located[T any] struct {
	v   T
	err error
}

// UnmarshalYAML implements goccy/go-yaml's NodeUnmarshaler: the node is
// decoded strictly into T, and a failure is kept, not returned.
func (l *located[T]) UnmarshalYAML(n ast.Node) error {
	l.err = yaml.NodeToValue(n, &l.v, yaml.DisallowUnknownField())
	return nil
}

// list is a YAML sequence that also accepts a single value.
type list[T any] []T

func (l *list[T]) UnmarshalYAML(unmarshal func(any) error) error {
	var one T
	if err := unmarshal(&one); err == nil {
		*l = list[T]{one}
		return nil
	}
	var many []T
	if err := unmarshal(&many); err != nil {
		return err
	}
	*l = many
	return nil
}
