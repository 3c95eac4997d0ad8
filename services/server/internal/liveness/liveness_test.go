package liveness_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/liveness"
	"github.com/bothy/bothy/services/server/internal/testwait"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(dbtest.Background(m),
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// lockFree reports whether id's liveness lock can be taken by a session of
// db's pool (taken and released at once by the transaction).
func lockFree(t *testing.T, db *dbtest.DB, id string) bool {
	t.Helper()
	var free bool
	err := pgx.BeginFunc(context.Background(), db.Pool, func(tx pgx.Tx) error {
		return tx.QueryRow(context.Background(), `SELECT pg_try_advisory_xact_lock($1, hashtext($2))`, liveness.LockClass, id).Scan(&free)
	})
	require.NoError(t, err)
	return free
}

func newHolder(t *testing.T, db *dbtest.DB, id string) *liveness.Holder {
	t.Helper()
	h, err := liveness.NewHolder(&liveness.HolderConfig{ConnString: db.URL, ID: id, Logger: quiet, MinBackoff: 10 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, h.Acquire(context.Background()))
	t.Cleanup(func() { _ = h.Close(context.Background()) })
	return h
}

func TestHolder(t *testing.T) {
	t.Parallel()

	t.Run("LockEndsWithTheSession", func(t *testing.T) {
		t.Parallel()
		db := dbtest.NewDB(t)
		h := newHolder(t, db, "")
		require.True(t, liveness.Participates(h.ID()))
		require.False(t, lockFree(t, db, h.ID()), "held while the session lives")
		require.NoError(t, h.Close(context.Background()))
		// The server ends the backend, and so releases the lock, a moment
		// after the client closed.
		testwait.Until(t, 10*time.Second, func() bool { return lockFree(t, db, h.ID()) }, "free once the session ended")
	})

	t.Run("RunReturnsOnCancelAndKeepsTheLock", func(t *testing.T) {
		t.Parallel()
		db := dbtest.NewDB(t)
		h := newHolder(t, db, "")
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- h.Run(ctx) }()
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return after cancel")
		}
		// River may still be finishing jobs: the lock must outlive Run.
		require.False(t, lockFree(t, db, h.ID()), "still held after Run returned")
		require.NotZero(t, h.HeldFor())
		require.NoError(t, h.Close(context.Background()))
		testwait.Until(t, 10*time.Second, func() bool { return lockFree(t, db, h.ID()) }, "free once the session ended")
	})

	t.Run("LocksAgainAfterTheSessionIsCut", func(t *testing.T) {
		t.Parallel()
		db := dbtest.NewDB(t)
		h := newHolder(t, db, "")
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- h.Run(ctx) }()
		defer func() { cancel(); <-done }()
		old := h.PID()
		_, err := db.Pool.Exec(context.Background(), `SELECT pg_terminate_backend($1)`, old)
		require.NoError(t, err)
		testwait.Until(t, 10*time.Second, func() bool { p := h.PID(); return p != 0 && p != old }, "a new session holds the lock")
		require.False(t, lockFree(t, db, h.ID()))
	})

	t.Run("RefusesAnIDHeldElsewhere", func(t *testing.T) {
		t.Parallel()
		db := dbtest.NewDB(t)
		h := newHolder(t, db, "")
		other, err := liveness.NewHolder(&liveness.HolderConfig{ConnString: db.URL, ID: h.ID(), Logger: quiet})
		require.NoError(t, err)
		require.ErrorIs(t, other.Acquire(context.Background()), liveness.ErrTaken)
	})
}

// holdArgs is a job that, on a blocking worker, runs until its client stops.
type holdArgs struct{}

func (holdArgs) Kind() string { return "liveness_test.hold" }

type holdWorker struct {
	river.WorkerDefaults[holdArgs]
	block   bool
	started chan string // the client ID of every run
}

