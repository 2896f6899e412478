// Package route spreads requests over replicas of a model server (infer
// serve, or any OpenAI-compatible server such as vLLM, SGLang, llama.cpp or
// Ollama): the library behind infer route. It knows nothing of models; it
// reads what requests say (a routing key, a prompt's bytes) and what
// replicas report (health, queue depth, KV cache use).
//
// A Router proxies infer's encoder endpoints (/naive, /batched, /v2/…) and
// the OpenAI endpoints (/v1/completions, /v1/chat/completions,
// /v1/embeddings, under /v1, /static/v1 and /naive/v1) and merges the
// replicas' /v1/models. It picks a replica per request with a Picker, one
// per Policy, each in a file of its own:
//
//	round-robin    smooth weighted round-robin
//	random         weighted random
//	least-request  fewest in-flight requests per weight
//	power-of-two   the less loaded of two drawn at random
//	hash           consistent hashing on a key with bounded load
//	prefix         the replica holding the longest prefix of the prompt,
//	               unless loads are out of balance (SGLang's rule)
//	scored         weighted scores over queue depth, KV cache use (read from
//	               each replica's /metrics) and prefix affinity (the Gateway
//	               API Inference Extension endpoint picker's way)
//
// Server-Sent Events pass through event by event, and a client that leaves
// cancels its request to the replica at once. A request is retried on
// another replica only while no byte of an answer has reached its client,
// and only when the replica could not be reached or refused it (429, 503).
// Replicas are checked actively and ejected passively (see HealthConfig).
//
// A host serves a Router as a service: Mount registers its routes, Run
// checks health and follows DNS until the host drains, Ready says whether
// any replica may be picked (the host's /readyz), Collectors are its
// metrics and Admin its admin API (behind the host's token).
package route
