package dbtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// StartLogAt makes db's event log one that has handed out every seq up to
// head and lost them all to retention, as a long-running log has: the next
// event appended gets head+1, every consumer's cursor is at head and the
// retention mark is past it. Tests of seqs beyond int4, or beyond the
// integers a float64 holds exactly, call it before anything runs on db.
func (db *DB) StartLogAt(tb testing.TB, head int64) {
	tb.Helper()
	err := pgx.BeginFunc(context.Background(), db.Pool, func(tx pgx.Tx) error {
		for _, sql := range []string{
			`UPDATE event_seq SET last_seq = $1`,
			`UPDATE event_consumer_cursors SET last_seq = $1`,
			`UPDATE event_log_retention SET low_seq = $1::bigint + 1`,
		} {
			if _, err := tx.Exec(context.Background(), sql, head); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatalf("dbtest: start the log at %d: %v", head, err)
	}
}
