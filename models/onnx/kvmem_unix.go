//go:build unix

package onnx

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// allocBytes returns n zeroed bytes of anonymous memory outside the Go
// heap (page-aligned), which freeBytes hands back to the system at once: the KV cache's
// buffers are large and short-lived, and on the Go heap a dropped one would
// stay resident until the next collection, which only starts once the heap
// has doubled. Pages become resident when first written, so capacity that is
// never used costs address space only.
func allocBytes(n int) ([]byte, error) {
	p, err := unix.MmapPtr(-1, 0, nil, uintptr(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("kv cache: allocate %d MiB: %w", n>>20, err)
	}
	return unsafe.Slice((*byte)(p), n), nil
}

// freeBytes unmaps memory from allocBytes; b may be resliced, but must
// have the capacity allocBytes gave it.
func freeBytes(b []byte) {
	if cap(b) > 0 {
		_ = unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(b)), uintptr(cap(b)))
	}
}
