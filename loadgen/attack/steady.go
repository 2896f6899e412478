package attack

import "time"

// answer counts a successful answer received at from the window's start.
func (tl *Timeline) answer(at time.Duration) {
	i := int(at / time.Second)
	for len(*tl) <= i {
		*tl = append(*tl, second{})
	}
	(*tl)[i].answered++
}

// Answered returns the successful answers received in each whole second
// of a measured window of that length: its throughput second by second
// (a last, shorter second is left out).
func (tl Timeline) Answered(window time.Duration) []float64 {
	n := int(window / time.Second)
	out := make([]float64, n)
	for i := range min(n, len(tl)) {
		out[i] = float64(tl[i].answered)
	}
	return out
}
