// Package sim is a simulated accelerator: a batch of n items takes
// Fixed + PerItem·n of wall time without using the CPU, the way a host thread
// waits on a GPU, and yields deterministic outputs. It exists to study
// batching where no accelerator is present and to make tests fast and exact.
package sim

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"strings"
	"time"

	"github.com/inferhq/infer/internal/setting"
	"github.com/inferhq/infer/models"
)

// The cost of a batch that infer serve --model sim simulates unless told
// otherwise: BERT-base on one GPU, 423 items/s per worker at batch 64. (A
// zero Config computes instantly.)
const (
	DefaultFixed   = 77 * time.Millisecond
	DefaultPerItem = 1160 * time.Microsecond
)

// Config is the simulated cost of a batch. The zero value computes instantly.
type Config struct {
	// Fixed is the cost of any batch, whatever its size (kernel launch,
	// transfers, the weights' pass through memory).
	Fixed time.Duration
	// PerItem is the added cost of each item in a batch.
	PerItem time.Duration
	// FailOn, when set, injects faults for studying error isolation: a
	// batch containing an item whose text contains FailOn fails as a
	// whole, after taking its time, with ErrInjected — as a device error
	// would, without saying which item caused it.
	FailOn string
	// GoSleep waits with time.Sleep instead of the precise waiter. Go's
	// timers wake up to ~1 ms late on these machines, so batches take a
	// little longer than Cost says; but the wait then follows the fake clock
	// of a testing/synctest bubble, so a server on this model can be tested
	// with exact virtual times.
	GoSleep bool
}

// Name is the simulated model's name, as clients and the command line
// address it.
const Name = "sim"

// The names of Config's settings in errors (*setting.Error).
const (
	SettingFixed   setting.Name = "fixed cost"    // Config.Fixed
	SettingPerItem setting.Name = "per-item cost" // Config.PerItem
)

// Validate reports a Config New refuses: a negative cost.
func (c Config) Validate() error {
	switch {
	case c.Fixed < 0:
		return setting.Errorf(SettingFixed, c.Fixed, "must not be negative")
	case c.PerItem < 0:
		return setting.Errorf(SettingPerItem, c.PerItem, "must not be negative")
	}
	return nil
}

// ErrInjected is the error of a batch failed by Config.FailOn.
var ErrInjected = errors.New("sim: injected batch failure")

// Cost returns the simulated wall time of a batch of n items.
func (c Config) Cost(n int) time.Duration { return c.Fixed + time.Duration(n)*c.PerItem }

// Prediction is the output for one item: a label and a score derived from a
// hash of the text, so the same text always gets the same answer.
type Prediction struct {
	Label string  `json:"label"`
	Score float64 `json:"score"`
}

// Predict returns the deterministic prediction for text.
func Predict(text string) Prediction {
	h := fnv.New64a()
	h.Write([]byte(text))
	v := h.Sum64()
	return Prediction{
		Label: labels[v%uint64(len(labels))],
		Score: math.Round(float64(v>>11)/(1<<53)*1e6) / 1e6,
	}
}

var labels = []string{"LABEL_0", "LABEL_1", "LABEL_2", "LABEL_3", "LABEL_4", "LABEL_5", "LABEL_6", "LABEL_7"}

// Factory creates simulated model instances.
type Factory struct{ cfg Config }

// New returns a factory for the simulated model.
func New(cfg Config) (*Factory, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	return &Factory{cfg: cfg}, nil
}

// Info describes the simulated model.
func (f *Factory) Info() models.Info {
	return models.Info{
		Name:    Name,
		Task:    "classify",
		Backend: "sim",
		Params:  f.params(),
	}
}

func (f *Factory) params() string {
	p := fmt.Sprintf("fixed=%v per_item=%v", f.cfg.Fixed, f.cfg.PerItem)
	if f.cfg.FailOn != "" {
		p += fmt.Sprintf(" fail_on=%q", f.cfg.FailOn)
	}
	return p
}

// Prepare accepts any text.
func (f *Factory) Prepare(text string) (models.Input, error) {
	return models.Input{Text: text}, nil
}

// New returns an instance; each has its own clock compensation.
func (f *Factory) New(context.Context, int) (models.Model, error) {
	m := &Model{cfg: f.cfg, sleep: time.Sleep}
	if !f.cfg.GoSleep {
		m.sleep = new(waiter).wait
	}
	return m, nil
}

// Close does nothing.
func (f *Factory) Close() error { return nil }

// Model is one simulated accelerator. It is not safe for concurrent use.
type Model struct {
	cfg   Config
	sleep func(time.Duration)
}

// Predict waits Cost(len(in)) without using the CPU, then fills out. The wait
// is not interrupted by ctx: like a kernel on a device, a started batch runs
// to its end.
func (m *Model) Predict(_ context.Context, in []models.Input, out []models.Output) error {
	m.sleep(m.cfg.Cost(len(in)))
	if m.cfg.FailOn != "" {
		for _, x := range in {
			if strings.Contains(x.Text, m.cfg.FailOn) {
				return fmt.Errorf("%w: batch of %d holds %q", ErrInjected, len(in), m.cfg.FailOn)
			}
		}
	}
	for i, x := range in {
		out[i] = Predict(x.Text)
	}
	return nil
}

// Close does nothing.
func (m *Model) Close() error { return nil }
