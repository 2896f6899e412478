// Package metric is the one definition of the Prometheus metrics that more
// than one part of infer knows by name: the server and the distributed
// workers expose them, and the load generator reads them back. It holds
// names and buckets only (no Prometheus import), so that readers need
// nothing else.
package metric

// Names of the metrics read back by the load generator, and of the batch
// metrics that a server and a distributed worker both expose.
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

	// The generation engine's prefix cache, after vLLM's
	// prefix_cache_queries and prefix_cache_hits: counters {endpoint} of
	// the prompt tokens of requests started, and of those found cached.
	GenPrefixCacheQueries = "infer_gen_prefix_cache_queries_total"
	GenPrefixCacheHits    = "infer_gen_prefix_cache_hits_total"

	// Count and Sum end the names of a histogram's count and sum series.
	Count = "_count"
	Sum   = "_sum"
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
