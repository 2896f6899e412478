// Package loadgen is infer bench's engine: it expands a scenario's sweep
// (package scenario) into points, gives the servers under test each
// point's configuration (package target: started anew, or set through the
// admin API), measures each point's repeats (package attack for
// request/response endpoints, package llm for streaming LLM endpoints)
// with the server's /metrics and CPU read alongside, flags points whose
// numbers cannot be trusted, and writes the records of package record.
// Live progress is published as aggregated Snapshots a few times a
// second; a finished run is judged against the scenario's SLO as a
// Summary.
package loadgen
