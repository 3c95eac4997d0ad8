package postgres_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

// appendTyped commits one event per (space, type), in order, one
// transaction each, and returns them.
func appendTyped(t testing.TB, log *postgres.EventLog, pairs ...string) []sync.Event {
	t.Helper()
	var out []sync.Event
	for i := 0; i+1 < len(pairs); i += 2 {
		evs, err := log.Write(context.Background(), func(context.Context, pgx.Tx) ([]sync.NewEvent, error) {
			return []sync.NewEvent{{Space: pairs[i], Type: pairs[i+1], Actor: "alice"}}, nil
		})
		require.NoError(t, err)
		out = append(out, evs...)
	}
	return out
}

func seqsOf(evs []sync.Event) []int64 {
	out := []int64{}
	for _, e := range evs {
		out = append(out, e.Seq)
	}
	return out
}

func TestEventLog_SpaceEvents(t *testing.T) {
	t.Parallel()
	b := setup(t, 100)
	ctx := context.Background()
	// seqs 1..8: a, b, a, a, b, a, b, a
	appendTyped(t, b.log, "a", "item.created", "b", "item.created", "a", "item.updated", "a", "order.placed",
		"b", "order.placed", "a", "item.created", "b", "item.created", "a", "item.deleted")
	read := func(p sync.SpaceEventsParams) *sync.SpaceEventsPage {
		t.Helper()
		pg, err := b.log.SpaceEvents(ctx, &p)
		require.NoError(t, err)
		return pg
	}

	t.Run("OnlyTheSpaceInSeqOrder", func(t *testing.T) {
		pg := read(sync.SpaceEventsParams{Space: "a", Limit: 50})
		require.Equal(t, []int64{1, 3, 4, 6, 8}, seqsOf(pg.Events))
		require.Equal(t, int64(8), pg.NextAfter)
		require.Equal(t, int64(8), pg.Head)
		require.True(t, pg.Done())
		require.Zero(t, pg.Lost.Len())
		require.Equal(t, "alice", pg.Events[0].Actor)
	})
	t.Run("AFullPageEndsAtItsLastEvent", func(t *testing.T) {
		pg := read(sync.SpaceEventsParams{Space: "a", Limit: 2})
		require.Equal(t, []int64{1, 3}, seqsOf(pg.Events))
		require.Equal(t, int64(3), pg.NextAfter)
		require.False(t, pg.Done())
		pg = read(sync.SpaceEventsParams{Space: "a", AfterSeq: 3, Limit: 2})
		require.Equal(t, []int64{4, 6}, seqsOf(pg.Events))
	})
	t.Run("TypePatterns", func(t *testing.T) {
		pg := read(sync.SpaceEventsParams{Space: "a", Limit: 50, Types: []string{"item.*"}})
		require.Equal(t, []int64{1, 3, 6, 8}, seqsOf(pg.Events))
		pg = read(sync.SpaceEventsParams{Space: "a", Limit: 50, Types: []string{"order.placed", "item.deleted"}})
		require.Equal(t, []int64{4, 8}, seqsOf(pg.Events))
		pg = read(sync.SpaceEventsParams{Space: "a", Limit: 50, Types: []string{"*"}})
		require.Len(t, pg.Events, 5)
		pg = read(sync.SpaceEventsParams{Space: "a", Limit: 50, Types: []string{"item"}})
		require.Empty(t, pg.Events, "an exact type matches only itself")
	})
	t.Run("TheScanIsBoundedAndMovesOn", func(t *testing.T) {
		pg := read(sync.SpaceEventsParams{Space: "b", AfterSeq: 2, Limit: 50, ScanLimit: 2})
		require.Empty(t, pg.Events, "seqs 3 and 4 are a's")
		require.Equal(t, int64(4), pg.NextAfter)
		require.False(t, pg.Done())
		pg = read(sync.SpaceEventsParams{Space: "b", AfterSeq: 4, Limit: 50, ScanLimit: 2})
		require.Equal(t, []int64{5}, seqsOf(pg.Events))
		require.Equal(t, int64(6), pg.NextAfter)
	})
	t.Run("RetentionsLossIsReported", func(t *testing.T) {
		_, err := b.db.Pool.Exec(ctx, `UPDATE event_log_retention SET low_seq = 5`)
		require.NoError(t, err)
		defer b.db.Pool.Exec(context.WithoutCancel(ctx), `UPDATE event_log_retention SET low_seq = 1`) //nolint:errcheck // restores
		pg := read(sync.SpaceEventsParams{Space: "a", AfterSeq: 1, Limit: 50})
		require.Equal(t, sync.SeqRange{From: 2, To: 4}, pg.Lost)
		require.Equal(t, []int64{6, 8}, seqsOf(pg.Events), "the scan starts at the mark")
	})
	t.Run("AfterTheHeadIsEmptyAndDone", func(t *testing.T) {
		pg := read(sync.SpaceEventsParams{Space: "a", AfterSeq: 8, Limit: 50})
		require.Empty(t, pg.Events)
		require.Equal(t, int64(8), pg.NextAfter)
		require.True(t, pg.Done())
	})
}

