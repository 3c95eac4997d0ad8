package push_test

import (
	"context"
	"log/slog"
	"net/http"
	gosync "sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/module"
	"github.com/bothy/bothy/services/server/internal/push"
	"github.com/bothy/bothy/services/server/internal/push/pushtest"
	"github.com/bothy/bothy/services/server/internal/testwait"
)

// TestDeliver_RetryWaitsForItsRecords: a job that will be retried does not
// end before the records of its sent messages are written, so its retry
// finds them however slow the insert is. The insert is held back by a row
// lock on the registration its foreign key checks; while it waits the job
// must stay running, and afterwards the retry sends only the failed device.
func TestDeliver_RetryWaitsForItsRecords(t *testing.T) {
	t.Parallel()
	var mu gosync.Mutex
	failedOnce := false
	b := setup(t, &setupOpts{
		respond: func(device string) pushtest.Response {
			mu.Lock()
			defer mu.Unlock()
			if device == "carol-phone" && !failedOnce {
				failedOnce = true
				return pushtest.Response{Status: http.StatusServiceUnavailable}
			}
			return pushtest.Response{}
		},
		// The held insert must outlast the check below, not time out.
		deliverCfg: func(c *push.DeliverConfig) { c.QueryTimeout = 20 * time.Second },
	})
	b.member(t, "alice", "s1", authz.RightWrite)
	b.member(t, "bob", "s1", authz.RightRead)
	b.member(t, "carol", "s1", authz.RightRead)
	bob, _ := b.device(t, "bob", "bob-phone")
	b.device(t, "carol", "carol-phone")
	b.start(t)

	ctx := context.Background()
	lock, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	release := gosync.OnceFunc(func() { _ = lock.Rollback(ctx) })
	t.Cleanup(release)
	_, err = lock.Exec(ctx, `SELECT 1 FROM push_registrations WHERE id = $1 FOR UPDATE`, bob.ID)
	require.NoError(t, err)

	b.write(t, "s1", "alice")
	require.Equal(t, 1, b.round(t).Jobs)
	testwait.Until(t, 10*time.Second, func() bool {
		var waiting bool
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO push_sends%')`).Scan(&waiting))
		return waiting && b.rcv.Requests("carol-phone") == 1
	}, "both sent, bob's record waits for the lock")

	// A job that ended now would be retried before bob's record exists.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		jobs := b.jobs(t)
		require.Len(t, jobs, 1)
		require.Equal(t, "running", jobs[0].State, "the job ended before its records were written")
		require.Equal(t, 1, b.rcv.Requests("bob-phone"))
		time.Sleep(20 * time.Millisecond)
	}
	release()

	jobs := b.waitJobs(t, 1, "completed")
	require.Equal(t, 2, jobs[0].Attempt, "one retry for carol's device")
	require.Equal(t, 1, b.rcv.Requests("bob-phone"), "the retry found bob's record")
	require.Equal(t, 2, b.rcv.Requests("carol-phone"))
}

