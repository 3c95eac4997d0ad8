package webhooks_test

import (
	"context"
	"net/http"
	"slices"
	gosync "sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/liveness"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/testwait"
	"github.com/bothy/bothy/services/server/internal/webhooks"
	"github.com/bothy/bothy/services/server/internal/webhooks/delivery"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest"
)

// slowDefaults is a delivery configuration whose own retry schedule would
// not retry within a test: whatever retries happens by the subscription's
// schedule.
func slowDefaults() *delivery.DeliverConfig {
	cfg := fastRetries()
	cfg.RetryBase, cfg.RetryMax, cfg.RetryBudget = time.Hour, time.Hour, 72*time.Hour
	return cfg
}

// quickSchedule is a per-subscription schedule fast enough for tests.
func quickSchedule(p *webhooks.PolicyParams, budget time.Duration) *webhooks.PolicyParams {
	p.RetryBase, p.RetryMax, p.RetryBudget = new(100*time.Millisecond), new(200*time.Millisecond), new(budget)
	return p
}

// policyProcess is a worker process for webhooks: its liveness lock and a
// River client running the delivery worker with workers slots.
func policyProcess(t *testing.T, b *bundle, cfg *delivery.DeliverConfig, workers int) *liveness.Holder {
	t.Helper()
	h, _ := workerProcessWith(t, b, cfg, workers)
	return h
}

// extraJobs inserts n more delivery jobs for the subscription, as rounds
// and retried jobs would: competitors for the same deliveries.
func (b *bundle) extraJobs(t *testing.T, id uuid.UUID, n int) {
	t.Helper()
	params := make([]river.InsertManyParams, n)
	for i := range params {
		params[i] = river.InsertManyParams{Args: webhooks.DeliverArgs{SubscriptionID: id}}
	}
	_, err := b.river.InsertMany(context.Background(), params)
	require.NoError(t, err)
}

// seqsOfEvents returns the events' seqs.
func seqsOfEvents(evs []sync.Event) []int64 {
	out := make([]int64, len(evs))
	for i, e := range evs {
		out[i] = e.Seq
	}
	return out
}

func TestPolicy_OrderedStaysOrderedUnderFailures(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{webhooks.PolicyOrdered, webhooks.PolicyOrderedDeadLetter} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			b := setup(t, slowDefaults())
			// Every third event fails twice, with the retry scheduled by
			// the subscription: a later event must still wait for it.
			rv := newReceiver(t, func(r request, n int) (int, map[string]string) {
				if r.Seq%3 == 0 && n <= 2 {
					return http.StatusServiceUnavailable, nil
				}
				return http.StatusOK, nil
			})
			s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url(),
				Policy: quickSchedule(&webhooks.PolicyParams{Name: new(policy)}, time.Hour)})
			require.Equal(t, policy, s.Policy.Name)
			policyProcess(t, b, slowDefaults(), 4)
			policyProcess(t, b, slowDefaults(), 4)
			var all []int64
			for range 3 {
				all = append(all, seqsOfEvents(b.emit(t, "s1", 10))...)
				b.round(t)
				b.extraJobs(t, s.ID, 3)
			}
			// Wait for the last delivery, or stop at the first request that
			// comes after a later event was delivered.
			inOrder := func() ([]int64, bool) {
				var delivered []int64
				for _, r := range rv.requests() {
					if len(delivered) > 0 && r.Seq <= delivered[len(delivered)-1] {
						return delivered, false
					}
					if r.Status == http.StatusOK {
						delivered = append(delivered, r.Seq)
					}
				}
				return delivered, true
			}
			testwait.Until(t, 30*time.Second, func() bool {
				delivered, ok := inOrder()
				return !ok || len(delivered) == len(all)
			}, "all delivered")
			delivered, ok := inOrder()
			require.True(t, ok, "nothing is sent after a later event was delivered: %v then %v", delivered, seqsOf(rv.requests()))
			require.Equal(t, all, delivered, "each delivered once, in seq order")
		})
	}
}

