package webhooks_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/testwait"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// deliverySeqs are the seqs of subscription id's delivery rows, in order.
func (b *bundle) deliverySeqs(t testing.TB, id uuid.UUID) []int64 {
	t.Helper()
	rows, err := b.db.Pool.Query(context.Background(), `SELECT event_seq FROM webhook_deliveries WHERE subscription_id = $1 ORDER BY event_seq`, id)
	require.NoError(t, err)
	seqs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	if seqs == nil {
		seqs = []int64{}
	}
	return seqs
}

// cursor is the webhooks consumer's last_seq.
func (b *bundle) cursor(t testing.TB) int64 {
	t.Helper()
	var seq int64
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT last_seq FROM event_consumer_cursors WHERE name = $1`,
		webhooks.ConsumerName).Scan(&seq))
	return seq
}

// emitData commits one item.created event in space per data document, in
// one transaction.
func (b *bundle) emitData(t testing.TB, space string, data ...string) []sync.Event {
	t.Helper()
	evs, err := b.log.Write(context.Background(), func(ctx context.Context, tx pgx.Tx) ([]sync.NewEvent, error) {
		out := make([]sync.NewEvent, len(data))
		for i, d := range data {
			out[i] = sync.NewEvent{Space: space, Type: "item.created", Actor: "bob", Data: []byte(d)}
		}
		return out, nil
	})
	require.NoError(t, err)
	return evs
}

// filterErrors counts the consumer's filter failures on a registry of its
// own (the bundle's registry has the deliverer's counter).
func filterErrors() (*webhooks.Consumer, *webhooks.ExpressionErrors) {
	errs := webhooks.NewExpressionErrors(prometheus.NewRegistry())
	return webhooks.NewConsumer(&webhooks.ConsumerConfig{ExpressionErrors: errs, Logger: quiet}), errs
}

// roundWith runs consumer until it has read everything.
func (b *bundle) roundWith(t testing.TB, consumer *webhooks.Consumer) {
	t.Helper()
	for {
		res, err := b.rounds.Run(context.Background(), consumer)
		require.NoError(t, err)
		if !res.Full {
			return
		}
	}
}

func TestFilter_DropsEventsWithoutDeliveryRowsAndTheCursorMovesOn(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	rvEven, rvAll := newReceiver(t, nil), newReceiver(t, nil)
	even, _ := b.subscribe(t, &webhooks.CreateParams{URL: rvEven.url(), Filter: "int(data.i) % 2 == 0"})
	all, _ := b.subscribe(t, &webhooks.CreateParams{URL: rvAll.url()})
	evs := b.emit(t, "s1", 6) // data.i = 0..5

	b.round(t)
	require.Equal(t, []int64{evs[0].Seq, evs[2].Seq, evs[4].Seq}, b.deliverySeqs(t, even.ID), "only the events the filter passes have a row")
	require.Len(t, b.deliverySeqs(t, all.ID), 6, "a subscription without a filter gets every event, in the same round")
	require.Equal(t, evs[5].Seq, b.cursor(t), "the cursor moves past the dropped events as past a type mismatch")

	b.start(t)
	testwait.Until(t, 10*time.Second, func() bool { return rvEven.count() == 3 && rvAll.count() == 6 }, "the receivers get their events")
	require.Equal(t, []int64{evs[0].Seq, evs[2].Seq, evs[4].Seq}, seqsOf(rvEven.requests()))
	testwait.Until(t, 10*time.Second, func() bool { return b.pending(t, even.ID) == 0 }, "nothing stays pending")

	// More events after the dropped ones are delivered: the sender never
	// waits for a seq that has no row.
	more := b.emit(t, "s1", 2)
	b.round(t)
	require.Equal(t, more[1].Seq, b.cursor(t))
	testwait.Until(t, 10*time.Second, func() bool { return rvEven.count() == 4 }, "the next even event arrives")
	require.Equal(t, more[0].Seq, rvEven.requests()[3].Seq)
}

func TestFilter_ErrorsAreCountedAndNeverStickTheRound(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	rv := newReceiver(t, nil)
	consumer, errs := filterErrors()
	partial, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url(), Filter: "data.x == 1"})
	_, err := b.db.Pool.Exec(context.Background(), `UPDATE webhook_subscriptions SET filter = 'data.' WHERE id = $1`, partial.ID)
	require.NoError(t, err) // a row written by hand that does not compile
	missing, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url(), Filter: "data.x == 1"})
	evs := b.emitData(t, "s1", `{"x": 1}`, `{"y": 2}`, `{"x": 2}`, `{"x": 1}`)

	b.roundWith(t, consumer)
	require.Equal(t, evs[3].Seq, b.cursor(t), "the round committed past every event")
	require.Equal(t, []int64{evs[0].Seq, evs[3].Seq}, b.deliverySeqs(t, missing.ID), "an event the filter fails on (no data.x) is not delivered")
	require.Empty(t, b.deliverySeqs(t, partial.ID), "a stored filter that does not compile delivers nothing")
	require.Equal(t, 1.0, testutil.ToFloat64(errs.Counter().WithLabelValues("filter", "error")))
	require.Equal(t, 4.0, testutil.ToFloat64(errs.Counter().WithLabelValues("filter", "invalid")))
}

func TestFilter_HostileExpressionsAreRefusedOrStoppedWhileTheNeighbourFlows(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	require.NoError(t, authz.CreatePrincipal(ctx, b.db.Pool, "mallory", authz.KindUser))
	require.NoError(t, authz.Grant(ctx, b.db.Pool, &authz.GrantParams{Space: "evil", Principal: "mallory", Right: authz.RightRead}))
	rvEvil, rvNeighbour := newReceiver(t, nil), newReceiver(t, nil)

	hundred := "[" + strings.Repeat("1,", 99) + "1]"
	refused := map[string]string{
		"deep nesting":  strings.Repeat("(", 200) + "true" + strings.Repeat(")", 200),
		"huge list":     "size(" + hundred + ".map(x, " + hundred + ".map(y, " + hundred + "))) > 0",
		"long source":   "true || " + strings.Repeat("type == 'x' || ", 400) + "false",
		"cartesian":     "size(" + hundred + ".map(x, " + hundred + ".map(y, " + hundred + ".map(z, x + y + z)))) > 0",
		"not a boolean": "data",
	}
	for name, expr := range refused {
		_, _, err := webhooks.Create(ctx, b.db.Pool, postgres.CursorStore{}, &webhooks.CreateParams{Owner: "mallory", Space: "evil", URL: rvEvil.url(),
			AllowPrivateTargets: true, Filter: expr})
		require.ErrorIs(t, err, webhooks.ErrInvalid, name)
		require.Contains(t, err.Error(), "filter: ", name)
	}

	// Accepted (their cost depends on the event) and stopped at run time by
	// the cost limit on a big event.
	consumer, errs := filterErrors()
	cubic, _ := b.subscribe(t, &webhooks.CreateParams{Owner: "mallory", Space: "evil", URL: rvEvil.url(),
		Filter: "data.items.all(x, data.items.all(y, data.items.all(z, x + y + z >= 0.0)))"})
	blowUp, _ := b.subscribe(t, &webhooks.CreateParams{Owner: "mallory", Space: "evil", URL: rvEvil.url(),
		Filter: "data.items.exists(x, (data.s + data.s + data.s + data.s).contains('needle'))"})
	neighbour, _ := b.subscribe(t, &webhooks.CreateParams{URL: rvNeighbour.url(), Filter: "int(data.i) >= 0"})

	items := make([]string, 300)
	for i := range items {
		items[i] = fmt.Sprint(i)
	}
	big := fmt.Sprintf(`{"items": [%s], "s": %q}`, strings.Join(items, ","), strings.Repeat("a", 20_000))
	b.emitData(t, "evil", big, big)
	evs := b.emit(t, "s1", 5)

	b.roundWith(t, consumer)
	require.Equal(t, evs[4].Seq, b.cursor(t))
	require.Empty(t, b.deliverySeqs(t, cubic.ID))
	require.Empty(t, b.deliverySeqs(t, blowUp.ID))
	require.Equal(t, 4.0, testutil.ToFloat64(errs.Counter().WithLabelValues("filter", "cost_limit")), "each hostile evaluation was stopped")
	require.Len(t, b.deliverySeqs(t, neighbour.ID), 5)

	b.start(t)
	testwait.Until(t, 10*time.Second, func() bool { return rvNeighbour.count() == 5 }, "the neighbour's deliveries flow")
	require.Zero(t, rvEvil.count())
}

func TestFilter_CreateAndUpdateRefuseNamingFieldAndPosition(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	rv := newReceiver(t, nil)
	_, _, err := webhooks.Create(ctx, b.db.Pool, postgres.CursorStore{}, &webhooks.CreateParams{Owner: "alice", Space: "s1", URL: rv.url(),
		AllowPrivateTargets: true, Filter: "type == 'a' &&"})
	require.ErrorIs(t, err, webhooks.ErrInvalid)
	require.Contains(t, err.Error(), "filter: 1:")
	_, _, err = webhooks.Create(ctx, b.db.Pool, postgres.CursorStore{}, &webhooks.CreateParams{Owner: "alice", Space: "s1", URL: rv.url(),
		AllowPrivateTargets: true, Transform: "type"})
	require.ErrorIs(t, err, webhooks.ErrInvalid)
	require.Contains(t, err.Error(), "transform: 1:1: a transform must be a map or a list")

	s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url(), Filter: "type == 'item.created'", Transform: "{'t': type}"})
	require.Equal(t, "type == 'item.created'", b.sub(t, s.ID).Filter)
	bad := "nope == 1"
	_, err = webhooks.Update(ctx, b.db.Pool, s.ID, &webhooks.UpdateParams{Filter: &bad})
	require.ErrorIs(t, err, webhooks.ErrInvalid)
	require.Contains(t, err.Error(), "filter: 1:1: undeclared reference to 'nope'")
	none := ""
	got, err := webhooks.Update(ctx, b.db.Pool, s.ID, &webhooks.UpdateParams{Filter: &none})
	require.NoError(t, err)
	require.Empty(t, got.Filter, "\"\" removes the filter")
	require.Equal(t, "{'t': type}", got.Transform, "an absent field stays")
}

func TestTransform_BodyIsWhatArrivesAndVerifies(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	single, batched := newReceiver(t, nil), newReceiver(t, nil)
	transform := "{'kind': type, 'n': int(data.i), 'tags': [space, actor]}"
	_, secret := b.subscribe(t, &webhooks.CreateParams{URL: single.url(), Transform: transform})
	single.setSecret(t, secret)
	three := 3
	_, secret = b.subscribe(t, &webhooks.CreateParams{URL: batched.url(), Transform: transform, Policy: &webhooks.PolicyParams{MaxBatch: &three}})
	batched.setSecret(t, secret)
	b.emit(t, "s1", 3)
	b.round(t)
	b.start(t)

	testwait.Until(t, 10*time.Second, func() bool { return single.count() == 3 && batched.count() >= 1 }, "the transformed requests arrive")
	for i, r := range single.requests() {
		require.NoError(t, r.SigErr, "the signature covers the transformed body")
		require.JSONEq(t, fmt.Sprintf(`{"kind": "item.created", "n": %d, "tags": ["s1", "bob"]}`, i), string(r.Body))
	}
	r := batched.requests()[0]
	require.NoError(t, r.SigErr)
	var list []json.RawMessage
	require.NoError(t, json.Unmarshal(r.Body, &list))
	require.Len(t, list, 3, "max_batch sends a list of the transformed bodies")
	require.JSONEq(t, `{"kind": "item.created", "n": 2, "tags": ["s1", "bob"]}`, string(list[2]))
}

func TestTransform_ErrorIsAFailedAttemptRetried(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	rv := newReceiver(t, nil)
	s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url(), Transform: "{'x': data.missing}"})
	evs := b.emit(t, "s1", 1)
	b.round(t)
	b.start(t)

	var attempts []webhooks.Attempt
	testwait.Until(t, 10*time.Second, func() bool {
		var err error
		attempts, err = webhooks.Attempts(context.Background(), b.db.Pool, s.ID, evs[0].Seq)
		require.NoError(t, err)
		return len(attempts) >= 2
	}, "the failed attempts are recorded and retried")
	require.Contains(t, attempts[0].Error, "transform: no such key: missing")
	require.Nil(t, attempts[0].StatusCode, "nothing was sent")
	require.Zero(t, rv.count())
	require.Equal(t, webhooks.DeliveryPending, b.deliveryStatus(t, s.ID, evs[0].Seq), "retried by the policy")

	// The owner fixes the transform; the retry sends the new body.
	fixed := "{'x': int(data.i)}"
	_, err := webhooks.Update(context.Background(), b.db.Pool, s.ID, &webhooks.UpdateParams{Transform: &fixed})
	require.NoError(t, err)
	testwait.Until(t, 10*time.Second, func() bool { return rv.count() == 1 }, "the retry with the fixed transform arrives")
	require.JSONEq(t, `{"x": 0}`, string(rv.requests()[0].Body))
}

func TestPreview_MatchesAndBodies(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	rv := newReceiver(t, nil)
	s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url(), Filter: "int(data.i) > 0"})
	evs := b.emit(t, "s1", 3)

	recent, err := webhooks.RecentEvents(context.Background(), b.log, "s1", 2)
	require.NoError(t, err)
	require.Equal(t, []int64{evs[1].Seq, evs[2].Seq}, []int64{recent[0].Seq, recent[1].Seq}, "the newest events, oldest first")
	all, err := webhooks.RecentEvents(context.Background(), b.log, "s1", 20)
	require.NoError(t, err)

	v, err := webhooks.Preview(s, &webhooks.PreviewRequest{}, all)
	require.NoError(t, err)
	require.Equal(t, "int(data.i) > 0", v.Filter, "the saved filter")
	require.False(t, v.Results[0].Matched)
	require.Nil(t, v.Results[0].Body)
	require.True(t, v.Results[1].Matched)
	var env sync.Envelope
	require.NoError(t, json.Unmarshal(v.Results[1].Body, &env), "without a transform, the envelope")
	require.Equal(t, evs[1].ID, env.ID)

	tr := "{'i': data.i}"
	none := ""
	v, err = webhooks.Preview(s, &webhooks.PreviewRequest{Filter: &none, Transform: &tr}, all)
	require.NoError(t, err)
	for i, r := range v.Results {
		require.True(t, r.Matched)
		require.JSONEq(t, fmt.Sprintf(`{"i": %d}`, i), string(r.Body))
	}

	bad := "data.i >"
	_, err = webhooks.Preview(s, &webhooks.PreviewRequest{Filter: &bad}, all)
	require.ErrorIs(t, err, webhooks.ErrInvalid)
	fails := "data.nope == 1"
	v, err = webhooks.Preview(s, &webhooks.PreviewRequest{Filter: &fails}, all)
	require.NoError(t, err)
	require.Contains(t, v.Results[0].Error, "no such key")
}

func TestNotice_UpdatedNamesAChangedFilterOrTransform(t *testing.T) {
	t.Parallel()
	b := setupNotices(t, nil)
	ctx := context.Background()
	rvWatcher, rvChanged := newReceiver(t, nil), newReceiver(t, nil)
	watcher, _ := b.subscribe(t, &webhooks.CreateParams{URL: rvWatcher.url(), EventTypes: []string{"bothy.*"}})
	changed, _ := b.subscribe(t, &webhooks.CreateParams{URL: rvChanged.url(), Filter: "true"})
	filter, transform, same := "type == 'item.created'", "{'t': type}", "[type]"
	url := rvChanged.url() + "?v=2"
	for _, p := range []*webhooks.UpdateParams{
		{Filter: &filter, Transform: &transform},
		{Filter: &filter},                       // the same text: nothing changed
		{URL: &url, AllowPrivateTargets: true},  // neither expression: nothing
		{Filter: new(string), Transform: &same}, // removed, and changed
	} {
		_, err := webhooks.Update(ctx, b.db.Pool, changed.ID, p)
		require.NoError(t, err)
	}
	b.start(t)
	ops := b.settle(t, 20*time.Second)
	require.Len(t, ops, 2)
	var details []string
	for _, e := range ops { // the notices' jobs may append them in either order
		require.Equal(t, webhooks.TypeUpdated, e.Type)
		require.Equal(t, "s1", e.Space)
		d := noticeData(t, e.Data)
		require.Equal(t, changed.ID, d.SubscriptionID)
		details = append(details, d.Detail)
	}
	require.ElementsMatch(t, []string{"filter changed, transform set", "filter removed, transform changed"}, details,
		"names what changed, never the text")
	require.Len(t, rvWatcher.requests(), 2, "delivered like any operational event")
	require.Zero(t, rvChanged.count(), "never to the subscription it is about")
	require.Equal(t, webhooks.StatusActive, b.sub(t, watcher.ID).Status)
}

// BenchmarkRoundExpressionFilters measures one round of the webhooks
// consumer (ns/op) over 100 events on a space with 100 subscriptions:
// without filters (filter=none, the round's single statement), each with
// a filter every event passes (filter=pass: 10,000 evaluations and a
// second insert) or fails (filter=drop: 10,000 evaluations, no delivery).
func BenchmarkRoundExpressionFilters(b *testing.B) {
	for _, variant := range []struct{ name, filter string }{
		{"none", ""}, {"pass", "int(data.i) >= 0 && type == 'item.created'"}, {"drop", "int(data.i) < 0 && type == 'item.created'"},
	} {
		b.Run("filter="+variant.name, func(b *testing.B) {
			const subs, events = 100, 100
			bn := setup(b, nil)
			for range subs {
				bn.subscribe(b, &webhooks.CreateParams{URL: "http://127.0.0.1:9/x", Filter: variant.filter})
			}
			ctx := context.Background()
			_, err := bn.db.Pool.Exec(ctx, `ANALYZE webhook_subscriptions; ANALYZE webhook_subscription_filters`)
			require.NoError(b, err)
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				bn.emit(b, "s1", events)
				b.StartTimer()
				res, err := bn.rounds.Run(ctx, bn.consumer)
				require.NoError(b, err)
				require.Equal(b, events, res.Events)
			}
		})
	}
}
