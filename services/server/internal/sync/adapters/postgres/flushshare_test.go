package postgres_test

import (
	"context"
	gosync "sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

// heldFlush counts the flushes it is asked for and holds each until
// released, then runs the real one.
type heldFlush struct {
	flush   sync.DurabilityBarrier
	release chan struct{}

	mu    gosync.Mutex
	calls int
}

func (h *heldFlush) Durable(ctx context.Context) error {
	h.mu.Lock()
	h.calls++
	h.mu.Unlock()
	select {
	case <-h.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return h.flush.Durable(ctx)
}

func (h *heldFlush) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls
}

// TestEventLog_ConcurrentWritesShareFlushes: producers that commit while a
// flush runs wait for the next one, which all of them share, instead of
// making a flush transaction each. The first flush is held until every
// producer has committed and given its connection back, the step before it
// joins a flush, so nearly all of them wait together for the next one; a
// flush per producer would make as many flushes as producers. No Write
// returns while the first flush is held, and none keeps its connection
// while it waits: the pool has fewer connections than there are producers.
func TestEventLog_ConcurrentWritesShareFlushes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.NewDB(t)
	pc, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	postgres.RequireSynchronousCommit(pc)
	pc.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	log := postgres.NewEventLog(pool, &postgres.EventLogConfig{Notify: postgres.NotifyNone})
	t.Cleanup(log.Close)
	held := &heldFlush{release: make(chan struct{})}
	postgres.WrapFlush(log, func(f sync.DurabilityBarrier) sync.DurabilityBarrier {
		held.flush = f
		return held
	})
	head, err := postgres.Head(ctx, pool)
	require.NoError(t, err)
	// Should the test fail with producers waiting, they give up and the
	// flush is let go, so the pool can close.
	release := gosync.OnceFunc(func() { close(held.release) })
	t.Cleanup(release)
	writeCtx, cancel := context.WithCancel(ctx)
	defer cancel()

	const producers = 16
	done := make(chan error, producers)
	for range producers {
		go func() {
			_, err := log.Write(writeCtx, func(context.Context, pgx.Tx) ([]sync.NewEvent, error) {
				return []sync.NewEvent{{Space: "s1", Type: "item.created", Actor: "alice"}}, nil
			})
			done <- err
		}()
	}
	pollUntil(t, func() bool {
		select {
		case err := <-done:
			t.Fatalf("a Write returned (%v) while the first flush was held", err)
		default:
		}
		n, err := postgres.Head(ctx, db.Pool)
		require.NoError(t, err)
		return n == head+producers && pool.Stat().AcquiredConns() == 0
	}, "every producer committing and giving its connection back")
	require.Positive(t, held.count(), "the producers wait for no shared flush")
	release()
	for range producers {
		require.NoError(t, <-done)
	}
	t.Logf("%d producers shared %d flushes", producers, held.count())
	require.Less(t, held.count(), producers, "each producer made a flush of its own")
}
