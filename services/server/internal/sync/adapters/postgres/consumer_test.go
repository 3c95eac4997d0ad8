package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/testwait"
)

// drain runs rounds until one reads less than a batch. A round that finds
// the cursor locked is tried again until a deadline: a backend killed with
// pg_terminate_backend reports the error to its client before it has
// released its locks, so the next round may still meet the old one.
func drain(t *testing.T, rounds *sync.RoundRunner, c sync.Consumer) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := rounds.Run(context.Background(), c)
		require.NoError(t, err)
		if res.Locked {
			require.True(t, time.Now().Before(deadline), "cursor %q still locked after 10s", c.Name())
			time.Sleep(5 * time.Millisecond) // polling with a deadline
			continue
		}
		if !res.Full {
			return
		}
	}
}

// requireExactlyOnce checks that seqs 1..n each have exactly one job.
func requireExactlyOnce(t *testing.T, b *bundle, consumer string, n int64) {
	t.Helper()
	requireSeqsOnce(t, jobSeqs(t, b.db, consumer), n, "a job")
}

// startWorker runs a Worker for c until the test ends, on a pool, event log
// and River client of its own, as a separate worker process would, with
// the round composed as the server composes it.
func startWorker(t *testing.T, b *bundle, c sync.Consumer, cfg *sync.WorkerConfig, listen *postgres.ListenerConfig) *sync.Worker {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), b.db.URL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	log := postgres.NewEventLog(pool, nil)
	t.Cleanup(log.Close)
	w, err := sync.NewWorker(productionRounds(t, pool, log, 50), []sync.Consumer{c}, cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var wg gosync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = w.Run(ctx) }()
	if listen != nil {
		listen.ConnString = b.db.URL
		l := postgres.NewListener(w.Wake, listen)
		wg.Add(1)
		go func() { defer wg.Done(); _ = l.Run(ctx) }()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	return w
}

// The round probe. Tests stop or break consumers' rounds at chosen points
// through triggers in their own database, so the round under test keeps
// every port exactly as production composes it (productionRounds) instead
// of running through wrappers.

// probeKey is the advisory lock a held round waits on.
const probeKey int64 = 0x626f7468795f686f // "bothy_ho"

