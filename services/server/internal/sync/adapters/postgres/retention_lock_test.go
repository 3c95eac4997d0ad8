package postgres_test

import (
	"context"
	"log/slog"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

// producerBound is the longest a producer's commit may take while partition
// maintenance waits for a lock on event_log: the default LockTimeout plus
// the commit itself, with room for a busy machine (the figures are
// measured in ADR 0009). Without the timeout a producer waits the whole
// holdFor.
const producerBound = 500 * time.Millisecond

// holdFor is how long a competing session keeps its lock on event_log.
const holdFor = 3 * time.Second

// fiveDaysOn is a maintenance time whose one-minute partitions no day
// partition of dbtest covers, while today's day partition, where producers
// write, stays within a five-day retention.
func fiveDaysOn() time.Time { return time.Now().Add(5 * 24 * time.Hour) }

// TestPartitions_MaintainNeverStallsProducers runs a maintenance pass that
// must create partitions and detach old ones while a reader keeps event_log
// open. The detach cannot run until the reader ends, yet no producer waits
// behind it longer than the lock timeout, and the pass completes once the
// reader is gone.
func TestPartitions_MaintainNeverStallsProducers(t *testing.T) {
	// Not parallel: it bounds commit latencies, which other tests' load blurs.
	b := setup(t, 100)
	ctx := context.Background()
	base := time.Now().UTC().Truncate(time.Minute).Add(-10 * 24 * time.Hour)
	require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		_, err := postgres.EnsurePartitions(ctx, tx, base, time.Minute, 2)
		return err
	}))
	oldSeq := insertAt(t, b.db.Pool, base.Add(time.Second))
	retries := &retryCounter{}
	parts := postgres.NewPartitions(b.db.Pool, &postgres.PartitionConfig{
		Interval: time.Minute, Ahead: 1, Retention: 5 * 24 * time.Hour, Logger: slog.New(retries),
	})

	released := hold(t, b.db.Pool, `SELECT count(*) FROM event_log`)
	prod := startProducers(t, b.log)
	res, err := parts.Maintain(ctx, fiveDaysOn())
	finished := time.Now()
	slowest, commits := prod.halt(t)

	require.NoError(t, err)
	require.Less(t, slowest, producerBound, "a producer queued behind partition DDL (%d commits)", commits)
	require.Positive(t, retries.n.Load(), "maintenance never met the reader's lock")
	require.True(t, finished.After(<-released), "the detach cannot have run while the reader held event_log")
	require.Len(t, res.Created, 2)
	require.Len(t, res.Dropped, 3)
	require.Equal(t, oldSeq+1, res.LowSeq)
}

// TestPartitions_EnsureNeverStallsProducers is the same for the creation
// that start-up and migrate run, in its own transactions (Ensure) and in a
// caller's transaction (EnsurePartitions).
func TestPartitions_EnsureNeverStallsProducers(t *testing.T) {
	// Not parallel: it bounds commit latencies, which other tests' load blurs.
	ctx := context.Background()
	newParts := func(pool *pgxpool.Pool, retries *retryCounter) *postgres.Partitions {
		return postgres.NewPartitions(pool, &postgres.PartitionConfig{Interval: time.Minute, Ahead: 1, Logger: slog.New(retries)})
	}

	t.Run("ReaderDoesNotHoldCreationBack", func(t *testing.T) {
		b := setup(t, 100)
		released := hold(t, b.db.Pool, `SELECT count(*) FROM event_log`)
		prod := startProducers(t, b.log)
		created, err := newParts(b.db.Pool, &retryCounter{}).Ensure(ctx, fiveDaysOn())
		finished := time.Now()
		slowest, commits := prod.halt(t)

		require.NoError(t, err)
		require.Less(t, slowest, producerBound, "a producer queued behind partition DDL (%d commits)", commits)
		require.True(t, finished.Before(<-released), "creation waited for a reader")
		require.Len(t, created, 2)
	})

	t.Run("ReaderDoesNotHoldCreationBackInCallersTransaction", func(t *testing.T) {
		b := setup(t, 100)
		released := hold(t, b.db.Pool, `SELECT count(*) FROM event_log`)
		prod := startProducers(t, b.log)
		var created []string
		var lockTimeout string
		err := pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) (err error) {
			if created, err = postgres.EnsurePartitions(ctx, tx, fiveDaysOn(), time.Minute, 1); err != nil {
				return err
			}
			return tx.QueryRow(ctx, `SELECT current_setting('lock_timeout')`).Scan(&lockTimeout)
		})
		finished := time.Now()
		slowest, commits := prod.halt(t)

		require.NoError(t, err)
		require.Less(t, slowest, producerBound, "a producer queued behind partition DDL (%d commits)", commits)
		require.True(t, finished.Before(<-released), "creation waited for a reader")
		require.Len(t, created, 2)
		require.Equal(t, "0", lockTimeout, "the caller's lock_timeout is restored")
	})

	t.Run("RetriesPastAnotherSessionsLock", func(t *testing.T) {
		// SHARE UPDATE EXCLUSIVE is what VACUUM, ANALYZE or another ATTACH
		// hold: it lets producers through but not the creation.
		b := setup(t, 100)
		retries := &retryCounter{}
		released := hold(t, b.db.Pool, `LOCK TABLE event_log IN SHARE UPDATE EXCLUSIVE MODE`)
		prod := startProducers(t, b.log)
		created, err := newParts(b.db.Pool, retries).Ensure(ctx, fiveDaysOn())
		finished := time.Now()
		slowest, commits := prod.halt(t)

		require.NoError(t, err)
		require.Less(t, slowest, producerBound, "a producer queued behind partition DDL (%d commits)", commits)
		require.Positive(t, retries.n.Load(), "creation never met the other session's lock")
		require.True(t, finished.After(<-released), "creation cannot have run while the lock was held")
		require.Len(t, created, 2)
	})
}

