package push_test

import (
	"context"
	"encoding/json"
	"net/http"
	gosync "sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/push"
	"github.com/bothy/bothy/services/server/internal/push/pushtest"
	"github.com/bothy/bothy/services/server/internal/testwait"
)

func TestDevices_JSON(t *testing.T) {
	t.Parallel()

	t.Run("OneStringRoundTrips", func(t *testing.T) {
		t.Parallel()
		a, b := uuid.New(), uuid.New()
		in := push.Devices{{RegistrationID: a, Principal: "alice@example.com"}, {RegistrationID: b, Principal: "odd,name/with%"}}
		raw, err := json.Marshal(in)
		require.NoError(t, err)
		var s string
		require.NoError(t, json.Unmarshal(raw, &s), "the devices are one JSON string, one entry in River's GIN index")
		require.Equal(t, a.String()+"/alice@example.com,"+b.String()+"/odd%2Cname%2Fwith%25", s)
		var out push.Devices
		require.NoError(t, json.Unmarshal(raw, &out))
		require.Equal(t, in, out)
	})

	t.Run("MalformedIsAnError", func(t *testing.T) {
		t.Parallel()
		var out push.Devices
		require.Error(t, json.Unmarshal([]byte(`"not-a-uuid/bob"`), &out))
		require.Error(t, json.Unmarshal([]byte(`"`+uuid.NewString()+`"`), &out))
	})
}

func TestConsumer_Batches(t *testing.T) {
	t.Parallel()

	t.Run("AJobHoldsAtMostBatchSizeDevices", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		b.member(t, "alice", "s1", authz.RightWrite)
		for _, p := range []string{"bob", "carol", "dave", "erin", "frank"} {
			b.member(t, p, "s1", authz.RightRead)
			b.device(t, p, p+"-phone")
		}
		ev := b.write(t, "s1", "alice")
		res, err := b.rounds.Run(context.Background(), push.NewConsumer(&push.ConsumerConfig{BatchSize: 2}))
		require.NoError(t, err)
		require.Equal(t, 3, res.Jobs)
		var all []jobMessage
		for i, j := range b.jobs(t) {
			require.Len(t, j.messages(), []int{2, 2, 1}[i])
			require.Equal(t, ev.ID, j.Args.Events[0].EventID)
			all = append(all, j.messages()...)
		}
		require.Len(t, all, 5)
	})

	t.Run("ARoundsEventsShareAJobPerPushService", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		other := pushtest.NewReceiver(&pushtest.ReceiverConfig{VAPIDPublicKey: b.vapid.Public})
		t.Cleanup(other.Close)
		b.member(t, "alice", "s1", authz.RightWrite)
		for _, p := range []string{"bob", "carol", "dave"} {
			b.member(t, p, "s1", authz.RightRead)
		}
		bob, _ := b.device(t, "bob", "bob-phone")
		carol, _ := b.device(t, "carol", "carol-phone")
		d, endpoint, err := other.AddDevice("dave-phone")
		require.NoError(t, err)
		var s push.Subscription
		s.Endpoint, s.Keys.P256dh, s.Keys.Auth = endpoint, d.P256dh(), d.Auth()
		dave, err := b.registry.Register(context.Background(), b.db.Pool, &push.RegisterParams{Principal: "dave", Subscription: s})
		require.NoError(t, err)

		e1, e2 := b.write(t, "s1", "alice"), b.write(t, "s1", "alice")
		require.Equal(t, 2, b.round(t).Jobs, "one job per push service for the whole round")
		var msgs [][]jobMessage
		for _, j := range b.jobs(t) {
			msgs = append(msgs, j.messages())
		}
		first, second := []jobMessage{
			{Seq: e1.Seq, RegistrationID: bob.ID, Principal: "bob"}, {Seq: e1.Seq, RegistrationID: carol.ID, Principal: "carol"},
			{Seq: e2.Seq, RegistrationID: bob.ID, Principal: "bob"}, {Seq: e2.Seq, RegistrationID: carol.ID, Principal: "carol"},
		}, []jobMessage{
			{Seq: e1.Seq, RegistrationID: dave.ID, Principal: "dave"}, {Seq: e2.Seq, RegistrationID: dave.ID, Principal: "dave"},
		}
		if bob.ID.String() > carol.ID.String() {
			first[0], first[1], first[2], first[3] = first[1], first[0], first[3], first[2]
		}
		require.ElementsMatch(t, [][]jobMessage{first, second}, msgs)

		b.start(t)
		b.waitJobs(t, 2, "completed")
		require.Len(t, b.rcv.Messages(), 4)
		require.Len(t, other.Messages(), 2)
	})

	t.Run("DevicesOfAnotherPushServiceGetTheirOwnJob", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		other := pushtest.NewReceiver(&pushtest.ReceiverConfig{VAPIDPublicKey: b.vapid.Public})
		t.Cleanup(other.Close)
		b.member(t, "alice", "s1", authz.RightWrite)
		b.member(t, "bob", "s1", authz.RightRead)
		b.member(t, "carol", "s1", authz.RightRead)
		b.device(t, "bob", "bob-phone")
		d, endpoint, err := other.AddDevice("carol-phone")
		require.NoError(t, err)
		var s push.Subscription
		s.Endpoint, s.Keys.P256dh, s.Keys.Auth = endpoint, d.P256dh(), d.Auth()
		_, err = b.registry.Register(context.Background(), b.db.Pool, &push.RegisterParams{Principal: "carol", Subscription: s})
		require.NoError(t, err)
		b.start(t)

		b.write(t, "s1", "alice")
		require.Equal(t, 2, b.round(t).Jobs, "one job per push service")
		b.waitJobs(t, 2, "completed")
		require.Equal(t, 1, b.rcv.Requests("bob-phone"))
		require.Equal(t, 1, other.Requests("carol-phone"))
	})
}