func TestPolicy_DeadLetterContinuesAfterBudget(t *testing.T) {
	t.Parallel()
	b := setup(t, slowDefaults())
	var bad int64
	rv := newReceiver(t, func(r request, _ int) (int, map[string]string) {
		if r.Seq == bad {
			return http.StatusInternalServerError, nil
		}
		return http.StatusOK, nil
	})
	s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url(),
		Policy: quickSchedule(&webhooks.PolicyParams{Name: new(webhooks.PolicyOrderedDeadLetter)}, time.Second)})
	evs := b.emit(t, "s1", 4)
	bad = evs[1].Seq
	b.start(t)
	b.round(t)

	testwait.Until(t, 20*time.Second, func() bool { return b.sub(t, s.ID).LastDeliveredSeq == evs[3].Seq }, "the events after the dead one are delivered")
	got := b.sub(t, s.ID)
	require.Equal(t, webhooks.StatusActive, got.Status, "the subscription goes on")
	dead, err := webhooks.Deliveries(context.Background(), b.db.Pool, &webhooks.DeliveriesParams{SubscriptionID: s.ID, Status: webhooks.DeliveryDead})
	require.NoError(t, err)
	require.Len(t, dead, 1, "the dead delivery stays listed")
	require.Equal(t, bad, dead[0].Seq)
	require.Contains(t, dead[0].LastError, "retry budget")
	require.GreaterOrEqual(t, dead[0].Attempts, 2, "retried by the subscription's schedule within its budget")

	reqs := rv.requests()
	lastBad := slices.IndexFunc(reqs, func(r request) bool { return r.Seq > bad }) - 1
	require.Positive(t, lastBad)
	for _, r := range reqs[:lastBad+1] {
		require.LessOrEqual(t, r.Seq, bad, "nothing after the head is sent before it is dead")
	}
	require.Equal(t, []int64{evs[2].Seq, evs[3].Seq}, seqsOf(reqs[lastBad+1:]), "then the rest, in order")
	b.waitCounter(t, "dead", 1)
}

// concurrency is a receiver that holds each request for hold and answers
// 503 where fail says (given the seq and its attempt), else 200.
type concurrency struct{ *receiver }

func newConcurrency(t *testing.T, hold time.Duration, fail func(seq int64, n int) bool) *concurrency {
	t.Helper()
	rv := newReceiver(t, nil)
	rv.SetRule(func(a *webhookstest.Arrival) webhookstest.Answer {
		ans := webhookstest.Answer{Delay: hold}
		if fail != nil && fail(a.Seq, a.Attempt) {
			ans.Status = http.StatusServiceUnavailable
		}
		return ans
	})
	return &concurrency{rv}
}

// snapshot returns the most requests at once, the overlaps (a seq that
// arrived while a request for it was in flight) and the answers per seq.
func (c *concurrency) snapshot() (int, []int64, map[int64][]int) {
	_, top := c.InFlight()
	answers := map[int64][]int{}
	for _, a := range c.Arrivals() {
		if !a.Answered.IsZero() {
			answers[a.Seq] = append(answers[a.Seq], a.Status)
		}
	}
	return top, c.Overlaps(), answers
}

