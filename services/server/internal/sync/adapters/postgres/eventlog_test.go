package postgres_test

import (
	"context"
	"errors"
	"fmt"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

// TestEventLog_ConcurrentAppendsAreGaplessAndCommitOrdered runs many
// producers, some of which roll back on purpose, while a reader tails the
// log the way a consumer does. Every read must extend what was read before
// without a hole (no seq ever shows up behind one already read), and the
// final log must be exactly 1..N with one event per committed transaction.
func TestEventLog_ConcurrentAppendsAreGaplessAndCommitOrdered(t *testing.T) {
	t.Parallel()
	b := setup(t, 100)
	ctx := context.Background()
	_, err := b.db.Pool.Exec(ctx, `CREATE TABLE items (id bigserial PRIMARY KEY, producer int, n int)`)
	require.NoError(t, err)

	const producers, each = 16, 60
	errRollback := errors.New("rolled back on purpose")
	var committed atomic.Int64
	var readerErr error
	stop := make(chan struct{})
	readerDone := make(chan int64)
	go func() {
		var last int64
		reads := int64(0)
		defer func() { readerDone <- reads }()
		for {
			select {
			case <-stop:
				// One last read after the producers are done.
			default:
			}
			rows, err := b.db.Pool.Query(ctx, `SELECT seq FROM event_log WHERE seq > $1 ORDER BY seq LIMIT 200`, last)
			if err != nil {
				readerErr = err
				return
			}
			seqs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			if err != nil {
				readerErr = err
				return
			}
			for _, s := range seqs {
				if s != last+1 {
					readerErr = fmt.Errorf("read seq %d right after %d: a hole that later fills would lose events", s, last)
					return
				}
				last = s
			}
			reads++
			select {
			case <-stop:
				if len(seqs) == 0 {
					return
				}
			default:
			}
		}
	}()

	var wg gosync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				_, err := b.log.Write(ctx, func(ctx context.Context, tx pgx.Tx) ([]sync.NewEvent, error) {
					if _, err := tx.Exec(ctx, `INSERT INTO items (producer, n) VALUES ($1, $2)`, p, i); err != nil {
						return nil, err
					}
					if i%5 == 4 {
						return nil, errRollback
					}
					return []sync.NewEvent{{Space: "s1", Type: "item.created", Actor: fmt.Sprintf("p%d", p),
						Data: []byte(fmt.Sprintf(`{"producer":%d,"n":%d}`, p, i))}}, nil
				})
				if errors.Is(err, errRollback) {
					continue
				}
				require.NoError(t, err)
				committed.Add(1)
			}
		}()
	}
	wg.Wait()
	close(stop)
	reads := <-readerDone
	require.NoError(t, readerErr)
	t.Logf("reader made %d reads", reads)

	n := committed.Load()
	require.Equal(t, int64(producers*each*4/5), n)
	var count, minSeq, maxSeq, items, distinct int64
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*), min(seq), max(seq), count(DISTINCT seq) FROM event_log`).Scan(&count, &minSeq, &maxSeq, &distinct))
	require.Equal(t, [4]int64{n, 1, n, n}, [4]int64{count, minSeq, maxSeq, distinct}, "log must be exactly 1..N")
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM items`).Scan(&items))
	require.Equal(t, n, items, "one committed domain row per event: rolled-back transactions left neither")
	head, err := postgres.Head(ctx, b.db.Pool)
	require.NoError(t, err)
	require.Equal(t, n, head)
	// Each event matches the domain row of its transaction.
	var mismatched int64
	require.NoError(t, b.db.Pool.QueryRow(ctx, `
		SELECT count(*) FROM event_log e
		WHERE NOT EXISTS (SELECT 1 FROM items i WHERE i.producer = (e.data->>'producer')::int AND i.n = (e.data->>'n')::int)`).Scan(&mismatched))
	require.Zero(t, mismatched)
}

