// Package coalesce lets calls that arrive together share one round trip:
// while a batch runs, the calls that arrive wait for the next, which
// takes them all, as PostgreSQL's group commit shares an fsync (with more
// than one runner, the next may start while the first still runs). The event
// log's appends, the webhook senders' grouped steps, push's send log and
// the API's durability barrier all batch this way.
package coalesce

import (
	"context"
	"errors"
	"fmt"
	"slices"
	gosync "sync"
	"time"
)

// Options shape a Batcher. The zero value runs one batch at a time, of
// any size, at once.
type Options[T any] struct {
	// MaxWeight bounds a batch's total Weight (0: no bound); a batch
	// always takes at least one call.
	MaxWeight int
	// Weight is a call's share of MaxWeight (nil: 1 each).
	Weight func(T) int
	// Runners is how many batches may run at once (0: 1).
	Runners int
	// Stall: a further batch starts while others run only once the
	// newest has run this long (0: as soon as a call waits), so calls
	// keep sharing batches unless one is held up. Only calls made with Do
	// look again while they wait; one made with Add starts a runner when
	// it comes, or waits for a running one.
	Stall time.Duration
	// Linger: a batch is taken once its oldest call has waited this long,
	// so that more calls join it (0: at once). One runner lingers at a
	// time; the others run the batches taken before.
	Linger time.Duration
}

// Batcher runs the calls that come together as batches through run. It
// calls run on goroutines of its own, under none of the callers'
// contexts: run must bound itself. run reports each call's outcome in
// the call's value (T is usually a pointer); the calls are done once run
// returns.
type Batcher[T any] struct {
	run  func([]T)
	opts Options[T]

	mu      gosync.Mutex
	queue   []*call[T]
	running int
	// lingering counts the runners waiting out Linger before they take a
	// batch: at most one, which the calls that come meanwhile join.
	lingering int
	latest    time.Time
	// idle is signalled when running drops to 0.
	idle *gosync.Cond
}

type call[T any] struct {
	v     T
	at    time.Time
	done  chan struct{}
	taken bool
}

// New returns a Batcher that runs batches through run.
func New[T any](run func(batch []T), opts Options[T]) *Batcher[T] {
	if opts.Runners <= 0 {
		opts.Runners = 1
	}
	b := &Batcher[T]{run: run, opts: opts}
	b.idle = gosync.NewCond(&b.mu)
	return b
}

// ErrNotTaken wraps the context's error when a call's context ended
// before any batch took it: it did not run, and never will.
var ErrNotTaken = errors.New("withdrawn before a batch took it")

// ErrOutcomeUnknown wraps the context's error when a call's context ended
// after a batch took it: the batch goes on, and what it did for this call
// is not known to the caller.
var ErrOutcomeUnknown = errors.New("outcome unknown, a batch took it")

// Do queues v for the next batch and waits until the batch that took it
// has run (nil), or ctx ends (ErrNotTaken or ErrOutcomeUnknown, wrapping
// ctx's error).
func (b *Batcher[T]) Do(ctx context.Context, v T) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrNotTaken, err)
	}
	c := b.add(v)
	var stalled <-chan time.Time
	if b.opts.Stall > 0 && b.opts.Runners > 1 {
		t := time.NewTicker(b.opts.Stall)
		defer t.Stop()
		stalled = t.C
	}
	for {
		select {
		case <-c.done:
			return nil
		case <-stalled:
			b.mu.Lock()
			if !c.taken {
				b.startLocked()
			}
			b.mu.Unlock()
		case <-ctx.Done():
			return b.withdraw(ctx, c)
		}
	}
}

// Add queues v for the next batch without waiting for it.
func (b *Batcher[T]) Add(v T) { b.add(v) }

// Waiting is how many calls wait for a batch to take them.
func (b *Batcher[T]) Waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

// Wait returns once no batch runs; calls added meanwhile start more.
func (b *Batcher[T]) Wait() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.running > 0 {
		b.idle.Wait()
	}
}

// stopLocked ends a runner. b.mu is held.
func (b *Batcher[T]) stopLocked() {
	b.running--
	if b.running == 0 {
		b.idle.Broadcast()
	}
}

func (b *Batcher[T]) add(v T) *call[T] {
	c := &call[T]{v: v, at: time.Now(), done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, c)
	b.startLocked()
	b.mu.Unlock()
	return c
}

// withdraw takes c out of the queue if no batch took it yet.
func (b *Batcher[T]) withdraw(ctx context.Context, c *call[T]) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-c.done:
		return nil
	default:
	}
	if !c.taken {
		b.queue = slices.DeleteFunc(b.queue, func(q *call[T]) bool { return q == c })
		return fmt.Errorf("%w: %w", ErrNotTaken, ctx.Err())
	}
	return fmt.Errorf("%w: %w", ErrOutcomeUnknown, ctx.Err())
}

// startLocked starts a runner when none runs, or when fewer than Runners
// run, none lingers (the calls join its batch) and the newest has run
// longer than Stall. b.mu is held.
func (b *Batcher[T]) startLocked() {
	if b.running > 0 && (b.running >= b.opts.Runners || b.lingering > 0 || time.Since(b.latest) <= b.opts.Stall) {
		return
	}
	b.running++
	b.latest = time.Now()
	go b.loop()
}

// loop runs batches until none waits.
func (b *Batcher[T]) loop() {
	for {
		batch := b.next()
		if batch == nil {
			return
		}
		vs := make([]T, len(batch))
		for i, c := range batch {
			vs[i] = c.v
		}
		b.run(vs)
		for _, c := range batch {
			close(c.done)
		}
	}
}

// next takes the next batch off the queue once the oldest waiting call
// has waited Linger, or ends the runner (nil) when none waits or another
// runner lingers already.
func (b *Batcher[T]) next() []*call[T] {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.opts.Linger > 0 && len(b.queue) > 0 {
		if b.lingering > 0 {
			b.stopLocked()
			return nil
		}
		if wait := b.opts.Linger - time.Since(b.queue[0].at); wait > 0 {
			b.lingering++
			b.mu.Unlock()
			time.Sleep(wait)
			b.mu.Lock()
			b.lingering--
		}
	}
	return b.takeLocked()
}

// takeLocked takes the next batch off the queue, or ends the runner (nil)
// when none waits. b.mu is held.
func (b *Batcher[T]) takeLocked() []*call[T] {
	n, weight := 0, 0
	for n < len(b.queue) {
		w := 1
		if b.opts.Weight != nil {
			w = b.opts.Weight(b.queue[n].v)
		}
		if n > 0 && b.opts.MaxWeight > 0 && weight+w > b.opts.MaxWeight {
			break
		}
		weight += w
		b.queue[n].taken = true
		n++
	}
	if n == 0 {
		b.stopLocked()
		return nil
	}
	batch := slices.Clone(b.queue[:n])
	// The taken calls leave the queue's array too, so it keeps no
	// finished call alive.
	clear(b.queue[:n])
	b.queue = b.queue[n:]
	b.latest = time.Now()
	return batch
}
