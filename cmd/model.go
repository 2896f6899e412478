package cmd

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/models/sim"
)

// modelOptions choose and configure the model; shared by the commands that
// load one.
type modelOptions struct {
	Model      string
	Devices    string
	SimFixed   time.Duration
	SimPerItem time.Duration
}

func (o *modelOptions) bind(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.Model, "model", "sim", "model to serve: sim (simulated accelerator)")
	f.StringVar(&o.Devices, "devices", "cpu", "devices for the model instances: cpu, auto, or cuda:0[,cuda:1…]; workers are assigned round-robin")
	f.DurationVar(&o.SimFixed, "sim-fixed", 77*time.Millisecond, "sim: fixed cost of any batch")
	f.DurationVar(&o.SimPerItem, "sim-per-item", 1160*time.Microsecond, "sim: added cost per item in a batch")
}

// open returns the factory for the chosen model.
func (o *modelOptions) open() (models.Factory, error) {
	if _, err := models.ParseDevices(o.Devices); err != nil {
		return nil, usageErrorf("--devices: %v", err)
	}
	switch o.Model {
	case "sim":
		f, err := sim.New(sim.Config{Fixed: o.SimFixed, PerItem: o.SimPerItem})
		if err != nil {
			return nil, usageErrorf("%v", err)
		}
		return f, nil
	default:
		return nil, usageErrorf("--model %q: unknown model; built-in models: sim", o.Model)
	}
}

func describe(info models.Info) string {
	if info.Params == "" {
		return info.Name
	}
	return fmt.Sprintf("%s (%s)", info.Name, info.Params)
}
