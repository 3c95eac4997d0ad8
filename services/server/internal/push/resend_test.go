package push_test

import (
	"context"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/push"
	"github.com/bothy/bothy/services/server/internal/push/pushtest"
	"github.com/bothy/bothy/services/server/internal/testwait"
)

// runAgain makes a finished job available again, as River's rescuer (or
// the liveness rescuer) does with the job of a process that died after
// sending and before River recorded the completion.
func (b *bundle) runAgain(t *testing.T, id int64) {
	t.Helper()
	_, err := b.db.Pool.Exec(context.Background(),
		`UPDATE river_job SET state = 'available', finalized_at = NULL, scheduled_at = now() WHERE id = $1`, id)
	require.NoError(t, err)
}

// waitRecorded waits until push_sends holds n records: a job that
// completed does not wait for its sends' records, which the worker's send
// log writes within milliseconds.
func (b *bundle) waitRecorded(t *testing.T, n int) {
	t.Helper()
	testwait.Until(t, 10*time.Second, func() bool {
		var got int
		require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM push_sends`).Scan(&got))
		return got == n
	}, "%d sends recorded", n)
}

// TestDeliver_RunAgainAfterASendSendsNothing: a job that sent its message
// and runs again (after the send was recorded) finds the record and makes
// no second request.
func TestDeliver_RunAgainAfterASendSendsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.member(t, "alice", "s1", authz.RightWrite)
	b.member(t, "bob", "s1", authz.RightRead)
	b.device(t, "bob", "bob-phone")
	b.start(t)

	ev := b.write(t, "s1", "alice")
	require.Equal(t, 1, b.round(t).Jobs)
	jobs := b.waitJobs(t, 1, "completed")
	require.Equal(t, 1, b.rcv.Requests("bob-phone"))
	msgs := b.rcv.Messages()
	require.Len(t, msgs, 1)
	topic := msgs[0].Header.Get("Topic")
	require.Equal(t, push.Topic(ev.ID), topic)
	require.Regexp(t, regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`), topic, "RFC 8030 5.4: at most 32 URL-safe base64 characters")

	b.waitRecorded(t, 1)
	b.runAgain(t, jobs[0].ID)
	testwait.Until(t, 10*time.Second, func() bool {
		j := b.jobs(t)
		return j[0].State == "completed" && j[0].Attempt == 2
	}, "the job ran a second time")
	require.Equal(t, 1, b.rcv.Requests("bob-phone"), "the second run sent nothing")
}

// TestDeliver_RetryAfterOnTheLastAttemptLeavesNothingBehind: River discards
// a job whose last attempt failed without asking NextRetry, so a
// Retry-After of that attempt must not be kept for it.
func TestDeliver_RetryAfterOnTheLastAttemptLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{respond: func(string) pushtest.Response {
		return pushtest.Response{Status: http.StatusTooManyRequests, Header: http.Header{"Retry-After": {"120"}}}
	}})
	b.member(t, "alice", "s1", authz.RightWrite)
	b.member(t, "bob", "s1", authz.RightRead)
	b.device(t, "bob", "bob-phone")
	b.write(t, "s1", "alice")
	require.Equal(t, 1, b.round(t).Jobs)
	_, err := b.db.Pool.Exec(context.Background(), `UPDATE river_job SET max_attempts = 1 WHERE kind = 'push.deliver'`)
	require.NoError(t, err)
	b.start(t)

	b.waitJobs(t, 1, "discarded")
	require.Equal(t, 1, b.rcv.Requests("bob-phone"))
	require.Zero(t, b.worker.PendingRetryAfters(), "nothing kept for a job that ended")
}

// TestDeliver_PrunesOldSendRecords: a worker that sends deletes the records
// no job can need any more (older than push.ttl plus an hour) and keeps the
// others.
func TestDeliver_PrunesOldSendRecords(t *testing.T) {
	t.Parallel()
	b := setup(t, nil) // push.ttl 1h
	b.member(t, "alice", "s1", authz.RightWrite)
	b.member(t, "bob", "s1", authz.RightRead)
	reg, _ := b.device(t, "bob", "bob-phone")
	ctx := context.Background()
	_, err := b.db.Pool.Exec(ctx, `
INSERT INTO push_sends (registration_id, event_seq, event_id, status, sent_at)
VALUES ($1, 1000001, gen_random_uuid(), 201, now() - interval '2 hours 1 minute'),
       ($1, 1000002, gen_random_uuid(), 201, now() - interval '1 hour 59 minutes')`, reg.ID)
	require.NoError(t, err)
	b.start(t)
	b.write(t, "s1", "alice")
	b.round(t)
	b.waitJobs(t, 1, "completed")
	b.waitRecorded(t, 2)

	var seqs []int64
	rows, err := b.db.Pool.Query(ctx, `SELECT event_seq FROM push_sends ORDER BY event_seq`)
	require.NoError(t, err)
	seqs, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, seqs, 2, "the new send and the record younger than ttl + 1h")
	require.Equal(t, int64(1000002), seqs[1])
}
