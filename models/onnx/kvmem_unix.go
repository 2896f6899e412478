//go:build unix

package onnx

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// allocFloats returns n zeroed floats of anonymous memory outside the Go
// heap, which freeFloats hands back to the system at once: the KV cache's
// buffers are large and short-lived, and on the Go heap a dropped one would
// stay resident until the next collection, which only starts once the heap
// has doubled. Pages become resident when first written, so capacity that is
// never used costs address space only.
func allocFloats(n int) ([]float32, error) {
	p, err := unix.MmapPtr(-1, 0, nil, uintptr(n)*4, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("kv cache: allocate %d MiB: %w", n>>18, err)
	}
	return unsafe.Slice((*float32)(p), n), nil
}

// freeFloats unmaps memory from allocFloats; f may be resliced, but must
// have the capacity allocFloats gave it.
func freeFloats(f []float32) {
	if cap(f) > 0 {
		_ = unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(f)), uintptr(cap(f))*4)
	}
}
