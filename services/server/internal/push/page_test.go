package push_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/push"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/testwait"
)

// handlePrefix runs the consumer's HandlePrefix on events in a
// transaction that is rolled back.
func (b *bundle) handlePrefix(t *testing.T, c *push.Consumer, events []sync.Event, budget sync.WorkBudget) ([]sync.Job, int) {
	t.Helper()
	ctx := context.Background()
	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	jobs, n, err := c.HandlePrefix(ctx, tx, events, budget)
	require.NoError(t, err)
	return jobs, n
}

func TestConsumer_HandlePrefix(t *testing.T) {
	t.Parallel()

	t.Run("StopsBeforeTheEventPastItsReceivers", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		b.member(t, "alice", "s1", authz.RightWrite)
		for _, p := range []string{"bob", "carol", "dave"} {
			b.member(t, p, "s1", authz.RightRead)
			b.device(t, p, p+"-phone")
		}
		evs := []sync.Event{b.write(t, "s1", "alice"), b.write(t, "s1", "alice"), b.write(t, "s1", "alice")}
		jobs, n := b.handlePrefix(t, b.consumer, evs, sync.WorkBudget{Jobs: 100, Receivers: 7})
		require.Equal(t, 2, n, "3 + 3 receivers fit 7, a third event would not")
		require.Len(t, jobs, 1)
		require.Len(t, jobs[0].Args.(push.DeliverArgs).Events, 2)

		_, n = b.handlePrefix(t, b.consumer, evs, sync.WorkBudget{Jobs: 100, Receivers: 1})
		require.Equal(t, 1, n, "the first event is covered whatever it costs")
		_, n = b.handlePrefix(t, push.NewConsumer(&push.ConsumerConfig{BatchSize: 1}), evs, sync.WorkBudget{Jobs: 4, Receivers: 100})
		require.Equal(t, 2, n, "three jobs for the first event, six after the second: no job to spare for a third")
	})

	t.Run("ALargeSpaceCostsTheRoundOnePageJob", func(t *testing.T) {
		t.Parallel()
		b := setup(t, &setupOpts{consumer: &push.ConsumerConfig{PageSize: 2, PageEvents: 2}})
		b.member(t, "alice", "big", authz.RightWrite)
		b.member(t, "alice", "small", authz.RightWrite)
		for _, p := range []string{"bob", "carol", "dave"} {
			b.member(t, p, "big", authz.RightRead)
			b.device(t, p, p+"-phone")
		}
		b.member(t, "bob", "small", authz.RightRead)
		evs := []sync.Event{b.write(t, "big", "alice"), b.write(t, "small", "alice"), b.write(t, "big", "alice"), b.write(t, "big", "alice")}
		jobs, n := b.handlePrefix(t, b.consumer, evs, sync.WorkBudget{Jobs: 100, Receivers: 100})
		require.Equal(t, 4, n)
		var pages [][]int64
		for _, j := range jobs[:2] {
			p, ok := j.Args.(push.PageArgs)
			require.True(t, ok, "page jobs first")
			require.Equal(t, "big", p.Space)
			var seqs []int64
			for _, e := range p.Events {
				seqs = append(seqs, e.Seq)
			}
			pages = append(pages, seqs)
		}
		require.Equal(t, [][]int64{{evs[0].Seq, evs[2].Seq}, {evs[3].Seq}}, pages, "at most PageEvents events a page job")
		require.Len(t, jobs, 3, "bob's message about the small space")
		require.Equal(t, evs[1].Seq, jobs[2].Args.(push.DeliverArgs).Events[0].Seq)
	})
}

// TestPushPage_SendsEachDeviceOnce: a space with more devices than a page
// goes through page jobs, a page at a time by key; every member's device
// gets each event exactly once, decrypted, and the actor, a member who
// muted the space and a member without a right get nothing.
func TestPushPage_SendsEachDeviceOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, &setupOpts{consumer: &push.ConsumerConfig{PageSize: 2}})
	b.member(t, "alice", "s1", authz.RightWrite)
	b.device(t, "alice", "alice-phone")
	receivers := []string{"bob-phone", "bob-laptop", "carol-phone", "dave-phone", "erin-phone"}
	for _, p := range []string{"bob", "carol", "dave", "erin", "frank"} {
		b.member(t, p, "s1", authz.RightRead)
	}
	for _, d := range [][2]string{{"bob", "bob-phone"}, {"bob", "bob-laptop"}, {"carol", "carol-phone"}, {"dave", "dave-phone"},
		{"erin", "erin-phone"}, {"frank", "frank-phone"}} {
		b.device(t, d[0], d[1])
	}
	require.NoError(t, b.registry.SetPreference(ctx, b.db.Pool, &push.SetPreferenceParams{Principal: "frank", Space: "s1", Notify: false}))
	require.NoError(t, authz.CreatePrincipal(ctx, b.db.Pool, "gina", authz.KindUser))
	b.device(t, "gina", "gina-phone")
	b.start(t)

	e1, e2 := b.write(t, "s1", "alice"), b.write(t, "s1", "alice")
	res := b.round(t)
	require.Equal(t, 1, res.Jobs, "one page job for both events")
	testwait.Until(t, 10*time.Second, func() bool {
		var open int
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state <> 'completed'`).Scan(&open))
		return open == 0 && len(b.rcv.Messages()) >= 2*len(receivers)
	}, "every job done, every device got both events")
	for _, d := range receivers {
		require.Equal(t, 2, b.rcv.Requests(d), d)
	}
	for _, d := range []string{"alice-phone", "frank-phone", "gina-phone"} {
		require.Zero(t, b.rcv.Requests(d), d)
	}
	seqs := map[int64]int{}
	for _, m := range b.rcv.Messages() {
		var p push.Payload
		require.NoError(t, json.Unmarshal(m.Payload, &p))
		seqs[p.Seq]++
	}
	require.Equal(t, map[int64]int{e1.Seq: len(receivers), e2.Seq: len(receivers)}, seqs)
	var pages int
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'push.page' AND state = 'completed'`).Scan(&pages))
	// Pages of at most two members and two devices, by (member, device):
	// alice+bob (2 of bob's, 1 left), bob+carol, carol+dave (1 device:
	// both members done), dave+erin, erin+frank (frank muted), frank.
	require.Equal(t, 6, pages)
}
