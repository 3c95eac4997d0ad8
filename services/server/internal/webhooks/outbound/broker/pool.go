package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	gosync "sync"
	"time"
)

// IdleTTL is how long a connection no send has used stays open. A
// subscription whose credentials were changed (or that was deleted) sends
// on its old key no more, so its connection goes after IdleTTL.
const IdleTTL = 5 * time.Minute

// ErrPoolClosed is the error of a connection asked for after Close.
var ErrPoolClosed = errors.New("the destination pool is closed")

// Conn is a broker kind's connection as a Pool keeps it.
type Conn interface {
	// Broken says the connection can carry no more sends (its client lost
	// it); the pool then closes it and dials a new one.
	Broken() bool
	// Close closes the connection; it may be called on a broken one.
	Close()
}

// Key names a pooled connection: ID is what tells connections apart (a
// broker URL with its credentials; never shown), Addr the host:port the
// pool's errors and reports name.
type Key struct {
	ID   string
	Addr string
}

// Dial makes a connection; ctx bounds it.
type Dial[C Conn] func(ctx context.Context) (C, error)

// Pool keeps one connection per key for the whole process, shared by
// every destination with that key. It dials at the first use of a key,
// and again when the connection broke, with Backoff between failed dials
// (an attempt in the wait fails at once with the last dial's error). A
// connection no send used for the idle TTL is closed: that is how a
// connection whose credentials were rotated away goes. Close closes every
// connection. It is safe for concurrent use.
type Pool[C Conn] struct {
	name string
	log  *slog.Logger
	kick chan struct{}
	stop chan struct{}
	done chan struct{}

	mu      gosync.Mutex
	ttl     time.Duration
	entries map[string]*entry[C]
	closed  bool
}

// entry is one key's connection. turn is a one-slot lock that whoever
// checks, dials or closes the connection holds, so one dial at a time
// happens per key and a waiting attempt can give up with its context.
type entry[C Conn] struct {
	key  Key
	turn chan struct{}

	// held with turn:
	conn     C
	up       bool
	gone     bool // closed by Close or by the idle sweep: dial no more
	failures int
	lastErr  error
	retryAt  time.Time

	// held with Pool.mu:
	users   int
	lastUse time.Time
}