func TestUnordered_CompetingJobsSendEachDeliveryOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, slowDefaults())
	// Every fifth event fails once: its retry competes with new ones.
	rcv := newConcurrency(t, 5*time.Millisecond, func(seq int64, n int) bool { return seq%5 == 0 && n == 1 })
	s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rcv.url(),
		Policy: quickSchedule(&webhooks.PolicyParams{Name: new(webhooks.PolicyUnordered), MaxInFlight: new(16)}, time.Hour)})
	require.Equal(t, 16, s.Policy.MaxInFlight)
	// Two processes with several slots each; every round adds a job, and
	// more jobs of the same subscription are inserted besides.
	policyProcess(t, b, slowDefaults(), 6)
	policyProcess(t, b, slowDefaults(), 6)
	var all []int64
	for range 6 {
		all = append(all, seqsOfEvents(b.emit(t, "s1", 50))...)
		b.round(t)
		b.extraJobs(t, s.ID, 4)
	}
	// Wait until every delivery is recorded as delivered, or stop at the
	// first delivery sent twice at once or again after its 2xx.
	twice := func(answers map[int64][]int) []int64 {
		var out []int64
		for seq, as := range answers {
			if i := slices.Index(as, http.StatusOK); i >= 0 && i < len(as)-1 {
				out = append(out, seq)
			}
		}
		return out
	}
	testwait.Until(t, 60*time.Second, func() bool {
		if _, overlaps, answers := rcv.snapshot(); len(overlaps) > 0 || len(twice(answers)) > 0 {
			return true
		}
		var pending int
		require.NoError(t, b.db.Pool.QueryRow(context.Background(),
			`SELECT count(*) FROM webhook_deliveries WHERE subscription_id = $1 AND status <> 'delivered'`, s.ID).Scan(&pending))
		return pending == 0
	}, "every delivery recorded as delivered")

	_, overlaps, answers := rcv.snapshot()
	require.Empty(t, overlaps, "no delivery was in flight twice at once")
	require.Empty(t, twice(answers), "no delivery was sent again after its 2xx")
	for _, seq := range all {
		want := []int{http.StatusOK}
		if seq%5 == 0 {
			want = []int{http.StatusServiceUnavailable, http.StatusOK}
		}
		require.Equal(t, want, answers[seq], "seq %d: sent once per attempt, never after its 2xx", seq)
	}
	require.Len(t, answers, len(all))
}

func TestUnordered_RespectsMaxInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t, slowDefaults())
	rcv := newConcurrency(t, 40*time.Millisecond, nil)
	s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rcv.url(),
		Policy: &webhooks.PolicyParams{Name: new(webhooks.PolicyUnordered), MaxInFlight: new(5)}})
	policyProcess(t, b, slowDefaults(), 4)
	policyProcess(t, b, slowDefaults(), 4)
	evs := b.emit(t, "s1", 80)
	b.round(t)
	b.extraJobs(t, s.ID, 6)
	testwait.Until(t, 60*time.Second, func() bool { return b.sub(t, s.ID).Pending == 0 }, "all delivered")
	testwait.Until(t, 5*time.Second, func() bool {
		_, _, answers := rcv.snapshot()
		return len(answers) == len(evs)
	}, "the receiver answered all")
	top, overlaps, _ := rcv.snapshot()
	require.Empty(t, overlaps)
	require.LessOrEqual(t, top, 5, "at most max_in_flight requests at once over both processes")
	require.GreaterOrEqual(t, top, 2, "unordered sends in parallel")
}

func TestPolicy_ThrottleRespected(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{webhooks.PolicyOrdered, webhooks.PolicyUnordered} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			rv := newReceiver(t, nil)
			const rate, events = 10, 30
			s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url(),
				Policy: &webhooks.PolicyParams{Name: new(policy), MaxRequestsPerSecond: new(float64(rate))}})
			started := time.Now()
			b.start(t)
			b.emit(t, "s1", events)
			b.round(t)
			b.extraJobs(t, s.ID, 3)
			testwait.Until(t, 30*time.Second, func() bool { return rv.count() >= events }, "all sent")
			// Each request's slot is at least 1/rate after the one before,
			// and kept across batches and sender jobs, so the last of the
			// events requests cannot arrive sooner than (events-1)/rate after
			// the start. A busy machine only delays it; an unthrottled
			// sender sends them all at once. (Counting requests per second
			// at the receiver would fail on a busy machine: a request whose
			// start was delayed lands next to the one after it.)
			reqs := rv.requests()
			least := time.Duration(float64(events-1) / rate * float64(time.Second))
			require.GreaterOrEqual(t, reqs[events-1].At.Sub(started), least, "request %d of %d at %d per second", events, events, rate)
		})
	}
}

