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

// placement is where a factory's sessions run: the ONNX Runtime library it
// loaded, its devices (auto replaced by what it chose) and the intra-op
// threads of each session.
type placement struct {
	library string
	devices []models.Device
	threads int
}

// place loads the runtime from library (once per process), resolves devices
// (none: the CPU) and sets the threads of each session (threadsPerSession).
func place(library string, devices []models.Device, threads, workers int, log *slog.Logger) (placement, error) {
	lib, err := loadRuntime(library)
	if err != nil {
		return placement{}, err
	}
	if len(devices) == 0 {
		devices = []models.Device{{Kind: "cpu"}}
	}
	ds, err := resolveDevices(devices, log)
	if err != nil {
		return placement{}, err
	}
	return placement{library: lib, devices: ds, threads: threadsPerSession(threads, workers)}, nil
}

// logAttrs are the placement's fields for a factory's start-up log line.
func (p placement) logAttrs() []any {
	return []any{"runtime", RuntimeVersion(), "library", p.library, "threads", p.threads, "devices", devicesString(p.devices)}
}

// params is the placement's part of a factory's models.Info.Params.
func (p placement) params() string {
	return fmt.Sprintf("onnxruntime=%s devices=%s threads=%d", RuntimeVersion(), devicesString(p.devices), p.threads)
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
