package postgres_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/testwait"
)

// writeEvents appends news in one Write whose transaction also inserts a
// domain row (table items), so a test can see whether the producer's own
// writes committed.
func writeEvents(ctx context.Context, log *postgres.EventLog, news ...sync.NewEvent) ([]sync.Event, error) {
	return log.Write(ctx, func(ctx context.Context, tx pgx.Tx) ([]sync.NewEvent, error) {
		_, err := tx.Exec(ctx, `INSERT INTO items DEFAULT VALUES`)
		return news, err
	})
}

// rowsWithID counts the log's events with id.
func rowsWithID(t *testing.T, b *bundle, id uuid.UUID) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM event_log WHERE id = $1`, id).Scan(&n))
	return n
}

func countItems(t *testing.T, b *bundle) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM items`).Scan(&n))
	return n
}

// TestEventLog_WriteRepeatedID shows that an event id is appended once: a
// repeat in the same call, in a later call or in a concurrent producer is
// answered with the logged event, marked Duplicate, and a repeat that
// differs is refused with sync.ErrEventIDConflict.
func TestEventLog_WriteRepeatedID(t *testing.T) {
	t.Parallel()
	b := setup(t, 100)
	ctx := context.Background()
	_, err := b.db.Pool.Exec(ctx, `CREATE TABLE items (id bigserial PRIMARY KEY)`)
	require.NoError(t, err)
	event := func(id uuid.UUID, data string) sync.NewEvent {
		return sync.NewEvent{ID: id, Space: "s1", Type: "item.created", Actor: "alice", Data: json.RawMessage(data)}
	}

	t.Run("SameIDTwiceInOneCallAppendsOnce", func(t *testing.T) {
		requireSameIDTwiceInOneCallAppendsOnce(t, b, viaWrite(b.log))
	})
	t.Run("SameIDInTwoCallsAppendsOnce", func(t *testing.T) {
		id := uuid.New()
		first, err := writeEvents(ctx, b.log, event(id, `{"a":1,"b":[1,2]}`))
		require.NoError(t, err)
		items := countItems(t, b)
		again, err := writeEvents(ctx, b.log, event(id, `{"b":[1,2],"a":1.0}`))
		require.NoError(t, err)
		require.Len(t, again, 1)
		require.True(t, again[0].Duplicate)
		require.Equal(t, first[0].Seq, again[0].Seq)
		require.True(t, first[0].CommittedAt.Equal(again[0].CommittedAt))
		require.True(t, first[0].OccurredAt.Equal(again[0].OccurredAt), "the logged event, not the repeat's defaults")
		require.Equal(t, 1, rowsWithID(t, b, id))
		require.Equal(t, items+1, countItems(t, b), "the producer's own writes commit")
	})
	t.Run("RepeatAmongNewEventsAppendsOnlyTheNew", func(t *testing.T) {
		id, fresh := uuid.New(), uuid.New()
		first, err := writeEvents(ctx, b.log, event(id, `{}`))
		require.NoError(t, err)
		evs, err := writeEvents(ctx, b.log, event(fresh, `{}`), event(id, `{}`))
		require.NoError(t, err)
		require.False(t, evs[0].Duplicate)
		require.Greater(t, evs[0].Seq, first[0].Seq)
		require.True(t, evs[1].Duplicate)
		require.Equal(t, first[0].Seq, evs[1].Seq)
		head, err := postgres.Head(ctx, b.db.Pool)
		require.NoError(t, err)
		require.Equal(t, evs[0].Seq, head, "one seq handed out")
	})
	t.Run("ConcurrentProducersWithSameIDAppendOnce", func(t *testing.T) {
		requireConcurrentCallsOfOneIDAppendOnce(t, b, viaWrite(b.log))
	})
	t.Run("ConcurrentFirstProducerRollingBackLetsTheSecondAppend", func(t *testing.T) {
		requireRolledBackClaimLetsTheCallAppend(t, b, viaWrite(b.log))
	})
	t.Run("OtherDataUnderTheSameIDIsAConflict", func(t *testing.T) {
		id := uuid.New()
		_, err := writeEvents(ctx, b.log, event(id, `{"a":1}`))
		require.NoError(t, err)
		items := countItems(t, b)
		before, err := postgres.Head(ctx, b.db.Pool)
		require.NoError(t, err)
		for name, ne := range map[string]sync.NewEvent{
			"data":  event(id, `{"a":2}`),
			"type":  {ID: id, Space: "s1", Type: "item.deleted", Actor: "alice", Data: []byte(`{"a":1}`)},
			"space": {ID: id, Space: "s2", Type: "item.created", Actor: "alice", Data: []byte(`{"a":1}`)},
			"actor": {ID: id, Space: "s1", Type: "item.created", Actor: "mallory", Data: []byte(`{"a":1}`)},
		} {
			_, err := writeEvents(ctx, b.log, event(uuid.New(), `{}`), ne)
			require.ErrorIs(t, err, sync.ErrEventIDConflict, name)
			var ee *sync.EventError
			require.ErrorAs(t, err, &ee)
			require.Equal(t, 1, ee.Index, name)
			require.NotContains(t, err.Error(), "alice", "the logged event is not shown")
		}
		after, err := postgres.Head(ctx, b.db.Pool)
		require.NoError(t, err)
		require.Equal(t, before, after, "nothing appended")
		require.Equal(t, items, countItems(t, b), "nothing committed")
	})
	t.Run("OtherDataUnderTheSameIDWithinOneCallIsAConflict", func(t *testing.T) {
		id := uuid.New()
		_, err := writeEvents(ctx, b.log, event(id, `{"a":1}`), event(uuid.New(), `{}`), event(id, `{"a":2}`))
		require.ErrorIs(t, err, sync.ErrEventIDConflict)
		var ee *sync.EventError
		require.ErrorAs(t, err, &ee)
		require.Equal(t, 2, ee.Index)
		require.Zero(t, rowsWithID(t, b, id))
	})
	t.Run("RepeatFarBehindItsClaimIsFound", func(t *testing.T) {
		// The search widens from after_seq until it reaches the event.
		many := make([]sync.NewEvent, 1100)
		for i := range many {
			many[i] = event(uuid.New(), `{}`)
		}
		_, err := writeEvents(ctx, b.log, many...)
		require.NoError(t, err)
		id := uuid.New()
		first, err := writeEvents(ctx, b.log, event(id, `{}`))
		require.NoError(t, err)
		_, err = b.db.Pool.Exec(ctx, `UPDATE event_ids SET after_seq = 0 WHERE id = $1`, id)
		require.NoError(t, err)
		again, err := writeEvents(ctx, b.log, event(id, `{}`))
		require.NoError(t, err)
		require.Equal(t, first[0].Seq, again[0].Seq)
		require.True(t, again[0].Duplicate)
	})
	t.Run("IDWhoseEventIsGoneIsAConflict", func(t *testing.T) {
		id := uuid.New()
		_, err := b.db.Pool.Exec(ctx, `INSERT INTO event_ids (id, after_seq) VALUES ($1, 0)`, id)
		require.NoError(t, err)
		_, err = writeEvents(ctx, b.log, event(id, `{}`))
		require.ErrorIs(t, err, sync.ErrEventIDConflict)
		require.Contains(t, err.Error(), "no longer in the log")
	})
}

