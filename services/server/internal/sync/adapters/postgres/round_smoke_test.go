package postgres_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRound_Smoke(t *testing.T) {
	t.Parallel()
	b := setup(t, 10)
	addConsumer(t, b.db, "t1")
	appendN(t, b.log, 25)
	c := &recordingConsumer{name: "t1"}
	res, err := b.rounds.Run(context.Background(), c)
	require.NoError(t, err)
	require.Equal(t, 10, res.Events)
	require.True(t, res.Full)
	for res.Full {
		res, err = b.rounds.Run(context.Background(), c)
		require.NoError(t, err)
	}
	require.Equal(t, int64(25), cursorOf(t, b.db, "t1"))
	seqs := jobSeqs(t, b.db, "t1")
	require.Len(t, seqs, 25)
}
