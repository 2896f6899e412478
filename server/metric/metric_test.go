package metric

import (
	"fmt"
	"testing"
)

func TestBuckets(t *testing.T) {
	lb := LatencyBuckets()
	if len(lb) != 18 || lb[0] != 0.0005 || fmt.Sprintf("%.3f", lb[17]) != "65.536" {
		t.Errorf("LatencyBuckets() = %v, want 0.5 ms doubling to 65.536 s", lb)
	}
	lb[0] = 7
	if LatencyBuckets()[0] != 0.0005 {
		t.Error("LatencyBuckets() shares its slice")
	}
	bb := BatchSizeBuckets()
	for i := 1; i < len(bb); i++ {
		if bb[i] <= bb[i-1] {
			t.Fatalf("BatchSizeBuckets() = %v, not increasing", bb)
		}
	}
}
