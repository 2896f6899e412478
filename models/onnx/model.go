package onnx

import (
	"context"
	"errors"
	"fmt"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/inferhq/infer/models"
)

// Model is one instance: its worker's session and the buffers its batches
// are built in, reused from batch to batch. It is not safe for concurrent
// use; instances sharing a session are.
type Model struct {
	f    *Factory
	s    *session                    // shared with the worker's other instances
	sess *ort.DynamicAdvancedSession // s.sess; nil once closed

	ids, mask, types []int64   // inputs, [n, seqLen]
	out              []float32 // the float output when its shape is known in advance
	tokens           [][]int32 // of the batch's items
}

// Predict pads the batch to its longest item, runs the graph once, and sets
// out[i] to a *FillMask or a []float32. Like a kernel on a device, a started
// batch runs to its end whatever ctx says.
func (m *Model) Predict(_ context.Context, in []models.Input, out []models.Output) error {
	n := len(in)
	if m.sess == nil {
		return errors.New("onnx: instance closed")
	}
	if n == 0 {
		return nil
	}
	m.tokens = m.tokens[:0]
	seqLen := 0
	for i, x := range in {
		if len(x.Tokens) == 0 {
			return fmt.Errorf("item %d has no tokens: inputs must come from Factory.Prepare", i)
		}
		m.tokens = append(m.tokens, x.Tokens)
		seqLen = max(seqLen, len(x.Tokens))
	}
	size := n * seqLen
	m.ids, m.mask = grow(m.ids, size), grow(m.mask, size)
	clear(m.ids[:size])
	clear(m.mask[:size])
	for i, toks := range m.tokens {
		row := i * seqLen
		for p, id := range toks {
			m.ids[row+p] = int64(id)
			m.mask[row+p] = 1
		}
	}
	shape := ort.NewShape(int64(n), int64(seqLen))
	inputs := make([]ort.Value, 0, 3)
	defer func() { destroy(inputs) }()
	for _, data := range [][]int64{m.ids, m.mask} {
		t, err := ort.NewTensor(shape, data[:size])
		if err != nil {
			return fmt.Errorf("input tensor: %w", err)
		}
		inputs = append(inputs, t)
	}
	if m.f.sig.typeIDs() {
		m.types = grow(m.types, size)
		clear(m.types[:size]) // one segment: all zeros
		t, err := ort.NewTensor(shape, m.types[:size])
		if err != nil {
			return fmt.Errorf("input tensor: %w", err)
		}
		inputs = append(inputs, t)
	}

	sig := m.f.sig
	outputs := make([]ort.Value, len(sig.outputs))
	defer func() { destroy(outputs) }()
	if outShape := sig.outputShape(n, seqLen); outShape != nil {
		m.out = grow(m.out, int(outShape.FlattenedSize()))
		t, err := ort.NewTensor(outShape, m.out)
		if err != nil {
			return fmt.Errorf("output tensor: %w", err)
		}
		outputs[0] = t
	}
	if err := m.sess.Run(inputs, outputs); err != nil {
		return fmt.Errorf("run %s: %w", m.f.cfg.Name, err)
	}
	return m.decode(out[:n], outputs, seqLen)
}

// decode turns the output tensors of a batch padded to seqLen into out.
func (m *Model) decode(out []models.Output, outputs []ort.Value, seqLen int) error {
	sig := m.f.sig
	switch sig.head {
	case headTopK:
		pos, err1 := tensorData[int64](outputs[0])
		scores, err2 := tensorData[float32](outputs[1])
		ids, err3 := tensorData[int64](outputs[2])
		if err := errors.Join(err1, err2, err3); err != nil {
			return err
		}
		k := 0
		if shape := outputs[1].GetShape(); len(shape) == 2 {
			k = int(shape[1])
		}
		return m.f.dec.topK(out, pos, scores, ids, k)
	}
	x, err := tensorData[float32](outputs[0])
	if err != nil {
		return err
	}
	shape := outputs[0].GetShape()
	width := int(shape[len(shape)-1])
	switch sig.head {
	case headLogits:
		m.f.dec.logits(out, m.tokens, x, seqLen, width)
	case headHidden:
		meanPooled(out, x, m.tokens, seqLen, width)
	default:
		vectors(out, x, width)
	}
	return nil
}

// outputShape is the shape of the float output of a batch of n items padded
// to seqLen, or nil when it is not known before running (the top-k head, or
// a dynamic width): ONNX Runtime then allocates it.
func (s signature) outputShape(n, seqLen int) ort.Shape {
	switch {
	case s.width <= 0:
		return nil
	case s.head == headLogits || s.head == headHidden:
		return ort.NewShape(int64(n), int64(seqLen), s.width)
	case s.head == headEmbedding || s.head == headVector:
		return ort.NewShape(int64(n), s.width)
	}
	return nil
}

func tensorData[T ort.TensorData](v ort.Value) ([]T, error) {
	t, ok := v.(*ort.Tensor[T])
	if !ok {
		var zero T
		return nil, fmt.Errorf("graph output is %T, want a tensor of %T", v, zero)
	}
	return t.GetData(), nil
}

func destroy(vs []ort.Value) {
	for _, v := range vs {
		if v != nil {
			v.Destroy()
		}
	}
}

// grow returns s with room for n elements, reusing its array when it can.
func grow[T any](s []T, n int) []T {
	if cap(s) >= n {
		return s[:n]
	}
	return make([]T, n, n+n/4)
}

// Close releases the instance's share of its session: the last instance of
// a worker number destroys it, so that removing a worker gives its memory
// back. Closing twice is harmless.
func (m *Model) Close() error {
	if m.sess != nil {
		m.sess = nil
		m.f.sessions.release(m.s)
	}
	return nil
}