// waitForLockWaiters waits until n sessions of the test's database wait
// for a lock.
func waitForLockWaiters(t *testing.T, b *bundle, n int) {
	t.Helper()
	testwait.Until(t, 10*time.Second, func() bool {
		var waiting int
		err := b.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting)
		return err == nil && waiting >= n
	}, "%d sessions waiting for a lock", n)
}

// appendFunc appends news in one call of the event log, through Write or
// through Append, so that one test body can hold both paths to the same
// promises.
type appendFunc func(ctx context.Context, news ...sync.NewEvent) ([]sync.Event, error)

// viaWrite appends through log.Write, with a domain row (writeEvents).
func viaWrite(log *postgres.EventLog) appendFunc {
	return func(ctx context.Context, news ...sync.NewEvent) ([]sync.Event, error) {
		return writeEvents(ctx, log, news...)
	}
}

// viaAppend appends through log.Append.
func viaAppend(log *postgres.EventLog) appendFunc {
	return func(ctx context.Context, news ...sync.NewEvent) ([]sync.Event, error) {
		return log.Append(ctx, news)
	}
}

// requireSameIDTwiceInOneCallAppendsOnce makes one call of appendEvents
// with an event, another and the first again (its data spelled
// otherwise), and requires that the repeat is answered with the first,
// marked Duplicate, and takes no seq. It returns the call's events.
func requireSameIDTwiceInOneCallAppendsOnce(t *testing.T, b *bundle, appendEvents appendFunc) []sync.Event {
	t.Helper()
	id, other := uuid.New(), uuid.New()
	evs, err := appendEvents(context.Background(), itemEvent(id, `{"a":1}`), itemEvent(other, `{}`), itemEvent(id, `{ "a" : 1 }`))
	require.NoError(t, err)
	require.Len(t, evs, 3)
	require.False(t, evs[0].Duplicate)
	require.False(t, evs[1].Duplicate)
	require.True(t, evs[2].Duplicate)
	require.Equal(t, evs[0].Seq, evs[2].Seq)
	require.Equal(t, evs[0].Seq+1, evs[1].Seq, "the repeat takes no seq")
	require.Equal(t, 1, rowsWithID(t, b, id))
	return evs
}

