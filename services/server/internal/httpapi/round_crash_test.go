package httpapi_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/app"
	"github.com/bothy/bothy/services/server/internal/app/apptest"
	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/config"
	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest"
)

// TestCrash_ARoundIsDurableBeforeItsFirstSend: a consumer round commits
// asynchronously (postgres.RoundTx); what makes it durable before anything
// outside the database acts on it is that River's fetch of the delivery job
// and the sender's claim commit synchronously, later in the WAL. Here the
// worker sends a webhook to a receiver that holds the request, PostgreSQL
// crashes (immediate stop) while it holds it, and after recovery the round
// that made the delivery must be there: its delivery row, and the cursor
// past the event.
//
// The cluster keeps unflushed WAL in memory for up to 10 s, and a first
// delivery touches the pages after the set-up's checkpoint (full-page
// images), so that the second round and what follows it up to the send fit
// in less than a WAL page: the WAL writer, which writes out completed pages
// at once, leaves the round's commit record in PostgreSQL's memory, where
// the immediate stop loses it unless a synchronous commit flushed it. That
// the window can be seen is checked too: with every commit of the worker
// made asynchronous (a trigger on each table sets synchronous_commit off
// for the writing transaction), the crash must lose the round in at least
// one of several tries.
func TestCrash_ARoundIsDurableBeforeItsFirstSend(t *testing.T) {
	t.Run("SynchronousFetchAndClaim", func(t *testing.T) {
		for try := range 3 {
			lost, at := sendThenCrash(t, false)
			t.Logf("try %d: lost %t (%s)", try+1, lost, at)
			require.False(t, lost, "try %d: the crash lost the round behind a webhook already sent (%s)", try+1, at)
		}
	})
	t.Run("ControlEverythingAsynchronous", func(t *testing.T) {
		const tries = 5
		for try := range tries {
			lost, at := sendThenCrash(t, true)
			t.Logf("try %d: lost %t (%s)", try+1, lost, at)
			if lost {
				return
			}
		}
		t.Fatalf("no try of %d lost the round with every commit asynchronous: the test cannot see the window", tries)
	})
}

// sendThenCrash runs one try on a fresh cluster: the worker delivers a first
// event, then sends a second to a receiver that holds the request; the
// cluster crashes while it holds it. It reports whether the second round
// was lost, and the WAL positions when the request arrived.
func sendThenCrash(t *testing.T, allAsync bool) (lost bool, at string) {
	t.Helper()
	p := dbtest.NewPrivate(t, dbtest.QuietCrashSettings)
	ctx := context.Background()
	pool := openPool(t, p.URL)
	defer func() { pool.Close() }()
	if allAsync {
		_, err := pool.Exec(ctx, commitAsyncSQL)
		require.NoError(t, err)
	}
	rv := newHoldingReceiver(t)
	token := apptest.Principal(t, pool, "owner", authz.RightWrite, "s1", apptest.AllScopes)
	base, stop := runWorker(t, p.URL)
	defer stop()
	res := (&testBundle{base: base}).do(t, "POST", "/v1/webhooks", token, `{"space":"s1","url":"`+rv.url()+`"}`)
	require.Equal(t, http.StatusCreated, res.status, "body: %s", res.body)
	subID := res.json(t)["id"].(string)

	producer := postgres.NewEventLog(pool, nil)
	defer producer.Close()
	waitDelivered(t, pool, subID, appendEvent(t, producer))
	rv.hold()
	second := appendEvent(t, producer)
	select {
	case <-rv.held:
	case <-time.After(30 * time.Second):
		t.Fatal("the worker did not send the second event")
	}
	at = walPositions(t, pool)
	pool.Close()
	require.NoError(t, p.Crash(ctx))
	rv.release()
	stop()
	require.NoError(t, p.Start(ctx))
	pool = openPool(t, p.URL)
	return !roundKept(t, pool, subID, second), at
}

