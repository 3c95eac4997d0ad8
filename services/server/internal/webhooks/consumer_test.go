package webhooks_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

func TestConsumerLossDisablesSubscriptions(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	require.NoError(t, authz.Grant(ctx, b.db.Pool, &authz.GrantParams{Space: "s2", Principal: "alice", Right: authz.RightRead}))
	rv := newReceiver(t, nil)
	s1, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
	s2, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url(), Space: "s2"}) // another space: can't know, so disabled too
	manual, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
	require.NoError(t, webhooks.Disable(ctx, b.db.Pool, manual.ID, "paused"))

	evs := b.emit(t, "s1", 5)
	// Retention removes seqs 1..3 before the webhooks consumer read them.
	lostTo := evs[2].Seq
	_, err := b.db.Pool.Exec(ctx, `DELETE FROM event_log WHERE seq <= $1`, lostTo)
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, `UPDATE event_log_retention SET low_seq = $1`, lostTo+1)
	require.NoError(t, err)
	// A subscription created after the lost range could not have missed it.
	later, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})

	res := b.round(t)
	require.Equal(t, sync.SeqRange{From: evs[0].Seq, To: lostTo}, res.Lost)

	for _, sub := range []*webhooks.Subscription{s1, s2} {
		got := b.sub(t, sub.ID)
		require.Equal(t, webhooks.StatusDisabled, got.Status, sub.Space)
		require.Equal(t, webhooks.CauseGap, got.DisabledCause)
		require.Contains(t, got.DisabledDetail, "removed by retention")
	}
	require.Equal(t, webhooks.CauseManual, b.sub(t, manual.ID).DisabledCause, "an already disabled one keeps its cause")
	require.Equal(t, webhooks.StatusActive, b.sub(t, later.ID).Status)
	// The events after the gap go to no disabled subscription.
	var n int
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE subscription_id = $1`, s1.ID).Scan(&n))
	require.Zero(t, n)
}

func TestConsumer_Handle(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	rv := newReceiver(t, nil)
	all, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
	prefix, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url(), EventTypes: []string{"item.*"}})
	exact, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url(), EventTypes: []string{"note.deleted"}})
	evs, err := b.log.Write(ctx, func(ctx context.Context, tx pgx.Tx) ([]sync.NewEvent, error) {
		return []sync.NewEvent{
			{Space: "s1", Type: "item.created", Actor: "bob"},
			{Space: "s1", Type: "note.deleted", Actor: "bob"},
			{Space: "s2", Type: "item.created", Actor: "bob"},
			{Space: "s1", Type: "itemx.created", Actor: "bob"},
		}, nil
	})
	require.NoError(t, err)

	count := func(tx pgx.Tx, id any) int {
		var n int
		require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE subscription_id = $1`, id).Scan(&n))
		return n
	}
	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	jobs, err := b.consumer.Handle(ctx, tx, evs)
	require.NoError(t, err)
	require.Len(t, jobs, 3, "one job per subscription with new deliveries")
	for _, j := range jobs {
		a := j.Args.(webhooks.DeliverArgs)
		require.Equal(t, webhooks.KindDeliver, a.Kind())
		if a.SubscriptionID == exact.ID {
			require.Equal(t, evs[1].Seq, a.Seq)
		} else {
			require.Equal(t, evs[0].Seq, a.Seq, "the lowest new seq")
		}
	}
	require.Equal(t, 3, count(tx, all.ID))
	require.Equal(t, 1, count(tx, prefix.ID), "item.* matches item.created, not itemx.created")
	require.Equal(t, 1, count(tx, exact.ID))

	jobs, err = b.consumer.Handle(ctx, tx, evs)
	require.NoError(t, err)
	require.Empty(t, jobs, "a replayed batch creates nothing: unique (subscription_id, event_seq)")
}

