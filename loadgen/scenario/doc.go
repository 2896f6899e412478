// Package scenario reads infer bench's scenario files: strict YAML (an
// unknown key is an error with a "did you mean"), every problem reported
// at its line, bounds checked by the libraries that own them (the
// batcher's and the generation engine's Config.Validate), defaults
// applied. A Scenario says what to load (existing targets, or an `infer
// serve` described by a typed target.Serve), with what payload and load,
// over which sweep, judged by which thresholds.
//
// It is the only importer of the YAML library.
package scenario
