package route

// random picks a candidate at random, in proportion to its weight.
type random struct{ rnd rng }

func (p random) Pick(_ *Request, cands []*Replica) (*Replica, Reason) {
	return weightedRandom(cands, p.rnd), ReasonPolicy
}