func (w *holdWorker) Work(ctx context.Context, job *river.Job[holdArgs]) error {
	w.started <- job.AttemptedBy[len(job.AttemptedBy)-1]
	if w.block {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

// process is a River client with one worker slot, as a worker process runs
// it: ID from its holder. RescueStuckJobsAfter is ten minutes, so River's
// own rescuer cannot explain a job that runs again within the test.
type process struct {
	holder *liveness.Holder
	client *river.Client[pgx.Tx]
	worker *holdWorker
}

func startProcess(t *testing.T, db *dbtest.DB, id string, block bool) *process {
	t.Helper()
	p := &process{worker: &holdWorker{block: block, started: make(chan string, 10)}}
	if id != "-" {
		p.holder = newHolder(t, db, id)
		id = p.holder.ID()
	} else {
		id = "" // River's default ID: takes no part
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, p.worker)
	rc, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{
		ID:                   id,
		Queues:               map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}},
		Workers:              workers,
		FetchCooldown:        5 * time.Millisecond,
		FetchPollInterval:    20 * time.Millisecond,
		RescueStuckJobsAfter: 10 * time.Minute,
		JobTimeout:           -1,
		Logger:               quiet,
	})
	require.NoError(t, err)
	require.NoError(t, rc.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rc.StopAndCancel(ctx)
	})
	p.client = rc
	return p
}

func (p *process) waitStart(t *testing.T, d time.Duration) string {
	t.Helper()
	select {
	case id := <-p.worker.started:
		return id
	case <-time.After(d):
		t.Fatalf("no job started within %s", d)
		return ""
	}
}

type jobState struct {
	State        string
	AttemptedBy  []string
	Errors       int
	RescueCount  int
	FinalizedSet bool
}

func readJob(t *testing.T, db *dbtest.DB, id int64) jobState {
	t.Helper()
	var s jobState
	err := db.Pool.QueryRow(context.Background(), `
SELECT state::text, attempted_by, coalesce(array_length(errors, 1), 0), coalesce((metadata->>'river:rescue_count')::int, 0), finalized_at IS NOT NULL
FROM river_job WHERE id = $1`, id).Scan(&s.State, &s.AttemptedBy, &s.Errors, &s.RescueCount, &s.FinalizedSet)
	require.NoError(t, err)
	return s
}

func newRescuer(t *testing.T, db *dbtest.DB, h *liveness.Holder) *liveness.Rescuer {
	t.Helper()
	r, err := liveness.NewRescuer(db.Pool, h, &liveness.RescuerConfig{Interval: 50 * time.Millisecond, Settle: time.Millisecond, Logger: quiet})
	require.NoError(t, err)
	return r
}