// TestConsumer_HandleFollowsFilterRows checks the lookup table behind the
// round's matching (webhook_subscription_filters) against what every way of writing a
// subscription leaves in it.
func TestConsumer_HandleFollowsFilterRows(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	rv := newReceiver(t, nil)
	both, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url(), EventTypes: []string{"item.*", "item.created", "item.*"}})
	deep, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url(), EventTypes: []string{"item.sub.*"}})
	changed, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url(), EventTypes: []string{"note.deleted"}})
	widened, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url(), EventTypes: []string{"note.deleted"}})
	off, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
	require.NoError(t, webhooks.Disable(ctx, b.db.Pool, off.ID, ""))
	types := []string{"item.created"}
	_, err := webhooks.Update(ctx, b.db.Pool, changed.ID, &webhooks.UpdateParams{EventTypes: &types})
	require.NoError(t, err)
	none := []string{}
	_, err = webhooks.Update(ctx, b.db.Pool, widened.ID, &webhooks.UpdateParams{EventTypes: &none})
	require.NoError(t, err)
	url := rv.url() + "?moved"
	_, err = webhooks.Update(ctx, b.db.Pool, deep.ID, &webhooks.UpdateParams{URL: &url, AllowPrivateTargets: true})
	require.NoError(t, err, "an update of the URL alone keeps the filter")
	var direct string
	require.NoError(t, b.db.Pool.QueryRow(ctx, `
INSERT INTO webhook_subscriptions (id, owner, space, url, secret, event_types, resume_after_seq, last_delivered_seq)
SELECT gen_random_uuid(), 'alice', 's1', $1, 'whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=', '{note.*}', last_seq, last_seq
FROM event_seq RETURNING id`, rv.url()).Scan(&direct))

	evs, err := b.log.Write(ctx, func(ctx context.Context, tx pgx.Tx) ([]sync.NewEvent, error) {
		return []sync.NewEvent{
			{Space: "s1", Type: "item.created", Actor: "bob"},
			{Space: "s1", Type: "item.sub.moved", Actor: "bob"},
			{Space: "s1", Type: "note.deleted", Actor: "bob"},
			{Space: "s2", Type: "item.created", Actor: "bob"},
		}, nil
	})
	require.NoError(t, err)
	b.round(t)

	seqs := func(id any) []int64 {
		rows, err := b.db.Pool.Query(ctx, `SELECT event_seq FROM webhook_deliveries WHERE subscription_id = $1 ORDER BY event_seq`, id)
		require.NoError(t, err)
		out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		require.NoError(t, err)
		return out
	}
	require.Equal(t, []int64{evs[0].Seq, evs[1].Seq}, seqs(both.ID), "one delivery per event, however many filters match it")
	require.Equal(t, []int64{evs[1].Seq}, seqs(deep.ID))
	require.Equal(t, []int64{evs[0].Seq}, seqs(changed.ID), "the updated filter, not the old one")
	require.Equal(t, []int64{evs[0].Seq, evs[1].Seq, evs[2].Seq}, seqs(widened.ID), "an empty filter delivers every type")
	require.Equal(t, []int64{evs[2].Seq}, seqs(direct), "rows written in SQL are matched too")
	require.Empty(t, seqs(off.ID), "disabled")
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	rv := newReceiver(t, nil)
	s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
	b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
	require.NoError(t, webhooks.Disable(ctx, b.db.Pool, s.ID, ""))

	problems, err := testutil.GatherAndLint(b.reg)
	require.NoError(t, err)
	require.Empty(t, problems)
	err = testutil.GatherAndCompare(b.reg, strings.NewReader(`
# HELP bothy_webhook_subscriptions Webhook subscriptions by status: active or disabled_<cause>.
# TYPE bothy_webhook_subscriptions gauge
bothy_webhook_subscriptions{status="active"} 1
bothy_webhook_subscriptions{status="disabled_failing"} 0
bothy_webhook_subscriptions{status="disabled_gap"} 0
bothy_webhook_subscriptions{status="disabled_gone"} 0
bothy_webhook_subscriptions{status="disabled_manual"} 1
# HELP bothy_webhook_oldest_pending_delivery_age_seconds Age of the oldest pending delivery of an active subscription (0 if none).
# TYPE bothy_webhook_oldest_pending_delivery_age_seconds gauge
bothy_webhook_oldest_pending_delivery_age_seconds 0
`), "bothy_webhook_subscriptions", "bothy_webhook_oldest_pending_delivery_age_seconds")
	require.NoError(t, err)

	// A pending delivery (River not started) shows its age.
	b.emit(t, "s1", 1)
	b.round(t)
	_, err = b.db.Pool.Exec(ctx, `UPDATE webhook_deliveries SET created_at = now() - interval '90 seconds'`)
	require.NoError(t, err)
	mfs, err := b.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "bothy_webhook_oldest_pending_delivery_age_seconds" {
			require.InDelta(t, 90, mf.GetMetric()[0].GetGauge().GetValue(), 5)
		}
	}
}
