package route

import "sync"

// roundRobin is smooth weighted round-robin (nginx's): each pick adds every
// candidate's weight to its running score, takes the highest and lowers it
// by the sum. Weights 5, 1, 1 give a a b a c a a, never a long run of one
// replica.
type roundRobin struct {
	mu      sync.Mutex
	current map[*Replica]int
}

func newRoundRobin() *roundRobin { return &roundRobin{current: map[*Replica]int{}} }

func (p *roundRobin) Pick(_ *Request, cands []*Replica) (*Replica, Reason) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var best *Replica
	total := 0
	for _, c := range cands {
		p.current[c] += c.weight
		total += c.weight
		if best == nil || p.current[c] > p.current[best] {
			best = c
		}
	}
	p.current[best] -= total
	return best, ReasonPolicy
}

func (p *roundRobin) SetReplicas(all []*Replica) {
	p.mu.Lock()
	defer p.mu.Unlock()
	keep := make(map[*Replica]int, len(all))
	for _, r := range all {
		keep[r] = p.current[r]
	}
	p.current = keep
}