func TestEventLog_Write(t *testing.T) {
	t.Parallel()
	b := setup(t, 100)
	ctx := context.Background()

	t.Run("ReturnsEventsWithSeqAndEnvelope", func(t *testing.T) {
		evs, err := b.log.Write(ctx, func(context.Context, pgx.Tx) ([]sync.NewEvent, error) {
			return []sync.NewEvent{
				{Space: "s1", Type: "item.created", Actor: "alice", Data: []byte(`{"a":1}`)},
				{Space: "s1", Type: "item.updated", Actor: "alice"},
			}, nil
		})
		require.NoError(t, err)
		require.Len(t, evs, 2)
		require.Equal(t, evs[0].Seq+1, evs[1].Seq)
		require.Equal(t, evs[0].CommittedAt, evs[1].CommittedAt, "one transaction, one commit time")
		env := evs[1].Envelope()
		require.JSONEq(t, `{}`, string(env.Data))
		require.NotEqual(t, evs[0].ID, evs[1].ID)
	})
	t.Run("RefusesBadEventsAndWritesNothing", func(t *testing.T) {
		before, err := postgres.Head(ctx, b.db.Pool)
		require.NoError(t, err)
		for _, bad := range []sync.NewEvent{
			{Space: "", Type: "item.created", Actor: "a"},
			{Space: "s1", Type: "Created", Actor: "a"},
			{Space: "s1", Type: "item.created", Actor: ""},
			{Space: "s1", Type: "item.created", Actor: "a", Data: []byte(`[1,2]`)},
			{Space: "s1", Type: "item.created", Actor: "a", Data: []byte(`{"a":`)},
		} {
			_, err := b.log.Write(ctx, func(context.Context, pgx.Tx) ([]sync.NewEvent, error) {
				return []sync.NewEvent{bad}, nil
			})
			require.Error(t, err, "%+v", bad)
		}
		after, err := postgres.Head(ctx, b.db.Pool)
		require.NoError(t, err)
		require.Equal(t, before, after)
	})
	t.Run("SwallowedErrorInTransactionIsNotReportedAsCommitted", func(t *testing.T) {
		_, err := b.log.Write(ctx, func(ctx context.Context, tx pgx.Tx) ([]sync.NewEvent, error) {
			_, _ = tx.Exec(ctx, `SELECT 1/0`) // the producer ignores the error; the transaction is aborted
			return []sync.NewEvent{{Space: "s1", Type: "item.created", Actor: "a"}}, nil
		})
		require.Error(t, err)
	})
}

// TestEventLog_Retention shows that partitions older than the retention are
// detached and dropped and that the retention mark says exactly which seqs
// are gone.
func TestEventLog_Retention(t *testing.T) {
	t.Parallel()
	b := setup(t, 100)
	ctx := context.Background()
	// One-minute partitions; place three in the past by hand-made times.
	parts := postgres.NewPartitions(b.db.Pool, &postgres.PartitionConfig{Interval: time.Minute, Ahead: 1, Retention: 2 * time.Minute})
	base := time.Now().UTC().Truncate(time.Minute).Add(-10 * time.Minute)
	_, err := b.db.Pool.Exec(ctx, `DELETE FROM event_log_partitions`) // forget the day partitions: drop them first
	require.NoError(t, err)
	rows, err := b.db.Pool.Query(ctx, `SELECT inhrelid::regclass::text FROM pg_inherits WHERE inhparent = 'event_log'::regclass`)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	for _, n := range names {
		_, err := b.db.Pool.Exec(ctx, `DROP TABLE `+n)
		require.NoError(t, err)
	}
	require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		_, err := postgres.EnsurePartitions(ctx, tx, base, time.Minute, 12)
		return err
	}))
	// Events at base+0 (seq 1-3), base+1m (4-5), base+5m (6), now (7-8).
	for i, at := range []time.Duration{0, 0, 0, time.Minute, time.Minute, 5 * time.Minute} {
		_, err := b.db.Pool.Exec(ctx, `
			WITH c AS (UPDATE event_seq SET last_seq = last_seq + 1 RETURNING last_seq)
			INSERT INTO event_log (seq, committed_at, id, space, type, actor, occurred_at)
			SELECT c.last_seq, $1, gen_random_uuid(), 's1', 'item.created', 'a', $1 FROM c`, base.Add(at).Add(time.Second))
		require.NoError(t, err, i)
	}
	appendN(t, b.log, 2)

	// Nothing old enough yet at base+3m: partitions end at base+1m, base+2m.
	res, err := parts.Maintain(ctx, base.Add(3*time.Minute))
	require.NoError(t, err)
	require.Equal(t, int64(4), res.LowSeq, "the base partition (seqs 1-3) ended at base+1m <= base+3m-2m")
	require.Len(t, res.Dropped, 1)

	res, err = parts.Maintain(ctx, base.Add(7*time.Minute+30*time.Second))
	require.NoError(t, err)
	require.Equal(t, int64(6), res.LowSeq, "partitions up to base+5m are gone; seq 6 at base+5m stays")
	var lowest int64
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT min(seq) FROM event_log`).Scan(&lowest))
	require.Equal(t, res.LowSeq, lowest, "the mark equals the lowest seq still present")

	// Detached partitions are dropped, not left behind.
	var leftovers int
	require.NoError(t, b.db.Pool.QueryRow(ctx, `
		SELECT count(*) FROM pg_class WHERE relname ~ '^event_log_p[0-9]' AND relkind = 'r'
		AND oid NOT IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'event_log'::regclass)`).Scan(&leftovers))
	require.Zero(t, leftovers)

	// Running again changes nothing.
	again, err := parts.Maintain(ctx, base.Add(7*time.Minute+30*time.Second))
	require.NoError(t, err)
	require.Empty(t, again.Dropped)
	require.Equal(t, res.LowSeq, again.LowSeq)
}