// installRoundProbe adds triggers on consumer's cursor row and test jobs
// with two points:
//
//   - "advance": inside the UPDATE that moves the cursor, after the round
//     inserted its jobs (a plain AFTER trigger);
//   - "commit": at the COMMIT of the transaction that moves the cursor,
//     after all its writes: the last act of a round (a deferred constraint
//     trigger).
//
// A point does nothing until the test arms it (armProbe). Arming is a
// committed row, not a setting of the round's transaction, so it catches
// whichever transaction does the write, even one a broken round opened
// besides its own. "hold" makes that transaction wait there while a
// roundHold holds probeKey; "refuse" makes it fail there. With check, every
// transaction that moves the cursor or inserts test jobs must commit both,
// jobs for exactly 1..last_seq together with the cursor at last_seq, or its
// COMMIT is refused (deferred constraint triggers on both tables).
func installRoundProbe(t testing.TB, db *dbtest.DB, consumer string, check bool) {
	t.Helper()
	require.Regexp(t, `^[a-z_]+$`, consumer) // spliced into DDL below
	_, err := db.Pool.Exec(context.Background(), fmt.Sprintf(`
CREATE TABLE IF NOT EXISTS test_round_probe_arm (consumer text NOT NULL, action text NOT NULL, point text NOT NULL);
CREATE OR REPLACE FUNCTION test_round_probe() RETURNS trigger LANGUAGE plpgsql AS $f$
DECLARE
	probe_consumer text := TG_ARGV[0];
	probe_point text := TG_ARGV[1];
	cur bigint;
	n bigint;
	hi bigint;
BEGIN
	IF EXISTS (SELECT 1 FROM test_round_probe_arm a WHERE a.consumer = probe_consumer AND a.action = 'hold' AND a.point = probe_point) THEN
		PERFORM pg_advisory_xact_lock(%[1]d);
	END IF;
	IF EXISTS (SELECT 1 FROM test_round_probe_arm a WHERE a.consumer = probe_consumer AND a.action = 'refuse' AND a.point = probe_point) THEN
		RAISE EXCEPTION 'round of %% refused at %% (test fault)', probe_consumer, probe_point;
	END IF;
	IF probe_point <> 'advance' AND TG_ARGV[2]::boolean THEN
		SELECT last_seq INTO cur FROM event_consumer_cursors WHERE name = probe_consumer;
		SELECT count(*), coalesce(max((args->>'seq')::bigint), 0) INTO n, hi
			FROM river_job WHERE kind = 'test.consumer' AND args->>'consumer' = probe_consumer;
		IF n <> cur OR hi <> cur THEN
			RAISE EXCEPTION 'consumer %%: a transaction commits the cursor at %% with %% test jobs up to seq %%: jobs and cursor do not commit together', probe_consumer, cur, n, hi;
		END IF;
	END IF;
	RETURN NULL;
END
$f$;
CREATE TRIGGER test_probe_advance_%[2]s AFTER UPDATE ON event_consumer_cursors
	FOR EACH ROW WHEN (NEW.name = '%[2]s') EXECUTE FUNCTION test_round_probe('%[2]s', 'advance', '%[3]t');
CREATE CONSTRAINT TRIGGER test_probe_commit_cursor_%[2]s AFTER UPDATE ON event_consumer_cursors
	DEFERRABLE INITIALLY DEFERRED
	FOR EACH ROW WHEN (NEW.name = '%[2]s') EXECUTE FUNCTION test_round_probe('%[2]s', 'commit', '%[3]t');
CREATE CONSTRAINT TRIGGER test_probe_commit_jobs_%[2]s AFTER INSERT ON river_job
	DEFERRABLE INITIALLY DEFERRED
	FOR EACH ROW WHEN (NEW.kind = 'test.consumer' AND NEW.args->>'consumer' = '%[2]s')
	EXECUTE FUNCTION test_round_probe('%[2]s', 'jobs commit', '%[3]t');`, probeKey, consumer, check))
	require.NoError(t, err)
}

// armProbe arms action ("hold" or "refuse") at point for consumer's rounds
// from now on; disarmProbe ends every action for it.
func armProbe(t testing.TB, db *dbtest.DB, consumer, action, point string) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), `INSERT INTO test_round_probe_arm (consumer, action, point) VALUES ($1, $2, $3)`,
		consumer, action, point)
	require.NoError(t, err)
}

func disarmProbe(t testing.TB, db *dbtest.DB, consumer string) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), `DELETE FROM test_round_probe_arm WHERE consumer = $1`, consumer)
	require.NoError(t, err)
}

// roundHold holds probeKey on a connection of its own: transactions at an
// armed "hold" point wait there until release.
type roundHold struct{ conn *pgx.Conn }

func holdRounds(t testing.TB, db *dbtest.DB) *roundHold {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), db.URL)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) }) // closing releases the lock too
	_, err = conn.Exec(context.Background(), `SELECT pg_advisory_lock($1)`, probeKey)
	require.NoError(t, err)
	return &roundHold{conn: conn}
}

func (h *roundHold) release(t testing.TB) {
	t.Helper()
	_, err := h.conn.Exec(context.Background(), `SELECT pg_advisory_unlock($1)`, probeKey)
	require.NoError(t, err)
}

// runRound runs one round in a goroutine and delivers its error.
func runRound(ctx context.Context, rounds *sync.RoundRunner, c sync.Consumer) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := rounds.Run(ctx, c)
		done <- err
	}()
	return done
}

// recv waits for a value on ch until a deadline.
func recv[T any](t testing.TB, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("timed out after %s waiting for %s", d, what)
		panic("unreachable")
	}
}

