package webhooks_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	gosync "sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/testwait"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// setupNotices is setup with the notice worker next to the deliverer, as
// the webhooks module registers them; afterAppend, if set, runs after each
// append of an operational event.
func setupNotices(t *testing.T, afterAppend func(job *river.Job[webhooks.NoticeArgs]) error) *bundle {
	t.Helper()
	return setupWith(t, &bundleOpts{
		workers: func(w *river.Workers, log *postgres.EventLog) {
			nw := webhooks.NewNoticeWorker(log)
			if afterAppend != nil {
				webhooks.SetNoticeAfterAppend(nw, afterAppend)
			}
			river.AddWorker(w, nw)
		},
		// Retries at once, so a failed notice job runs again within the test.
		retry: immediateRetry{},
	})
}

type immediateRetry struct{}

func (immediateRetry) NextRetry(*rivertype.JobRow) time.Time { return time.Now() }

// operational returns the operational events in the log, in seq order.
func (b *bundle) operational(t testing.TB) []sync.Event {
	t.Helper()
	ctx := context.Background()
	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // read only
	evs, err := b.log.EventsAfter(ctx, tx, &sync.EventsAfterParams{AfterSeq: 0, Limit: 100000})
	require.NoError(t, err)
	var out []sync.Event
	for _, e := range evs {
		if len(e.Type) > len(webhooks.OperationalPrefix) && e.Type[:len(webhooks.OperationalPrefix)] == webhooks.OperationalPrefix {
			out = append(out, e)
		}
	}
	return out
}

func noticeData(t testing.TB, raw []byte) webhooks.NoticeData {
	t.Helper()
	var d webhooks.NoticeData
	require.NoError(t, json.Unmarshal(raw, &d))
	return d
}

// noticeJobs returns the notice jobs.
func (b *bundle) noticeJobs(t testing.TB) []*rivertype.JobRow {
	t.Helper()
	res, err := b.river.JobList(context.Background(), river.NewJobListParams().Kinds(webhooks.KindNotice).First(1000))
	require.NoError(t, err)
	return res.Jobs
}