// TestRescuer is the takeover of River jobs a dead process left running: a
// process (its River client and its liveness session) runs a job that
// never ends; its session ends as a SIGKILL would end it; another process's
// rescuer must make the job run again within seconds, where River's own
// rescuer would wait ten minutes.
func TestRescuer(t *testing.T) {
	t.Parallel()

	t.Run("JobOfADeadProcessRunsAgainWithinSeconds", func(t *testing.T) {
		t.Parallel()
		db := dbtest.NewDB(t)
		dead := startProcess(t, db, "", true)
		res, err := dead.client.Insert(context.Background(), holdArgs{}, nil)
		require.NoError(t, err)
		require.Equal(t, dead.holder.ID(), dead.waitStart(t, 10*time.Second))

		live := startProcess(t, db, "", false)
		r := newRescuer(t, db, live.holder)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		defer func() { cancel(); <-done }()

		// The dead process's client still holds its only slot with the
		// blocked job, as a killed process would; only its session ends.
		killedAt := time.Now()
		require.NoError(t, dead.holder.Close(context.Background()))
		require.Equal(t, live.holder.ID(), live.waitStart(t, 30*time.Second), "the job runs again on the live process")
		took := time.Since(killedAt)
		t.Logf("taken over after %s", took)
		testwait.Until(t, 10*time.Second, func() bool { return readJob(t, db, res.Job.ID).State == "completed" }, "completed")
		s := readJob(t, db, res.Job.ID)
		require.Equal(t, 1, s.RescueCount)
		require.Equal(t, 1, s.Errors, "the rescue is recorded as an attempt error")
	})

	t.Run("LiveProcessKeepsItsJob", func(t *testing.T) {
		t.Parallel()
		db := dbtest.NewDB(t)
		busy := startProcess(t, db, "", true)
		res, err := busy.client.Insert(context.Background(), holdArgs{}, nil)
		require.NoError(t, err)
		busy.waitStart(t, 10*time.Second)
		other, err := liveness.NewHolder(&liveness.HolderConfig{ConnString: db.URL, Logger: quiet})
		require.NoError(t, err)
		require.NoError(t, other.Acquire(context.Background()))
		defer other.Close(context.Background())
		got, err := newRescuer(t, db, other).RescueOnce(context.Background())
		require.NoError(t, err)
		require.Empty(t, got)
		require.Equal(t, "running", readJob(t, db, res.Job.ID).State)
	})

	t.Run("ProcessOutsideLivenessKeepsItsJob", func(t *testing.T) {
		t.Parallel()
		db := dbtest.NewDB(t)
		old := startProcess(t, db, "-", true) // River's default ID, no lock: an older binary
		res, err := old.client.Insert(context.Background(), holdArgs{}, nil)
		require.NoError(t, err)
		old.waitStart(t, 10*time.Second)
		h := newHolder(t, db, "")
		got, err := newRescuer(t, db, h).RescueOnce(context.Background())
		require.NoError(t, err)
		require.Empty(t, got)
		require.Equal(t, "running", readJob(t, db, res.Job.ID).State)
	})

	t.Run("YoungJudgeWaits", func(t *testing.T) {
		t.Parallel()
		db := dbtest.NewDB(t)
		dead := startProcess(t, db, "", true)
		res, err := dead.client.Insert(context.Background(), holdArgs{}, nil)
		require.NoError(t, err)
		dead.waitStart(t, 10*time.Second)
		require.NoError(t, dead.holder.Close(context.Background()))
		h := newHolder(t, db, "")
		// A session younger than Settle may mean the server just restarted
		// and live processes have not locked again yet: no judgement.
		young, err := liveness.NewRescuer(db.Pool, h, &liveness.RescuerConfig{Settle: time.Hour, Logger: quiet})
		require.NoError(t, err)
		var got []liveness.Rescued
		testwait.Until(t, 10*time.Second, func() bool {
			// The young judge asks first each time: once the dead session
			// is gone, it must still not rescue, and the settled one must.
			g, err := young.RescueOnce(context.Background())
			require.NoError(t, err)
			require.Empty(t, g, "a young judge rescued")
			got, err = newRescuer(t, db, h).RescueOnce(context.Background()) // settled: 1ms
			require.NoError(t, err)
			return len(got) > 0
		}, "rescued by a settled judge")
		require.NoError(t, err)
		require.Equal(t, res.Job.ID, got[0].ID)
	})

	t.Run("YoungJudgeOfAnOldServerJudges", func(t *testing.T) {
		t.Parallel()
		const settle = 3 * time.Second
		db := dbtest.NewDB(t)
		ctx := context.Background()
		cc, err := pgx.ParseConfig(db.URL)
		require.NoError(t, err)
		cc.RuntimeParams["application_name"] = "bothy-api-1" // another process of bothy's, running all along
		witness, err := pgx.ConnectConfig(ctx, cc)
		require.NoError(t, err)
		t.Cleanup(func() { _ = witness.Close(context.WithoutCancel(ctx)) })
		started := time.Now()
		dead := startProcess(t, db, "", true)
		res, err := dead.client.Insert(ctx, holdArgs{}, nil)
		require.NoError(t, err)
		dead.waitStart(t, 10*time.Second)
		require.NoError(t, dead.holder.Close(ctx))
		testwait.Until(t, 10*time.Second, func() bool { return time.Since(started) > settle }, "the witness is older than the settle interval")
		// A judge whose process has just started: its pool's sessions are
		// new, younger than the settle interval.
		pool, err := pgxpool.New(ctx, db.URL)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		judge, err := liveness.NewRescuer(pool, newHolder(t, db, ""), &liveness.RescuerConfig{Settle: settle, Logger: quiet})
		require.NoError(t, err)
		var got []liveness.Rescued
		// Well within the settle interval, so the judge's own sessions
		// stay young throughout.
		testwait.Until(t, settle/2, func() bool {
			got, err = judge.RescueOnce(ctx)
			require.NoError(t, err)
			return len(got) > 0
		}, "rescued by the young judge")
		require.Equal(t, res.Job.ID, got[0].ID)
	})

	t.Run("LastAttemptIsDiscarded", func(t *testing.T) {
		t.Parallel()
		db := dbtest.NewDB(t)
		dead := startProcess(t, db, "", true)
		res, err := dead.client.Insert(context.Background(), holdArgs{}, &river.InsertOpts{MaxAttempts: 1})
		require.NoError(t, err)
		dead.waitStart(t, 10*time.Second)
		require.NoError(t, dead.holder.Close(context.Background()))
		h := newHolder(t, db, "")
		var got []liveness.Rescued
		testwait.Until(t, 10*time.Second, func() bool {
			got, err = newRescuer(t, db, h).RescueOnce(context.Background())
			require.NoError(t, err)
			return len(got) > 0
		}, "rescued")
		require.Equal(t, "discarded", got[0].State)
		s := readJob(t, db, res.Job.ID)
		require.Equal(t, "discarded", s.State)
		require.True(t, s.FinalizedSet)
	})
}