// holdCounter takes the log's counter row in a transaction of its own, so
// that a producer that has claimed its ids waits for the counter before it
// inserts; release rolls the transaction back and lets the producer on.
// The transaction is also rolled back when the test ends, should it stop
// before release.
func holdCounter(t *testing.T, b *bundle) (release func()) {
	t.Helper()
	ctx := context.Background()
	holder, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = holder.Rollback(ctx) })
	_, err = holder.Exec(ctx, `SELECT last_seq FROM event_seq FOR UPDATE`)
	require.NoError(t, err)
	return func() {
		t.Helper()
		require.NoError(t, holder.Rollback(ctx))
	}
}

// requireConcurrentCallsOfOneIDAppendOnce makes two concurrent calls of
// appendEvents with the same event and requires that the event is
// appended once: both calls succeed with the same seq, exactly one of
// them not marked Duplicate. It returns that seq.
func requireConcurrentCallsOfOneIDAppendOnce(t *testing.T, b *bundle, appendEvents appendFunc) int64 {
	t.Helper()
	// A holder of the counter keeps call A in the window's queue after A
	// claimed the id, so B claims it while A has not committed.
	id := uuid.New()
	release := holdCounter(t, b)
	type result struct {
		evs []sync.Event
		err error
	}
	results := make(chan result, 2)
	call := func() {
		evs, err := appendEvents(context.Background(), itemEvent(id, `{"n":1}`))
		results <- result{evs, err}
	}
	go call()
	waitForLockWaiters(t, b, 1) // A waits for the counter, its id claimed
	go call()
	waitForLockWaiters(t, b, 2) // B waits for A's claim
	release()
	r1, r2 := <-results, <-results
	require.NoError(t, r1.err)
	require.NoError(t, r2.err)
	require.Equal(t, r1.evs[0].Seq, r2.evs[0].Seq, "both callers get the same seq")
	require.NotEqual(t, r1.evs[0].Duplicate, r2.evs[0].Duplicate, "exactly one appended")
	require.Equal(t, 1, rowsWithID(t, b, id))
	return r1.evs[0].Seq
}