// settle runs rounds until everything the log holds for subscriptions that
// send is delivered or dead,
// every notice job has completed and a round finds nothing new, and
// returns the operational events then in the log. It fails if that does
// not happen within d.
func (b *bundle) settle(t testing.TB, d time.Duration) []sync.Event {
	t.Helper()
	ctx := context.Background()
	quiet := 0
	testwait.Until(t, d, func() bool {
		res := b.round(t)
		var pending int
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries d JOIN webhook_subscriptions s ON s.id = d.subscription_id
			WHERE d.status = 'pending' AND (s.status = 'active' OR s.probing)`).Scan(&pending))
		done := res.Events == 0 && pending == 0
		for _, j := range b.noticeJobs(t) {
			done = done && j.State == rivertype.JobStateCompleted
		}
		if !done {
			quiet = 0
			return false
		}
		quiet++
		return quiet >= 3
	}, "deliveries and operational events settle")
	return b.operational(t)
}

// TestNotice_DisabledAppendedOnceEvenIfTheJobIsRetried: a receiver answers
// 410, so its subscription is disabled. In the transaction that disables
// it, a notice job is inserted; the job appends bothy.webhook.disabled and
// then fails, as if its process died before River recorded it done. River
// runs it again, and the log still holds the event once; another
// subscription on the space receives it once.
func TestNotice_DisabledAppendedOnceEvenIfTheJobIsRetried(t *testing.T) {
	t.Parallel()
	var mu gosync.Mutex
	appends := 0
	b := setupNotices(t, func(job *river.Job[webhooks.NoticeArgs]) error {
		mu.Lock()
		defer mu.Unlock()
		appends++
		if job.Attempt == 1 {
			return errors.New("the process dies after the append")
		}
		return nil
	})
	gone := newReceiver(t, func(request, int) (int, map[string]string) { return http.StatusGone, nil })
	other := newReceiver(t, nil)
	a, _ := b.subscribe(t, &webhooks.CreateParams{URL: gone.url(), EventTypes: []string{"item.*"}})
	_, secret := b.subscribe(t, &webhooks.CreateParams{URL: other.url()})
	other.setSecret(t, secret)
	b.start(t)
	evs := b.emit(t, "s1", 1)
	ops := b.settle(t, 20*time.Second)

	require.Equal(t, webhooks.CauseGone, b.sub(t, a.ID).DisabledCause)
	require.Len(t, ops, 1, "one operational event: %v", ops)
	require.Equal(t, webhooks.TypeDisabled, ops[0].Type)
	require.Equal(t, "s1", ops[0].Space)
	require.Equal(t, webhooks.SystemActor, ops[0].Actor)
	d := noticeData(t, ops[0].Data)
	require.Equal(t, webhooks.NoticeData{SubscriptionID: a.ID, Cause: webhooks.CauseGone, Detail: "receiver answered 410 Gone", Seq: evs[0].Seq}, d)

	jobs := b.noticeJobs(t)
	require.Len(t, jobs, 1)
	require.Equal(t, 2, jobs[0].Attempt, "the job ran twice")
	require.Len(t, jobs[0].Errors, 1)
	mu.Lock()
	require.Equal(t, 2, appends, "and appended twice, the second time a duplicate")
	mu.Unlock()

	var got []string
	for _, r := range other.requests() {
		require.NoError(t, r.SigErr)
		got = append(got, r.ID)
	}
	require.Equal(t, []string{evs[0].ID.String(), ops[0].ID.String()}, got, "the other subscription gets the event and the notice, once")
	require.Equal(t, 1, gone.count(), "a disabled subscription gets nothing more")
}

// TestNotice_FailingAndRecoveredOncePerChange: a receiver fails three
// attempts and then recovers. Its space learns bothy.webhook.failing once
// (at the first failure, not at each) and bothy.webhook.recovered once;
// the subscription itself is not sent either.
func TestNotice_FailingAndRecoveredOncePerChange(t *testing.T) {
	t.Parallel()
	b := setupNotices(t, nil)
	flaky := newReceiver(t, func(r request, n int) (int, map[string]string) {
		if r.Seq == 1 && n <= 3 {
			return http.StatusServiceUnavailable, nil
		}
		return http.StatusOK, nil
	})
	watcher := newReceiver(t, nil)
	a, _ := b.subscribe(t, &webhooks.CreateParams{URL: flaky.url()})
	b.subscribe(t, &webhooks.CreateParams{URL: watcher.url(), EventTypes: []string{"bothy.webhook.*"}})
	b.start(t)
	evs := b.emit(t, "s1", 2)
	require.Equal(t, int64(1), evs[0].Seq)
	ops := b.settle(t, 20*time.Second)

	require.Len(t, ops, 2, "%v", ops)
	// Notice jobs run concurrently, so the log may hold them in either
	// order; occurred_at is the time of each change.
	if ops[0].Type == webhooks.TypeRecovered {
		ops[0], ops[1] = ops[1], ops[0]
	}
	require.Equal(t, webhooks.TypeFailing, ops[0].Type)
	require.Equal(t, webhooks.TypeRecovered, ops[1].Type)
	require.True(t, ops[0].OccurredAt.Before(ops[1].OccurredAt))
	f, r := noticeData(t, ops[0].Data), noticeData(t, ops[1].Data)
	require.Equal(t, a.ID, f.SubscriptionID)
	require.Equal(t, evs[0].Seq, f.Seq)
	require.Equal(t, "receiver answered 503 Service Unavailable", f.Detail)
	require.Equal(t, webhooks.NoticeData{SubscriptionID: a.ID, Seq: evs[0].Seq}, r)

	require.ElementsMatch(t, []int64{ops[0].Seq, ops[1].Seq}, seqsOf(watcher.requests()), "the watcher gets both, once")
	for _, req := range flaky.requests() {
		require.NotEqual(t, ops[0].ID.String(), req.ID, "a subscription is not sent notices about itself")
		require.NotEqual(t, ops[1].ID.String(), req.ID)
	}
}

// TestNotice_NoLoopBetweenFlakySubscriptions: two subscriptions of every
// type on one space, with receivers that fail the first attempt at every
// message. Each notice about one is a delivery for the other, which fails
// once. Were attempts at notices counted as failures and recoveries, each
// notice would make two more, for ever; they are not, so the log settles
// with one failing and one recovered notice per subscription.
func TestNotice_NoLoopBetweenFlakySubscriptions(t *testing.T) {
	t.Parallel()
	b := setupNotices(t, nil)
	var mu gosync.Mutex
	tries := map[string]int{}
	firstFails := func(r request, _ int) (int, map[string]string) {
		mu.Lock()
		defer mu.Unlock()
		tries[r.Header.Get("X-Receiver")+r.ID]++
		if tries[r.Header.Get("X-Receiver")+r.ID] == 1 {
			return http.StatusInternalServerError, nil
		}
		return http.StatusOK, nil
	}
	rv := newReceiver(t, firstFails)
	a, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url(), Headers: map[string]string{"X-Receiver": "a"}})
	c, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url(), Headers: map[string]string{"X-Receiver": "c"}})
	b.start(t)
	b.emit(t, "s1", 1)
	ops := b.settle(t, 30*time.Second)

	count := map[string]int{}
	for _, e := range ops {
		count[noticeData(t, e.Data).SubscriptionID.String()+" "+e.Type]++
	}
	require.Equal(t, map[string]int{
		a.ID.String() + " " + webhooks.TypeFailing: 1, a.ID.String() + " " + webhooks.TypeRecovered: 1,
		c.ID.String() + " " + webhooks.TypeFailing: 1, c.ID.String() + " " + webhooks.TypeRecovered: 1,
	}, count)
}

// TestNotice_GapFromTheRound: retention removed events the webhooks
// consumer had not read; the round disables the subscriptions that could
// have missed them and, in the same transaction, inserts one
// bothy.webhook.gap notice for each, on its own space.
func TestNotice_GapFromTheRound(t *testing.T) {
	t.Parallel()
	b := setupNotices(t, nil)
	ctx := context.Background()
	require.NoError(t, authz.Grant(ctx, b.db.Pool, &authz.GrantParams{Space: "s2", Principal: "alice", Right: authz.RightRead}))
	rv := newReceiver(t, nil)
	s1, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
	s2, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url(), Space: "s2"})
	evs := b.emit(t, "s1", 3)
	_, err := b.db.Pool.Exec(ctx, `DELETE FROM event_log WHERE seq <= $1`, evs[1].Seq)
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, `UPDATE event_log_retention SET low_seq = $1`, evs[1].Seq+1)
	require.NoError(t, err)
	later, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
	b.start(t)
	ops := b.settle(t, 20*time.Second)

	bySub := map[uuid.UUID]sync.Event{}
	for _, e := range ops {
		require.Equal(t, webhooks.TypeGap, e.Type)
		bySub[noticeData(t, e.Data).SubscriptionID] = e
	}
	require.Len(t, bySub, 2)
	require.Equal(t, "s1", bySub[s1.ID].Space)
	require.Equal(t, "s2", bySub[s2.ID].Space, "each notice goes to its subscription's space")
	d := noticeData(t, bySub[s1.ID].Data)
	require.Equal(t, webhooks.CauseGap, d.Cause)
	require.Equal(t, evs[0].Seq, d.Seq, "the first seq it will not receive")
	require.Contains(t, d.Detail, "removed by retention")
	require.Equal(t, []int64{bySub[s1.ID].Seq}, seqsOf(rv.requests()), "the subscription created after the gap gets the notice about s1")
	require.Equal(t, webhooks.StatusActive, b.sub(t, later.ID).Status)
}

// TestNotice_GapAtTheHead: retention removed the event of a subscription's
// pending head; the sender disables it with cause gap and, in the same
// transaction, inserts bothy.webhook.gap.
func TestNotice_GapAtTheHead(t *testing.T) {
	t.Parallel()
	b := setupNotices(t, nil)
	ctx := context.Background()
	rv := newReceiver(t, nil)
	watcher := newReceiver(t, nil)
	s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url(), EventTypes: []string{"item.*"}})
	b.subscribe(t, &webhooks.CreateParams{URL: watcher.url(), EventTypes: []string{"bothy.webhook.*"}})
	evs := b.emit(t, "s1", 2)
	b.round(t)
	_, err := b.db.Pool.Exec(ctx, `DELETE FROM event_log WHERE seq = $1`, evs[0].Seq)
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, `UPDATE event_log_retention SET low_seq = $1`, evs[1].Seq)
	require.NoError(t, err)
	b.start(t)
	ops := b.settle(t, 20*time.Second)

	require.Len(t, ops, 1, "%v", ops)
	require.Equal(t, webhooks.TypeGap, ops[0].Type)
	d := noticeData(t, ops[0].Data)
	require.Equal(t, s.ID, d.SubscriptionID)
	require.Equal(t, webhooks.CauseGap, d.Cause)
	require.Equal(t, evs[0].Seq, d.Seq)
	require.Equal(t, []int64{ops[0].Seq}, seqsOf(watcher.requests()))
	require.Zero(t, rv.count())
}

// TestNotice_AutoRecoverProbes: with auto_recover a spent budget disables
// the subscription (bothy.webhook.disabled, cause failing) and probes it;
// the probe that is answered makes it active again
// (bothy.webhook.recovered). Probes that fail change nothing more.
func TestNotice_AutoRecoverProbes(t *testing.T) {
	t.Parallel()
	b := setupNotices(t, nil)
	var mu gosync.Mutex
	healthy := false
	rv := newReceiver(t, func(request, int) (int, map[string]string) {
		mu.Lock()
		defer mu.Unlock()
		if healthy {
			return http.StatusOK, nil
		}
		return http.StatusServiceUnavailable, nil
	})
	watcher := newReceiver(t, nil)
	s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url(), EventTypes: []string{"item.*"},
		Policy: quickSchedule(&webhooks.PolicyParams{AutoRecover: new(true)}, time.Second)})
	b.subscribe(t, &webhooks.CreateParams{URL: watcher.url(), EventTypes: []string{"bothy.webhook.*"}})
	b.emit(t, "s1", 1)
	b.start(t)
	b.round(t)
	testwait.Until(t, 20*time.Second, func() bool { return b.sub(t, s.ID).Probing }, "disabled as failing and probing")
	probes := rv.count()
	testwait.Until(t, 20*time.Second, func() bool { return rv.count() > probes+1 }, "probed twice more")
	mu.Lock()
	healthy = true
	mu.Unlock()
	testwait.Until(t, 30*time.Second, func() bool { return b.sub(t, s.ID).Status == webhooks.StatusActive }, "active again")
	ops := b.settle(t, 20*time.Second)

	types := map[string]int{}
	for _, e := range ops {
		require.Equal(t, s.ID, noticeData(t, e.Data).SubscriptionID)
		types[e.Type]++
	}
	require.Equal(t, map[string]int{webhooks.TypeFailing: 1, webhooks.TypeDisabled: 1, webhooks.TypeRecovered: 1}, types)
	for _, e := range ops {
		if e.Type == webhooks.TypeDisabled {
			require.Equal(t, webhooks.CauseFailing, noticeData(t, e.Data).Cause)
		}
	}
	require.Len(t, watcher.requests(), 3)
}
