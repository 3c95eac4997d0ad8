package push_test

import (
	"context"
	"net/http"
	gosync "sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/push"
	"github.com/bothy/bothy/services/server/internal/push/pushtest"
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
	eventually(t, 10*time.Second, func() bool {
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
