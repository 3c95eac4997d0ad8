package postgres_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/sync"
)

// TestRoundCallsHandleLostWhenNothingIsLeft: retention dropped every event
// after the cursor and nothing newer has been appended, so the round reads
// no event at all. The lost range then comes from the retention mark alone:
// the round must report exactly that range, once, and move the cursor past
// it. TestRoundCallsHandleLost covers the case with events after the gap.
func TestRoundCallsHandleLostWhenNothingIsLeft(t *testing.T) {
	t.Parallel()
	b, partly := setupRetentionStruck(t)

	for _, tc := range []struct {
		c    *recordingConsumer
		want sync.SeqRange
	}{
		{&recordingConsumer{name: "behind"}, sync.SeqRange{From: 1, To: 10}},
		{partly, sync.SeqRange{From: 5, To: 10}},
	} {
		res, err := b.rounds.Run(context.Background(), tc.c)
		require.NoError(t, err)
		require.Equal(t, tc.want, res.Lost, tc.c.name)
		require.Equal(t, []sync.SeqRange{tc.want}, tc.c.lost, tc.c.name)
		require.Zero(t, res.Events, tc.c.name)
		require.Equal(t, int64(10), cursorOf(t, b.db, tc.c.name), "the cursor moves past the lost range")

		// Nothing is reported twice.
		res, err = b.rounds.Run(context.Background(), tc.c)
		require.NoError(t, err)
		require.Zero(t, res.Lost.Len(), tc.c.name)
		require.Len(t, tc.c.lost, 1, tc.c.name)
	}
}
