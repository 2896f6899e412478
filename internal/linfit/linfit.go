// Package linfit fits the cost of a batch of n items, t(n) = a + b·n, by
// weighted least squares. It is the one fit of the batcher's online cost
// model (server/batch) and of the offline ceiling (models/ceiling), so that
// both read the same measurements the same way.
//
// Both coefficients are kept non-negative, since no batch costs less than
// nothing and no item makes a batch cheaper: a negative slope is replaced by
// a flat line through the mean time (b = 0), and a negative intercept by the
// least-squares line through the origin (a = 0, b = Σn·t / Σn²).
package linfit

// Sums accumulates weighted samples (n, t). The zero value holds none.
type Sums struct {
	w, n, nn, t, nt float64
}

// Add adds the sample (n, t) with weight w.
func (s *Sums) Add(n, t, w float64) {
	s.w += w
	s.n += w * n
	s.nn += w * n * n
	s.t += w * t
	s.nt += w * n * t
}

// Scale multiplies the weight of every sample so far by f, e.g. 0.95 per new
// sample for exponential forgetting.
func (s *Sums) Scale(f float64) {
	s.w *= f
	s.n *= f
	s.nn *= f
	s.t *= f
	s.nt *= f
}

// Line returns the fitted intercept a and slope b, both non-negative, and
// false when there are no samples. When every sample has the same n the
// slope cannot be told apart from the intercept: b is 0 and a the mean t.
func (s Sums) Line() (a, b float64, ok bool) {
	if s.w <= 0 {
		return 0, 0, false
	}
	// The denominator is w² times the weighted variance of n; relative to
	// w·Σn² it is the share of n's spread, 0 when all n are equal.
	if den := s.w*s.nn - s.n*s.n; den > 1e-9*s.w*s.nn {
		b = (s.w*s.nt - s.n*s.t) / den
	}
	if b < 0 {
		b = 0
	}
	a = (s.t - b*s.n) / s.w
	if a < 0 {
		a, b = 0, 0
		if s.nn > 0 && s.nt > 0 {
			b = s.nt / s.nn
		}
	}
	return a, b, true
}
