package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/bothy/bothy/services/server/internal/dbconn"
	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/testwait"
)

// itemEvent is an item.created event of alice in s1.
func itemEvent(id uuid.UUID, data string) sync.NewEvent {
	return sync.NewEvent{ID: id, Space: "s1", Type: "item.created", Actor: "alice", Data: json.RawMessage(data)}
}

// headOf returns the log's head.
func headOf(t *testing.T, b *bundle) int64 {
	t.Helper()
	head, err := postgres.Head(context.Background(), b.db.Pool)
	require.NoError(t, err)
	return head
}

// claimsOf counts the rows of event_ids with id.
func claimsOf(t *testing.T, b *bundle, id uuid.UUID) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM event_ids WHERE id = $1`, id).Scan(&n))
	return n
}

// onePool opens a pool of one connection on db, configured as the roles'
// pools are (dbconn.RegisterTypes, postgres.RequireSynchronousCommit);
// configure, if not nil, adjusts it first.
func onePool(t *testing.T, db *dbtest.DB, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	pc, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	pc.MaxConns = 1
	dbconn.RegisterTypes(pc)
	postgres.RequireSynchronousCommit(pc)
	if configure != nil {
		configure(pc)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// TestEventLog_AppendRepeatedID shows that Append keeps Write's promises
// about event ids: fresh events get the next seqs, an id is appended once
// (a repeat in the same call, in a later call or in a concurrent producer
// is answered with the logged event, marked Duplicate), a repeat that
// differs is refused with sync.ErrEventIDConflict and nothing of its call
// commits, and the connection of a call that fell back to Write's path
// goes back to the pool usable.
func TestEventLog_AppendRepeatedID(t *testing.T) {
	t.Parallel()
	b := setup(t, 100)
	ctx := context.Background()

	t.Run("FreshEventsAppendWithGaplessSeqs", func(t *testing.T) {
		before := headOf(t, b)
		news := []sync.NewEvent{itemEvent(uuid.New(), `{"n":1}`), itemEvent(uuid.New(), `{"n":2}`), itemEvent(uuid.New(), `{"n":3}`)}
		evs, err := b.log.Append(ctx, news)
		require.NoError(t, err)
		require.Len(t, evs, 3)
		for i, e := range evs {
			require.False(t, e.Duplicate)
			require.Equal(t, before+int64(i)+1, e.Seq)
			require.Equal(t, news[i].ID, e.ID, "in call order")
			require.True(t, e.CommittedAt.Equal(evs[0].CommittedAt), "one transaction")
		}
		require.Equal(t, before+3, headOf(t, b))
		rows, err := b.db.Pool.Query(ctx, `SELECT id FROM event_log WHERE seq > $1 ORDER BY seq`, before)
		require.NoError(t, err)
		ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		require.NoError(t, err)
		require.Equal(t, []uuid.UUID{news[0].ID, news[1].ID, news[2].ID}, ids)
	})
	t.Run("SameIDTwiceInOneCallAppendsOnce", func(t *testing.T) {
		evs := requireSameIDTwiceInOneCallAppendsOnce(t, b, viaAppend(b.log))
		require.Equal(t, evs[1].Seq, headOf(t, b))
	})
	t.Run("IDUsedByAnEarlierCallIsADuplicateAndAppendsNothing", func(t *testing.T) {
		byWrite, err := b.log.Write(ctx, func(context.Context, pgx.Tx) ([]sync.NewEvent, error) {
			return []sync.NewEvent{itemEvent(uuid.New(), `{"a":1,"b":[1,2]}`)}, nil
		})
		require.NoError(t, err)
		byAppend, err := b.log.Append(ctx, []sync.NewEvent{itemEvent(uuid.New(), `{"a":1,"b":[1,2]}`)})
		require.NoError(t, err)
		before := headOf(t, b)
		for name, first := range map[string]sync.Event{"write": byWrite[0], "append": byAppend[0]} {
			// The same event, its data spelled otherwise.
			again, err := b.log.Append(ctx, []sync.NewEvent{itemEvent(first.ID, `{"b":[1,2],"a":1.0}`)})
			require.NoError(t, err, name)
			require.Len(t, again, 1, name)
			require.True(t, again[0].Duplicate, name)
			require.Equal(t, first.Seq, again[0].Seq, name)
			require.True(t, first.CommittedAt.Equal(again[0].CommittedAt), name)
			require.True(t, first.OccurredAt.Equal(again[0].OccurredAt), "%s: the logged event, not the repeat's defaults", name)
			require.Equal(t, 1, rowsWithID(t, b, first.ID), name)
		}
		require.Equal(t, before, headOf(t, b), "nothing appended")
	})
	t.Run("UsedIDAmongFreshOnesAppendsOnlyTheFresh", func(t *testing.T) {
		used := uuid.New()
		first, err := b.log.Append(ctx, []sync.NewEvent{itemEvent(used, `{}`)})
		require.NoError(t, err)
		fresh := uuid.New()
		evs, err := b.log.Append(ctx, []sync.NewEvent{itemEvent(fresh, `{}`), itemEvent(used, `{}`)})
		require.NoError(t, err)
		require.False(t, evs[0].Duplicate)
		require.Equal(t, first[0].Seq+1, evs[0].Seq)
		require.True(t, evs[1].Duplicate)
		require.Equal(t, first[0].Seq, evs[1].Seq)
		require.Equal(t, evs[0].Seq, headOf(t, b), "one seq handed out")
	})
	t.Run("OtherDataUnderAUsedIDIsAConflictAndNothingCommits", func(t *testing.T) {
		id := uuid.New()
		_, err := b.log.Append(ctx, []sync.NewEvent{itemEvent(id, `{"a":1}`)})
		require.NoError(t, err)
		before := headOf(t, b)
		for name, ne := range map[string]sync.NewEvent{
			"data":  itemEvent(id, `{"a":2}`),
			"type":  {ID: id, Space: "s1", Type: "item.deleted", Actor: "alice", Data: []byte(`{"a":1}`)},
			"space": {ID: id, Space: "s2", Type: "item.created", Actor: "alice", Data: []byte(`{"a":1}`)},
			"actor": {ID: id, Space: "s1", Type: "item.created", Actor: "mallory", Data: []byte(`{"a":1}`)},
		} {
			fresh := uuid.New()
			_, err := b.log.Append(ctx, []sync.NewEvent{itemEvent(fresh, `{}`), ne})
			require.ErrorIs(t, err, sync.ErrEventIDConflict, name)
			var ee *sync.EventError
			require.ErrorAs(t, err, &ee)
			require.Equal(t, 1, ee.Index, name)
			require.Zero(t, rowsWithID(t, b, fresh), "%s: the call's fresh event is not appended", name)
			require.Zero(t, claimsOf(t, b, fresh), "%s: nor its id claimed", name)
		}
		require.Equal(t, before, headOf(t, b), "nothing appended")
	})
	t.Run("OtherDataUnderTheSameIDWithinOneCallIsAConflict", func(t *testing.T) {
		id, other := uuid.New(), uuid.New()
		before := headOf(t, b)
		_, err := b.log.Append(ctx, []sync.NewEvent{itemEvent(id, `{"a":1}`), itemEvent(other, `{}`), itemEvent(id, `{"a":2}`)})
		require.ErrorIs(t, err, sync.ErrEventIDConflict)
		var ee *sync.EventError
		require.ErrorAs(t, err, &ee)
		require.Equal(t, 2, ee.Index)
		require.Zero(t, rowsWithID(t, b, id))
		require.Zero(t, rowsWithID(t, b, other))
		require.Equal(t, before, headOf(t, b))
	})
	t.Run("ConcurrentAppendsOfTheSameIDAppendOnce", func(t *testing.T) {
		// Two processes: the calls of one process share pipelines, so only
		// calls of two meet at the claim.
		other := postgres.NewEventLog(b.db.Pool, nil)
		t.Cleanup(other.Close)
		logs := []*postgres.EventLog{b.log, other}
		var calls atomic.Int32
		seq := requireConcurrentCallsOfOneIDAppendOnce(t, b, func(ctx context.Context, news ...sync.NewEvent) ([]sync.Event, error) {
			return logs[calls.Add(1)%2].Append(ctx, news)
		})
		require.Equal(t, seq, headOf(t, b))
	})
	t.Run("ConcurrentAppendsOfTheSameIDInOneProcessAppendOnce", func(t *testing.T) {
		// Every pipeline the process may run waits for the counter, so the
		// two calls of one id queue and are taken together: their shared
		// pipeline appends nothing and each runs alone.
		release := holdCounter(t, b)
		others := make(chan error, postgres.MaxAppendRunners)
		for k := range postgres.MaxAppendRunners {
			go func() {
				_, err := b.log.Append(ctx, []sync.NewEvent{itemEvent(uuid.New(), `{}`)})
				others <- err
			}()
			waitForLockWaiters(t, b, k+1)
		}
		id := uuid.New()
		type result struct {
			evs []sync.Event
			err error
		}
		results := make(chan result, 2)
		for range 2 {
			go func() {
				evs, err := b.log.Append(ctx, []sync.NewEvent{itemEvent(id, `{"n":1}`)})
				results <- result{evs, err}
			}()
		}
		testwait.Until(t, 10*time.Second, func() bool { return b.log.QueuedAppends() == 2 }, "the two calls queue")
		release()
		for range postgres.MaxAppendRunners {
			require.NoError(t, <-others)
		}
		r1, r2 := <-results, <-results
		require.NoError(t, r1.err)
		require.NoError(t, r2.err)
		require.Equal(t, r1.evs[0].Seq, r2.evs[0].Seq)
		require.NotEqual(t, r1.evs[0].Duplicate, r2.evs[0].Duplicate, "exactly one appended")
		require.Equal(t, 1, rowsWithID(t, b, id))
	})
	t.Run("ConcurrentAppendsShareOnePipeline", func(t *testing.T) {
		// The first call's pipeline waits for the counter; as it stalls, the
		// next calls start pipelines of their own, up to the most that run
		// at once, which wait too; the rest queue in the process and then
		// go together, in one transaction.
		release := holdCounter(t, b)
		const n = 10
		runners := postgres.MaxAppendRunners
		results := make(chan error, n)
		call := func() {
			evs, err := b.log.Append(ctx, []sync.NewEvent{itemEvent(uuid.New(), `{}`)})
			if err == nil && cap(evs) != len(evs) {
				err = fmt.Errorf("the result's capacity %d reaches past its %d events, into another call's", cap(evs), len(evs))
			}
			results <- err
		}
		for k := range runners {
			go call()
			waitForLockWaiters(t, b, k+1)
		}
		for range n - runners {
			go call()
		}
		testwait.Until(t, 10*time.Second, func() bool { return b.log.QueuedAppends() == n-runners }, "the other calls queue")
		before := headOf(t, b)
		release()
		for range n {
			require.NoError(t, <-results)
		}
		var commits int
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(DISTINCT committed_at) FROM event_log WHERE seq > $1`, before).Scan(&commits))
		require.Equal(t, runners+1, commits, "the first calls alone, then the others in one transaction")
	})
	t.Run("CallWithdrawnBeforeAPipelineTakesItAppendsNothing", func(t *testing.T) {
		// Every pipeline that may run waits for the counter, so the next
		// call queues; its caller gives up while it is still queued: the
		// call leaves the queue, its answer says so (not "outcome
		// unknown"), and no pipeline appends its event later.
		release := holdCounter(t, b)
		runners := postgres.MaxAppendRunners
		stalled := make(chan error, runners)
		for k := range runners {
			go func() {
				_, err := b.log.Append(ctx, []sync.NewEvent{itemEvent(uuid.New(), `{}`)})
				stalled <- err
			}()
			waitForLockWaiters(t, b, k+1)
		}
		id := uuid.New()
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		done := start(func() error {
			_, err := b.log.Append(cctx, []sync.NewEvent{itemEvent(id, `{}`)})
			return err
		})
		testwait.Until(t, 10*time.Second, func() bool { return b.log.QueuedAppends() == 1 }, "the call queues")
		cancel()
		err := <-done
		require.ErrorIs(t, err, context.Canceled)
		require.NotContains(t, err.Error(), "outcome unknown")
		require.Zero(t, b.log.QueuedAppends(), "the call left the queue")
		release()
		for range runners {
			require.NoError(t, <-stalled)
		}
		require.Zero(t, rowsWithID(t, b, id), "a withdrawn call appends nothing")
	})
	t.Run("ConcurrentClaimerRollingBackLetsTheAppendThrough", func(t *testing.T) {
		requireRolledBackClaimLetsTheCallAppend(t, b, viaAppend(b.log))
	})
	t.Run("CancelledCallIsSettledByRepeatingIt", func(t *testing.T) {
		// The pipeline, COMMIT included, is on the server when the caller
		// gives up waiting for the counter: the outcome is unknown.
		id := uuid.New()
		release := holdCounter(t, b)
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		done := start(func() error {
			_, err := b.log.Append(cctx, []sync.NewEvent{itemEvent(id, `{}`)})
			return err
		})
		waitForLockWaiters(t, b, 1)
		cancel()
		err := <-done
		require.ErrorIs(t, err, context.Canceled)
		require.ErrorContains(t, err, "outcome unknown")
		release()

		again, err := b.log.Append(ctx, []sync.NewEvent{itemEvent(id, `{}`)})
		require.NoError(t, err)
		require.Equal(t, 1, rowsWithID(t, b, id), "appended once, by one call or the other")
		var seq int64
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT seq FROM event_log WHERE id = $1`, id).Scan(&seq))
		require.Equal(t, seq, again[0].Seq)
	})
	t.Run("ConnectionIsKeptAfterFallbacks", func(t *testing.T) {
		// One connection: each fallback runs after the failed pipeline's
		// connection went back to the pool, and a connection returned in
		// a transaction would be closed and replaced.
		pool := onePool(t, b.db, nil)
		log := postgres.NewEventLog(pool, nil)
		t.Cleanup(log.Close)
		id := uuid.New()
		first, err := log.Append(ctx, []sync.NewEvent{itemEvent(id, `{"a":1}`)})
		require.NoError(t, err)
		for range 3 {
			again, err := log.Append(ctx, []sync.NewEvent{itemEvent(id, `{"a":1}`)})
			require.NoError(t, err)
			require.True(t, again[0].Duplicate)
			require.Equal(t, first[0].Seq, again[0].Seq)
			_, err = log.Append(ctx, []sync.NewEvent{itemEvent(uuid.New(), `{}`), itemEvent(id, `{"a":2}`)})
			require.ErrorIs(t, err, sync.ErrEventIDConflict)
			fresh, err := log.Append(ctx, []sync.NewEvent{itemEvent(uuid.New(), `{}`)})
			require.NoError(t, err)
			require.False(t, fresh[0].Duplicate)
		}
		require.EqualValues(t, 1, pool.Stat().NewConnsCount(), "the connection was kept throughout")
	})
}

// TestEventLog_AppendTracesOneSpanPerCall shows that an Append makes one
// span, also when it falls back to Write's path, and stores its trace
// context with the events it appends.
func TestEventLog_AppendTracesOneSpanPerCall(t *testing.T) {
	t.Parallel()
	b := setup(t, 100)
	ctx := context.Background()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.WithoutCancel(ctx))) })
	log := postgres.NewEventLog(b.db.Pool, &postgres.EventLogConfig{Tracer: tp})
	t.Cleanup(log.Close)

	used := uuid.New()
	for _, c := range []struct {
		name string
		news []sync.NewEvent
	}{
		{"fresh", []sync.NewEvent{itemEvent(used, `{}`)}},
		{"used", []sync.NewEvent{itemEvent(used, `{}`)}},
		{"fresh and used", []sync.NewEvent{itemEvent(uuid.New(), `{}`), itemEvent(used, `{}`)}},
		{"repeat in call", []sync.NewEvent{itemEvent(uuid.New(), `{}`), itemEvent(used, `{}`), itemEvent(used, `{}`)}},
	} {
		name, news := c.name, c.news
		spans := len(rec.Ended())
		evs, err := log.Append(ctx, news)
		require.NoError(t, err, name)
		ended := rec.Ended()
		require.Len(t, ended, spans+1, "%s: one span", name)
		span := ended[spans]
		require.Equal(t, "bothy.event_log.write", span.Name(), name)
		dup := 0
		for _, e := range evs {
			if e.Duplicate {
				dup++
				continue
			}
			tp := sync.FormatTraceParent(span.SpanContext())
			require.Equal(t, tp, e.TraceParent, "%s: the span's trace context", name)
			var stored string
			require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT traceparent FROM event_log WHERE seq = $1`, e.Seq).Scan(&stored))
			require.Equal(t, tp, stored, "%s: stored with the event", name)
		}
		require.Contains(t, span.Attributes(), attribute.Int("bothy.events.duplicate", dup), name)
	}
}

// TestEventLog_AppendCostsOneRoundTrip counts the round trips of an
// Append of fresh events on a connection that has prepared its
// statements (the first Append on a connection prepares them, one more
// round trip): one, the pipeline. Readers are not notified here: the
// notification is sent apart, shared by concurrent producers.
func TestEventLog_AppendCostsOneRoundTrip(t *testing.T) {
	t.Parallel()
	db := dbtest.NewDB(t)
	ctx := context.Background()
	trips := &dbconn.RoundTrips{}
	pool := onePool(t, db, func(pc *pgxpool.Config) {
		// No liveness pings: what is counted is the call's own.
		pc.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
		trips.Install(pc)
	})
	log := postgres.NewEventLog(pool, &postgres.EventLogConfig{Notify: postgres.NotifyNone})
	t.Cleanup(log.Close)
	appendOne := func() {
		_, err := log.Append(ctx, []sync.NewEvent{itemEvent(uuid.New(), `{}`), itemEvent(uuid.New(), `{}`)})
		require.NoError(t, err)
	}
	appendOne() // connects and prepares the statements
	before := trips.Total()
	appendOne()
	require.Equal(t, int64(1), trips.Total()-before, trips.String())
}
