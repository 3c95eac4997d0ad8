package push_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	gosync "sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/push"
	"github.com/bothy/bothy/services/server/internal/push/pushtest"
)

func TestDeliver_MessageDecryptsWithRegistrationKeys(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.member(t, "alice", "s1", authz.RightWrite)
	b.member(t, "bob", "s1", authz.RightRead)
	b.device(t, "bob", "bob-phone")
	b.start(t)

	ev := b.write(t, "s1", "alice")
	res := b.round(t)
	require.Equal(t, 1, res.Jobs)
	b.waitJobs(t, 1, "completed")

	msgs := b.rcv.Messages()
	require.Len(t, msgs, 1)
	require.Empty(t, b.rcv.Errors())
	require.Equal(t, "bob-phone", msgs[0].Device)
	var p push.Payload
	require.NoError(t, json.Unmarshal(msgs[0].Payload, &p))
	require.Equal(t, push.Payload{Space: "s1", Seq: ev.Seq, EventID: ev.ID, Type: "item.created"}, p)
	require.NotContains(t, string(msgs[0].Payload), "secret", "the payload points at the change, it does not carry it")
	require.Equal(t, "3600", msgs[0].Header.Get("TTL"))
	require.Equal(t, "high", msgs[0].Header.Get("Urgency"))
	require.Equal(t, "aes128gcm", msgs[0].Header.Get("Content-Encoding"))
}

func TestConsumer_Handle(t *testing.T) {
	t.Parallel()

	t.Run("ActorGetsNoPushOfOwnEvent", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		b.member(t, "alice", "s1", authz.RightAdmin)
		b.member(t, "bob", "s1", authz.RightRead)
		b.device(t, "alice", "alice-laptop")
		b.device(t, "alice", "alice-phone")
		b.device(t, "bob", "bob-phone")
		b.start(t)

		b.write(t, "s1", "alice")
		require.Equal(t, 1, b.round(t).Jobs)
		b.waitJobs(t, 1, "completed")
		require.Equal(t, 1, b.rcv.Requests("bob-phone"))
		require.Zero(t, b.rcv.Requests("alice-laptop"), "alice wrote the event")
		require.Zero(t, b.rcv.Requests("alice-phone"), "alice wrote the event")

		b.write(t, "s1", "bob")
		require.Equal(t, 1, b.round(t).Jobs, "alice's two devices share a push service: one job")
		jobs := b.waitJobs(t, 2, "completed")
		require.Len(t, jobs[1].messages(), 2)
		require.Equal(t, 1, b.rcv.Requests("bob-phone"), "bob wrote the second event")
		require.Equal(t, 1, b.rcv.Requests("alice-laptop"))
		require.Equal(t, 1, b.rcv.Requests("alice-phone"))
	})

	t.Run("ReceiversAreMembersWithDevicesWhoWantTheSpace", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		b.member(t, "alice", "s1", authz.RightWrite)
		b.member(t, "bob", "s1", authz.RightRead)
		b.member(t, "carol", "s1", authz.RightRead) // muted s1
		b.member(t, "dave", "s2", authz.RightAdmin) // another space
		b.member(t, "erin", "s1", authz.RightRead)  // disabled
		b.member(t, "frank", "s1", authz.RightRead) // no device
		bob, _ := b.device(t, "bob", "bob-phone")
		b.device(t, "carol", "carol-phone")
		b.device(t, "dave", "dave-phone")
		b.device(t, "erin", "erin-phone")
		ctx := context.Background()
		require.NoError(t, b.registry.SetPreference(ctx, b.db.Pool, &push.SetPreferenceParams{Principal: "carol", Space: "s1", Notify: false}))
		require.NoError(t, authz.SetPrincipalDisabled(ctx, b.db.Pool, "erin", true))

		var seqs []int64
		for range 3 {
			seqs = append(seqs, b.write(t, "s1", "alice").Seq)
		}
		require.Equal(t, 1, b.round(t).Jobs, "the round's events share a job")
		jobs := b.jobs(t)
		require.Len(t, jobs, 1)
		var want []jobMessage
		for _, seq := range seqs {
			want = append(want, jobMessage{Seq: seq, RegistrationID: bob.ID, Principal: "bob"})
		}
		require.Equal(t, want, jobs[0].messages())

		// Unmuting takes effect for the next events.
		require.NoError(t, b.registry.SetPreference(ctx, b.db.Pool, &push.SetPreferenceParams{Principal: "carol", Space: "s1", Notify: true}))
		b.write(t, "s1", "alice")
		require.Equal(t, 1, b.round(t).Jobs)
		jobs = b.jobs(t)
		require.Len(t, jobs[1].messages(), 2, "bob and carol")
	})

	t.Run("DisabledConsumerAdvancesWithoutJobs", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		b.member(t, "alice", "s1", authz.RightWrite)
		b.member(t, "bob", "s1", authz.RightRead)
		b.device(t, "bob", "bob-phone")
		b.write(t, "s1", "alice")
		res, err := b.rounds.Run(context.Background(), push.NewConsumer(&push.ConsumerConfig{Disabled: true}))
		require.NoError(t, err)
		require.Equal(t, 1, res.Events)
		require.Zero(t, res.Jobs)
	})
}

