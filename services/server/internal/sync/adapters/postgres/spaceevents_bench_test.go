package postgres_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

// benchLogEvents is the size of the log the read benchmarks read: events
// spread round-robin over benchLogSpaces spaces, each with a 200-byte
// payload.
const (
	benchLogEvents = 500_000
	benchLogSpaces = 1000
)

// fillLog writes the benchmark's log directly (not through producers: the
// reads are measured, not the writes) and analyzes it.
func fillLog(b *testing.B) (*dbtest.DB, *postgres.EventLog) {
	b.Helper()
	db := dbtest.NewDB(b)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `
INSERT INTO event_log (seq, committed_at, id, space, type, actor, occurred_at, data)
SELECT n, now(), gen_random_uuid(), 'space-' || (n % $2), 'item.' || (ARRAY['created','updated','deleted'])[1 + n % 3], 'alice', now(),
       jsonb_build_object('n', n, 'pad', repeat('x', 180))
FROM generate_series(1, $1::bigint) AS n`, benchLogEvents, benchLogSpaces)
	require.NoError(b, err)
	_, err = db.Pool.Exec(ctx, `UPDATE event_seq SET last_seq = $1`, benchLogEvents)
	require.NoError(b, err)
	_, err = db.Pool.Exec(ctx, `VACUUM ANALYZE event_log`)
	require.NoError(b, err)
	log := postgres.NewEventLog(db.Pool, nil)
	b.Cleanup(log.Close)
	return db, log
}

// BenchmarkSpaceEvents reads one space's page: at the tail (a long poll
// woken by a commit: the range is the few seqs since its last answer), and
// in a catch-up, where one call examines a whole scan window of which the
// space holds one event in benchLogSpaces. rows/op is what a call examined.
func BenchmarkSpaceEvents(b *testing.B) {
	_, log := fillLog(b)
	ctx := context.Background()
	run := func(b *testing.B, p sync.SpaceEventsParams, scanned int64) {
		for b.Loop() {
			pg, err := log.SpaceEvents(ctx, &p)
			if err != nil {
				b.Fatal(err)
			}
			if pg.NextAfter <= p.AfterSeq {
				b.Fatal("no progress")
			}
		}
		b.ReportMetric(float64(scanned), "rows/op")
	}
	b.Run("Tail", func(b *testing.B) {
		run(b, sync.SpaceEventsParams{Space: "space-7", AfterSeq: benchLogEvents - 20, Limit: 50}, 20)
	})
	for _, scan := range []int64{10_000, 100_000} {
		b.Run("CatchUpScan"+itoaBench(scan), func(b *testing.B) {
			run(b, sync.SpaceEventsParams{Space: "space-7", AfterSeq: 1000, Limit: 500, ScanLimit: scan}, scan)
		})
	}
}

// BenchmarkChangedSpaces is the waker's read once per notification: the
// spaces of the newest seqs, a notification's worth (20) and the most one
// read examines by default (10,000).
func BenchmarkChangedSpaces(b *testing.B) {
	_, log := fillLog(b)
	ctx := context.Background()
	for _, n := range []int64{20, 10_000} {
		b.Run("Seqs"+itoaBench(n), func(b *testing.B) {
			for b.Loop() {
				cs, err := log.ChangedSpaces(ctx, &sync.ChangedSpacesParams{AfterSeq: benchLogEvents - n, Limit: 10_000})
				if err != nil {
					b.Fatal(err)
				}
				if !cs.Complete || len(cs.Spaces) != int(min(n, benchLogSpaces)) {
					b.Fatalf("%d spaces, complete %v", len(cs.Spaces), cs.Complete)
				}
			}
		})
	}
}

// BenchmarkEventTypesByScan is what GET .../event-types would cost as a
// query over the retained log instead of the consumer-kept table: one
// space's types grouped from its events.
func BenchmarkEventTypesByScan(b *testing.B) {
	db, _ := fillLog(b)
	ctx := context.Background()
	for b.Loop() {
		rows, err := db.Pool.Query(ctx, `SELECT type, count(*), max(committed_at) FROM event_log WHERE space = 'space-7' GROUP BY type`)
		if err != nil {
			b.Fatal(err)
		}
		rows.Close()
		if rows.Err() != nil {
			b.Fatal(rows.Err())
		}
	}
}

func itoaBench(n int64) string {
	switch {
	case n >= 1000 && n%1000 == 0:
		return itoaBench(n/1000) + "k"
	case n < 10:
		return string(rune('0' + n))
	}
	return itoaBench(n/10) + string(rune('0'+n%10))
}
