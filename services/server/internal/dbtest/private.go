package dbtest

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bothy/bothy/internal/tooltest"
	"github.com/bothy/bothy/services/server/internal/pgcluster"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/testsweep"
)

// QuietCrashSettings are pgcluster.QuietCrashSettings sized for a test's
// cluster: an immediate stop loses every commit that nobody flushed.
var QuietCrashSettings = func() map[string]string {
	m := pgcluster.QuietCrashSettings()
	m["shared_buffers"] = "32MB"
	m["max_connections"] = "60"
	return m
}()

// Private is a test's own PostgreSQL cluster, which the test may crash.
type Private struct {
	*pgcluster.Cluster
	// URL connects to database "bothy", migrated, with partitions for now.
	URL string
}

// NewPrivate initializes and starts a private cluster with settings (see
// QuietCrashSettings), creates and migrates database "bothy" in it, and
// stops and removes the cluster when tb ends. It never touches the shared
// test server. Without the local server binaries the test fails in CI and
// is skipped elsewhere (tooltest.Need).
func NewPrivate(tb testing.TB, settings map[string]string) *Private {
	tb.Helper()
	tooltest.Need(tb, tooltest.PostgresServer)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Not tb.TempDir: its parents are private to root, and the cluster may
	// run as the postgres user. Owned (testsweep): a later run stops and
	// removes the cluster if this one is killed before its cleanup.
	dir, err := testsweep.MkdirTemp("bothy-pg-")
	if err != nil {
		tb.Fatalf("dbtest: %v", err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	copied := copyPrivateTemplate(ctx, dir)
	c, err := pgcluster.New(ctx, &pgcluster.Config{Dir: dir, Settings: settings})
	if err != nil {
		tb.Fatalf("dbtest: private cluster: %v", err)
	}
	if err := c.Start(ctx); err != nil {
		tb.Fatalf("dbtest: private cluster: %v", err)
	}
	tb.Cleanup(func() { _ = c.Crash(context.Background()) })
	p := &Private{Cluster: c, URL: c.URL("bothy")}
	if !copied {
		if err := createBothy(ctx, c); err != nil {
			tb.Fatalf("dbtest: private cluster: %v", err)
		}
	}
	pool, err := pgxpool.New(ctx, p.URL)
	if err != nil {
		tb.Fatalf("dbtest: private cluster: %v", err)
	}
	defer pool.Close()
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := postgres.EnsurePartitions(ctx, tx, time.Now(), 24*time.Hour, 2)
		return err
	})
	if err != nil {
		tb.Fatalf("dbtest: private cluster: partitions: %v", err)
	}
	// The set-up's own commits are on disk before the test begins: what a
	// crash loses afterwards is the test's doing.
	if _, err := pool.Exec(ctx, `CHECKPOINT`); err != nil {
		tb.Fatalf("dbtest: private cluster: checkpoint: %v", err)
	}
	return p
}

// CrashAndRestart stops the cluster in immediate mode and starts it again.
func (p *Private) CrashAndRestart(tb testing.TB) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := p.Crash(ctx); err != nil {
		tb.Fatalf("dbtest: crash: %v", err)
	}
	if err := p.Start(ctx); err != nil {
		tb.Fatalf("dbtest: restart after crash: %v", err)
	}
}
