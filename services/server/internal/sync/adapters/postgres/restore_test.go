package postgres_test

import (
	"context"
	"errors"
	gosync "sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

// cursors reads every cursor as name → last_seq.
func cursors(t testing.TB, db *dbtest.DB) map[string]int64 {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `SELECT name, last_seq FROM event_consumer_cursors`)
	require.NoError(t, err)
	out := map[string]int64{}
	for rows.Next() {
		var name string
		var seq int64
		require.NoError(t, rows.Scan(&name, &seq))
		out[name] = seq
	}
	require.NoError(t, rows.Err())
	return out
}

func headSeq(t testing.TB, db *dbtest.DB) int64 {
	t.Helper()
	var head int64
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT last_seq FROM event_seq`).Scan(&head))
	return head
}

func TestRestoreFinalize(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("MovesEveryCursorToHeadAndIsIdempotent", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 100)
		appendN(t, b.log, 10)
		_, err := b.rounds.Run(ctx, &recordingConsumer{name: "webhooks"})
		require.NoError(t, err)
		require.EqualValues(t, 10, cursorOf(t, b.db, "webhooks"))
		addConsumer(t, b.db, "gamma") // at 0, behind the others
		appendN(t, b.log, 5)
		before := cursors(t, b.db)
		head := headSeq(t, b.db)
		require.EqualValues(t, 15, head)

		// The plan is what finalizing then does, and changes nothing.
		plan, err := postgres.PlanRestoreFinalize(ctx, b.db.Pool)
		require.NoError(t, err)
		require.Equal(t, before, cursors(t, b.db), "planning moves no cursor")

		moves, err := postgres.RestoreFinalize(ctx, b.db.Pool)
		require.NoError(t, err)
		require.Equal(t, plan, moves)
		require.Len(t, moves, len(before))
		for i, m := range moves {
			if i > 0 {
				require.Less(t, moves[i-1].Consumer, m.Consumer, "moves are in name order")
			}
			require.Equal(t, before[m.Consumer], m.From, m.Consumer)
			require.Equal(t, head, m.To, m.Consumer)
			require.Equal(t, head-before[m.Consumer], m.Skipped, m.Consumer)
		}
		require.Contains(t, moves, postgres.CursorMove{Consumer: "webhooks", From: 10, To: 15, Skipped: 5})
		require.Contains(t, moves, postgres.CursorMove{Consumer: "gamma", From: 0, To: 15, Skipped: 15})
		for name, seq := range cursors(t, b.db) {
			require.Equal(t, head, seq, "cursor %s is at head_seq", name)
		}

		again, err := postgres.RestoreFinalize(ctx, b.db.Pool)
		require.NoError(t, err)
		require.Len(t, again, len(before))
		for _, m := range again {
			require.Equal(t, postgres.CursorMove{Consumer: m.Consumer, From: head, To: head, Skipped: 0}, m)
		}
		for name, seq := range cursors(t, b.db) {
			require.Equal(t, head, seq, "cursor %s is still at head_seq", name)
		}

		// A round after finalizing starts at the head: the skipped events
		// create no jobs, new ones do.
		appendN(t, b.log, 2)
		res, err := b.rounds.Run(ctx, &recordingConsumer{name: "gamma"})
		require.NoError(t, err)
		require.Equal(t, 2, res.Events)
		require.Equal(t, map[int64]int{16: 1, 17: 1}, jobSeqs(t, b.db, "gamma"))
	})

	t.Run("RefusesWhileARoundHoldsACursor", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 100)
		appendN(t, b.log, 3)
		before := cursors(t, b.db)

		inRound := make(chan struct{})
		release := make(chan struct{})
		// Ends the round; the cleanup runs it too, before the pool closes,
		// should the test fail first.
		endRound := gosync.OnceFunc(func() { close(release) })
		t.Cleanup(endRound)
		c := &recordingConsumer{name: "webhooks", hook: func(ctx context.Context, tx pgx.Tx, events []sync.Event) error {
			close(inRound)
			<-release
			return nil
		}}
		roundErr := make(chan error, 1)
		go func() {
			_, err := b.rounds.Run(ctx, c)
			roundErr <- err
		}()
		select {
		case <-inRound:
		case <-time.After(10 * time.Second):
			t.Fatal("round did not start")
		}

		// The round holds its cursor until release. Finalize must refuse
		// without waiting for the row lock (NOWAIT): its session is never
		// seen waiting for a lock. (Its lock_timeout would also end a wait,
		// with the same error, seconds later.)
		r := finalizeWatchingLocks(t, b.db.Pool, endRound)
		moves, err := r.moves, r.err
		require.False(t, r.waited, "finalize waited for the round's cursor lock instead of refusing (NOWAIT)")
		require.Error(t, err)
		require.Nil(t, moves)
		require.True(t, errors.Is(err, sync.ErrCursorLocked), "err %v matches sync.ErrCursorLocked", err)
		var busy *postgres.CursorBusyError
		require.ErrorAs(t, err, &busy)
		require.Equal(t, []string{"webhooks"}, busy.Consumers)
		require.Contains(t, err.Error(), "webhooks")
		require.Equal(t, before, cursors(t, b.db), "nothing moved, not even the free cursors")

		endRound()
		require.NoError(t, <-roundErr)
		require.EqualValues(t, 3, cursorOf(t, b.db, "webhooks"))

		moves, err = postgres.RestoreFinalize(ctx, b.db.Pool)
		require.NoError(t, err)
		require.Contains(t, moves, postgres.CursorMove{Consumer: "webhooks", From: 3, To: 3, Skipped: 0})
		for name, seq := range cursors(t, b.db) {
			require.EqualValues(t, 3, seq, "cursor %s is at head_seq", name)
		}
	})
}

// finalizeResult is what RestoreFinalize answered, and whether its session
// was seen waiting for a lock meanwhile.
type finalizeResult struct {
	moves  []postgres.CursorMove
	err    error
	waited bool
}

// finalizeWatchingLocks runs RestoreFinalize and, until it returns, polls
// whether a session of pool's database waits for a lock: a round that
// holds a cursor waits on a Go channel, not a lock, so any such session is
// finalize's. After a minute without an answer it ends the round, so
// finalize can return, and fails.
func finalizeWatchingLocks(t *testing.T, pool *pgxpool.Pool, endRound func()) finalizeResult {
	t.Helper()
	finalized := make(chan finalizeResult, 1)
	go func() {
		moves, err := postgres.RestoreFinalize(context.Background(), pool)
		finalized <- finalizeResult{moves: moves, err: err}
	}()
	waited := false
	deadline := time.After(time.Minute)
	for {
		select {
		case r := <-finalized:
			r.waited = waited
			return r
		case <-deadline:
			endRound()
			t.Fatal("finalize did not return while a round held a cursor")
		case <-time.After(5 * time.Millisecond):
			var n int
			err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
			waited = waited || (err == nil && n > 0)
		}
	}
}
