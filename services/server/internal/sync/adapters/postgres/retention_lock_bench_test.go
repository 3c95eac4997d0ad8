package postgres_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/testwait"
)

// BenchmarkPartitions_CommitWhileMaintenanceWaits measures producer
// commits while a maintenance pass keeps retrying the detach of an old
// partition behind a reader that holds event_log open: each attempt queues
// the producers behind its lock request for up to PartitionConfig.
// LockTimeout. It reports the slowest commit and the p99, the figures
// TestPartitions_MaintainNeverStallsProducers does not assert.
//
//	go test ./services/server/internal/sync/adapters/postgres -run '^$' -bench CommitWhileMaintenanceWaits -benchtime 10s
func BenchmarkPartitions_CommitWhileMaintenanceWaits(b *testing.B) {
	db := dbtest.NewDB(b)
	log := postgres.NewEventLog(db.Pool, nil)
	b.Cleanup(log.Close)
	ctx := context.Background()
	base := time.Now().UTC().Truncate(time.Minute).Add(-10 * 24 * time.Hour)
	require.NoError(b, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		_, err := postgres.EnsurePartitions(ctx, tx, base, time.Minute, 2)
		return err
	}))
	insertAt(b, db.Pool, base.Add(time.Second))
	reader, err := db.Pool.Begin(ctx)
	require.NoError(b, err)
	_, err = reader.Exec(ctx, `SELECT count(*) FROM event_log`)
	require.NoError(b, err)
	retries := &retryCounter{}
	parts := postgres.NewPartitions(db.Pool, &postgres.PartitionConfig{Interval: time.Minute, Ahead: 1,
		Retention: 5 * 24 * time.Hour, RetryFor: time.Hour, Logger: slog.New(retries)})
	mctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := parts.Maintain(mctx, fiveDaysOn()); done <- err }()
	testwait.Until(b, progressWait, func() bool { return retries.n.Load() > 0 }, "maintenance never met the reader")

	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		took, err := commitOne(log)
		require.NoError(b, err)
		lat = append(lat, took)
	}
	b.StopTimer()
	stop()
	<-done
	_ = reader.Rollback(ctx)
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(retries.n.Load()), "retries")
}
