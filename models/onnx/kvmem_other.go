//go:build !unix

package onnx

// allocBytes returns n zeroed bytes from the Go heap, 8-aligned as the Go
// heap aligns allocations of 8 bytes or more.
func allocBytes(n int) ([]byte, error) { return make([]byte, n), nil }

// freeBytes leaves b to the garbage collector.
func freeBytes([]byte) {}