// hold runs sql in a transaction that it commits after holdFor; the channel
// receives the time of that commit.
func hold(t *testing.T, pool *pgxpool.Pool, sql string) <-chan time.Time {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, sql)
	require.NoError(t, err)
	released := make(chan time.Time, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-time.After(holdFor)
		_ = tx.Commit(ctx)
		released <- time.Now()
	}()
	t.Cleanup(func() { <-done })
	return released
}

// producerLoop commits one event at a time on two producers until halted
// and records the slowest commit.
type producerLoop struct {
	stop    chan struct{}
	wg      gosync.WaitGroup
	mu      gosync.Mutex
	slowest time.Duration
	commits int
	err     error
	once    gosync.Once
}

// startProducers returns once each producer has made a first commit, not
// measured: it opens a connection, which is not what the test bounds.
func startProducers(t *testing.T, log *postgres.EventLog) *producerLoop {
	t.Helper()
	p := &producerLoop{stop: make(chan struct{})}
	var ready gosync.WaitGroup
	for range 2 {
		ready.Add(1)
		p.wg.Go(func() {
			_, err := commitOne(log)
			ready.Done()
			if err != nil {
				p.record(0, err)
				return
			}
			for {
				select {
				case <-p.stop:
					return
				default:
				}
				p.record(commitOne(log))
			}
		})
	}
	t.Cleanup(p.wait)
	ready.Wait()
	return p
}

func commitOne(log *postgres.EventLog) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	_, err := log.Write(ctx, func(context.Context, pgx.Tx) ([]sync.NewEvent, error) {
		return []sync.NewEvent{{Space: "s1", Type: "item.created", Actor: "alice"}}, nil
	})
	return time.Since(start), err
}

func (p *producerLoop) record(took time.Duration, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.slowest = max(p.slowest, took)
	p.commits++
	if p.err == nil {
		p.err = err
	}
}

// halt stops the producers and returns the slowest commit and how many
// there were; a failed commit fails the test.
func (p *producerLoop) halt(t *testing.T) (time.Duration, int) {
	t.Helper()
	p.wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	require.NoError(t, p.err)
	t.Logf("slowest of %d commits: %s", p.commits, p.slowest)
	return p.slowest, p.commits
}

func (p *producerLoop) wait() {
	p.once.Do(func() { close(p.stop) })
	p.wg.Wait()
}

// insertAt commits one event with committed_at at and returns its seq.
func insertAt(t *testing.T, pool *pgxpool.Pool, at time.Time) int64 {
	t.Helper()
	var seq int64
	require.NoError(t, pool.QueryRow(context.Background(), `
		WITH c AS (UPDATE event_seq SET last_seq = last_seq + 1 RETURNING last_seq)
		INSERT INTO event_log (seq, committed_at, id, space, type, actor, occurred_at)
		SELECT c.last_seq, $1, gen_random_uuid(), 's1', 'item.created', 'a', $1 FROM c
		RETURNING seq`, at).Scan(&seq))
	return seq
}

// retryCounter is a slog.Handler counting the records Partitions logs,
// which it does only when a step waits for a lock.
type retryCounter struct{ n atomic.Int64 }

func (c *retryCounter) Enabled(context.Context, slog.Level) bool { return true }

func (c *retryCounter) Handle(context.Context, slog.Record) error { c.n.Add(1); return nil }

func (c *retryCounter) WithAttrs([]slog.Attr) slog.Handler { return c }

func (c *retryCounter) WithGroup(string) slog.Handler { return c }