func TestNewHolder_RefusesAnIDOutsideLiveness(t *testing.T) {
	t.Parallel()
	_, err := liveness.NewHolder(&liveness.HolderConfig{ConnString: "postgres://x", ID: "worker-1"})
	require.Error(t, err)
	require.False(t, errors.Is(err, liveness.ErrTaken))
	require.Equal(t, "", liveness.OwnerOf([]string{"bothy-live-a", "worker-1"}))
	require.Equal(t, "bothy-live-a", liveness.OwnerOf([]string{"worker-1", "bothy-live-a"}))
}

func TestRescuer_Metrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	r, err := liveness.NewRescuer(nil, nil, &liveness.RescuerConfig{Registerer: reg})
	require.NoError(t, err)
	require.NotNil(t, r)
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems)
}

// TestHolders: a holder's session is listed, with its application name,
// while it holds its lock, and no longer once it ended; holders in other
// databases of the same server are not.
func TestHolders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, other := dbtest.NewDB(t), dbtest.NewDB(t)
	newHolder(t, other, "")
	none, err := liveness.Holders(ctx, db.Pool)
	require.NoError(t, err)
	require.Empty(t, none, "a holder of another database")

	h := newHolder(t, db, "")
	got, err := liveness.Holders(ctx, db.Pool)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.EqualValues(t, h.PID(), got[0].PID)
	require.Equal(t, "bothy-alive", got[0].ApplicationName)
	require.NotNil(t, got[0].BackendStart)
	require.Contains(t, got[0].String(), "bothy-alive")

	require.NoError(t, h.Close(ctx))
	testwait.Until(t, 10*time.Second, func() bool {
		got, err := liveness.Holders(ctx, db.Pool)
		require.NoError(t, err)
		return len(got) == 0
	}, "no holder once the session ended")
}

// TestHolder_LocksPastAHostThatStoppedAnswering: on a failover formation's
// URL whose first host stopped answering without refusing anything (a
// lost primary's machine), the holder gives up on that host after
// dbconn.ConnectTimeout and takes its lock on the next, within its own
// attempt's 10 s.
func TestHolder_LocksPastAHostThatStoppedAnswering(t *testing.T) {
	t.Parallel()
	db := dbtest.NewDB(t)
	lost := dbtest.NewFrozenProxy(t, dbtest.HostPort(t, db.URL))
	lost.Freeze()
	h, err := liveness.NewHolder(&liveness.HolderConfig{ConnString: dbtest.WithHosts(t, db.URL, lost.Addr()+","+dbtest.HostPort(t, db.URL)),
		Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, h.Acquire(context.Background()))
	t.Cleanup(func() { _ = h.Close(context.Background()) })
	require.False(t, lockFree(t, db, h.ID()), "the lock is held on the answering host")
}

// TestHolder_LocksAgainWhenItsServerStopsAnswering: after a failover the
// old primary may stop answering without ending anything (its machine
// lost, or frozen), while the lock lives on the new one no longer. The
// holder pings its session and, when the ping goes unanswered, locks
// again on the next host of the URL. Here the old session goes through a
// proxy that freezes, and its backend is ended on the server, as the new
// primary never had it.
func TestHolder_LocksAgainWhenItsServerStopsAnswering(t *testing.T) {
	t.Parallel()
	db := dbtest.NewDB(t)
	old := dbtest.NewFrozenProxy(t, dbtest.HostPort(t, db.URL))
	h, err := liveness.NewHolder(&liveness.HolderConfig{ConnString: dbtest.WithHosts(t, db.URL, old.Addr()+","+dbtest.HostPort(t, db.URL)),
		Logger: quiet, MinBackoff: 10 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, h.Acquire(context.Background()))
	first := h.PID()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		old.Close()
		_ = h.Close(context.Background())
	})

	old.Freeze()
	_, err = db.Pool.Exec(context.Background(), `SELECT pg_terminate_backend($1)`, first)
	require.NoError(t, err)
	testwait.Until(t, 30*time.Second, func() bool { p := h.PID(); return p != 0 && p != first },
		"the holder still waits on the session whose server stopped answering")
	require.False(t, lockFree(t, db, h.ID()), "the lock is held again")
}