func TestEventLog_EventByID(t *testing.T) {
	t.Parallel()
	b := setup(t, 100)
	ctx := context.Background()
	evs := appendTyped(t, b.log, "a", "item.created", "b", "item.created")
	got, err := b.log.EventByID(ctx, evs[1].ID)
	require.NoError(t, err)
	require.Equal(t, evs[1].Seq, got.Seq)
	require.Equal(t, "b", got.Space)

	_, err = b.log.EventByID(ctx, uuid.New())
	require.ErrorIs(t, err, sync.ErrEventNotFound)

	// An event far after its claim (a producer held back while 2000 others
	// committed) is found by the widening search.
	late := uuid.New()
	_, err = b.db.Pool.Exec(ctx, `INSERT INTO event_ids (id, after_seq) VALUES ($1, 0)`, late)
	require.NoError(t, err)
	for i := range 20 {
		news := make([]sync.NewEvent, 100)
		for j := range news {
			news[j] = sync.NewEvent{Space: "a", Type: "item.created", Actor: "alice", Data: []byte(fmt.Sprintf(`{"n":%d}`, i*100+j))}
		}
		_, err := b.log.Write(ctx, func(context.Context, pgx.Tx) ([]sync.NewEvent, error) { return news, nil })
		require.NoError(t, err)
	}
	_, err = b.db.Pool.Exec(ctx, `INSERT INTO event_log (seq, committed_at, id, space, type, actor, occurred_at)
SELECT last_seq + 1, now(), $1, 'c', 'item.created', 'alice', now() FROM event_seq`, late)
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, `UPDATE event_seq SET last_seq = last_seq + 1`)
	require.NoError(t, err)
	got, err = b.log.EventByID(ctx, late)
	require.NoError(t, err)
	require.Equal(t, "c", got.Space)
	require.Equal(t, int64(2003), got.Seq)
}

// TestEventLog_SpaceEventsAtTheEndOfInt8: a scan window that would reach
// past the largest int8 is cut at the head, in SQL and in the page's
// NextAfter, instead of overflowing.
func TestEventLog_SpaceEventsAtTheEndOfInt8(t *testing.T) {
	t.Parallel()
	b := setup(t, 100)
	ctx := context.Background()
	const head = math.MaxInt64 - 10
	b.db.StartLogAt(t, head-3)
	appendTyped(t, b.log, "a", "item.created", "b", "item.created", "a", "item.updated")

	for _, after := range []int64{head - 3, head - 2} {
		pg, err := b.log.SpaceEvents(ctx, &sync.SpaceEventsParams{Space: "a", AfterSeq: after, Limit: 50})
		require.NoError(t, err)
		require.Equal(t, []int64{head - 2, head}[int(after-(head-3)):], seqsOf(pg.Events))
		require.Equal(t, int64(head), pg.NextAfter, "the scan ends at the head")
		require.True(t, pg.Done())
	}
	for _, after := range []int64{head, math.MaxInt64 - 1, math.MaxInt64} {
		pg, err := b.log.SpaceEvents(ctx, &sync.SpaceEventsParams{Space: "a", AfterSeq: after, Limit: 50})
		require.NoError(t, err, "after %d", after)
		require.Empty(t, pg.Events)
		require.Equal(t, after, pg.NextAfter, "after the head: where it was")
		require.True(t, pg.Done())
		require.Zero(t, pg.Lost.Len())
	}
}
