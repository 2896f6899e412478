// Package models defines what the server needs from a model: a Factory that
// prepares inputs and creates instances, and the Model instance that computes
// a batch. Backends (models/sim, models/onnx, …) implement it.
package models

import (
	"context"
	"errors"
)

// Input is one item prepared for a model by Factory.Prepare.
type Input struct {
	// Text is the item as the client sent it.
	Text string
	// Tokens holds token ids for models that tokenize; nil otherwise.
	Tokens []int32
}

// Output is one item's result. It must encode as JSON.
type Output = any

// Info describes a model as served.
type Info struct {
	Name    string // as clients address it, e.g. "sim" or "bert-mini"
	Task    string // what an output is: "classify", "fill-mask", "embed", …
	Backend string // "sim", "onnx", …
	// Params is a short human description of the model's settings, for logs
	// and reports, e.g. "fixed=77ms per_item=1.16ms".
	Params string
}

// TaskEmbed is the Info.Task of a model whose every output is a vector
// ([]float32 of one length): an embedding head.
const TaskEmbed = "embed"

// Model is one instance of a loaded model. A server gives each worker its own
// instance and never calls Predict on one instance concurrently.
type Model interface {
	// Predict computes a batch: it sets out[i] for each in[i], or returns an
	// error. An error of type *batch.ItemsError-like shape is the backend's
	// business; the server treats any error as the failure of the items it
	// names, or of the whole batch.
	Predict(ctx context.Context, in []Input, out []Output) error
	// Close releases the instance.
	Close() error
}

// Factory creates instances of one model and prepares its inputs.
type Factory interface {
	Info() Info
	// Prepare validates and converts one client item, e.g. tokenizes it. It
	// runs on request goroutines, before queueing, so it must be safe for
	// concurrent use. Errors wrap ErrInvalidInput or ErrInputTooLong.
	Prepare(text string) (Input, error)
	// New creates the instance for worker number worker (0-based), placing it
	// on the device the factory assigns to that worker.
	New(ctx context.Context, worker int) (Model, error)
	// Close releases what the factory holds; instances are closed first.
	Close() error
}

var (
	// ErrInvalidInput marks an item the model cannot take.
	ErrInvalidInput = errors.New("invalid input")
	// ErrInputTooLong marks an item longer than the model accepts.
	ErrInputTooLong = errors.New("input too long")
)
