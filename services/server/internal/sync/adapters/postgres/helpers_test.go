package postgres_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

// testArgs is the job kind test consumers enqueue: one per event.
type testArgs struct {
	Consumer string `json:"consumer"`
	Seq      int64  `json:"seq"`
}

func (testArgs) Kind() string { return "test.consumer" }

// recordingConsumer enqueues one job per event and can be told to fail.
type recordingConsumer struct {
	name string
	// hook, if set, runs inside Handle before the jobs are returned.
	hook func(ctx context.Context, tx pgx.Tx, events []sync.Event) error
	// lost collects HandleLost calls.
	lost []sync.SeqRange
}

func (c *recordingConsumer) Name() string { return c.name }

func (c *recordingConsumer) Handle(ctx context.Context, tx pgx.Tx, events []sync.Event) ([]sync.Job, error) {
	if c.hook != nil {
		if err := c.hook(ctx, tx, events); err != nil {
			return nil, err
		}
	}
	jobs := make([]sync.Job, len(events))
	for i, e := range events {
		jobs[i] = sync.Job{Args: testArgs{Consumer: c.name, Seq: e.Seq}}
	}
	return jobs, nil
}

func (c *recordingConsumer) HandleLost(ctx context.Context, tx pgx.Tx, consumer string, lost sync.SeqRange) error {
	c.lost = append(c.lost, lost)
	return nil
}

type bundle struct {
	db     *dbtest.DB
	log    *postgres.EventLog
	rounds *sync.RoundRunner
}

func setup(t *testing.T, batch int) *bundle {
	t.Helper()
	db := dbtest.NewDB(t)
	log := postgres.NewEventLog(db.Pool, nil)
	t.Cleanup(log.Close)
	return &bundle{db: db, log: log, rounds: productionRounds(t, db.Pool, log, batch)}
}

// productionRounds composes a RoundRunner exactly as app.Server.Run does for
// the worker role: RoundTx on the pool (BEGIN with synchronous_commit off),
// the CursorStore (FOR UPDATE SKIP LOCKED), the EventLog as event source and
// a JobSink with Fast (River's InsertManyFastTx, COPY) on a real River
// client of the same pool. The client inserts only: the test job kinds have
// no workers, and the insert path is the same as the server's client takes.
// Tests of the round mechanism must go through this, not through a pool's
// plain Begin or the InsertManyTx path, or they prove a round the server
// does not run.
func productionRounds(t testing.TB, pool *pgxpool.Pool, log *postgres.EventLog, batch int) *sync.RoundRunner {
	t.Helper()
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	return postgres.NewRoundRunner(pool, log, rc, &sync.RoundConfig{BatchSize: batch})
}

// appendN commits n events, one transaction each, in space "s1".
func appendN(t testing.TB, log *postgres.EventLog, n int) []sync.Event {
	t.Helper()
	var out []sync.Event
	for i := range n {
		evs, err := log.Write(context.Background(), func(ctx context.Context, tx pgx.Tx) ([]sync.NewEvent, error) {
			return []sync.NewEvent{{Space: "s1", Type: "item.created", Actor: "alice", Data: []byte(fmt.Sprintf(`{"i":%d}`, i))}}, nil
		})
		require.NoError(t, err)
		out = append(out, evs...)
	}
	return out
}

// jobSeqs counts the test jobs per seq for a consumer.
func jobSeqs(t testing.TB, db *dbtest.DB, consumer string) map[int64]int {
	t.Helper()
	return countSeqs(t, db, `SELECT (args->>'seq')::bigint, count(*) FROM river_job
		WHERE kind = 'test.consumer' AND args->>'consumer' = $1 GROUP BY 1`, consumer)
}

// countSeqs runs query (seq, count rows for the consumer in $1) into a map.
func countSeqs(t testing.TB, db *dbtest.DB, query, consumer string) map[int64]int {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), query, consumer)
	require.NoError(t, err)
	out := map[int64]int{}
	for rows.Next() {
		var seq int64
		var n int
		require.NoError(t, rows.Scan(&seq, &n))
		out[seq] = n
	}
	require.NoError(t, rows.Err())
	return out
}

// requireSeqsOnce checks that seqs (a count per seq) holds each of 1..n
// exactly once and nothing else; what names the rows in messages.
func requireSeqsOnce(t testing.TB, seqs map[int64]int, n int64, what string) {
	t.Helper()
	var missing, dup []int64
	for s := int64(1); s <= n; s++ {
		switch seqs[s] {
		case 1:
		case 0:
			missing = append(missing, s)
		default:
			dup = append(dup, s)
		}
	}
	require.Empty(t, missing, "events without %s", what)
	require.Empty(t, dup, "events with more than one of %s", what)
	require.Len(t, seqs, int(n), "%s for seqs outside 1..%d", what, n)
}

func cursorOf(t testing.TB, db *dbtest.DB, name string) int64 {
	t.Helper()
	var seq int64
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT last_seq FROM event_consumer_cursors WHERE name = $1`, name).Scan(&seq))
	return seq
}

// addConsumer inserts a cursor row as a consumer's migration would, at 0.
func addConsumer(t testing.TB, db *dbtest.DB, name string) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), `INSERT INTO event_consumer_cursors (name, last_seq) VALUES ($1, 0)`, name)
	require.NoError(t, err)
}
