package route

// powerOfTwo draws two distinct candidates at random, in proportion to
// their weights, and picks the less loaded (Mitzenmacher's power of two
// choices): nearly least-request's balance without reading every replica's
// load, and no herd on one replica when loads are stale.
type powerOfTwo struct{ rnd rng }

func (p powerOfTwo) Pick(_ *Request, cands []*Replica) (*Replica, Reason) {
	if len(cands) == 1 {
		return cands[0], ReasonPolicy
	}
	a := weightedRandom(cands, p.rnd)
	// The second draw is among the others.
	total := 0
	for _, c := range cands {
		if c != a {
			total += c.weight
		}
	}
	n := p.rnd(total)
	var b *Replica
	for _, c := range cands {
		if c == a {
			continue
		}
		if b = c; n < c.weight {
			break
		}
		n -= c.weight
	}
	switch {
	case loadLess(b, a):
		return b, ReasonPolicy
	case loadEqual(a, b) && p.rnd(2) == 0:
		return b, ReasonPolicy
	}
	return a, ReasonPolicy
}