// TestDeliver_BatchRetrySendsOnlyTheFailedDevices: in a batch where one
// device's push service answers 503 and another's refuses for good (400),
// the retry sends again only to the first; the devices that got their
// message and the refused one get no second request.
func TestDeliver_BatchRetrySendsOnlyTheFailedDevices(t *testing.T) {
	t.Parallel()
	var mu gosync.Mutex
	failedOnce := false
	b := setup(t, &setupOpts{respond: func(device string) pushtest.Response {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case device == "carol-phone" && !failedOnce:
			failedOnce = true
			return pushtest.Response{Status: http.StatusServiceUnavailable}
		case device == "dave-phone":
			return pushtest.Response{Status: http.StatusBadRequest}
		}
		return pushtest.Response{}
	}})
	b.member(t, "alice", "s1", authz.RightWrite)
	for _, p := range []string{"bob", "carol", "dave", "erin"} {
		b.member(t, p, "s1", authz.RightRead)
		b.device(t, p, p+"-phone")
	}
	b.start(t)

	b.write(t, "s1", "alice")
	require.Equal(t, 1, b.round(t).Jobs)
	jobs := b.waitJobs(t, 1, "completed")
	require.Equal(t, 2, jobs[0].Attempt, "one retry for carol's device")
	require.Contains(t, jobs[0].Errors[0], "1 of 4 messages to retry")
	require.Equal(t, 1, b.rcv.Requests("bob-phone"))
	require.Equal(t, 1, b.rcv.Requests("erin-phone"))
	require.Equal(t, 2, b.rcv.Requests("carol-phone"))
	require.Equal(t, 1, b.rcv.Requests("dave-phone"), "a refusal for good is recorded and not tried again")
	require.Len(t, b.rcv.Messages(), 3)
	require.Empty(t, b.rcv.Errors())

	b.waitRecorded(t, 4) // a completed job does not wait for its records
	var statuses []int
	rows, err := b.db.Pool.Query(context.Background(), `SELECT status FROM push_sends ORDER BY status`)
	require.NoError(t, err)
	statuses, err = pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	require.Equal(t, []int{201, 201, 201, 400}, statuses)
}