// NewPool returns a pool whose reports to log name the broker as name
// ("nats"); connections idle for IdleTTL are closed.
func NewPool[C Conn](name string, log *slog.Logger) *Pool[C] {
	if log == nil {
		log = slog.Default()
	}
	p := &Pool[C]{name: name, log: log, ttl: IdleTTL, entries: map[string]*entry[C]{},
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go p.sweeper()
	return p
}

// SetIdleTTL changes how long an unused connection stays open.
func (p *Pool[C]) SetIdleTTL(d time.Duration) {
	p.mu.Lock()
	p.ttl = d
	p.mu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Acquire returns key's connection, dialling it with dial if there is
// none or it broke, and a release to call once the send is done with it;
// a connection is not closed for idleness while acquired. An error says
// why there is no connection, naming the address, never the ID.
func (p *Pool[C]) Acquire(ctx context.Context, key Key, dial Dial[C]) (C, func(), error) {
	var zero C
	e, err := p.use(key)
	if err != nil {
		return zero, nil, err
	}
	release := gosync.OnceFunc(func() { p.release(e) })
	c, err := p.connect(ctx, e, dial)
	if err != nil {
		release()
		return zero, nil, err
	}
	return c, release, nil
}

// use returns key's entry, made if there is none, counted as in use.
func (p *Pool[C]) use(key Key) (*entry[C], error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrPoolClosed
	}
	e, ok := p.entries[key.ID]
	if !ok {
		e = &entry[C]{key: key, turn: make(chan struct{}, 1)}
		p.entries[key.ID] = e
	}
	e.users++
	e.lastUse = time.Now()
	return e, nil
}

func (p *Pool[C]) release(e *entry[C]) {
	p.mu.Lock()
	e.users--
	e.lastUse = time.Now()
	p.mu.Unlock()
}

// connect returns e's live connection: the one it has, or a new one when
// it has none or it broke and the backoff has passed.
func (p *Pool[C]) connect(ctx context.Context, e *entry[C], dial Dial[C]) (C, error) {
	var zero C
	select {
	case e.turn <- struct{}{}:
	case <-ctx.Done():
		return zero, fmt.Errorf("waiting for the connection to %s: %w", e.key.Addr, ctx.Err())
	}
	defer func() { <-e.turn }()
	switch {
	case e.gone:
		return zero, ErrPoolClosed
	case e.up && !e.conn.Broken():
		return e.conn, nil
	case e.up:
		e.conn.Close()
		e.conn, e.up = zero, false
		p.log.Warn(p.name+" connection lost", slog.String("addr", e.key.Addr))
	}
	if wait := time.Until(e.retryAt); wait > 0 {
		return zero, fmt.Errorf("not connected to %s: %w (dialling again in %s)", e.key.Addr, e.lastErr, wait.Round(time.Millisecond))
	}
	dctx, cancel := context.WithTimeout(ctx, DialTimeout)
	defer cancel()
	c, err := dial(dctx)
	if err != nil {
		if ctx.Err() == nil { // the broker's failure, not the attempt's end
			e.failures++
			e.lastErr, e.retryAt = err, time.Now().Add(Backoff(e.failures))
			if e.failures == 1 {
				p.log.Warn(p.name+" connection failed", slog.String("addr", e.key.Addr), slog.Any("error", err))
			}
		}
		return zero, fmt.Errorf("not connected to %s: %w", e.key.Addr, err)
	}
	if e.failures > 0 {
		p.log.Info(p.name+" connection back", slog.String("addr", e.key.Addr))
	}
	e.conn, e.up, e.failures, e.lastErr, e.retryAt = c, true, 0, nil, time.Time{}
	return c, nil
}

// sweeper closes idle connections every half TTL until Close.
func (p *Pool[C]) sweeper() {
	defer close(p.done)
	for {
		p.mu.Lock()
		every := max(p.ttl/2, time.Millisecond)
		p.mu.Unlock()
		t := time.NewTimer(every)
		select {
		case <-t.C:
			p.sweep()
		case <-p.kick:
			t.Stop()
		case <-p.stop:
			t.Stop()
			return
		}
	}
}

// sweep closes the connections no send has used for the TTL.
func (p *Pool[C]) sweep() {
	p.mu.Lock()
	var idle []*entry[C]
	for id, e := range p.entries {
		if e.users == 0 && time.Since(e.lastUse) >= p.ttl {
			delete(p.entries, id)
			idle = append(idle, e)
		}
	}
	p.mu.Unlock()
	for _, e := range idle {
		p.end(e)
	}
}

// end closes e's connection for good, once no dial of it is under way.
func (p *Pool[C]) end(e *entry[C]) {
	e.turn <- struct{}{}
	defer func() { <-e.turn }()
	e.gone = true
	if e.up {
		e.conn.Close()
		var zero C
		e.conn, e.up = zero, false
	}
}

// Close closes every connection, waiting for dials under way, and stops
// the idle sweep. Acquire fails with ErrPoolClosed after it.
func (p *Pool[C]) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	entries := p.entries
	p.entries = map[string]*entry[C]{}
	p.mu.Unlock()
	close(p.stop)
	<-p.done
	for _, e := range entries {
		p.end(e)
	}
}

// Peek returns key's connection as it is, without using or dialling it:
// for tests that watch a connection go.
func (p *Pool[C]) Peek(id string) (C, bool) {
	var zero C
	p.mu.Lock()
	e, ok := p.entries[id]
	p.mu.Unlock()
	if !ok {
		return zero, false
	}
	e.turn <- struct{}{}
	defer func() { <-e.turn }()
	return e.conn, e.up
}