// roundKept reports whether the round that made the delivery of seq
// survived: its delivery row, and the cursor at or past seq. A round is
// kept or lost whole, and the event itself must be there.
func roundKept(t *testing.T, pool *pgxpool.Pool, subID string, seq int64) bool {
	t.Helper()
	var cursor, rows, events int64
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT
		(SELECT last_seq FROM event_consumer_cursors WHERE name = 'webhooks'),
		(SELECT count(*) FROM webhook_deliveries WHERE subscription_id = $1 AND event_seq = $2),
		(SELECT count(*) FROM event_log WHERE seq = $2)`, subID, seq).Scan(&cursor, &rows, &events))
	require.EqualValues(t, 1, events, "the producer's acknowledged event is gone")
	require.Equal(t, cursor >= seq, rows == 1, "half a round survived (cursor %d, delivery rows %d)", cursor, rows)
	return rows == 1
}

// commitAsyncSQL makes every transaction that writes a table of the schema
// commit asynchronously: a statement trigger on each sets
// synchronous_commit off for the rest of the transaction. It removes the
// synchronous commits the test relies on (River's fetch, the sender's claim).
const commitAsyncSQL = `
CREATE FUNCTION test_commit_async() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    RETURN NULL;
END $$;
DO $$
DECLARE r record;
BEGIN
    FOR r IN SELECT c.oid::regclass AS t FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition LOOP
        EXECUTE format('CREATE TRIGGER test_commit_async AFTER INSERT OR UPDATE OR DELETE ON %s
                        FOR EACH STATEMENT EXECUTE FUNCTION test_commit_async()', r.t);
    END LOOP;
END $$`

func appendEvent(t *testing.T, producer *postgres.EventLog) int64 {
	t.Helper()
	evs, err := producer.Write(context.Background(), func(context.Context, pgx.Tx) ([]sync.NewEvent, error) {
		return []sync.NewEvent{{Space: "s1", Type: "test.crash", Actor: "test", Data: []byte(`{}`)}}, nil
	})
	require.NoError(t, err)
	return evs[0].Seq
}

// waitDelivered waits until the delivery of seq is recorded as delivered.
func waitDelivered(t *testing.T, pool *pgxpool.Pool, subID string, seq int64) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		err := pool.QueryRow(context.Background(), `SELECT count(*) FROM webhook_deliveries
			WHERE subscription_id = $1 AND event_seq = $2 AND status = 'delivered'`, subID, seq).Scan(&n)
		return err == nil && n == 1
	}, 30*time.Second, 20*time.Millisecond, "the first event was not delivered")
}

// walPositions describes how far the WAL was inserted and how far flushed.
func walPositions(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var s string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT format('insert %s, flushed %s, %s bytes not flushed',
		pg_current_wal_insert_lsn(), pg_current_wal_flush_lsn(), pg_current_wal_insert_lsn() - pg_current_wal_flush_lsn())`).Scan(&s))
	return s
}

// holdingReceiver answers webhooks with 204 until hold is called; after
// that it signals the first request on held and keeps every request
// unanswered until release.
type holdingReceiver struct {
	*receiver
	holding, released atomic.Bool
	held              chan struct{}
}

func newHoldingReceiver(t *testing.T) *holdingReceiver {
	t.Helper()
	rv := &holdingReceiver{receiver: newReceiver(t), held: make(chan struct{}, 1)}
	rv.SetRule(func(*webhookstest.Arrival) webhookstest.Answer {
		if !rv.holding.Load() || rv.released.Load() {
			return webhookstest.Answer{Status: http.StatusNoContent}
		}
		select {
		case rv.held <- struct{}{}:
		default:
		}
		return webhookstest.Answer{Status: http.StatusNoContent, Hang: true}
	})
	return rv
}

func (rv *holdingReceiver) hold() { rv.holding.Store(true) }

func (rv *holdingReceiver) release() {
	rv.released.Store(true)
	rv.Release()
}

// runWorker starts the server (role all) on the database at url, which may
// crash under it, and returns its base URL and a func that stops it and
// waits for it whatever Run returns (idempotent).
func runWorker(t *testing.T, url string) (base string, stop func()) {
	t.Helper()
	flags := apptest.Flags(url, "all")
	// Stopping River with the database down takes seconds (it retries
	// resigning its leadership); a shorter timeout would leave its
	// goroutines running after Run returned.
	flags["server.shutdown_timeout"] = "20s"
	cfg, err := config.Load("", nil, flags)
	require.NoError(t, err)
	srv := app.NewServer(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), app.Features(cfg))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	var once gosync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
				// Run's error is the database going away under it; only
				// that it stops matters.
			case <-time.After(60 * time.Second):
				t.Error("the server did not stop")
			}
		})
	}
	actx, acancel := context.WithTimeout(ctx, 20*time.Second)
	defer acancel()
	addr, err := srv.Addr(actx)
	if err != nil {
		stop()
		require.NoError(t, err)
	}
	return "http://" + addr.String(), stop
}
