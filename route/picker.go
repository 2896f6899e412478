package route

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// Picker chooses the replica of a request. Pick is called with the
// candidates: replicas that are ready, not drained and not yet tried by
// this request, never none. It returns one of them and why. A Picker is
// safe for concurrent use.
type Picker interface {
	Pick(req *Request, cands []*Replica) (*Replica, Reason)
}

// A Picker that keeps state per replica may also implement
//
//	SetReplicas(all []*Replica)
//
// which the router calls with every replica, eligible or not, whenever the
// set changes (a DNS answer), before any request sees the new set.
type replicaSetter interface {
	SetReplicas(all []*Replica)
}

// Reason says why a replica was picked; the metric
// infer_route_picks_total counts picks by it.
type Reason uint8

const (
	ReasonPolicy   Reason = iota // the policy's plain choice (round-robin, random, least-request, power-of-two, scored without affinity)
	ReasonAffinity               // the key's or the prefix's home replica
	ReasonFallback               // affinity given up: no key or prompt, no match, over the load bound, or loads out of balance
	ReasonRetry                  // a retry after a refusal or a connection error
	numReasons
)

func (r Reason) String() string {
	return [...]string{"policy", "affinity", "fallback", "retry"}[r]
}

// Request is what a Picker knows of a request.
type Request struct {
	// Route names the API the request is for: "/v1", "/static/v1",
	// "/naive/v1", "/batched", "/naive", "/v2". Replicas cache prompts per
	// route (each has its own engine), so prefix affinity is per route.
	Route string
	// Key is the request's routing key (hash), "" if it has none.
	Key string
	// Prompt is the request's prompt as sent (its JSON text, or the body
	// of a text request), nil if it has none. Prefix matching reads it.
	Prompt []byte

	blocks    []uint64 // Prompt's chained block hashes, computed once
	hashedFor int      // the block size they were computed for
}

// Policy names a Picker.
type Policy string

// The policies.
const (
	RoundRobin   Policy = "round-robin"
	Random       Policy = "random"
	LeastRequest Policy = "least-request"
	PowerOfTwo   Policy = "power-of-two"
	Hash         Policy = "hash"
	Prefix       Policy = "prefix"
	Scored       Policy = "scored"
)

// Policies lists every policy.
var Policies = []Policy{RoundRobin, Random, LeastRequest, PowerOfTwo, Hash, Prefix, Scored}

// ParsePolicy returns the policy named s.
func ParsePolicy(s string) (Policy, error) {
	for _, p := range Policies {
		if string(p) == s {
			return p, nil
		}
	}
	names := make([]string, len(Policies))
	for i, p := range Policies {
		names[i] = string(p)
	}
	return "", fmt.Errorf("unknown policy %q: want %s", s, strings.Join(names, ", "))
}

// needsPrompt reports whether the policy reads prompts.
func (p Policy) needsPrompt(c Config) bool {
	return p == Prefix || (p == Scored && c.Score.Prefix > 0)
}

// rng picks a whole number in [0, n). The pickers take one so that tests
// can seed them.
type rng func(n int) int

func defaultRNG(n int) int { return rand.IntN(n) }

// weightedRandom picks a candidate with probability proportional to its
// weight.
func weightedRandom(cands []*Replica, rnd rng) *Replica {
	total := 0
	for _, c := range cands {
		total += c.weight
	}
	n := rnd(total)
	for _, c := range cands {
		if n < c.weight {
			return c
		}
		n -= c.weight
	}
	return cands[len(cands)-1]
}

// leastLoaded returns the candidate with the fewest in-flight requests per
// weight, ties broken at random.
func leastLoaded(cands []*Replica, rnd rng) *Replica {
	best, ties := cands[0], 1
	for _, c := range cands[1:] {
		switch {
		case loadLess(c, best):
			best, ties = c, 1
		case loadEqual(c, best):
			ties++
			if rnd(ties) == 0 {
				best = c
			}
		}
	}
	return best
}