func TestDeliver_RevokedRightIsDeadWithoutRequest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// viaToken registers the device through a token with these scopes.
		viaToken []string
		revoke   func(t *testing.T, b *bundle, tokenID *uuid.UUID)
	}{
		{name: "SpaceMembershipRemoved", revoke: func(t *testing.T, b *bundle, _ *uuid.UUID) {
			require.NoError(t, authz.Revoke(ctx, b.db.Pool, "s1", "bob"))
		}},
		{name: "PrincipalDisabled", revoke: func(t *testing.T, b *bundle, _ *uuid.UUID) {
			require.NoError(t, authz.SetPrincipalDisabled(ctx, b.db.Pool, "bob", true))
		}},
		{name: "TokenRevoked", viaToken: []string{authz.ScopeEventsRead, authz.ScopePushManage}, revoke: func(t *testing.T, b *bundle, id *uuid.UUID) {
			require.NoError(t, authz.RevokeToken(ctx, b.db.Pool, *id))
		}},
		{name: "TokenScopeRemoved", viaToken: []string{authz.ScopeEventsRead, authz.ScopePushManage}, revoke: func(t *testing.T, b *bundle, id *uuid.UUID) {
			require.NoError(t, authz.SetTokenScopes(ctx, b.db.Pool, *id, []string{authz.ScopePushManage}))
		}},
		{name: "DeviceMutedTheSpace", revoke: func(t *testing.T, b *bundle, _ *uuid.UUID) {
			require.NoError(t, b.registry.SetPreference(ctx, b.db.Pool, &push.SetPreferenceParams{Principal: "bob", Space: "s1", Notify: false}))
		}},
		{name: "DeviceUnregistered", revoke: func(t *testing.T, b *bundle, _ *uuid.UUID) {
			_, err := b.db.Pool.Exec(ctx, `DELETE FROM push_registrations WHERE principal = 'bob'`)
			require.NoError(t, err)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			b.member(t, "alice", "s1", authz.RightWrite)
			b.member(t, "bob", "s1", authz.RightRead)
			var tokenID uuid.UUID
			if tc.viaToken != nil {
				tok, _, err := authz.CreateToken(ctx, b.db.Pool, &authz.CreateTokenParams{Principal: "bob", Scopes: tc.viaToken})
				require.NoError(t, err)
				tokenID = tok.ID
				d, endpoint, err := b.rcv.AddDevice("bob-phone")
				require.NoError(t, err)
				var s push.Subscription
				s.Endpoint, s.Keys.P256dh, s.Keys.Auth = endpoint, d.P256dh(), d.Auth()
				_, err = b.registry.Register(ctx, b.db.Pool, &push.RegisterParams{Principal: "bob", Subscription: s, TokenID: &tok.ID})
				require.NoError(t, err)
			} else {
				b.device(t, "bob", "bob-phone")
			}

			// The round creates the job while bob may still read s1 ...
			b.write(t, "s1", "alice")
			require.Equal(t, 1, b.round(t).Jobs)
			// ... and the right goes before the job runs.
			tc.revoke(t, b, &tokenID)
			b.start(t)

			jobs := b.waitJobs(t, 1, "cancelled")
			require.Zero(t, b.rcv.Requests("bob-phone"), "no request may reach the device")
			require.NotEmpty(t, jobs[0].Errors)
		})
	}

	t.Run("StillAllowedIsSent", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		b.member(t, "alice", "s1", authz.RightWrite)
		b.member(t, "bob", "s1", authz.RightRead)
		tok, _, err := authz.CreateToken(ctx, b.db.Pool, &authz.CreateTokenParams{Principal: "bob", Scopes: []string{authz.ScopeEventsRead + "@s1"}})
		require.NoError(t, err)
		d, endpoint, err := b.rcv.AddDevice("bob-phone")
		require.NoError(t, err)
		var s push.Subscription
		s.Endpoint, s.Keys.P256dh, s.Keys.Auth = endpoint, d.P256dh(), d.Auth()
		_, err = b.registry.Register(ctx, b.db.Pool, &push.RegisterParams{Principal: "bob", Subscription: s, TokenID: &tok.ID})
		require.NoError(t, err)
		b.write(t, "s1", "alice")
		require.Equal(t, 1, b.round(t).Jobs)
		b.start(t)
		b.waitJobs(t, 1, "completed")
		require.Equal(t, 1, b.rcv.Requests("bob-phone"))
	})
}

