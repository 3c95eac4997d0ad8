package postgres_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

// setupRetentionStruck makes two consumers, "behind" at the start and
// "partly" after reading seqs 1..4 (with the recorder returned), then has
// retention drop all ten events appended; nothing is appended after that.
func setupRetentionStruck(t *testing.T) (*bundle, *recordingConsumer) {
	t.Helper()
	b := setup(t, 100)
	addConsumer(t, b.db, "behind")
	addConsumer(t, b.db, "partly")
	appendN(t, b.log, 10)
	partly := &recordingConsumer{name: "partly"}
	_, err := productionRounds(t, b.db.Pool, b.log, 4).Run(context.Background(), partly)
	require.NoError(t, err)
	dropAllCurrentPartitions(t, b)
	return b, partly
}

// TestEventLog_ConsumerStatusesLost: the status names the range retention
// removed after a consumer's cursor, the one its next round will skip,
// whether events are left after it or not, and none once it was skipped.
func TestEventLog_ConsumerStatusesLost(t *testing.T) {
	t.Parallel()
	b, _ := setupRetentionStruck(t)

	lost := func() map[string]sync.SeqRange {
		t.Helper()
		sts, err := b.log.ConsumerStatuses(context.Background())
		require.NoError(t, err)
		out := map[string]sync.SeqRange{}
		for _, s := range sts {
			out[s.Name] = s.Lost
		}
		return out
	}

	// Nothing is left after the cursors: retention's low mark tells.
	got := lost()
	require.Equal(t, sync.SeqRange{From: 1, To: 10}, got["behind"])
	require.Equal(t, sync.SeqRange{From: 5, To: 10}, got["partly"])
	require.Equal(t, sync.SeqRange{From: 1, To: 10}, got["webhooks"])

	appendN(t, b.log, 3) // 11..13 survive
	got = lost()
	require.Equal(t, sync.SeqRange{From: 1, To: 10}, got["behind"])
	require.Equal(t, sync.SeqRange{From: 5, To: 10}, got["partly"])

	res, err := b.rounds.Run(context.Background(), &recordingConsumer{name: "behind"})
	require.NoError(t, err)
	require.Equal(t, sync.SeqRange{From: 1, To: 10}, res.Lost, "the round skips what the status named")
	require.Zero(t, lost()["behind"].Len())

	sts, err := postgres.ConsumerStatuses(context.Background(), b.db.Pool)
	require.NoError(t, err)
	for _, s := range sts {
		if s.Name == "partly" {
			require.EqualValues(t, 9, s.Lag, "lost seqs are lag until a round skips them")
		}
	}
}
