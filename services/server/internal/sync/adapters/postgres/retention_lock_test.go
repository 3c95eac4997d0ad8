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
	"github.com/bothy/bothy/services/server/internal/testwait"
)

// progressCommits is how many commits the producers must make while a
// partition step meets another session's lock on event_log. Without the
// step's lock_timeout the step waits in the lock queue and every producer
// waits behind it until the other session ends, which the tests hold off
// until the producers made that progress: they fail by waiting out
// progressWait, however fast or slow the machine.
const progressCommits = 10

// progressWait bounds each wait of these tests for a condition; it is a
// deadline for a failing test, not a bound on latency.
const progressWait = time.Minute

// fiveDaysOn is a maintenance time whose one-minute partitions no day
// partition of dbtest covers, while today's day partition, where producers
// write, stays within a five-day retention.
func fiveDaysOn() time.Time { return time.Now().Add(5 * 24 * time.Hour) }

// TestPartitions_MaintainNeverStallsProducers runs a maintenance pass that
// must create partitions and detach old ones while a reader keeps event_log
// open. The detach cannot run until the reader ends, yet producers keep
// committing while it waits, and the pass completes once the reader is
// gone.
func TestPartitions_MaintainNeverStallsProducers(t *testing.T) {
	t.Parallel()
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
	var res *postgres.MaintenanceResult
	c := contend(t, b, `SELECT count(*) FROM event_log`, func() (err error) {
		res, err = parts.Maintain(ctx, fiveDaysOn())
		return err
	})
	c.requireProducersPassTheStep(t, retries)
	c.requireStepWaitsForRelease(t)
	require.Len(t, res.Created, 2)
	require.Len(t, res.Dropped, 3)
	require.Equal(t, oldSeq+1, res.LowSeq)
}

// TestPartitions_EnsureNeverStallsProducers is the same for the creation
// that start-up and migrate run, in its own transactions (Ensure) and in a
// caller's transaction (EnsurePartitions).
func TestPartitions_EnsureNeverStallsProducers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	newParts := func(pool *pgxpool.Pool, retries *retryCounter) *postgres.Partitions {
		return postgres.NewPartitions(pool, &postgres.PartitionConfig{Interval: time.Minute, Ahead: 1, Logger: slog.New(retries)})
	}

	t.Run("ReaderDoesNotHoldCreationBack", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 100)
		var created []string
		c := contend(t, b, `SELECT count(*) FROM event_log`, func() (err error) {
			created, err = newParts(b.db.Pool, &retryCounter{}).Ensure(ctx, fiveDaysOn())
			return err
		})
		c.requireStepEndsWhileHeld(t)
		require.Len(t, created, 2)
	})

	t.Run("ReaderDoesNotHoldCreationBackInCallersTransaction", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 100)
		var created []string
		var lockTimeout string
		c := contend(t, b, `SELECT count(*) FROM event_log`, func() error {
			return pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) (err error) {
				if created, err = postgres.EnsurePartitions(ctx, tx, fiveDaysOn(), time.Minute, 1); err != nil {
					return err
				}
				return tx.QueryRow(ctx, `SELECT current_setting('lock_timeout')`).Scan(&lockTimeout)
			})
		})
		c.requireStepEndsWhileHeld(t)
		require.Len(t, created, 2)
		require.Equal(t, "0", lockTimeout, "the caller's lock_timeout is restored")
	})

	t.Run("RetriesPastAnotherSessionsLock", func(t *testing.T) {
		t.Parallel()
		// SHARE UPDATE EXCLUSIVE is what VACUUM, ANALYZE or another ATTACH
		// hold: it lets producers through but not the creation.
		b := setup(t, 100)
		retries := &retryCounter{}
		var created []string
		c := contend(t, b, `LOCK TABLE event_log IN SHARE UPDATE EXCLUSIVE MODE`, func() (err error) {
			created, err = newParts(b.db.Pool, retries).Ensure(ctx, fiveDaysOn())
			return err
		})
		c.requireProducersPassTheStep(t, retries)
		c.requireStepWaitsForRelease(t)
		require.Len(t, created, 2)
	})
}

// contention is another session holding a lock on event_log until the
// test releases it, two producers committing, and a partition step started
// after both.
type contention struct {
	pool    *pgxpool.Pool
	prod    *producerLoop
	release func()
	done    chan error // the step's result
}