// requireRolledBackClaimLetsTheCallAppend has a transaction claim an id,
// then a call of appendEvents with that id wait for the claim, and
// requires that the call appends the event once the claimer rolls back.
func requireRolledBackClaimLetsTheCallAppend(t *testing.T, b *bundle, appendEvents appendFunc) {
	t.Helper()
	ctx := context.Background()
	id := uuid.New()
	claimer, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = claimer.Rollback(ctx) })
	_, err = claimer.Exec(ctx, `INSERT INTO event_ids (id, after_seq) VALUES ($1, 0)`, id)
	require.NoError(t, err)
	var evs []sync.Event
	done := start(func() error {
		var err error
		evs, err = appendEvents(ctx, itemEvent(id, `{}`))
		return err
	})
	waitForLockWaiters(t, b, 1) // the call's claim waits for the claimer's
	require.NoError(t, claimer.Rollback(ctx))
	require.NoError(t, <-done)
	require.False(t, evs[0].Duplicate)
	require.Equal(t, 1, rowsWithID(t, b, id))
}

// TestPartitions_MaintainForgetsEventIDs shows that retention deletes the
// ids of the events it drops, and only those: a dropped event's id may be
// appended again, a kept one's may not.
func TestPartitions_MaintainForgetsEventIDs(t *testing.T) {
	t.Parallel()
	b := setup(t, 100)
	ctx := context.Background()
	now := time.Now().UTC()
	// One-minute partitions instead of the day partitions dbtest made.
	_, err := b.db.Pool.Exec(ctx, `DELETE FROM event_log_partitions`)
	require.NoError(t, err)
	rows, err := b.db.Pool.Query(ctx, `SELECT inhrelid::regclass::text FROM pg_inherits WHERE inhparent = 'event_log'::regclass`)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	for _, n := range names {
		_, err := b.db.Pool.Exec(ctx, `DROP TABLE `+n)
		require.NoError(t, err)
	}
	ensure := func(at time.Time) {
		require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
			_, err := postgres.EnsurePartitions(ctx, tx, at, time.Minute, 12)
			return err
		}))
	}
	ensure(now)

	old := appendN(t, b.log, 3)
	// A kept event, committed in a partition 11 minutes on, as a producer
	// then would: its id claimed with the head before it.
	kept := uuid.New()
	_, err = b.db.Pool.Exec(ctx, `
		WITH c AS (UPDATE event_seq SET last_seq = last_seq + 1 RETURNING last_seq),
		i AS (INSERT INTO event_ids (id, after_seq) SELECT $2, last_seq - 1 FROM c)
		INSERT INTO event_log (seq, committed_at, id, space, type, actor, occurred_at)
		SELECT c.last_seq, $1, $2, 's1', 'item.created', 'alice', $1 FROM c`, now.Add(11*time.Minute), kept)
	require.NoError(t, err)

	parts := postgres.NewPartitions(b.db.Pool, &postgres.PartitionConfig{Interval: time.Minute, Ahead: 1, Retention: 2 * time.Minute})
	res, err := parts.Maintain(ctx, now.Add(13*time.Minute))
	require.NoError(t, err)
	require.NotEmpty(t, res.Dropped)
	require.Equal(t, 0, rowsWithID(t, b, old[0].ID), "the old events are dropped")

	var ids []uuid.UUID
	rows, err = b.db.Pool.Query(ctx, `SELECT id FROM event_ids`)
	require.NoError(t, err)
	ids, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{kept}, ids, "only the kept event's id remains")

	// The dropped events' ids may be used again; the kept one's is a repeat.
	ensure(time.Now())
	again, err := b.log.Write(ctx, func(context.Context, pgx.Tx) ([]sync.NewEvent, error) {
		return []sync.NewEvent{
			{ID: old[0].ID, Space: "s1", Type: "item.created", Actor: "alice", Data: []byte(`{"i":0}`)},
			{ID: kept, Space: "s1", Type: "item.created", Actor: "alice"},
		}, nil
	})
	require.NoError(t, err)
	require.False(t, again[0].Duplicate)
	require.True(t, again[1].Duplicate)
}