func TestDeliver_PushServiceAnswers(t *testing.T) {
	t.Parallel()

	for _, status := range []int{http.StatusGone, http.StatusNotFound} {
		t.Run(fmt.Sprintf("Status%dRemovesRegistration", status), func(t *testing.T) {
			t.Parallel()
			b := setup(t, &setupOpts{respond: func(string) pushtest.Response { return pushtest.Response{Status: status} }})
			b.member(t, "alice", "s1", authz.RightWrite)
			b.member(t, "bob", "s1", authz.RightRead)
			gone, _ := b.device(t, "bob", "bob-old-phone")
			b.start(t)

			b.write(t, "s1", "alice")
			b.round(t)
			b.waitJobs(t, 1, "cancelled")
			require.Equal(t, 1, b.rcv.Requests("bob-old-phone"))
			require.False(t, b.registrationExists(t, gone), "the registration must be removed")

			// The next event finds no device.
			b.write(t, "s1", "alice")
			require.Zero(t, b.round(t).Jobs)
		})
	}

	t.Run("RateLimitRetriesAfterRetryAfter", func(t *testing.T) {
		t.Parallel()
		b := setup(t, &setupOpts{respond: func(string) pushtest.Response {
			return pushtest.Response{Status: http.StatusTooManyRequests, Header: http.Header{"Retry-After": {"120"}}}
		}})
		b.member(t, "alice", "s1", authz.RightWrite)
		b.member(t, "bob", "s1", authz.RightRead)
		reg, _ := b.device(t, "bob", "bob-phone")
		b.start(t)

		before := time.Now()
		b.write(t, "s1", "alice")
		b.round(t)
		jobs := b.waitJobs(t, 1, "retryable")
		require.Equal(t, 1, jobs[0].Attempt)
		require.WithinRange(t, jobs[0].ScheduledAt, before.Add(119*time.Second), time.Now().Add(121*time.Second))
		require.True(t, b.registrationExists(t, reg))
	})

	t.Run("ServerErrorRetriesWithBackoff", func(t *testing.T) {
		t.Parallel()
		var mu gosync.Mutex
		fail := true
		b := setup(t, &setupOpts{respond: func(string) pushtest.Response {
			mu.Lock()
			defer mu.Unlock()
			if fail {
				fail = false
				return pushtest.Response{Status: http.StatusServiceUnavailable}
			}
			return pushtest.Response{}
		}})
		b.member(t, "alice", "s1", authz.RightWrite)
		b.member(t, "bob", "s1", authz.RightRead)
		b.device(t, "bob", "bob-phone")
		b.start(t)

		b.write(t, "s1", "alice")
		b.round(t)
		// First backoff is about a second; River's scheduler makes it available again.
		jobs := b.waitJobs(t, 1, "completed")
		require.Equal(t, 2, jobs[0].Attempt)
		require.Equal(t, 2, b.rcv.Requests("bob-phone"))
		require.Len(t, b.rcv.Messages(), 1)
	})

	t.Run("PrivateAddressRefusedWithoutRequest", func(t *testing.T) {
		t.Parallel()
		b := setup(t, &setupOpts{deliverCfg: func(c *push.DeliverConfig) { c.AllowPrivateTargets = false }})
		b.member(t, "alice", "s1", authz.RightWrite)
		b.member(t, "bob", "s1", authz.RightRead)
		b.device(t, "bob", "bob-phone") // registered while private targets were allowed
		b.start(t)

		b.write(t, "s1", "alice")
		b.round(t)
		jobs := b.waitJobs(t, 1, "cancelled")
		require.Zero(t, b.rcv.Requests("bob-phone"))
		require.Contains(t, jobs[0].Errors[0], "non-public")
		require.NotContains(t, jobs[0].Errors[0], "/push/bob-phone", "the endpoint's path is a capability and stays out of errors")
	})
}

// TestDeliver_UnusableKeysAreDeadWithoutRequest: keys that cannot encrypt
// (a row changed behind the registry's back) fail the same way on every
// try, so the job is cancelled at once instead of retried for a day.
func TestDeliver_UnusableKeysAreDeadWithoutRequest(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.member(t, "alice", "s1", authz.RightWrite)
	b.member(t, "bob", "s1", authz.RightRead)
	reg, _ := b.device(t, "bob", "bob-phone")
	_, err := b.db.Pool.Exec(context.Background(), `UPDATE push_registrations SET p256dh = 'AAAA' WHERE id = $1`, reg.ID)
	require.NoError(t, err)
	b.start(t)

	b.write(t, "s1", "alice")
	b.round(t)
	jobs := b.waitJobs(t, 1, "cancelled")
	require.Equal(t, 1, jobs[0].Attempt)
	require.Zero(t, b.rcv.Requests("bob-phone"))
	require.Contains(t, jobs[0].Errors[0], "p256dh")
}
