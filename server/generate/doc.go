// Package generate is the generation engine: it schedules the steps of a
// generative model (models.Decoder) for many concurrent requests, and
// streams each request's tokens as they are produced. Like server/batch it
// has no HTTP and no model inside; server/openai puts an HTTP API on it.
//
// One goroutine (Run) owns the waiting queue, the running set and the
// decoder; Generate admits a request and returns its Stream. The scheduler
// decides and the decoder computes: the decoder instance owns the KV cache
// of the sequences it holds, and the engine keeps their sizes within the
// capacity.
//
// # Policies
//
// Continuous (iteration-level) batching: each step decodes one token for
// every running sequence and prefills newly admitted ones, so a request joins
// at the next step after it arrives and a finished sequence leaves at once.
// Static batching forms a batch within Config.MaxLatency of its first
// request, admits nothing until the whole batch has finished, and keeps
// computing its finished rows (as Hugging Face generate does with padding).
// Naive runs one sequence at a time.
//
// # A step under Continuous
//
// Running sequences are scheduled before new ones: first one decode token
// for each running sequence, then the prompt chunks of those still
// prefilling, then waiting requests in arrival order, while fewer than
// Config.MaxSeqs run and the token budget (Config.MaxBatchedTokens) lasts. A
// prompt longer than what is left of the budget is prefilled in chunks over
// several steps (chunked prefill), inside the decode steps. That choice was
// measured: on the simulated decoder's cost model with the acceptance load
// (64 closed-loop clients, 32 slots, prompts of 32–512 words, lognormal
// output lengths), prefill inside the decode steps reaches 0.99 of the ideal
// throughput, and prefill in steps of its own (Config.SeparatePrefill) 0.89,
// since each extra step pays the step's fixed cost while the running
// sequences wait (TestSimThroughputContinuousVsStatic).
//
// # KV admission and preemption (by recompute)
//
// The engine counts the tokens each running sequence holds in the KV. The
// head of the waiting queue is admitted only when its whole prompt (after a
// preemption: its prompt and the tokens it had generated), plus one token of
// headroom for each running sequence, fits in the free KV; the head is never
// skipped, so long prompts are not starved by shorter ones behind them. When
// a step's tokens do not fit, the most recently admitted running sequence is
// preempted: its KV is freed, and it returns to the head of the waiting
// queue, to be recomputed (prefilled again from its prompt and generated
// tokens) when it fits; no request is admitted in a step that preempted. The
// decoder's determinism contract (models.Sampling) makes the recomputed
// sequence continue exactly where it stopped. Static reserves instead: a
// batch is formed only while its prompts plus rows × its longest max tokens
// fit, so it never preempts.
//
// # Per sequence
//
// A sequence stops at EOS (unless Request.IgnoreEOS), at Request.MaxTokens,
// at the model's context, or where one of Request.Stop appears in the
// generated text (across token boundaries; the stop string is not
// released); before Request.MinTokens none of EOS and the stop strings end
// it. A request whose context is cancelled or whose deadline passes leaves at
// the next step and frees its KV.
//
// # Admission
//
// Bounded: beyond Config.QueueCap waiting requests Generate fails at once
// with ErrQueueFull, and a request whose deadline falls before its estimated
// start (from the measured running time of sequences) with
// ErrWouldMissDeadline. A stream holds at most Config.StreamBuffer tokens its
// reader has not taken; a reader further behind is cut (ErrSlowReader), so
// the engine never waits for a client.
package generate