// contend takes the other session's lock with sql, starts the producers,
// then runs step. The test's cleanup releases the lock, waits for the step
// and halts the producers, in that order: each waits for the one before.
func contend(t *testing.T, b *bundle, sql string, step func() error) *contention {
	t.Helper()
	ctx := context.Background()
	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, sql)
	require.NoError(t, err)
	c := &contention{pool: b.db.Pool, done: make(chan error, 1)}
	c.release = gosync.OnceFunc(func() { _ = tx.Commit(ctx) })
	c.prod = startProducers(t, b.log)
	stepDone := make(chan struct{})
	go func() {
		defer close(stepDone)
		c.done <- step()
	}()
	t.Cleanup(func() {
		c.release()
		<-stepDone
		c.prod.wait()
	})
	return c
}

// requireProducersPassTheStep waits until the step has met the lock (it
// logged a retry, or a lock request on event_log waits), then until the
// producers made progressCommits more commits while the lock is still
// held, and until the step retried.
func (c *contention) requireProducersPassTheStep(t *testing.T, retries *retryCounter) {
	t.Helper()
	testwait.Until(t, progressWait, func() bool { return retries.n.Load() > 0 || lockWaiters(c.pool) > 0 },
		"the partition step never met the other session's lock")
	from := c.prod.count()
	waitOrFail(t, func() bool { return c.prod.count() >= from+progressCommits },
		"producers stalled behind partition DDL: %d commits while it met the lock, want %d", func() any { return c.prod.count() - from },
		progressCommits)
	// The producers may have made their commits before the step's first
	// attempt ran out of its lock timeout.
	testwait.Until(t, progressWait, func() bool { return retries.n.Load() > 0 }, "the step never retried past the lock")
}

// requireStepWaitsForRelease requires that the step has not ended while the
// lock is held, releases it, and waits for the step to succeed.
func (c *contention) requireStepWaitsForRelease(t *testing.T) {
	t.Helper()
	select {
	case err := <-c.done:
		t.Fatalf("the step ended while the other session held its lock: %v", err)
	default:
	}
	c.release()
	select {
	case err := <-c.done:
		require.NoError(t, err)
	case <-time.After(progressWait):
		t.Fatal("the step did not end after the lock was released")
	}
	require.NoError(t, c.prod.halt(t))
}

// requireStepEndsWhileHeld waits for the step to succeed while the other
// session still holds its lock.
func (c *contention) requireStepEndsWhileHeld(t *testing.T) {
	t.Helper()
	select {
	case err := <-c.done:
		require.NoError(t, err)
	case <-time.After(progressWait):
		t.Fatal("creation waited for a reader")
	}
	c.release()
	require.NoError(t, c.prod.halt(t))
}

// waitOrFail polls cond until it holds; after progressWait it fails with
// msg, whose first argument is got's value then.
func waitOrFail(t *testing.T, cond func() bool, msg string, got func() any, args ...any) {
	t.Helper()
	deadline := time.Now().Add(progressWait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf(msg, append([]any{got()}, args...)...)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// lockWaiters counts the lock requests on event_log itself waiting in pool's
// database: a partition step's, and producers' queued behind it. (The
// producers' waits for each other are on the counter row.)
func lockWaiters(pool *pgxpool.Pool) int {
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks
		WHERE NOT granted AND locktype = 'relation' AND relation = 'event_log'::regclass
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&n); err != nil {
		return 0
	}
	return n
}

// producerLoop commits one event at a time on two producers until halted
// and counts the commits.
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
// counted: it opens a connection.
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
	ready.Wait()
	return p
}

func commitOne(log *postgres.EventLog) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*progressWait)
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

func (p *producerLoop) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.commits
}

// halt stops the producers, logs the slowest commit (a figure, not a check:
// BenchmarkPartitions_CommitWhileMaintenanceWaits measures it) and returns
// the first error of a commit.
func (p *producerLoop) halt(t *testing.T) error {
	t.Helper()
	p.wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	t.Logf("slowest of %d commits: %s", p.commits, p.slowest)
	return p.err
}

func (p *producerLoop) wait() {
	p.once.Do(func() { close(p.stop) })
	p.wg.Wait()
}

// insertAt commits one event with committed_at at and returns its seq.
func insertAt(t testing.TB, pool *pgxpool.Pool, at time.Time) int64 {
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
