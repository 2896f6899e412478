// Package attack is infer bench's request/response HTTP load, over the
// vegeta library (its only importer): the schedules of sends (constant,
// a ramp, Poisson and gamma arrivals; they also pace package llm's
// streams), each point's prepared requests (infer's JSON, text or KServe
// v2 bodies over a corpus), one repeat's warm-up and measured window in
// open or closed loop, and the classification and tallies of the answers
// (status, error cause, shape check, Server-Timing, schedule lag) that a
// point's record is built from.
package attack