func TestPolicy_AutoRecoverResumes(t *testing.T) {
	t.Parallel()
	b := setup(t, slowDefaults())
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
	s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url(),
		Policy: quickSchedule(&webhooks.PolicyParams{AutoRecover: new(true)}, time.Second)})
	evs := b.emit(t, "s1", 3)
	b.start(t)
	b.round(t)

	testwait.Until(t, 20*time.Second, func() bool { return b.sub(t, s.ID).Probing }, "disabled as failing and probing")
	got := b.sub(t, s.ID)
	require.Equal(t, webhooks.StatusDisabled, got.Status)
	require.Equal(t, webhooks.CauseFailing, got.DisabledCause)
	require.Equal(t, webhooks.DeliveryPending, b.deliveryStatus(t, s.ID, evs[0].Seq), "the head stays pending as the probe")
	// Events keep arriving while the receiver is down: the backlog grows.
	evs = append(evs, b.emit(t, "s1", 2)...)
	b.round(t)
	probes := rv.count()
	testwait.Until(t, 20*time.Second, func() bool { return rv.count() > probes }, "probed again")
	for _, r := range rv.requests() {
		require.Equal(t, evs[0].Seq, r.Seq, "only the head is probed")
	}

	mu.Lock()
	healthy = true
	mu.Unlock()
	testwait.Until(t, 30*time.Second, func() bool { return b.sub(t, s.ID).LastDeliveredSeq == evs[4].Seq }, "active again with its backlog")
	got = b.sub(t, s.ID)
	require.Equal(t, webhooks.StatusActive, got.Status)
	require.False(t, got.Probing)
	var delivered []int64
	for _, r := range rv.requests() {
		if r.Status == http.StatusOK {
			delivered = append(delivered, r.Seq)
		}
	}
	require.Equal(t, seqsOfEvents(evs), delivered, "the head, then the backlog in order, nothing lost")
}

func TestPolicy_Validation(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		p     webhooks.PolicyParams
		field string
	}{
		{"UnknownPolicy", webhooks.PolicyParams{Name: new("fifo")}, "policy:"},
		{"MaxInFlightTooHigh", webhooks.PolicyParams{Name: new(webhooks.PolicyUnordered), MaxInFlight: new(101)}, "max_in_flight:"},
		{"MaxInFlightWithOrdered", webhooks.PolicyParams{MaxInFlight: new(5)}, "max_in_flight: only with policy unordered"},
		{"AutoRecoverWithUnordered", webhooks.PolicyParams{Name: new(webhooks.PolicyUnordered), AutoRecover: new(true)}, "auto_recover: only with policy ordered"},
		{"AutoRecoverWithDeadLetter", webhooks.PolicyParams{Name: new(webhooks.PolicyOrderedDeadLetter), AutoRecover: new(true)}, "auto_recover: only with policy ordered"},
		{"RateTooLow", webhooks.PolicyParams{MaxRequestsPerSecond: new(0.01)}, "max_requests_per_second:"},
		{"RetryBaseTooShort", webhooks.PolicyParams{RetryBase: new(time.Millisecond)}, "retry_base_seconds:"},
		{"RetryMaxTooLong", webhooks.PolicyParams{RetryMax: new(48 * time.Hour)}, "retry_max_seconds:"},
		{"RetryBudgetTooLong", webhooks.PolicyParams{RetryBudget: new(800 * time.Hour)}, "retry_budget_seconds:"},
		{"BaseAboveMax", webhooks.PolicyParams{RetryBase: new(time.Minute), RetryMax: new(time.Second)}, "retry_base_seconds: 60 is above retry_max_seconds 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := webhooks.Create(ctx, b.db.Pool, postgres.CursorStore{}, &webhooks.CreateParams{Owner: "alice", Space: "s1",
				URL: "http://127.0.0.1:9/x", AllowPrivateTargets: true, Policy: &tc.p})
			require.ErrorIs(t, err, webhooks.ErrInvalid)
			require.Contains(t, err.Error(), tc.field)
		})
	}
	t.Run("BudgetBelowRetention", func(t *testing.T) {
		limits := &webhooks.Limits{EventRetention: 48 * time.Hour}
		_, _, err := webhooks.Create(ctx, b.db.Pool, postgres.CursorStore{}, &webhooks.CreateParams{Owner: "alice", Space: "s1",
			URL: "http://127.0.0.1:9/x", AllowPrivateTargets: true, Limits: limits,
			Policy: &webhooks.PolicyParams{RetryBudget: new(48 * time.Hour)}})
		require.ErrorIs(t, err, webhooks.ErrLimit)
		require.Contains(t, err.Error(), "retry_budget_seconds: 172800 must be below sync.event_retention")
		s, _ := b.subscribe(t, &webhooks.CreateParams{URL: "http://127.0.0.1:9/x", Limits: limits,
			Policy: &webhooks.PolicyParams{RetryBudget: new(47 * time.Hour)}})
		_, err = webhooks.Update(ctx, b.db.Pool, s.ID, &webhooks.UpdateParams{Limits: limits,
			Policy: &webhooks.PolicyParams{RetryBudget: new(49 * time.Hour)}})
		require.ErrorIs(t, err, webhooks.ErrLimit)
	})
	t.Run("UpdateChecksAgainstTheStoredPolicy", func(t *testing.T) {
		s, _ := b.subscribe(t, &webhooks.CreateParams{URL: "http://127.0.0.1:9/x",
			Policy: &webhooks.PolicyParams{RetryMax: new(time.Second)}})
		_, err := webhooks.Update(ctx, b.db.Pool, s.ID, &webhooks.UpdateParams{Policy: &webhooks.PolicyParams{RetryBase: new(time.Minute)}})
		require.ErrorIs(t, err, webhooks.ErrInvalid)
		require.Contains(t, err.Error(), "retry_base_seconds")
		_, err = webhooks.Update(ctx, b.db.Pool, s.ID, &webhooks.UpdateParams{Policy: &webhooks.PolicyParams{MaxInFlight: new(3)}})
		require.ErrorIs(t, err, webhooks.ErrInvalid)

		got, err := webhooks.Update(ctx, b.db.Pool, s.ID, &webhooks.UpdateParams{Policy: &webhooks.PolicyParams{
			Name: new(webhooks.PolicyUnordered), MaxRequestsPerSecond: new(2.5)}})
		require.NoError(t, err)
		require.Equal(t, webhooks.Policy{Name: webhooks.PolicyUnordered, MaxInFlight: webhooks.DefaultMaxInFlight,
			MaxRequestsPerSecond: 2.5, RetryMax: time.Second}, got.Policy)
		got, err = webhooks.Update(ctx, b.db.Pool, s.ID, &webhooks.UpdateParams{Policy: &webhooks.PolicyParams{
			Name: new(webhooks.PolicyOrdered), MaxRequestsPerSecond: new(0.0), RetryMax: new(time.Duration(0))}})
		require.NoError(t, err)
		require.Equal(t, webhooks.Policy{Name: webhooks.PolicyOrdered}, got.Policy, "zero values return to the defaults")
	})
}

