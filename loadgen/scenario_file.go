package loadgen

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
	}
	filePayload struct {
		Corpus string      `yaml:"corpus"`
		Items  *int        `yaml:"items"`
		Format string      `yaml:"format"`
		Expect string      `yaml:"expect"`
		Inject *fileInject `yaml:"inject"`
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
		Timeout     *string       `yaml:"timeout"`
	}
	fileSweep struct {
		Endpoints  list[string] `yaml:"endpoints"`
		Batch      list[int]    `yaml:"batch"`
		Workers    list[int]    `yaml:"workers"`
		MaxLatency list[string] `yaml:"max_latency"`
		Policy     list[string] `yaml:"policy"`
		Buckets    list[[]int]  `yaml:"buckets"`
	}
	fileSLO struct {
		P99           *string  `yaml:"p99"`
		MaxErrorRate  *float64 `yaml:"max_error_rate"`
		MinThroughput *float64 `yaml:"min_throughput"`
		Require       string   `yaml:"require"`
	}
)

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