// TestDeliver_RecordWaitsForNoOtherWork: the window in which a crash
// loses the record of an answer (and a rerun sends the message again) is
// the send log's gathering and one insert. A record does not queue for a
// connection behind the jobs' queries, which may hold every connection of
// a busy worker's pool, nor behind an earlier insert that is slow.
func TestDeliver_RecordWaitsForNoOtherWork(t *testing.T) {
	t.Parallel()

	t.Run("NotForTheJobsPool", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		releaseAnswers := gosync.OnceFunc(func() { close(release) })
		b := setup(t, &setupOpts{
			respond: func(string) pushtest.Response { <-release; return pushtest.Response{} },
			records: push.RecordConns,
		})
		t.Cleanup(releaseAnswers)
		b.member(t, "alice", "s1", authz.RightWrite)
		b.member(t, "bob", "s1", authz.RightRead)
		b.member(t, "carol", "s1", authz.RightRead)
		b.device(t, "bob", "bob-phone")
		b.device(t, "carol", "carol-phone")
		b.start(t)
		b.write(t, "s1", "alice")
		require.Equal(t, 1, b.round(t).Jobs)
		testwait.Until(t, 10*time.Second, func() bool {
			return b.rcv.Requests("bob-phone") == 1 && b.rcv.Requests("carol-phone") == 1
		}, "both requests on their way")

		// Every connection of the jobs' pool is taken, as by a busy worker's
		// other work, before the answers arrive.
		ctx := context.Background()
		var held []*pgxpool.Conn
		t.Cleanup(func() {
			for _, c := range held {
				c.Release()
			}
		})
		for range b.db.Pool.Stat().MaxConns() {
			c, err := b.db.Pool.Acquire(ctx)
			require.NoError(t, err)
			held = append(held, c)
		}
		releaseAnswers()
		check := ownPool(t, b.db.URL, 1)
		testwait.Until(t, 10*time.Second, func() bool {
			var n int
			require.NoError(t, check.QueryRow(ctx, `SELECT count(*) FROM push_sends WHERE status = 201`).Scan(&n))
			return n == 2
		}, "the answers were not recorded while the jobs' pool was busy")
		for _, c := range held {
			c.Release()
		}
		held = nil
		b.waitJobs(t, 1, "completed")
		require.Len(t, b.rcv.Messages(), 2)
	})

	t.Run("NotForAnEarlierInsert", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		releaseCarol := gosync.OnceFunc(func() { close(release) })
		b := setup(t, &setupOpts{
			respond: func(device string) pushtest.Response {
				if device == "carol-phone" {
					<-release
				}
				return pushtest.Response{}
			},
			// The held insert must outlast the check below, not time out.
			deliverCfg: func(c *push.DeliverConfig) { c.QueryTimeout = 20 * time.Second },
		})
		t.Cleanup(releaseCarol)
		b.member(t, "alice", "s1", authz.RightWrite)
		b.member(t, "bob", "s1", authz.RightRead)
		b.member(t, "carol", "s1", authz.RightRead)
		bob, _ := b.device(t, "bob", "bob-phone")
		carol, _ := b.device(t, "carol", "carol-phone")
		b.start(t)

		// Bob's record waits on a lock of his registration, which its
		// foreign key check needs, until the end of the test.
		ctx := context.Background()
		lock, err := b.db.Pool.Begin(ctx)
		require.NoError(t, err)
		unlock := gosync.OnceFunc(func() { _ = lock.Rollback(ctx) })
		t.Cleanup(unlock)
		_, err = lock.Exec(ctx, `SELECT 1 FROM push_registrations WHERE id = $1 FOR UPDATE`, bob.ID)
		require.NoError(t, err)

		b.write(t, "s1", "alice")
		require.Equal(t, 1, b.round(t).Jobs)
		testwait.Until(t, 10*time.Second, func() bool {
			var waiting bool
			require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO push_sends%')`).Scan(&waiting))
			return waiting
		}, "bob's record waits for the lock")
		releaseCarol()
		testwait.Until(t, 10*time.Second, func() bool {
			return len(b.sendStatuses(t, carol.ID)) == 1
		}, "carol's record waited for bob's insert")
		require.Empty(t, b.sendStatuses(t, bob.ID))
		unlock()
		b.waitJobs(t, 1, "completed")
		require.Equal(t, []int16{201}, b.sendStatuses(t, bob.ID))
	})
}

// ownPool opens a pool of n connections on the test's database, closed
// when the test ends.
func ownPool(t *testing.T, url string, n int32) *pgxpool.Pool {
	t.Helper()
	pc, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	pc.MaxConns = n
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// TestModule_SendLogHasConnectionsOfItsOwn: the push module gives its send
// log a pool of its own, RecordConns connections with the process pool's
// settings, which Close closes.
func TestModule_SendLogHasConnectionsOfItsOwn(t *testing.T) {
	t.Parallel()
	db := dbtest.NewDB(t)
	vapid, err := push.GenerateVAPIDKeys()
	require.NoError(t, err)
	factory := push.NewModule(&push.ModuleConfig{Deliver: push.DeliverConfig{
		VAPIDPublicKey: vapid.Public, VAPIDPrivateKey: vapid.Private, Urgency: "normal", OriginConcurrency: 4}})
	m, err := factory(&module.Deps{Pool: db.Pool, Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry()})
	require.NoError(t, err)
	pm := m.(*push.Module)
	records, used := pm.SendLogPool()
	require.NotNil(t, records)
	require.True(t, used, "the worker writes its records elsewhere")
	require.NotSame(t, db.Pool, records)
	require.EqualValues(t, push.RecordConns, records.Config().MaxConns)
	require.Equal(t, db.Pool.Config().ConnString(), records.Config().ConnString())
	var one int
	require.NoError(t, records.QueryRow(context.Background(), `SELECT 1`).Scan(&one))
	pm.Close()
	require.Error(t, records.Ping(context.Background()), "Close closes the pool")
}
