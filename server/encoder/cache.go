package encoder

import (
	"container/list"
	"sync"
	"time"

	"github.com/inferhq/infer/models"
)

// cache is an LRU cache of model outputs keyed by the item's text, with an
// optional time to live. Outputs are shared, never modified, so a hit hands
// out the same value. Safe for concurrent use.
type cache struct {
	mu    sync.Mutex
	cap   int
	ttl   time.Duration
	ll    *list.List // front: most recently used
	items map[string]*list.Element
}

type cacheEntry struct {
	key     string
	out     models.Output
	tokens  int       // the item's tokens, for usage counts
	expires time.Time // zero: never
}

func newCache(size int, ttl time.Duration) *cache {
	return &cache{cap: size, ttl: ttl, ll: list.New(), items: make(map[string]*list.Element, min(size, 1024))}
}

// get returns the output of key and the number of its tokens.
func (c *cache) get(key string, now time.Time) (models.Output, int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[key]
	if !ok {
		return nil, 0, false
	}
	e := el.Value.(*cacheEntry)
	if !e.expires.IsZero() && now.After(e.expires) {
		c.ll.Remove(el)
		delete(c.items, key)
		return nil, 0, false
	}
	c.ll.MoveToFront(el)
	return e.out, e.tokens, true
}

// put keeps out, of an item of tokens tokens, as key's output.
func (c *cache) put(key string, out models.Output, tokens int, now time.Time) {
	var expires time.Time
	if c.ttl > 0 {
		expires = now.Add(c.ttl)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		e := el.Value.(*cacheEntry)
		e.out, e.tokens, e.expires = out, tokens, expires
		c.ll.MoveToFront(el)
		return
	}
	c.items[key] = c.ll.PushFront(&cacheEntry{key: key, out: out, tokens: tokens, expires: expires})
	for c.ll.Len() > c.cap {
		last := c.ll.Back()
		c.ll.Remove(last)
		delete(c.items, last.Value.(*cacheEntry).key)
	}
}

func (c *cache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ll.Len()
}
