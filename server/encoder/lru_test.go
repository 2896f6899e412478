package encoder

import (
	"testing"
	"time"
)

func TestCacheLRUAndTTL(t *testing.T) {
	c := newCache(2, time.Second)
	t0 := time.Now()
	c.put("a", 1, t0)
	c.put("b", 2, t0)
	c.get("a", t0) // a is now the most recent
	c.put("c", 3, t0)
	if _, ok := c.get("b", t0); ok {
		t.Error("b survived eviction, want the least recently used evicted")
	}
	if v, ok := c.get("a", t0); !ok || v != 1 {
		t.Errorf("get(a) = %v, %v", v, ok)
	}
	if _, ok := c.get("a", t0.Add(2*time.Second)); ok {
		t.Error("a outlived its TTL")
	}
}