// TestDeliver_RecordsEachSendBeforeTheBatchEnds: a send is recorded as
// soon as its answer arrives, not when the whole batch is done, so a
// process that dies in the middle of a large batch sends again only what
// was in flight.
func TestDeliver_RecordsEachSendBeforeTheBatchEnds(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var releaseOnce gosync.Once
	releaseAll := func() { releaseOnce.Do(func() { close(release) }) }
	b := setup(t, &setupOpts{respond: func(device string) pushtest.Response {
		if device == "carol-phone" {
			<-release
		}
		return pushtest.Response{}
	}})
	t.Cleanup(releaseAll)
	b.member(t, "alice", "s1", authz.RightWrite)
	b.member(t, "bob", "s1", authz.RightRead)
	b.member(t, "carol", "s1", authz.RightRead)
	bob, _ := b.device(t, "bob", "bob-phone")
	b.device(t, "carol", "carol-phone")
	b.start(t)

	b.write(t, "s1", "alice")
	require.Equal(t, 1, b.round(t).Jobs)
	testwait.Until(t, 10*time.Second, func() bool {
		var n int
		require.NoError(t, b.db.Pool.QueryRow(context.Background(),
			`SELECT count(*) FROM push_sends WHERE registration_id = $1`, bob.ID).Scan(&n))
		return n == 1
	}, "bob's send recorded while carol's request is still open")
	require.Equal(t, "running", b.jobs(t)[0].State)
	releaseAll()
	b.waitJobs(t, 1, "completed")
	require.Len(t, b.rcv.Messages(), 2)
}

// TestDeliver_RunAgainAfterABatchSendsNothing: a batch job that sent all
// its messages and runs again (its completion was lost) makes no request.
func TestDeliver_RunAgainAfterABatchSendsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.member(t, "alice", "s1", authz.RightWrite)
	devices := []string{"bob-phone", "carol-phone", "dave-phone"}
	for _, d := range devices {
		p := d[:len(d)-len("-phone")]
		b.member(t, p, "s1", authz.RightRead)
		b.device(t, p, d)
	}
	b.start(t)

	b.write(t, "s1", "alice")
	require.Equal(t, 1, b.round(t).Jobs)
	jobs := b.waitJobs(t, 1, "completed")
	require.Len(t, jobs[0].messages(), 3)
	for _, d := range devices {
		require.Equal(t, 1, b.rcv.Requests(d))
	}

	b.waitRecorded(t, 3)
	b.runAgain(t, jobs[0].ID)
	testwait.Until(t, 10*time.Second, func() bool {
		j := b.jobs(t)
		return j[0].State == "completed" && j[0].Attempt == 2
	}, "the job ran a second time")
	for _, d := range devices {
		require.Equal(t, 1, b.rcv.Requests(d), "the second run sent nothing to %s", d)
	}
}

// TestDeliver_RevokedRightInABatchStopsOnlyThatPrincipal: rights are
// decided per principal at send time, also in a batch: the principal who
// lost the right and the one whose token was revoked get nothing, the
// others in the same job get their messages.
func TestDeliver_RevokedRightInABatchStopsOnlyThatPrincipal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, nil)
	b.member(t, "alice", "s1", authz.RightWrite)
	for _, p := range []string{"bob", "carol", "dave", "erin"} {
		b.member(t, p, "s1", authz.RightRead)
	}
	b.device(t, "bob", "bob-phone")
	b.device(t, "bob", "bob-laptop")
	b.device(t, "carol", "carol-phone")
	tokens := map[string]uuid.UUID{}
	for _, p := range []string{"dave", "erin"} { // registered through tokens
		tok, _, err := authz.CreateToken(ctx, b.db.Pool, &authz.CreateTokenParams{Principal: p, Scopes: []string{authz.ScopeEventsRead, authz.ScopePushManage}})
		require.NoError(t, err)
		tokens[p] = tok.ID
		d, endpoint, err := b.rcv.AddDevice(p + "-phone")
		require.NoError(t, err)
		var s push.Subscription
		s.Endpoint, s.Keys.P256dh, s.Keys.Auth = endpoint, d.P256dh(), d.Auth()
		_, err = b.registry.Register(ctx, b.db.Pool, &push.RegisterParams{Principal: p, Subscription: s, TokenID: &tok.ID})
		require.NoError(t, err)
	}

	b.write(t, "s1", "alice")
	require.Equal(t, 1, b.round(t).Jobs)
	require.Len(t, b.jobs(t)[0].messages(), 5)
	// After the round, before the job runs: bob leaves the space, erin's
	// token is revoked.
	require.NoError(t, authz.Revoke(ctx, b.db.Pool, "s1", "bob"))
	require.NoError(t, authz.RevokeToken(ctx, b.db.Pool, tokens["erin"]))
	b.start(t)

	b.waitJobs(t, 1, "completed")
	require.Zero(t, b.rcv.Requests("bob-phone"))
	require.Zero(t, b.rcv.Requests("bob-laptop"))
	require.Zero(t, b.rcv.Requests("erin-phone"))
	require.Equal(t, 1, b.rcv.Requests("carol-phone"))
	require.Equal(t, 1, b.rcv.Requests("dave-phone"))
	require.Len(t, b.rcv.Messages(), 2)
}

