package eventexpr

import (
	gosync "sync"

	"github.com/google/uuid"
)

// cacheMax bounds a Cache: past it, it starts over, so subscriptions
// deleted long ago do not keep their programs.
const cacheMax = 10_000

// Cache keeps the programs of subscriptions, compiled once per expression
// text: a subscription's new filter or transform is compiled on first use,
// its old one dropped. It is safe for concurrent use.
type Cache struct {
	mu gosync.Mutex
	m  map[cacheKey]cacheEntry
}

type cacheKey struct {
	id   uuid.UUID
	kind Kind
}

type cacheEntry struct {
	src string
	prg *Program
	err error
}

// NewCache returns an empty cache.
func NewCache() *Cache { return &Cache{m: map[cacheKey]cacheEntry{}} }

// Program returns the compiled src, the expression of kind of subscription
// id, or why it does not compile (an expression stored before a bound was
// lowered, or written by hand).
func (c *Cache) Program(id uuid.UUID, kind Kind, src string) (*Program, error) {
	k := cacheKey{id: id, kind: kind}
	c.mu.Lock()
	e, ok := c.m[k]
	c.mu.Unlock()
	if ok && e.src == src {
		return e.prg, e.err
	}
	prg, err := Compile(kind, src)
	c.mu.Lock()
	if len(c.m) >= cacheMax {
		clear(c.m)
	}
	c.m[k] = cacheEntry{src: src, prg: prg, err: err}
	c.mu.Unlock()
	return prg, err
}
