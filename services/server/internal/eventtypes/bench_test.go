package eventtypes_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/eventtypes"
	"github.com/bothy/bothy/services/server/internal/sync"
)

// BenchmarkList reads one space's types from a catalog of 1000 spaces with
// three types each, what BenchmarkEventTypesByScan (package postgres) does
// by grouping a 500,000-event log instead.
func BenchmarkList(b *testing.B) {
	db := dbtest.NewDB(b)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `
INSERT INTO event_types (space, type, count, first_seq, last_seq, first_seen_at, last_seen_at)
SELECT 'space-' || s, 'item.' || t, 166, 1, 500000, now(), now()
FROM generate_series(0, 999) AS s, unnest(ARRAY['created', 'updated', 'deleted']) AS t`)
	require.NoError(b, err)
	_, err = db.Pool.Exec(ctx, `ANALYZE event_types`)
	require.NoError(b, err)
	for b.Loop() {
		ts, err := eventtypes.List(ctx, db.Pool, &eventtypes.ListParams{Space: "space-7", Limit: 51})
		if err != nil || len(ts) != 3 {
			b.Fatal(err, len(ts))
		}
	}
}

// BenchmarkConsumer_Handle is what the catalog adds to a round: one batch
// of 1000 events over 100 spaces with 3 types each, upserted in the
// round's transaction (rolled back, so every op counts the same rows).
func BenchmarkConsumer_Handle(b *testing.B) {
	db := dbtest.NewDB(b)
	ctx := context.Background()
	events := make([]sync.Event, 1000)
	now := time.Now()
	for i := range events {
		events[i] = sync.Event{Seq: int64(i + 1), Space: fmt.Sprintf("space-%d", i%100), Type: []string{"item.created", "item.updated", "item.deleted"}[i%3],
			CommittedAt: now}
	}
	for b.Loop() {
		tx, err := db.Pool.Begin(ctx)
		require.NoError(b, err)
		if _, err := (eventtypes.Consumer{}).Handle(ctx, tx, events); err != nil {
			b.Fatal(err)
		}
		require.NoError(b, tx.Rollback(ctx))
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(events)), "ns/event")
}
