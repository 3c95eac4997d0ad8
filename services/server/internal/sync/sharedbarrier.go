package sync

import (
	"context"
	gosync "sync"
	"time"
)

// SharedBarrier lets concurrent callers share the flushes of a
// DurabilityBarrier. A flush of the event log is a transaction that writes
// WAL and waits for the disk (and the synchronous standbys) whenever
// anything is unflushed, which under steady appends is nearly always: a
// burst of producers' acknowledgments, or of answers (every long poll woken
// by one commit), would otherwise make one flush each. Here a call joins the
// flush that starts next, so while one runs, every call that arrives waits
// for the single one after it. That one begins after the call was made, so
// it covers whatever the caller committed or read before calling, as its own
// flush would (TestSharedBarrier_ACallWaitsForAFlushThatBeganAfterIt).
//
// A flush runs for all its callers, so on none of their contexts: it is
// cancelled once every caller waiting for it has given up, or when
// SharedBarrierConfig.Timeout ends it. Its error goes to every caller that
// waited for it. The zero SharedBarrier is not usable: use
// NewSharedBarrier.
type SharedBarrier struct {
	barrier DurabilityBarrier
	timeout time.Duration

	mu      gosync.Mutex
	running bool
	// next is the flush that calls join; it starts when the running one
	// ends.
	next *sharedFlush
}

// sharedFlush is one call of the underlying barrier and its outcome.
type sharedFlush struct {
	done chan struct{}
	err  error
	// waiters counts the calls that wait for it.
	waiters int
	// cancel ends the flush once it has started; nil before.
	cancel context.CancelFunc
}

// SharedBarrierConfig configures a SharedBarrier.
type SharedBarrierConfig struct {
	// Timeout bounds one flush. Default: no bound; the flush runs while
	// any caller waits for it.
	Timeout time.Duration
}

var _ DurabilityBarrier = (*SharedBarrier)(nil)

// NewSharedBarrier returns a SharedBarrier whose flushes are calls of b.
func NewSharedBarrier(b DurabilityBarrier, cfg *SharedBarrierConfig) *SharedBarrier {
	s := &SharedBarrier{barrier: b}
	if cfg != nil {
		s.timeout = cfg.Timeout
	}
	return s
}

// Durable implements DurabilityBarrier: it returns once a flush that began
// after the call has ended, with that flush's error, or ctx has ended, with
// ctx's error. It is safe for concurrent use.
func (s *SharedBarrier) Durable(ctx context.Context) error {
	s.mu.Lock()
	if s.next == nil {
		s.next = &sharedFlush{done: make(chan struct{})}
	}
	f := s.next
	f.waiters++
	if !s.running {
		s.running = true
		go s.run()
	}
	s.mu.Unlock()
	select {
	case <-f.done:
		return f.err
	case <-ctx.Done():
		s.leave(f)
		return ctx.Err()
	}
}

// leave withdraws a caller that gave up waiting for f: a flush nobody waits
// for is dropped before it starts, or cancelled if it runs.
func (s *SharedBarrier) leave(f *sharedFlush) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f.waiters--
	if f.waiters > 0 {
		return
	}
	if f.cancel != nil {
		f.cancel()
	} else if s.next == f {
		s.next = nil
	}
}

// run makes the waiting flushes one after the other until none waits.
func (s *SharedBarrier) run() {
	for {
		s.mu.Lock()
		f := s.next
		s.next = nil
		if f == nil {
			s.running = false
			s.mu.Unlock()
			return
		}
		ctx, cancel := s.flushContext()
		f.cancel = cancel
		s.mu.Unlock()
		f.err = s.barrier.Durable(ctx)
		cancel()
		close(f.done)
	}
}

// flushContext returns the context of one flush: cancelled by its callers
// leaving, or at the timeout if there is one.
func (s *SharedBarrier) flushContext() (context.Context, context.CancelFunc) {
	if s.timeout > 0 {
		return context.WithTimeout(context.Background(), s.timeout)
	}
	return context.WithCancel(context.Background())
}
