package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/bothy/bothy/services/server/internal/sync"
)

// RoundTx begins a round's transaction with synchronous_commit off, in the
// same round trip as BEGIN, so a round's COMMIT returns once it is visible
// instead of after the WAL flush.
//
// That loses nothing. The round only writes rows (jobs, the cursor, a
// loss record); the first thing that acts on them outside the database is
// a River worker, and River marks a job running with a commit of its own
// that is synchronous and lies later in the WAL than the round's commit
// record, so it flushes the round first. A crash before that flush loses
// the round whole, jobs and cursor together, and the next round does it
// again. This is the argument the producers' commits already rest on.
type RoundTx struct {
	Pool *pgxpool.Pool
}

var _ sync.TxBeginner = RoundTx{}

// Begin implements sync.TxBeginner.
func (r RoundTx) Begin(ctx context.Context) (pgx.Tx, error) {
	return r.Pool.BeginTx(ctx, pgx.TxOptions{BeginQuery: "BEGIN; SET LOCAL synchronous_commit = off"})
}

// NewRoundRunner returns the rounds bothy runs: RoundTx, the cursor rows,
// events from log and jobs inserted by rc's fast path in the round's
// transaction. The server and the framework tests build rounds with it, so
// the tests run what production runs.
func NewRoundRunner(pool *pgxpool.Pool, log *EventLog, rc *river.Client[pgx.Tx], cfg *sync.RoundConfig) *sync.RoundRunner {
	return sync.NewRoundRunner(RoundTx{Pool: pool}, CursorStore{}, log, NewJobSink(rc, &JobSinkConfig{Fast: true}), cfg)
}
