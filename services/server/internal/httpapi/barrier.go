package httpapi

import (
	"context"
	gosync "sync"
	"time"

	"github.com/bothy/bothy/services/server/internal/sync"
)

// sharedBarrier lets concurrent readers share flushes. Each flush of the
// event log's barrier is a transaction that writes WAL and waits for the
// disk when anything is unflushed, which under steady appends is nearly
// always: a burst of answers (every long poll woken by one commit) would
// make one flush each. Here a call joins the flush that starts next, so
// while one runs, every call that arrives waits for the single one after
// it. That one begins after the call was made, so it covers whatever the
// caller read before calling, as its own flush would.
type sharedBarrier struct {
	barrier sync.DurabilityBarrier
	// timeout bounds one flush, which runs for all its callers and so on
	// no caller's context.
	timeout time.Duration

	mu      gosync.Mutex
	running bool
	next    *flush
}

// flush is one call of the underlying barrier and its outcome.
type flush struct {
	done chan struct{}
	err  error
	// waiters counts the calls that wait for it.
	waiters int
}

var _ sync.DurabilityBarrier = (*sharedBarrier)(nil)

func newSharedBarrier(b sync.DurabilityBarrier) *sharedBarrier {
	return &sharedBarrier{barrier: b, timeout: 10 * time.Second}
}

// Durable implements sync.DurabilityBarrier: it returns once a flush that
// began after the call has ended, or ctx has.
func (s *sharedBarrier) Durable(ctx context.Context) error {
	s.mu.Lock()
	if s.next == nil {
		s.next = &flush{done: make(chan struct{})}
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
		return ctx.Err()
	}
}

// run makes the waiting flushes one after the other until none waits.
func (s *sharedBarrier) run() {
	for {
		s.mu.Lock()
		f := s.next
		s.next = nil
		if f == nil {
			s.running = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
		f.err = s.barrier.Durable(ctx)
		cancel()
		close(f.done)
	}
}
