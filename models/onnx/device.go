package onnx

import (
	"fmt"
	"log/slog"
	"strconv"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/inferhq/infer/models"
)

// appendCUDA adds ONNX Runtime's CUDA execution provider for device index to
// opts. Nodes it cannot run fall back to the CPU provider.
func appendCUDA(opts *ort.SessionOptions, index int) error {
	cuda, err := ort.NewCUDAProviderOptions()
	if err != nil {
		return noCUDA(err)
	}
	defer cuda.Destroy()
	if err := cuda.Update(map[string]string{"device_id": strconv.Itoa(index)}); err != nil {
		return noCUDA(err)
	}
	if err := opts.AppendExecutionProviderCUDA(cuda); err != nil {
		return noCUDA(err)
	}
	return nil
}

func noCUDA(err error) error {
	return fmt.Errorf("this ONNX Runtime library cannot use CUDA (the build that scripts/setup-ort.sh fetches is CPU-only; "+
		"point --ort-lib at a CUDA build of libonnxruntime with its provider libraries, or use --devices cpu): %w", err)
}

// resolveDevices checks that each CUDA device can be used, at start-up rather
// than at the first session, and replaces auto by cuda:0 when the runtime
// can use it, else by the CPU.
func resolveDevices(ds []models.Device, log *slog.Logger) ([]models.Device, error) {
	out := make([]models.Device, len(ds))
	for i, d := range ds {
		switch d.Kind {
		case "cpu":
		case "cuda":
			if err := probeCUDA(d.Index); err != nil {
				return nil, fmt.Errorf("onnx: device %v: %w", d, err)
			}
		case "auto":
			if err := probeCUDA(0); err != nil {
				d = models.Device{Kind: "cpu"}
				log.Info("device auto: using the CPU", "reason", err)
			} else {
				d = models.Device{Kind: "cuda"}
				log.Info("device auto: using cuda:0")
			}
		default:
			return nil, fmt.Errorf("onnx: device %q: want cpu, cuda:N or auto", d.Kind)
		}
		out[i] = d
	}
	return out, nil
}

// probeCUDA reports whether session options can take the CUDA provider for
// device index: it fails when the runtime has no CUDA support or the
// provider's libraries cannot be loaded.
func probeCUDA(index int) error {
	opts, err := ort.NewSessionOptions()
	if err != nil {
		return err
	}
	defer opts.Destroy()
	return appendCUDA(opts, index)
}
