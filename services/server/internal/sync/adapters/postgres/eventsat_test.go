package postgres_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

// TestEventsAt_ReadsEachEventOnceInSeqOrder: seqs in any order, repeated
// (two deliveries of one event), or past the log's head.
func TestEventsAt_ReadsEachEventOnceInSeqOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, 100)
	ctx := context.Background()
	appendN(t, b.log, 5)
	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()

	evs, err := b.log.EventsAt(ctx, tx, []int64{4, 2, 4, 99, 2, 1})
	require.NoError(t, err)
	var seqs []int64
	for _, e := range evs {
		seqs = append(seqs, e.Seq)
	}
	require.Equal(t, []int64{1, 2, 4}, seqs)

	batch := &pgx.Batch{}
	var queued []sync.Event
	b.log.QueueEventsAt(batch, []int64{5, 3, 3}, &queued)
	require.NoError(t, tx.SendBatch(ctx, batch).Close())
	seqs = seqs[:0]
	for _, e := range queued {
		seqs = append(seqs, e.Seq)
	}
	require.Equal(t, []int64{3, 5}, seqs)
}

// TestEventsAt_ProbesTheKeyInAPlanMadeWhileThePartitionWasSmall: a
// connection caches one plan of a prepared statement, made for the sizes
// of the tables when it was made. The senders read events by seq on
// connections that live for an hour while the current partition grows
// from nothing to a day of events, so that plan must look each seq up in
// the primary key even when it was made for a partition of a few rows;
// one that scanned the partition cost a sender group milliseconds per read
// by the end of a load test, and would cost seconds by the end of a day.
// The plan is forced generic here, made for a partition of 50 rows that
// autovacuum never analyzed (the usual state of a fresh partition).
func TestEventsAt_ProbesTheKeyInAPlanMadeWhileThePartitionWasSmall(t *testing.T) {
	t.Parallel()
	b := setup(t, 100)
	disableAutovacuum(t, b)
	appendN(t, b.log, 50)
	plan := b.db.GenericPlan(t, postgres.EventsAtSQL, `'{1,2,3}'`)
	require.NotContains(t, plan, "Seq Scan", "plan:\n%s", plan)
}

// TestEventLog_LoggedEventsProbesEventIDsInAPlanMadeWhileTheyWereFew: a
// repeated id's claim is read from event_ids, which holds an entry for
// every event the log keeps, so the plan a connection cached while it
// held a few must look each id up in its primary key, as EventsAt's must;
// one that hashed the table would read all of it for every repeat.
func TestEventLog_LoggedEventsProbesEventIDsInAPlanMadeWhileTheyWereFew(t *testing.T) {
	t.Parallel()
	b := setup(t, 100)
	disableAutovacuum(t, b)
	evs := appendN(t, b.log, 50)
	plan := b.db.GenericPlan(t, postgres.LoggedEventsSQL, fmt.Sprintf(`'{%s,%s}', '{"{}","{}"}', 1000`, evs[0].ID, evs[1].ID))
	require.NotContains(t, plan, "Seq Scan", "plan:\n%s", plan)
}

// disableAutovacuum keeps the event log's partitions and event_ids from
// being analyzed, the usual state of a fresh partition.
func disableAutovacuum(t *testing.T, b *bundle) {
	t.Helper()
	_, err := b.db.Pool.Exec(context.Background(), `
ALTER TABLE event_ids SET (autovacuum_enabled = false);
DO $$ DECLARE p regclass; BEGIN
    FOR p IN SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = 'event_log'::regclass LOOP
        EXECUTE format('ALTER TABLE %s SET (autovacuum_enabled = false)', p);
    END LOOP;
END $$`)
	require.NoError(t, err)
}

// TestPlans_KeepTheKeysOnceAutovacuumAnalyzedAGrownLog: the event reads a
// connection caches must look events up by key also when the plan is made
// right after autovacuum analyzed a grown partition and event_ids, as it
// does every few thousand events with PostgreSQL's default settings: a
// connection replans its prepared statements after every ANALYZE of a
// table they read.
func TestPlans_KeepTheKeysOnceAutovacuumAnalyzedAGrownLog(t *testing.T) {
	t.Parallel()
	b := setup(t, 100)
	disableAutovacuum(t, b)
	evs := appendBulk(t, b.log, 20_000)
	// Autovacuum analyzes the partitions that changed, never an empty one.
	_, err := b.db.Pool.Exec(context.Background(), `
DO $$ DECLARE p regclass; BEGIN
    FOR p IN SELECT DISTINCT tableoid::regclass FROM event_log LOOP
        EXECUTE format('ANALYZE %s', p);
    END LOOP;
END $$;
ANALYZE event_ids`)
	require.NoError(t, err)
	for name, c := range map[string]struct{ sql, args string }{
		"EventsAt":     {postgres.EventsAtSQL, `'{19990,19991,19995}'`},
		"EventsAfter":  {postgres.EventsAfterSQL, `19990, 100`},
		"LoggedEvents": {postgres.LoggedEventsSQL, fmt.Sprintf(`'{%s,%s}', '{"{}","{}"}', 1000`, evs[0].ID, evs[1].ID)},
	} {
		t.Run(name, func(t *testing.T) {
			plan := b.db.GenericPlan(t, c.sql, c.args)
			require.NotContains(t, plan, "Seq Scan", "plan:\n%s", plan)
		})
	}
}

// appendBulk appends n events, a thousand per call.
func appendBulk(t *testing.T, log *postgres.EventLog, n int) []sync.Event {
	t.Helper()
	var out []sync.Event
	for len(out) < n {
		news := make([]sync.NewEvent, min(1000, n-len(out)))
		for i := range news {
			news[i] = sync.NewEvent{Space: "s1", Type: "item.created", Actor: "alice", Data: []byte(`{}`)}
		}
		evs, err := log.Append(context.Background(), news)
		require.NoError(t, err)
		out = append(out, evs...)
	}
	return out
}
