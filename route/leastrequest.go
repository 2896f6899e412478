package route

// leastRequest picks the candidate with the fewest in-flight requests per
// weight (Envoy's LEAST_REQUEST with all candidates, HAProxy's leastconn),
// ties broken at random.
type leastRequest struct{ rnd rng }

func (p leastRequest) Pick(_ *Request, cands []*Replica) (*Replica, Reason) {
	return leastLoaded(cands, p.rnd), ReasonPolicy
}
