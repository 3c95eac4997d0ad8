package eventtypes_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/eventtypes"
	"github.com/bothy/bothy/services/server/internal/sync"
)

func TestConsumer_KeepsTheCatalog(t *testing.T) {
	t.Parallel()
	db := dbtest.NewDB(t)
	ctx := context.Background()
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	ev := func(seq int64, space, typ string) sync.Event {
		return sync.Event{Seq: seq, Space: space, Type: typ, CommittedAt: t0.Add(time.Duration(seq) * time.Second)}
	}
	round := func(events ...sync.Event) {
		t.Helper()
		require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			jobs, err := eventtypes.Consumer{}.Handle(ctx, tx, events)
			require.Empty(t, jobs)
			return err
		}))
	}
	round(ev(1, "a", "item.created"), ev(2, "b", "item.created"), ev(3, "a", "item.created"), ev(4, "a", "order.placed"))
	round(ev(5, "a", "item.created"))

	got, err := eventtypes.List(ctx, db.Pool, &eventtypes.ListParams{Space: "a", Limit: 10})
	require.NoError(t, err)
	require.Len(t, got, 2)
	item := got[0].View()
	require.Equal(t, eventtypes.View{Type: "item.created", Count: 3, FirstSeq: 1, LastSeq: 5,
		FirstSeenAt: t0.Add(time.Second), LastSeenAt: t0.Add(5 * time.Second)}, item)
	require.Equal(t, "order.placed", got[1].Type)
	require.Equal(t, int64(1), got[1].Count)

	next, err := eventtypes.List(ctx, db.Pool, &eventtypes.ListParams{Space: "a", AfterType: "item.created", Limit: 10})
	require.NoError(t, err)
	require.Len(t, next, 1)
	b, err := eventtypes.List(ctx, db.Pool, &eventtypes.ListParams{Space: "b", Limit: 10})
	require.NoError(t, err)
	require.Len(t, b, 1)
}