func TestUnordered_FailuresDoNotBlockOthers(t *testing.T) {
	t.Parallel()
	b := setup(t, slowDefaults())
	var bad int64
	rv := newReceiver(t, func(r request, _ int) (int, map[string]string) {
		if r.Seq == bad {
			return http.StatusInternalServerError, nil
		}
		return http.StatusOK, nil
	})
	s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url(),
		Policy: quickSchedule(&webhooks.PolicyParams{Name: new(webhooks.PolicyUnordered), MaxInFlight: new(4)}, time.Second)})
	evs := b.emit(t, "s1", 20)
	bad = evs[0].Seq
	b.start(t)
	b.round(t)

	testwait.Until(t, 20*time.Second, func() bool {
		return b.deliveryStatus(t, s.ID, bad) == webhooks.DeliveryDead
	}, "the failing delivery is dead after its own budget")
	for _, e := range evs[1:] {
		require.Equal(t, webhooks.DeliveryDelivered, b.deliveryStatus(t, s.ID, e.Seq), "seq %d", e.Seq)
	}
	got := b.sub(t, s.ID)
	require.Equal(t, webhooks.StatusActive, got.Status, "unordered never disables as failing")
	require.Equal(t, evs[19].Seq, got.LastDeliveredSeq)
	var badAttempts, lastBad, lastOther int
	for i, r := range rv.requests() {
		if r.Seq == bad {
			badAttempts, lastBad = badAttempts+1, i
		} else {
			lastOther = i
		}
	}
	require.GreaterOrEqual(t, badAttempts, 3, "retried on its own schedule")
	require.Less(t, lastOther, lastBad, "the others were all sent while it was still being retried")
	b.waitCounter(t, "dead", 1)
}