// TestDeliver_OriginConcurrencyIsBounded: a batch larger than
// push.origin_concurrency never has more requests in flight to its push
// service than that.
func TestDeliver_OriginConcurrencyIsBounded(t *testing.T) {
	t.Parallel()
	const limit, devices = 2, 6
	var (
		mu       gosync.Mutex
		inFlight int
		maxSeen  int
		release  = make(chan struct{})
	)
	b := setup(t, &setupOpts{
		respond: func(string) pushtest.Response {
			mu.Lock()
			inFlight++
			maxSeen = max(maxSeen, inFlight)
			mu.Unlock()
			<-release
			mu.Lock()
			inFlight--
			mu.Unlock()
			return pushtest.Response{}
		},
		deliverCfg: func(c *push.DeliverConfig) { c.OriginConcurrency = limit },
	})
	// Answers every held request when the test ends, however it ends, so
	// River can stop.
	var releaseOnce gosync.Once
	releaseAll := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(releaseAll)
	waiting := make(chan struct{}, devices)
	b.worker.SetSlotWait(func() { waiting <- struct{}{} })
	b.member(t, "alice", "s1", authz.RightWrite)
	for i := range devices {
		p := string(rune('a'+i)) + "-user"
		b.member(t, p, "s1", authz.RightRead)
		b.device(t, p, p+"-phone")
	}
	b.start(t)
	b.write(t, "s1", "alice")
	require.Equal(t, 1, b.round(t).Jobs)

	// The job fills its two slots and then waits for one: nothing more can
	// reach the push service until a request is answered.
	select {
	case <-waiting:
	case <-time.After(10 * time.Second):
		t.Fatal("the job never waited for a slot")
	}
	testwait.Until(t, 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return inFlight == limit
	}, "two requests in flight")
	releaseAll()
	b.waitJobs(t, 1, "completed")
	require.Len(t, b.rcv.Messages(), devices)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, limit, maxSeen)
}

// TestDeliver_JobOfOneDeviceFromBeforeBatching: jobs queued by a version
// that made one job per device, still waiting or retrying after an
// upgrade, are delivered.
func TestDeliver_JobOfOneDeviceFromBeforeBatching(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.member(t, "alice", "s1", authz.RightWrite)
	b.member(t, "bob", "s1", authz.RightRead)
	reg, _ := b.device(t, "bob", "bob-phone")
	ev := b.write(t, "s1", "alice")
	_, err := b.river.Insert(context.Background(), push.DeliverArgs{
		RegistrationID: reg.ID, Principal: "bob", Space: "s1", Seq: ev.Seq, EventID: ev.ID, Type: ev.Type, CommittedAt: ev.CommittedAt,
	}, nil)
	require.NoError(t, err)
	var raw []byte
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT args FROM river_job`).Scan(&raw))
	require.NotContains(t, string(raw), `"events"`, "the args are the old shape")
	b.start(t)

	b.waitJobs(t, 1, "completed")
	msgs := b.rcv.Messages()
	require.Len(t, msgs, 1)
	var p push.Payload
	require.NoError(t, json.Unmarshal(msgs[0].Payload, &p))
	require.Equal(t, push.Payload{Space: "s1", Seq: ev.Seq, EventID: ev.ID, Type: ev.Type}, p)
}

// TestDeliver_TimeoutStaysUnderTheRescue: River's rescuer makes a job that
// ran longer than river.rescue_stuck_jobs_after (at least a minute)
// available again while it runs; a batch job's timeout, its records and
// removals included, stays below that however large the batch.
func TestDeliver_TimeoutStaysUnderTheRescue(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	devices := make(push.Devices, 5000)
	for i := range devices {
		devices[i] = push.Device{RegistrationID: uuid.New(), Principal: "p"}
	}
	big := &river.Job[push.DeliverArgs]{Args: push.DeliverArgs{Events: []push.BatchEvent{{Space: "s1", Devices: devices}}}}
	require.LessOrEqual(t, b.worker.Timeout(big), 45*time.Second)
	one := &river.Job[push.DeliverArgs]{Args: push.DeliverArgs{Events: []push.BatchEvent{{Space: "s1", Devices: devices[:1]}}}}
	require.Equal(t, 30*time.Second, b.worker.Timeout(one), "one request and four queries")
}
