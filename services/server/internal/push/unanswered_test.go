package push_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/push"
)

// TestDeliver_UnansweredRequestIsTriedOnceMore: a request that went out
// and got no answer in push's request timeout may have been delivered.
// The message is tried once more, never again: a push service that
// accepts every message and answers too late gets two copies, not one
// per attempt of the job. A try that is answered ends it as usual, and a
// request that never went out (nothing listens) is no such try.
func TestDeliver_UnansweredRequestIsTriedOnceMore(t *testing.T) {
	t.Parallel()
	quick := func(c *push.DeliverConfig) { c.Timeout = 300 * time.Millisecond }

	t.Run("SlowServiceGetsTwoCopies", func(t *testing.T) {
		t.Parallel()
		b := setup(t, &setupOpts{deliverCfg: quick, delay: func(string) time.Duration { return time.Minute }})
		b.member(t, "alice", "s1", authz.RightWrite)
		b.member(t, "bob", "s1", authz.RightRead)
		reg, _ := b.device(t, "bob", "bob-phone")
		b.start(t)

		b.write(t, "s1", "alice")
		require.Equal(t, 1, b.round(t).Jobs)
		jobs := b.waitJobs(t, 1, "cancelled")
		require.Equal(t, 2, jobs[0].Attempt)
		require.Contains(t, jobs[0].Errors[1], "no answer")
		require.Len(t, b.rcv.Messages(), 2, "copies the push service accepted")
		require.Equal(t, 2, b.rcv.Requests("bob-phone"))
		require.Equal(t, []int16{1}, b.sendStatuses(t, reg.ID))
	})

	t.Run("AnsweredSecondTryCompletes", func(t *testing.T) {
		t.Parallel()
		var answered atomic.Int32
		b := setup(t, &setupOpts{deliverCfg: quick, delay: func(string) time.Duration {
			if answered.Add(1) == 1 {
				return time.Minute
			}
			return 0
		}})
		b.member(t, "alice", "s1", authz.RightWrite)
		b.member(t, "bob", "s1", authz.RightRead)
		reg, _ := b.device(t, "bob", "bob-phone")
		b.start(t)

		b.write(t, "s1", "alice")
		require.Equal(t, 1, b.round(t).Jobs)
		jobs := b.waitJobs(t, 1, "completed")
		require.Equal(t, 2, jobs[0].Attempt)
		require.Len(t, b.rcv.Messages(), 2)
		require.Equal(t, []int16{201}, b.sendStatuses(t, reg.ID))
	})

	t.Run("RequestThatNeverWentOutLeavesNoRecord", func(t *testing.T) {
		t.Parallel()
		b := setup(t, &setupOpts{deliverCfg: quick})
		b.member(t, "alice", "s1", authz.RightWrite)
		b.member(t, "bob", "s1", authz.RightRead)
		d, _, err := b.rcv.AddDevice("unused")
		require.NoError(t, err)
		var s push.Subscription
		s.Endpoint, s.Keys.P256dh, s.Keys.Auth = "http://"+closedAddr(t)+"/push/bob-phone", d.P256dh(), d.Auth()
		reg, err := b.registry.Register(context.Background(), b.db.Pool, &push.RegisterParams{Principal: "bob", Subscription: s})
		require.NoError(t, err)
		b.start(t)

		b.write(t, "s1", "alice")
		require.Equal(t, 1, b.round(t).Jobs)
		jobs := b.waitJobs(t, 1, "retryable")
		require.NotContains(t, jobs[0].Errors[0], "no answer")
		require.Empty(t, b.sendStatuses(t, reg.ID), "a refused connection is no try: it may be retried as often as the job is")
	})
}

// sendStatuses returns the statuses recorded in push_sends for a
// registration.
func (b *bundle) sendStatuses(t *testing.T, reg uuid.UUID) []int16 {
	t.Helper()
	var out []int16
	require.NoError(t, b.db.Pool.QueryRow(context.Background(),
		`SELECT coalesce(array_agg(status ORDER BY event_seq), '{}') FROM push_sends WHERE registration_id = $1`, reg).Scan(&out))
	return out
}

// closedAddr returns a loopback address where nothing listens (it was
// free a moment ago).
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}