// waitHeld polls until a backend waits on probeKey, at an armed hold, and
// returns its pid. It fails at once if the round ends first: then it never
// reached the point that was armed.
func waitHeld(t testing.TB, db *dbtest.DB, done <-chan error) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case err := <-done:
			t.Fatalf("the round ended before it reached the armed hold, with error %v", err)
		default:
		}
		rows, err := db.Pool.Query(context.Background(), `SELECT pid FROM pg_locks
			WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
			AND classid::bigint = $1 AND objid::bigint = $2 AND objsubid = 1`, probeKey>>32, probeKey&0xffffffff)
		require.NoError(t, err)
		pids, err := pgx.CollectRows(rows, pgx.RowTo[int])
		require.NoError(t, err)
		if len(pids) > 0 {
			require.Len(t, pids, 1, "more than one backend at the hold")
			return pids[0]
		}
		require.True(t, time.Now().Before(deadline), "no backend waiting at the hold after 10s")
		time.Sleep(5 * time.Millisecond) // polling with a deadline
	}
}

// waitGone polls until backend pid has exited, so whatever it was doing
// has committed or rolled back.
func waitGone(t testing.TB, db *dbtest.DB, pid int) {
	t.Helper()
	testwait.Until(t, 10*time.Second, func() bool {
		var alive bool
		require.NoError(t, db.Pool.QueryRow(context.Background(),
			`SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)`, pid).Scan(&alive))
		return !alive
	}, "backend %d still alive", pid)
}

