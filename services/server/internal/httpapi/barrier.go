package httpapi

import (
	"context"
	"time"

	"github.com/bothy/bothy/services/server/internal/coalesce"
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
	flushes *coalesce.Batcher[*flush]
}

// flush is one caller's share of a flush: the flush's outcome.
type flush struct{ err error }

var _ sync.DurabilityBarrier = (*sharedBarrier)(nil)

func newSharedBarrier(b sync.DurabilityBarrier) *sharedBarrier {
	s := &sharedBarrier{barrier: b, timeout: 10 * time.Second}
	s.flushes = coalesce.New(s.flush, coalesce.Options[*flush]{})
	return s
}

// Durable implements sync.DurabilityBarrier: it returns once a flush that
// began after the call has ended, or ctx has.
func (s *sharedBarrier) Durable(ctx context.Context) error {
	f := &flush{}
	if err := s.flushes.Do(ctx, f); err != nil {
		return ctx.Err()
	}
	return f.err
}

// flush makes one flush for all the calls of a batch.
func (s *sharedBarrier) flush(calls []*flush) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	err := s.barrier.Durable(ctx)
	for _, f := range calls {
		f.err = err
	}
}
