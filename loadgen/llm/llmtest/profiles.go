package llmtest

// The wire forms of real servers' OpenAI-compatible streams, as their
// sources and issue trackers show them (for chat; completions streams
// have no role). Each is valid SSE; together they are what a client must
// read.

// VLLM is vLLM's form: "data: " with a space, LF, a role-only chunk
// ({"role": "assistant", "content": ""}) first, a separate usage chunk
// with empty choices when asked, data: [DONE]; errors as
// data: {"error": {…}} followed by [DONE]. (vLLM sends its role chunk with
// the first iteration; here it comes at once, which is what makes counting
// it as the first token visibly wrong.)
func VLLM() Quirks {
	return Quirks{RoleFirst: true}
}

// TGI is Hugging Face text-generation-inference's form (axum's SSE): no
// space after "data:", the role with the first token, usage in the last
// content chunk (with its finish_reason), errors as
// data:{"error": "…", "error_type": …}.
func TGI() Quirks {
	return Quirks{NoSpace: true, UsageInLast: true, ErrorStyle: "tgi"}
}

// LlamaCpp is llama.cpp server's form: a role chunk with "content": null
// first, usage in the last chunk, and errors as an "error: {…}" line,
// which a strict SSE parser ignores.
func LlamaCpp() Quirks {
	return Quirks{RoleFirst: true, RoleNull: true, UsageInLast: true, ErrorStyle: "llamacpp"}
}

// Ollama is Ollama's OpenAI-compatible form: the role in every content
// chunk, a separate usage chunk when asked, data: [DONE].
func Ollama() Quirks {
	return Quirks{RoleEvery: true}
}
