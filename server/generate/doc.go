// Package generate is the generation engine: it schedules the steps of a
// generative model (models.Decoder) for many concurrent requests, and
// streams each request's tokens as they are produced. Like server/batch it
// has no HTTP and no model inside; server/openai puts an HTTP API on it.
//
// One goroutine (Run) owns the waiting queue, the running set, the KV
// blocks and the decoder; Generate admits a request and returns its Stream.
// The scheduler decides and the decoder computes: the engine names the
// blocks of the decoder instance's KV and gives each sequence its block
// table; the decoder stores keys and values where the table says (see
// models.StepSeq).
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
// # KV blocks and the prefix cache
//
// The KV is held in blocks of Config.BlockSize tokens (16 by default);
// Config.KVTokens / BlockSize of them. A full block of computed tokens is
// cached, known by a hash of its tokens chained with its parent block's
// hash, so equal tokens after a different prefix are a different block
// (a hit is checked against the block's own tokens and parent, so a hash
// collision can only miss). Cached blocks are shared by reference count. A
// request starts after the longest run of cached blocks its prompt begins
// with, leaving at least its last prompt token to compute (for its
// logits): those tokens cost no compute and no step budget. Blocks nobody
// references stay cached until a new block is needed and no empty one is
// left; then they are evicted least recently used first (a sequence's later
// blocks before its earlier ones, which more prompts share). A referenced
// block is never evicted. Generated tokens fill blocks too, so the next turn
// of a chat, which carries the answer, finds it cached.
//
// The cache is on unless Config.NoPrefixCache, and off for a decoder that
// cannot reuse KV (models.DecoderInfo.BlockKV false). StepInfo counts vLLM's
// prefix_cache_queries and prefix_cache_hits; a request's cached tokens are
// in its Timing.
//
// # KV admission and preemption (by recompute)
//
// The engine counts blocks. The head of the waiting queue is admitted only
// when the blocks of its whole prompt (after a preemption: its prompt and
// the tokens it had generated) and one more token, plus the blocks each
// running sequence needs to grow by one token, fit in the free blocks
// (empty, or cached and evictable); a cached prefix costs only the blocks
// nobody else holds. The head is never skipped, so long prompts are not
// starved by shorter ones behind them. When a step's tokens do not fit, the
// most recently admitted running sequence is preempted: it drops its
// references (its blocks stay cached unless evicted) and returns to the head
// of the waiting queue, to be recomputed when it fits, after whatever of it
// is still cached; no request is admitted in a step that preempted. The
// decoder's determinism contract (models.Sampling) makes the recomputed
// sequence continue exactly where it stopped. Static reserves instead: a
// batch is formed only while the blocks of its prompts plus rows × its
// longest max tokens fit, so it never preempts.
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
