package postgres_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/sync"
)

// TestRound_AfterCommitRunsOnceTheRoundCommitted: what a consumer asks for
// with sync.AfterCommit runs after the round's commit, when what it
// committed is visible to others, and never when the round rolls back.
func TestRound_AfterCommitRunsOnceTheRoundCommitted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	require.False(t, sync.AfterCommit(ctx, func() { t.Error("called outside a round") }))

	t.Run("SeesTheCommit", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 100)
		appendN(t, b.log, 3)
		var seen []int64
		c := &recordingConsumer{name: "webhooks", hook: func(ctx context.Context, _ pgx.Tx, _ []sync.Event) error {
			require.True(t, sync.AfterCommit(ctx, func() {
				var cursor int64
				require.NoError(t, b.db.Pool.QueryRow(context.Background(),
					`SELECT last_seq FROM event_consumer_cursors WHERE name = 'webhooks'`).Scan(&cursor))
				seen = append(seen, cursor)
			}))
			return nil
		}}
		res, err := b.rounds.Run(ctx, c)
		require.NoError(t, err)
		require.Equal(t, []int64{res.To}, seen, "called once, after the cursor's move committed")
	})
	t.Run("NotOnRollback", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 100)
		appendN(t, b.log, 3)
		c := &recordingConsumer{name: "webhooks", hook: func(ctx context.Context, _ pgx.Tx, _ []sync.Event) error {
			sync.AfterCommit(ctx, func() { t.Error("called after a rollback") })
			return errors.New("the consumer fails")
		}}
		_, err := b.rounds.Run(ctx, c)
		require.Error(t, err)
	})
}
