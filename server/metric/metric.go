// Package metric is the one definition of the Prometheus metrics that more
// than one part of infer knows by name: the server and the distributed
// workers expose them, and the load generator reads them back. It holds
// names and buckets only (no Prometheus import), so that readers need
// nothing else.
package metric

// Names of an encoder server's metrics read back by the load generator,
// and of the batch metrics that a server and a distributed worker both
// expose.
const (
	// Prefix starts every infer metric.
	Prefix = "infer_"

	BatchSize       = "infer_batch_size"               // histogram {endpoint}: items per batch
	QueueDuration   = "infer_queue_duration_seconds"   // histogram {endpoint}: arrival to batch start
	ComputeDuration = "infer_compute_duration_seconds" // histogram {endpoint}: one batch in the model
	RequestDuration = "infer_request_duration_seconds" // histogram {endpoint}: arrival to answer
	ItemsTotal      = "infer_items_total"              // counter {endpoint}: items computed
	FailedItems     = "infer_failed_items_total"       // counter {endpoint}
	DroppedItems    = "infer_dropped_items_total"      // counter {endpoint}: not computed, deadline or client gone
	ModelInfo       = "infer_model_info"               // gauge {model, task, backend}: always 1
	BatchingInfo    = "infer_batching_info"            // gauge {policy, max_batch, max_latency, workers}: always 1

	// Count, Sum and Bucket end the names of a histogram's count, sum
	// and bucket series.
	Count  = "_count"
	Sum    = "_sum"
	Bucket = "_bucket"
)

// Names of a generation server's metrics (server/openai) that the load
// generator reads back. They follow vLLM's (vllm:X is infer_gen_X) so that
// dashboards map; each is labelled by endpoint: v1, static or naive.
const (
	// GenPrefix starts every generation metric.
	GenPrefix = "infer_gen_"

	GenRequestSuccess  = "infer_gen_request_success_total"         // counter {endpoint, finished_reason}
	GenPromptTokens    = "infer_gen_prompt_tokens_total"           // counter {endpoint}: of admitted requests
	GenGeneratedTokens = "infer_gen_generation_tokens_total"       // counter {endpoint}
	GenPreemptions     = "infer_gen_num_preemptions_total"         // counter {endpoint}
	GenTTFT            = "infer_gen_time_to_first_token_seconds"   // histogram {endpoint}
	GenTPOT            = "infer_gen_time_per_output_token_seconds" // histogram {endpoint}
	GenE2E             = "infer_gen_e2e_request_latency_seconds"   // histogram {endpoint}
	GenQueueTime       = "infer_gen_request_queue_time_seconds"    // histogram {endpoint}: arrival to first step
	GenStepDuration    = "infer_gen_step_duration_seconds"         // histogram {endpoint}: one engine step in the model
	GenStepBatch       = "infer_gen_step_batch_size"               // histogram {endpoint}: sequences in one step
	GenRunning         = "infer_gen_num_requests_running"          // gauge {endpoint}
	GenWaiting         = "infer_gen_num_requests_waiting"          // gauge {endpoint}
	GenKVUsage         = "infer_gen_kv_cache_usage_perc"           // gauge {endpoint}: share of the KV capacity in use, 0 to 1
	GenModelInfo       = "infer_gen_model_info"                    // gauge {model, backend, params}: always 1
	GenBatchingInfo    = "infer_gen_batching_info"                 // gauge {policy, max_seqs, max_batched_tokens, kv_tokens, max_latency, prefix_cache, block_size}: always 1

	// The generation engine's prefix cache, after vLLM's
	// prefix_cache_queries and prefix_cache_hits: counters {endpoint} of
	// the prompt tokens of requests started, and of those found cached.
	GenPrefixCacheQueries = "infer_gen_prefix_cache_queries_total"
	GenPrefixCacheHits    = "infer_gen_prefix_cache_hits_total"
)

// LatencyBuckets are the buckets of every duration histogram, in seconds:
// 0.5 ms doubling to ~65 s. Each call returns a fresh slice.
func LatencyBuckets() []float64 {
	b := make([]float64, 18)
	for i, v := 0, 0.0005; i < len(b); i, v = i+1, v*2 {
		b[i] = v
	}
	return b
}

// BatchSizeBuckets are the buckets of BatchSize. Each call returns a fresh
// slice.
func BatchSizeBuckets() []float64 {
	return []float64{1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 512}
}
