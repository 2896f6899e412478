package models

import (
	"fmt"
	"strconv"
	"strings"
)

// Device is where a model instance runs.
type Device struct {
	Kind  string // "cpu", "cuda" or "auto"
	Index int    // the CUDA device number
}

func (d Device) String() string {
	if d.Kind == "cuda" {
		return "cuda:" + strconv.Itoa(d.Index)
	}
	return d.Kind
}

// DefaultDevices is the device list of a model that names none: the CPU.
const DefaultDevices = "cpu"

// ParseDevices parses a device list such as "cpu", "auto", "cuda:0" or
// "cuda:0,cuda:1"; an empty one is DefaultDevices. Workers are assigned to
// the devices round-robin.
func ParseDevices(s string) ([]Device, error) {
	if strings.TrimSpace(s) == "" {
		s = DefaultDevices
	}
	var ds []Device
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		switch {
		case part == "cpu" || part == "auto":
			ds = append(ds, Device{Kind: part})
		case part == "cuda":
			ds = append(ds, Device{Kind: "cuda"})
		case strings.HasPrefix(part, "cuda:"):
			n, err := strconv.Atoi(strings.TrimPrefix(part, "cuda:"))
			if err != nil || n < 0 {
				return nil, fmt.Errorf("device %q: want cuda:N with N a device number", part)
			}
			ds = append(ds, Device{Kind: "cuda", Index: n})
		default:
			return nil, fmt.Errorf("device %q: want cpu, auto or cuda:N", part)
		}
	}
	if len(ds) > 1 {
		for _, d := range ds {
			if d.Kind == "auto" {
				return nil, fmt.Errorf("devices %q: auto cannot be combined with other devices", s)
			}
		}
	}
	return ds, nil
}

// ForWorker returns the device of worker i: round-robin over ds.
func ForWorker(ds []Device, i int) Device {
	if len(ds) == 0 {
		return Device{Kind: "cpu"}
	}
	return ds[i%len(ds)]
}
