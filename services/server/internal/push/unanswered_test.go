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

// TestRecordSends_Statuses: the send log's statement keeps a final record
// and replaces only a no-answer one (status 0, then 1 or the answer), and
// writes a message answered twice in one batch once, preferring its 2xx.
func TestRecordSends_Statuses(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.member(t, "bob", "s1", authz.RightRead)
	reg, _ := b.device(t, "bob", "bob-phone")
	ctx := context.Background()
	record := func(seq int64, statuses ...int16) {
		t.Helper()
		n := len(statuses)
		regs, seqs, events := make([][16]byte, n), make([]int64, n), make([][16]byte, n)
		for i := range n {
			regs[i], seqs[i], events[i] = reg.ID, seq, uuid.New()
		}
		_, err := b.db.Pool.Exec(ctx, push.RecordSendsSQL, regs, seqs, events, statuses)
		require.NoError(t, err)
	}
	status := func(seq int64) int16 {
		t.Helper()
		var s int16
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT status FROM push_sends WHERE registration_id = $1 AND event_seq = $2`, reg.ID, seq).Scan(&s))
		return s
	}
	record(1, 0)
	record(1, 201)
	require.EqualValues(t, 201, status(1), "the answer of the one more try replaces no answer")
	record(1, 0)
	require.EqualValues(t, 201, status(1), "an answer is final")
	record(2, 0)
	record(2, 1)
	require.EqualValues(t, 1, status(2))
	record(2, 201)
	require.EqualValues(t, 1, status(2), "given up is final")
	record(3, 0, 201, 0)
	require.EqualValues(t, 201, status(3), "one message twice in a batch")
}
