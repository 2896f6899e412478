package batch

import (
	"math"
	"testing"
	"time"
)

// The online fit is the offline one (models/ceiling): with a negative
// intercept the slope is refitted through the origin, Σn·t / Σn².
func TestEstimatorNegativeIntercept(t *testing.T) {
	var e estimator
	e.observe(1, 500*time.Microsecond)
	e.observe(10, 20*time.Millisecond)
	a, per, ok := e.cost()
	// Equal weights up to the decay: 0.95 for the first, 1 for the second.
	want := (0.95*1*0.0005 + 10*0.020) / (0.95*1 + 100)
	if !ok || a != 0 || math.Abs(per-want) > 1e-12 {
		t.Errorf("cost() = %v, %v, %v; want 0, %v", a, per, ok, want)
	}
}