// outsideView reads a consumer's cursor and its number of test jobs in one
// snapshot, as any other session sees them.
func outsideView(t testing.TB, db *dbtest.DB, consumer string) (cursor, jobs int64) {
	t.Helper()
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT
		(SELECT last_seq FROM event_consumer_cursors WHERE name = $1),
		(SELECT count(*) FROM river_job WHERE kind = 'test.consumer' AND args->>'consumer' = $1)`, consumer).Scan(&cursor, &jobs))
	return cursor, jobs
}

// Effects are rows a consumer's Handle writes through the round's
// transaction (as webhooks writes delivery records); they must commit or
// roll back with the round, exactly like its jobs.
func createEffects(t testing.TB, db *dbtest.DB) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), `CREATE TABLE test_effects (consumer text NOT NULL, seq bigint NOT NULL)`)
	require.NoError(t, err)
}

func writeEffects(ctx context.Context, tx pgx.Tx, consumer string, events []sync.Event) error {
	seqs := make([]int64, len(events))
	for i, e := range events {
		seqs[i] = e.Seq
	}
	_, err := tx.Exec(ctx, `INSERT INTO test_effects (consumer, seq) SELECT $1, unnest($2::bigint[])`, consumer, seqs)
	return err
}

func effectSeqs(t testing.TB, db *dbtest.DB, consumer string) map[int64]int {
	t.Helper()
	return countSeqs(t, db, `SELECT seq, count(*) FROM test_effects WHERE consumer = $1 GROUP BY 1`, consumer)
}

// overlapGate holds the first round with events, of either worker, inside
// its Handle, with the cursor locked, and wakes the other worker. That
// worker's round must end at once as Locked (FOR UPDATE SKIP LOCKED); only
// then does the held round go on ("skipped"). Should the other round get
// through to Handle instead, two rounds of one consumer overlap: the lock
// is missing ("overlap"). Should it never report, it is waiting on the
// lock: SKIP LOCKED is missing, and the gate gives up ("timeout").
type overlapGate struct {
	workers [2]atomic.Pointer[sync.Worker]
	holder  atomic.Int32 // 1 + index of the worker held at the gate; 0 before
	opened  chan struct{}
	once    gosync.Once
	outcome atomic.Value // string
}

func newOverlapGate() *overlapGate {
	g := &overlapGate{opened: make(chan struct{})}
	g.outcome.Store("never armed")
	return g
}

func (g *overlapGate) open(outcome string) {
	g.once.Do(func() { g.outcome.Store(outcome); close(g.opened) })
}

// hook is worker i's Handle hook.
func (g *overlapGate) hook(i int) func(context.Context, pgx.Tx, []sync.Event) error {
	return func(ctx context.Context, _ pgx.Tx, _ []sync.Event) error {
		if g.holder.CompareAndSwap(0, int32(i+1)) {
			if other := g.workers[1-i].Load(); other != nil {
				other.Wake()
			}
			select {
			case <-g.opened:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(10 * time.Second):
				g.open("timeout")
				return errors.New("overlap gate: the other worker's round neither ended as Locked nor ran within 10s")
			}
		}
		if g.holder.Load() != int32(i+1) {
			g.open("overlap") // a no-op once the gate is open
		}
		return nil
	}
}

// afterRound is worker i's AfterRound hook.
func (g *overlapGate) afterRound(i int, res sync.RoundResult) {
	if res.Locked && g.holder.Load() == int32(2-i) { // the other worker holds the gate
		g.open("skipped")
	}
}

func TestConsumersTwoWorkersExactlyOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, 50)
	addConsumer(t, b.db, "twin")

	gate := newOverlapGate()
	var rounds, locked [2]atomic.Int64
	for i := range 2 {
		w := startWorker(t, b, &recordingConsumer{name: "twin", hook: gate.hook(i)}, &sync.WorkerConfig{
			PollInterval: 20 * time.Millisecond,
			AfterRound: func(_ string, res sync.RoundResult, err error) {
				gate.afterRound(i, res)
				switch {
				case err == nil && res.Locked:
					locked[i].Add(1)
				case err == nil && res.Events > 0:
					rounds[i].Add(1)
				}
			},
		}, &postgres.ListenerConfig{})
		gate.workers[i].Store(w)
	}

	// Producers append while both workers run, so rounds race for real.
	const producers, each = 8, 100
	var wg gosync.WaitGroup
	for range producers {
		wg.Add(1)
		go func() { defer wg.Done(); appendN(t, b.log, each) }()
	}
	wg.Wait()
	const n = producers * each
	testwait.Until(t, 30*time.Second, func() bool { return cursorOf(t, b.db, "twin") == n }, "cursor did not reach %d", n)
	t.Logf("rounds with events: worker A %d, worker B %d; rounds that found the cursor locked: A %d, B %d",
		rounds[0].Load(), rounds[1].Load(), locked[0].Load(), locked[1].Load())
	assert.Equal(t, "skipped", gate.outcome.Load(),
		"while one worker's round held the cursor, the other worker's round must end at once as Locked")
	requireExactlyOnce(t, b, "twin", n)
}

func TestConsumerCrashMidRoundNoDuplicates(t *testing.T) {
	t.Parallel()
	errLookup := errors.New("receiver lookup failed")

	// Each case breaks round 2 of 3 (batch 10, 30 events); Handle writes
	// effects through the round's transaction in every round. HandlerError
	// and Panic fail in the consumer's Handle itself, after its writes.
	// TerminatedBackend and CancelledContext hold the round at an armed
	// probe point, with its jobs inserted, and strike from outside.
	cases := []struct {
		name string
		// handleFault, if set, runs in Handle of round 2 after its writes.
		handleFault func() error
		// hold, if set, is the probe point round 2 is held at until strike
		// has run: "commit" (all written, COMMIT sent) or "advance" (jobs
		// inserted, cursor UPDATE running).
		hold   string
		strike func(t *testing.T, b *bundle, pid int, cancel context.CancelFunc)
		check  func(t *testing.T, err error)
	}{
		{
			name: "TerminatedBackend",
			hold: "commit",
			strike: func(t *testing.T, b *bundle, pid int, _ context.CancelFunc) {
				// Another session kills the backend committing the round, as
				// a crash or an operator would.
				_, err := b.db.Pool.Exec(context.Background(), `SELECT pg_terminate_backend($1)`, pid)
				require.NoError(t, err)
			},
			check: func(t *testing.T, err error) { require.Error(t, err) },
		},
		{
			name:        "HandlerError",
			handleFault: func() error { return errLookup },
			check:       func(t *testing.T, err error) { require.ErrorIs(t, err, errLookup) },
		},
		{
			name:        "Panic",
			handleFault: func() error { panic("bug in consumer") },
			check:       func(t *testing.T, err error) { require.ErrorIs(t, err, sync.ErrRoundPanicked) },
		},
		{
			name: "CancelledContext",
			hold: "advance",
			strike: func(_ *testing.T, _ *bundle, _ int, cancel context.CancelFunc) {
				// The round's context ends (RoundTimeout, shutdown) while its
				// cursor UPDATE runs, after its jobs were inserted.
				cancel()
			},
			check: func(t *testing.T, err error) { require.ErrorIs(t, err, context.Canceled) },
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const consumer, n, faultRound = "crash", 30, 2
			b := setup(t, 10)
			addConsumer(t, b.db, consumer)
			installRoundProbe(t, b.db, consumer, false)
			createEffects(t, b.db)
			appendN(t, b.log, n)

			var calls atomic.Int32
			c := &recordingConsumer{name: consumer, hook: func(ctx context.Context, tx pgx.Tx, events []sync.Event) error {
				if err := writeEffects(ctx, tx, consumer, events); err != nil {
					return err
				}
				if calls.Add(1) == faultRound && tc.handleFault != nil {
					return tc.handleFault()
				}
				return nil
			}}

			res, err := b.rounds.Run(context.Background(), c)
			require.NoError(t, err)
			require.Equal(t, int64(10), res.To)

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.hold != "" {
				hold := holdRounds(t, b.db)
				armProbe(t, b.db, consumer, "hold", tc.hold)
				done := runRound(ctx, b.rounds, c)
				pid := waitHeld(t, b.db, done)
				tc.strike(t, b, pid, cancel)
				err = recv(t, done, 20*time.Second, "the struck round to return")
				disarmProbe(t, b.db, consumer)
				hold.release(t)
				waitGone(t, b.db, pid) // its transaction has ended, one way or the other
			} else {
				err = recv(t, runRound(ctx, b.rounds, c), 20*time.Second, "the failing round to return")
			}
			tc.check(t, err)
			t.Logf("round 2 failed with: %s", strings.SplitN(err.Error(), "\n", 2)[0])

			// Round 1 stays; of round 2 nothing is left.
			require.Equal(t, int64(10), cursorOf(t, b.db, consumer), "the cursor of the failed round moved")
			requireSeqsOnce(t, jobSeqs(t, b.db, consumer), 10, "a job (after the failed round)")
			requireSeqsOnce(t, effectSeqs(t, b.db, consumer), 10, "an effect (after the failed round)")

			drain(t, b.rounds, c)
			require.Equal(t, int64(n), cursorOf(t, b.db, consumer))
			requireExactlyOnce(t, b, consumer, n)
			requireSeqsOnce(t, effectSeqs(t, b.db, consumer), n, "an effect")
		})
	}
}

func TestConsumerWakesOnNotify(t *testing.T) {
	t.Parallel()
	b := setup(t, 50)
	addConsumer(t, b.db, "notified")
	connected := make(chan struct{}, 4)
	first := make(chan struct{})
	var once gosync.Once
	startWorker(t, b, &recordingConsumer{name: "notified"}, &sync.WorkerConfig{
		PollInterval: time.Hour, // only a notification can wake it in time
		AfterRound:   func(string, sync.RoundResult, error) { once.Do(func() { close(first) }) },
	}, &postgres.ListenerConfig{OnConnect: func(uint32) { connected <- struct{}{} }})
	recv(t, connected, 20*time.Second, "the listener to connect")
	recv(t, first, 20*time.Second, "the first round")

	appendN(t, b.log, 3)
	testwait.Until(t, 20*time.Second, func() bool { return cursorOf(t, b.db, "notified") == 3 }, "no round after NOTIFY")
	requireExactlyOnce(t, b, "notified", 3)
}

func TestConsumerWakesOnPoll(t *testing.T) {
	t.Parallel()
	b := setup(t, 50)
	addConsumer(t, b.db, "polled")
	silent := postgres.NewEventLog(b.db.Pool, &postgres.EventLogConfig{Notify: postgres.NotifyNone})
	first := make(chan struct{})
	var once gosync.Once
	// No listener at all: the poll is the only way to wake.
	startWorker(t, b, &recordingConsumer{name: "polled"}, &sync.WorkerConfig{
		PollInterval: 50 * time.Millisecond,
		AfterRound:   func(string, sync.RoundResult, error) { once.Do(func() { close(first) }) },
	}, nil)
	recv(t, first, 20*time.Second, "the first round")
	appendN(t, silent, 3)
	testwait.Until(t, 20*time.Second, func() bool { return cursorOf(t, b.db, "polled") == 3 }, "no round after poll interval")
	requireExactlyOnce(t, b, "polled", 3)
}

func TestConsumerListenLossLosesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, 50)
	addConsumer(t, b.db, "relisten")

	pids := make(chan uint32, 4)
	var attempts atomic.Int32
	release := make(chan struct{})
	first := make(chan struct{})
	var once gosync.Once
	startWorker(t, b, &recordingConsumer{name: "relisten"}, &sync.WorkerConfig{
		PollInterval: time.Hour, // without the wake after reconnect the events would wait an hour
		AfterRound:   func(string, sync.RoundResult, error) { once.Do(func() { close(first) }) },
	}, &postgres.ListenerConfig{
		MinBackoff: time.Millisecond,
		BeforeConnect: func(ctx context.Context) {
			if attempts.Add(1) == 2 { // hold the first reconnect until events committed unheard
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
		},
		OnConnect: func(pid uint32) { pids <- pid },
	})
	pid := recv(t, pids, 20*time.Second, "the listener to connect")
	recv(t, first, 20*time.Second, "the first round")

	_, err := b.db.Pool.Exec(context.Background(), `SELECT pg_terminate_backend($1)`, pid)
	require.NoError(t, err)
	testwait.Until(t, 10*time.Second, func() bool { return attempts.Load() >= 2 }, "listener did not try to reconnect")

	// Nobody is listening: these notifications are lost. A round woken
	// before the outage (the first connect wakes one too) may still run and
	// read some; those it leaves have nothing left to wake a round but the
	// reconnect. Append until some are left.
	var head int64
	for head == 0 || cursorOf(t, b.db, "relisten") == head {
		require.Less(t, head, int64(50), "rounds kept reading while nobody listened")
		appendN(t, b.log, 5)
		head += 5
	}
	close(release)
	recv(t, pids, 20*time.Second, "the listener to reconnect")
	testwait.Until(t, 20*time.Second, func() bool { return cursorOf(t, b.db, "relisten") == head }, "events committed during the outage were not read after reconnect")
	requireExactlyOnce(t, b, "relisten", head)
}

func TestConsumerRoundJobsAndCursorCommitTogether(t *testing.T) {
	t.Parallel()

	// The round is held at its COMMIT, after it inserted its jobs and moved
	// its cursor: outside, neither is visible; after the commit, both are.
	// The probe's check refuses any commit that carries one without the
	// other, so a round that commits them apart fails here.
	t.Run("InvisibleUntilCommitThenBoth", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 100)
		addConsumer(t, b.db, "together")
		installRoundProbe(t, b.db, "together", true)
		appendN(t, b.log, 10)
		hold := holdRounds(t, b.db)
		armProbe(t, b.db, "together", "hold", "commit")

		done := runRound(context.Background(), b.rounds, &recordingConsumer{name: "together"})
		waitHeld(t, b.db, done)
		cursor, jobs := outsideView(t, b.db, "together")
		require.Zero(t, jobs, "jobs visible before the round committed")
		require.Zero(t, cursor, "cursor visible before the round committed")

		hold.release(t)
		require.NoError(t, recv(t, done, 20*time.Second, "the round to commit"))
		require.Equal(t, int64(10), cursorOf(t, b.db, "together"))
		requireExactlyOnce(t, b, "together", 10)
	})

	// The round fails at its COMMIT, after every write: neither stays, and
	// the next round does the work once.
	t.Run("RefusedCommitKeepsNeither", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 100)
		addConsumer(t, b.db, "together")
		installRoundProbe(t, b.db, "together", true)
		appendN(t, b.log, 10)
		c := &recordingConsumer{name: "together"}

		armProbe(t, b.db, "together", "refuse", "commit")
		_, err := b.rounds.Run(context.Background(), c)
		require.ErrorContains(t, err, "refused at commit")
		require.Empty(t, jobSeqs(t, b.db, "together"), "jobs of the refused round survived")
		require.Zero(t, cursorOf(t, b.db, "together"), "cursor of the refused round moved")

		disarmProbe(t, b.db, "together")
		res, err := b.rounds.Run(context.Background(), c)
		require.NoError(t, err)
		require.Equal(t, 10, res.Events)
		require.Equal(t, int64(10), cursorOf(t, b.db, "together"))
		requireExactlyOnce(t, b, "together", 10)
	})
}

func TestConsumerRoundLockedEndsAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, 100)
	addConsumer(t, b.db, "busy")
	appendN(t, b.log, 5)

	// Another round holds the cursor row.
	holder, err := b.db.Pool.Begin(context.Background())
	require.NoError(t, err)
	defer holder.Rollback(context.Background()) //nolint:errcheck
	_, err = holder.Exec(context.Background(), `SELECT 1 FROM event_consumer_cursors WHERE name = 'busy' FOR UPDATE`)
	require.NoError(t, err)

	// Without SKIP LOCKED the round would wait on the row until this
	// deadline and fail; with it, it reports Locked at once.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := b.rounds.Run(ctx, &recordingConsumer{name: "busy"})
	require.NoError(t, err)
	require.True(t, res.Locked)
	require.Zero(t, res.Events)
	require.Empty(t, jobSeqs(t, b.db, "busy"))

	// Unknown consumers are not mistaken for locked ones.
	_, err = b.rounds.Run(ctx, &recordingConsumer{name: "nosuch"})
	require.ErrorIs(t, err, sync.ErrUnknownConsumer)

	require.NoError(t, holder.Rollback(context.Background()))
	res, err = b.rounds.Run(ctx, &recordingConsumer{name: "busy"})
	require.NoError(t, err)
	require.False(t, res.Locked)
	require.Equal(t, 5, res.Events)
}

// gauges scrapes reg and returns value[name][consumer].
func gauges(t *testing.T, reg *prometheus.Registry) map[string]map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			consumer := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "consumer" {
					consumer = l.GetValue()
				}
			}
			if out[mf.GetName()] == nil {
				out[mf.GetName()] = map[string]float64{}
			}
			out[mf.GetName()][consumer] = value(m)
		}
	}
	return out
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	}
	return 0
}

func TestConsumerLagGauges(t *testing.T) {
	t.Parallel()
	b := setup(t, 100)
	addConsumer(t, b.db, "lagging")
	reg := prometheus.NewRegistry()
	reg.MustRegister(postgres.NewLagCollector(b.db.Pool, nil))

	g := gauges(t, reg)
	require.Zero(t, g["bothy_event_consumer_lag"]["lagging"])
	require.Zero(t, g["bothy_event_consumer_pending_age_seconds"]["lagging"], "no pending event: age 0")
	require.Zero(t, g["bothy_event_consumer_last_success_timestamp_seconds"]["lagging"], "no round yet")
	require.Equal(t, 1.0, g["bothy_event_consumer_status_up"][""])

	appendN(t, b.log, 7)
	// Make the oldest pending event ten minutes old; it ages by the time
	// the scrape takes to come, however long that is. Ten minutes after
	// midnight that moves it into yesterday's partition, which the
	// database made today lacks.
	aged := time.Now()
	_, err := postgres.NewPartitions(b.db.Pool, &postgres.PartitionConfig{}).Ensure(context.Background(), aged.Add(-10*time.Minute))
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(context.Background(), `UPDATE event_log SET committed_at = now() - interval '10 minutes' WHERE seq = 1`)
	require.NoError(t, err)
	g = gauges(t, reg)
	require.Equal(t, 7.0, g["bothy_event_consumer_lag"]["lagging"])
	age := g["bothy_event_consumer_pending_age_seconds"]["lagging"]
	require.GreaterOrEqual(t, age, 600.0)
	require.LessOrEqual(t, age, 600+time.Since(aged).Seconds())
	require.Equal(t, 7.0, g["bothy_event_log_head_seq"][""])
	// The webhooks and push consumers from the migrations are reported too.
	require.Contains(t, g["bothy_event_consumer_lag"], "webhooks")
	require.Contains(t, g["bothy_event_consumer_lag"], "push")

	before := time.Now()
	drain(t, b.rounds, &recordingConsumer{name: "lagging"})
	g = gauges(t, reg)
	require.Zero(t, g["bothy_event_consumer_lag"]["lagging"])
	require.Zero(t, g["bothy_event_consumer_pending_age_seconds"]["lagging"])
	require.GreaterOrEqual(t, g["bothy_event_consumer_last_success_timestamp_seconds"]["lagging"], float64(before.Unix()-1))

	// A database that cannot be read reports status_up 0 and no stale values.
	pool, err := pgxpool.New(context.Background(), b.db.URL)
	require.NoError(t, err)
	broken := prometheus.NewRegistry()
	broken.MustRegister(postgres.NewLagCollector(pool, nil))
	pool.Close()
	g = gauges(t, broken)
	require.Equal(t, 0.0, g["bothy_event_consumer_status_up"][""])
	require.NotContains(t, g, "bothy_event_consumer_lag")
}

func TestRoundCallsHandleLost(t *testing.T) {
	t.Parallel()
	b := setup(t, 100)
	addConsumer(t, b.db, "behind")
	addConsumer(t, b.db, "partly")
	appendN(t, b.log, 10)
	c := &recordingConsumer{name: "partly"}
	// "partly" reads 1..4 before retention strikes.
	rounds4 := productionRounds(t, b.db.Pool, b.log, 4)
	_, err := rounds4.Run(context.Background(), c)
	require.NoError(t, err)

	dropAllCurrentPartitions(t, b)
	appendN(t, b.log, 3) // 11..13 survive

	for _, tc := range []struct {
		c    *recordingConsumer
		want sync.SeqRange
	}{
		{&recordingConsumer{name: "behind"}, sync.SeqRange{From: 1, To: 10}},
		{c, sync.SeqRange{From: 5, To: 10}},
	} {
		res, err := b.rounds.Run(context.Background(), tc.c)
		require.NoError(t, err)
		require.Equal(t, []sync.SeqRange{tc.want}, tc.c.lost, tc.c.name)
		require.Equal(t, tc.want, res.Lost)
		require.Equal(t, 3, res.Events, "the round continues after the lost range")
		require.Equal(t, int64(13), cursorOf(t, b.db, tc.c.name))
	}
	require.Equal(t, map[int64]int{11: 1, 12: 1, 13: 1}, jobSeqs(t, b.db, "behind"))

	// Nothing is reported twice.
	res, err := b.rounds.Run(context.Background(), c)
	require.NoError(t, err)
	require.Zero(t, res.Lost.Len())
	require.Len(t, c.lost, 1)
}

// dropAllCurrentPartitions runs retention as if a week had passed with a
// one-day retention, then recreates partitions for now.
func dropAllCurrentPartitions(t *testing.T, b *bundle) {
	t.Helper()
	ctx := context.Background()
	parts := postgres.NewPartitions(b.db.Pool, &postgres.PartitionConfig{Interval: 24 * time.Hour, Retention: 24 * time.Hour, Ahead: 1})
	res, err := parts.Maintain(ctx, time.Now().Add(7*24*time.Hour))
	require.NoError(t, err)
	require.NotEmpty(t, res.Dropped)
	require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		_, err := postgres.EnsurePartitions(ctx, tx, time.Now(), 24*time.Hour, 1)
		return err
	}))
}
