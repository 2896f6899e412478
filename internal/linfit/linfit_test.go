package linfit

import (
	"math"
	"testing"
)

func TestLine(t *testing.T) {
	type sample struct{ n, t, w float64 }
	for _, tc := range []struct {
		name    string
		samples []sample
		a, b    float64
		ok      bool
	}{
		{"none", nil, 0, 0, false},
		{"exact line", []sample{{1, 78.16, 1}, {8, 86.28, 1}, {64, 151.24, 1}}, 77, 1.16, true},
		// With two sizes the line passes through each size's weighted mean
		// time: 10 at n = 1, (12 + 3·14) / 4 = 13.5 at n = 2.
		{"weights", []sample{{1, 10, 1}, {2, 12, 1}, {2, 14, 3}}, 6.5, 3.5, true},
		{"one size: flat line through the mean", []sample{{64, 150, 1}, {64, 152, 1}}, 151, 0, true},
		{"negative slope: flat line through the mean", []sample{{1, 30, 1}, {10, 10, 1}}, 20, 0, true},
		// Least squares gives t = −10 + 2n; refitted through the origin,
		// b = Σn·t / Σn² = (1·1 + 10·10 + 20·30) / (1 + 100 + 400).
		{"negative intercept: through the origin", []sample{{1, 1, 1}, {10, 10, 1}, {20, 30, 1}}, 0, 701.0 / 501, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s Sums
			for _, x := range tc.samples {
				s.Add(x.n, x.t, x.w)
			}
			a, b, ok := s.Line()
			if ok != tc.ok || math.Abs(a-tc.a) > 1e-9 || math.Abs(b-tc.b) > 1e-9 {
				t.Errorf("Line() = %v, %v, %v; want %v, %v, %v", a, b, ok, tc.a, tc.b, tc.ok)
			}
		})
	}
}

func TestScaleForgets(t *testing.T) {
	var s Sums
	for _, n := range []float64{1, 64, 8} { // an old cost: 10 + n
		s.Add(n, 10+n, 1)
	}
	for _, n := range []float64{1, 64, 8, 32, 16, 2, 64, 1, 8, 32} { // the cost now: 50 + 2n
		s.Scale(0.5)
		s.Add(n, 50+2*n, 1)
	}
	a, b, _ := s.Line()
	if math.Abs(a-50) > 0.5 || math.Abs(b-2) > 0.02 {
		t.Errorf("Line() = %v, %v after the cost changed; want about 50, 2", a, b)
	}
	var z Sums
	z.Add(4, 8, 1)
	z.Scale(0)
	if _, _, ok := z.Line(); ok {
		t.Error("Line() ok after every sample's weight was scaled to 0")
	}
}
