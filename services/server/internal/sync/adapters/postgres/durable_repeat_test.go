package postgres_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

// TestEventLog_RepeatAnswersOnlyDurableEvents: a Write whose every id is in
// the log already appends nothing and answers with the logged events. The
// first append of such an event may be committed and not yet on disk (its
// producer has not flushed yet); the repeat's answer must not show a seq
// that a crash then takes back (it would later be handed to another event).
func TestEventLog_RepeatAnswersOnlyDurableEvents(t *testing.T) {
	p := dbtest.NewPrivate(t, dbtest.QuietCrashSettings)
	ctx := context.Background()
	pool := p.Pool(t)
	log := postgres.NewEventLog(pool, &postgres.EventLogConfig{Notify: postgres.NotifyNone})
	event := func(id uuid.UUID) sync.WriteFunc {
		return func(context.Context, pgx.Tx) ([]sync.NewEvent, error) {
			return []sync.NewEvent{{ID: id, Space: "s1", Type: "item.created", Actor: "bob", Data: []byte(`{"n":1}`)}}, nil
		}
	}

	// Warm up first (see dbtest.BeginAsync): vacuum away the dead catalog
	// rows the migrations left, then write an event and repeat it.
	_, err := pool.Exec(ctx, `VACUUM`)
	require.NoError(t, err)
	warm := uuid.New()
	for range 2 {
		_, err = log.Write(ctx, event(warm))
		require.NoError(t, err)
	}

	// As a producer's window commits: the id claimed and the event appended
	// with synchronous_commit off, its flush not sent yet.
	id := uuid.New()
	tx := dbtest.BeginAsync(t, pool)
	_, err = tx.Exec(ctx, `INSERT INTO event_ids (id, after_seq) SELECT $1, last_seq FROM event_seq`, id)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `
		WITH c AS (UPDATE event_seq SET last_seq = last_seq + 1 WHERE id RETURNING last_seq, clock_timestamp() AS ts)
		INSERT INTO event_log (seq, committed_at, id, space, type, actor, occurred_at, data)
		SELECT c.last_seq, c.ts, $1, 's1', 'item.created', 'bob', c.ts, '{"n":1}' FROM c`, id)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	out, err := log.Write(ctx, event(id))
	require.NoError(t, err)
	require.Len(t, out, 1)
	require.True(t, out[0].Duplicate)
	seq := out[0].Seq

	log.Close()
	pool = p.CrashAndReopen(t, pool)
	var stored uuid.UUID
	err = pool.QueryRow(ctx, `SELECT id FROM event_log WHERE seq = $1`, seq).Scan(&stored)
	require.NoError(t, err, "the repeat answered with seq %d, which the crash took back", seq)
	require.Equal(t, id, stored)
}
