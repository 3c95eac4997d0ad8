package dbtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The helpers below serve the crash tests that check a read shows only
// durable state: a test commits rows asynchronously (BeginAsync), reads
// them through the code under test, crashes the cluster (CrashAndReopen)
// and requires the rows to have survived.

// Pool opens a pool on database "bothy" of the cluster; it is closed when tb
// ends, if not before.
func (p *Private) Pool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	pool, err := pgxpool.New(context.Background(), p.URL)
	if err != nil {
		tb.Fatalf("dbtest: pool: %v", err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// CrashAndReopen closes pool, crashes and restarts the cluster, and returns
// a new pool on database "bothy", closed when tb ends.
func (p *Private) CrashAndReopen(tb testing.TB, pool *pgxpool.Pool) *pgxpool.Pool {
	tb.Helper()
	pool.Close()
	p.CrashAndRestart(tb)
	return p.Pool(tb)
}

// BeginAsync begins a transaction whose commit is asynchronous
// (synchronous_commit off), as a producer's window or a round commits: once
// committed its rows are visible to every reader, and on disk only when the
// WAL writer or a later flush writes them out. The caller commits it.
//
// A test warms up before it commits such a transaction. The first touch of
// a page after a checkpoint, the first reads (which prune pages) and a new
// connection's first catalog reads (of the dead catalog rows the migrations
// left) write WAL of their own, enough to complete a WAL page, which the WAL
// writer then writes out, and the asynchronous commit with it. The test
// needs that commit to stay in the buffers until the crash, so it first
// vacuums or touches the pages it will change, and runs the read under test.
func BeginAsync(tb testing.TB, pool *pgxpool.Pool) pgx.Tx {
	tb.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		tb.Fatalf("dbtest: begin: %v", err)
	}
	if _, err := tx.Exec(ctx, `SET LOCAL synchronous_commit = off`); err != nil {
		_ = tx.Rollback(ctx)
		tb.Fatalf("dbtest: synchronous_commit off: %v", err)
	}
	return tx
}

// CommitAsync runs sql with args in a transaction that BeginAsync began and
// commits it.
func CommitAsync(tb testing.TB, pool *pgxpool.Pool, sql string, args ...any) {
	tb.Helper()
	ctx := context.Background()
	tx := BeginAsync(tb, pool)
	if _, err := tx.Exec(ctx, sql, args...); err != nil {
		_ = tx.Rollback(ctx)
		tb.Fatalf("dbtest: %s: %v", sql, err)
	}
	if err := tx.Commit(ctx); err != nil {
		tb.Fatalf("dbtest: commit: %v", err)
	}
}

// BumpSeqAsync advances the event log's counter by n with an asynchronous
// commit, as a producer takes seqs inside its window.
func BumpSeqAsync(tb testing.TB, pool *pgxpool.Pool, n int64) {
	tb.Helper()
	CommitAsync(tb, pool, `UPDATE event_seq SET last_seq = last_seq + $1`, n)
}
