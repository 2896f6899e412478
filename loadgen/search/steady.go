package search

import "math"

// A window is unsteady when the line fitted to its throughput second by
// second changes by more than MaxDrift of the mean across the window, and
// its slope is MinT standard errors or more from flat: a drift, not the
// seconds' noise. Windows of fewer than MinSeconds seconds are not judged.
const (
	MaxDrift   = 0.05
	MinT       = 3.0
	MinSeconds = 4
	maxRho     = 0.9 // the most correlated seconds are taken to be
)

// Drift fits a least-squares line to a window's values second by second
// and returns the change it makes across the window (its slope times the
// number of seconds) as a share of the values' mean, and its slope over
// the slope's standard error (t; ±Inf for values exactly on a sloped
// line), the error widened for seconds that are correlated. Both are 0
// for fewer than 3 values or a mean of 0 or less.
func Drift(perSecond []float64) (share, t float64) {
	n := float64(len(perSecond))
	if len(perSecond) < 3 {
		return 0, 0
	}
	var sy float64
	for _, y := range perSecond {
		sy += y
	}
	mean := sy / n
	if mean <= 0 {
		return 0, 0
	}
	xm := (n - 1) / 2
	var sxx, sxy float64
	for i, y := range perSecond {
		dx := float64(i) - xm
		sxx += dx * dx
		sxy += dx * (y - mean)
	}
	slope := sxy / sxx
	var sse float64
	for i, y := range perSecond {
		r := y - (mean + slope*(float64(i)-xm))
		sse += r * r
	}
	se := math.Sqrt(sse / (n - 2) / sxx)
	// Seconds of a stream of long requests are not independent: a
	// request's tokens span several. With the residuals' lag-1
	// correlation rho (AR(1)), the slope's standard error grows by
	// √((1+ρ)/(1−ρ)), so that a wandering window is not taken for a
	// trend.
	if sse > 0 {
		var c float64
		for i := 1; i < len(perSecond); i++ {
			r0 := perSecond[i-1] - (mean + slope*(float64(i-1)-xm))
			r1 := perSecond[i] - (mean + slope*(float64(i)-xm))
			c += r0 * r1
		}
		if rho := min(c/sse, maxRho); rho > 0 {
			se *= math.Sqrt((1 + rho) / (1 - rho))
		}
	}
	switch {
	case slope == 0:
		t = 0
	case se == 0 || se < 1e-12*math.Abs(slope):
		t = math.Inf(1)
		if slope < 0 {
			t = math.Inf(-1)
		}
	default:
		t = slope / se
	}
	return slope * n / mean, t
}

// Unsteady reports whether a window's throughput second by second drifts:
// at least MinSeconds seconds, a fitted change beyond MaxDrift of the
// mean, and a slope at least MinT standard errors from flat.
func Unsteady(perSecond []float64) bool {
	if len(perSecond) < MinSeconds {
		return false
	}
	share, t := Drift(perSecond)
	return math.Abs(share) > MaxDrift && math.Abs(t) >= MinT
}
