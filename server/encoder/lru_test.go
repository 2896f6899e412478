package encoder

import (
	"testing"
	"time"
)

func TestCacheLRUAndTTL(t *testing.T) {
	c := newCache(2, time.Second)
	t0 := time.Now()
	c.put("a", 1, 10, t0)
	c.put("b", 2, 20, t0)
	c.get("a", t0) // a is now the most recent
	c.put("c", 3, 30, t0)
	if _, _, ok := c.get("b", t0); ok {
		t.Error("b survived eviction, want the least recently used evicted")
	}
	if v, n, ok := c.get("a", t0); !ok || v != 1 || n != 10 {
		t.Errorf("get(a) = %v, %d, %v; want 1, 10, true", v, n, ok)
	}
	if _, _, ok := c.get("a", t0.Add(2*time.Second)); ok {
		t.Error("a outlived its TTL")
	}
}
