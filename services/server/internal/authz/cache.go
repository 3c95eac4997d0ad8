package authz

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	gosync "sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// CacheConfig configures a Cache.
type CacheConfig struct {
	// TTL is how long a token's subject and a principal's right on a space
	// are reused once read: a revoked or expired token, a disabled
	// principal or a changed right takes effect within it. 0 reads them
	// for every call. Default 0.
	TTL time.Duration
	// MaxEntries bounds what the cache holds. Default 10,000.
	MaxEntries int
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Cache answers Authenticate and Allowed from what it read at most TTL
// ago, so that a busy client costs the database one token lookup and one
// rights lookup per TTL instead of two queries per request. Only
// successful authentications are kept: a bad token is looked up each
// time, and answered as before. It is safe for concurrent use.
type Cache struct {
	q   Querier
	cfg CacheConfig

	mu       gosync.Mutex
	subjects map[[sha256.Size]byte]subjectEntry
	rights   map[rightsKey]rightsEntry
}

type subjectEntry struct {
	subject Subject
	until   time.Time
}

type rightsKey struct{ principal, space string }

// rightsEntry is what decideSQL read of a principal and its right on a
// space.
type rightsEntry struct {
	found, active bool
	right         *string
	until         time.Time
}

// NewCache returns a cache reading through q.
func NewCache(q Querier, cfg *CacheConfig) *Cache {
	c := &Cache{q: q, subjects: map[[sha256.Size]byte]subjectEntry{}, rights: map[rightsKey]rightsEntry{}}
	if cfg != nil {
		c.cfg = *cfg
	}
	c.cfg.MaxEntries = cmp.Or(c.cfg.MaxEntries, 10_000)
	if c.cfg.Now == nil {
		c.cfg.Now = time.Now
	}
	return c
}

// Authenticate is Authenticate, answered from the cache when the same
// bearer secret authenticated less than TTL ago. The cache holds the
// secret's SHA-256, never the secret.
func (c *Cache) Authenticate(ctx context.Context, bearer string) (*Subject, error) {
	if c.cfg.TTL <= 0 {
		return Authenticate(ctx, c.q, bearer)
	}
	key := sha256.Sum256([]byte(bearer))
	now := c.cfg.Now()
	c.mu.Lock()
	e, ok := c.subjects[key]
	c.mu.Unlock()
	if ok && now.Before(e.until) {
		s := e.subject
		return &s, nil
	}
	s, until, err := authenticate(ctx, c.q, bearer)
	if err != nil {
		return nil, err
	}
	e = subjectEntry{subject: *s, until: now.Add(c.cfg.TTL)}
	if until != nil && until.Before(e.until) {
		e.until = *until // the token expires sooner
	}
	c.mu.Lock()
	c.makeRoom(len(c.subjects))
	c.subjects[key] = e
	c.mu.Unlock()
	return s, nil
}

// Allowed is Allowed for a request without Token, its principal's state
// and right on the space answered from the cache when read less than TTL
// ago. A request with Token reads the database.
func (c *Cache) Allowed(ctx context.Context, req *Request) (Decision, error) {
	if c.cfg.TTL <= 0 || req.Token != nil {
		return Allowed(ctx, c.q, req)
	}
	rl, ok := rules[req.Action]
	if !ok {
		return Decision{}, fmt.Errorf("%w %q", ErrUnknownAction, req.Action)
	}
	key := rightsKey{principal: req.Principal, space: req.Space}
	now := c.cfg.Now()
	c.mu.Lock()
	e, ok := c.rights[key]
	c.mu.Unlock()
	if !ok || !now.Before(e.until) {
		p := &Pending{req: *req, rule: rl}
		err := c.q.QueryRow(ctx, decideSQL, req.Principal, req.Space).Scan(&p.active, &p.right)
		switch {
		case err == nil:
			p.principalFound = true
		case !errors.Is(err, pgx.ErrNoRows):
			return Decision{}, fmt.Errorf("authz %s: read rights: %w", req.Action, err)
		}
		e = rightsEntry{found: p.principalFound, active: p.active, right: p.right, until: now.Add(c.cfg.TTL)}
		c.mu.Lock()
		c.makeRoom(len(c.rights))
		c.rights[key] = e
		c.mu.Unlock()
	}
	p := &Pending{req: *req, rule: rl, principalFound: e.found, active: e.active, right: e.right}
	return p.Decision()
}

// Clear forgets everything: a change made through this process (a token
// revoked, a member added or removed, a principal disabled) then takes
// effect here at once, and within TTL in other processes.
func (c *Cache) Clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.subjects)
	clear(c.rights)
}

// makeRoom drops expired entries once a map of n entries is full, and
// everything if none had expired; c.mu is held.
func (c *Cache) makeRoom(n int) {
	if n < c.cfg.MaxEntries {
		return
	}
	now := c.cfg.Now()
	for k, e := range c.subjects {
		if !now.Before(e.until) {
			delete(c.subjects, k)
		}
	}
	for k, e := range c.rights {
		if !now.Before(e.until) {
			delete(c.rights, k)
		}
	}
	if len(c.subjects) >= c.cfg.MaxEntries {
		clear(c.subjects)
	}
	if len(c.rights) >= c.cfg.MaxEntries {
		clear(c.rights)
	}
}
