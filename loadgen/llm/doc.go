// Package llm is infer bench's load client for streaming LLM endpoints:
// OpenAI-compatible /v1/completions and /v1/chat/completions, streamed
// (server-sent events) or not. It has a spec-compliant SSE parser, a client
// that times every content chunk of a stream, an open-loop runner that
// keeps its schedule (the intended send time of each request comes from a
// pacer; the actual one is when a stream slot is free) and a closed-loop
// one, payload generation (prompt and output lengths from distributions,
// prompts from a file or a built-in corpus, cut to length with GPT-2's
// tokenizer), the metrics of vLLM's benchmark (TTFT, TPOT, ITL, E2EL,
// tokens/s, goodput) into a record.LLM, and live snapshots for a view.
//
// It does not import vegeta: a Pacer has vegeta.Pacer's method set, so
// package attack's pacers (vegeta's, and its Poisson and gamma ones) go
// straight in.
package llm
