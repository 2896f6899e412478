// Package loadgen is infer bench's engine: it reads scenario files (strict
// YAML, every problem reported at its line), expands a scenario's sweep into
// points, drives each point with HTTP load through the vegeta library (open
// loop on a pacer's schedule, or closed loop with a fixed number of
// clients), starts and stops the server under test when infer owns it,
// measures each point (client latency histogram, status codes, Server-Timing,
// /metrics deltas, server and generator CPU), flags points whose numbers
// cannot be trusted, and writes the records of package record. Live progress
// is published as aggregated Snapshots a few times a second.
//
// It is the only importer of vegeta and of the YAML library.
package loadgen
