//go:build !unix

package onnx

// allocFloats returns n zeroed floats from the Go heap.
func allocFloats(n int) ([]float32, error) { return make([]float32, n), nil }

// freeFloats leaves f to the garbage collector.
func freeFloats([]float32) {}
