// Package target is infer bench's side of the servers under test: the
// `infer serve` it starts, as a typed spec (Serve, Settings) that this
// package alone turns into flags; launching and stopping it as a child
// process; the readiness probe of servers it did not start; their admin
// API, through which a sweep sets existing servers' batching settings;
// infer's endpoints, as paths and as metric labels; and reading /metrics
// (an encoder server's batching counters, a generation server's infer_gen_
// metrics) and a process's CPU and memory. Servers holds a run's servers
// under one configuration of the sweep at a time.
package target
