package webhooks_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/config"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/testwait"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

func TestCreate_Limits(t *testing.T) {
	t.Parallel()

	t.Run("RefusesMoreEventTypesThanTheLimitNamingTheField", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		ctx := context.Background()
		p := &webhooks.CreateParams{Owner: "alice", Space: "s1", URL: "http://127.0.0.1:9/x", AllowPrivateTargets: true,
			EventTypes: noiseTypes(webhooks.DefaultMaxEventTypes + 1)}
		_, _, err := webhooks.Create(ctx, b.db.Pool, postgres.CursorStore{}, p)
		require.ErrorIs(t, err, webhooks.ErrLimit)
		require.ErrorContains(t, err, "event_types: 101 filters, at most 100 (webhooks.max_event_types)")

		p.EventTypes = noiseTypes(webhooks.DefaultMaxEventTypes)
		_, _, err = webhooks.Create(ctx, b.db.Pool, postgres.CursorStore{}, p)
		require.NoError(t, err, "the limit itself is allowed")

		p.EventTypes, p.Limits = noiseTypes(3), &webhooks.Limits{MaxEventTypes: 2}
		_, _, err = webhooks.Create(ctx, b.db.Pool, postgres.CursorStore{}, p)
		require.ErrorContains(t, err, "event_types: 3 filters, at most 2")
	})

	t.Run("RefusesAFilterThatCanMatchNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		long := "a."
		for len(long) <= 128 {
			long += "bcdefghij"
		}
		_, _, err := webhooks.Create(context.Background(), b.db.Pool, postgres.CursorStore{}, &webhooks.CreateParams{Owner: "alice", Space: "s1",
			URL: "http://127.0.0.1:9/x", AllowPrivateTargets: true, EventTypes: []string{long}})
		require.ErrorIs(t, err, webhooks.ErrInvalid)
		require.ErrorContains(t, err, "at most 128 bytes")
	})

	t.Run("RefusesMoreSubscriptionsPerSpaceOfAnyOwnerAndStatus", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		ctx := context.Background()
		require.NoError(t, authz.CreatePrincipal(ctx, b.db.Pool, "bob", authz.KindUser))
		require.NoError(t, authz.Grant(ctx, b.db.Pool, &authz.GrantParams{Space: "s1", Principal: "bob", Right: authz.RightRead}))
		require.NoError(t, authz.Grant(ctx, b.db.Pool, &authz.GrantParams{Space: "s2", Principal: "bob", Right: authz.RightRead}))
		limits := &webhooks.Limits{MaxSubscriptionsPerSpace: 2}
		first, _ := b.subscribe(t, &webhooks.CreateParams{URL: "http://127.0.0.1:9/x", Limits: limits})
		require.NoError(t, webhooks.Disable(ctx, b.db.Pool, first.ID, "a disabled one counts: it can be enabled"))
		b.subscribe(t, &webhooks.CreateParams{Owner: "bob", URL: "http://127.0.0.1:9/x", Limits: limits})

		_, _, err := webhooks.Create(ctx, b.db.Pool, postgres.CursorStore{}, &webhooks.CreateParams{Owner: "bob", Space: "s1",
			URL: "http://127.0.0.1:9/x", AllowPrivateTargets: true, Limits: limits})
		require.ErrorIs(t, err, webhooks.ErrLimit)
		require.ErrorContains(t, err, `space: "s1" has 2 subscriptions, at most 2 (webhooks.max_subscriptions_per_space)`)
		b.subscribe(t, &webhooks.CreateParams{Owner: "bob", Space: "s2", URL: "http://127.0.0.1:9/x", Limits: limits})
	})

	t.Run("RefusesMoreSubscriptionsPerOwnerOnAllSpaces", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		ctx := context.Background()
		require.NoError(t, authz.Grant(ctx, b.db.Pool, &authz.GrantParams{Space: "s2", Principal: "alice", Right: authz.RightRead}))
		limits := &webhooks.Limits{MaxSubscriptionsPerOwner: 2}
		b.subscribe(t, &webhooks.CreateParams{URL: "http://127.0.0.1:9/x", Limits: limits})
		b.subscribe(t, &webhooks.CreateParams{URL: "http://127.0.0.1:9/x", Space: "s2", Limits: limits})
		_, _, err := webhooks.Create(ctx, b.db.Pool, postgres.CursorStore{}, &webhooks.CreateParams{Owner: "alice", Space: "s2",
			URL: "http://127.0.0.1:9/x", AllowPrivateTargets: true, Limits: limits})
		require.ErrorIs(t, err, webhooks.ErrLimit)
		require.ErrorContains(t, err, `owner: "alice" has 2 subscriptions, at most 2 (webhooks.max_subscriptions_per_owner)`)
	})

	t.Run("DefaultsAreTheConfigurationDefaults", func(t *testing.T) {
		t.Parallel()
		cfg, err := config.Load("", nil, nil)
		require.NoError(t, err)
		for key, want := range map[string]int{
			"webhooks.max_event_types":             webhooks.DefaultMaxEventTypes,
			"webhooks.max_subscriptions_per_space": webhooks.DefaultMaxSubscriptionsPerSpace,
			"webhooks.max_subscriptions_per_owner": webhooks.DefaultMaxSubscriptionsPerOwner,
		} {
			v, src := cfg.Value(key)
			require.Equal(t, config.SourceDefault, src, key)
			n, err := strconv.Atoi(v)
			require.NoError(t, err, key)
			require.Equal(t, want, n, key)
		}
	})
}

func TestUpdate_Limits(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	s, _ := b.subscribe(t, &webhooks.CreateParams{URL: "http://127.0.0.1:9/x"})
	types := noiseTypes(webhooks.DefaultMaxEventTypes + 1)
	_, err := webhooks.Update(ctx, b.db.Pool, s.ID, &webhooks.UpdateParams{EventTypes: &types})
	require.ErrorIs(t, err, webhooks.ErrLimit)
	require.ErrorContains(t, err, "event_types: 101 filters, at most 100 (webhooks.max_event_types)")
	require.Empty(t, b.sub(t, s.ID).EventTypes, "unchanged")

	types = types[:webhooks.DefaultMaxEventTypes]
	got, err := webhooks.Update(ctx, b.db.Pool, s.ID, &webhooks.UpdateParams{EventTypes: &types})
	require.NoError(t, err)
	require.Len(t, got.EventTypes, webhooks.DefaultMaxEventTypes)
}

func TestRotateSecret(t *testing.T) {
	t.Parallel()

	// Receivers switch from the old secret to the new one while both sign.
	// A second rotation inside that window used to drop the first old
	// secret at once, failing every receiver that had not switched yet.
	t.Run("SecondRotationInsideTheOverlapIsRefusedAndTheOldSecretStillSigns", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		ctx := context.Background()
		rv := newReceiver(t, nil)
		s, first := b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
		rv.setSecret(t, first) // the receiver has not switched yet
		second, err := webhooks.RotateSecret(ctx, b.db.Pool, s.ID, time.Hour)
		require.NoError(t, err)

		_, err = webhooks.RotateSecret(ctx, b.db.Pool, s.ID, time.Hour)
		require.ErrorIs(t, err, webhooks.ErrRotationInProgress)
		require.ErrorContains(t, err, "the previous secret signs until ")

		b.start(t)
		b.emit(t, "s1", 1)
		b.round(t)
		testwait.Until(t, 10*time.Second, func() bool { return rv.count() == 1 }, "delivered")
		r := rv.requests()[0]
		require.NoError(t, r.SigErr, "the first secret still verifies inside its overlap")
		wh, err := standardwebhooks.NewWebhook(second)
		require.NoError(t, err)
		require.NoError(t, wh.Verify(r.Body, r.Header), "and so does the current one")
	})

	t.Run("OverlapZeroAlwaysRotatesAndEndsEveryOldSecret", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		ctx := context.Background()
		s, _ := b.subscribe(t, &webhooks.CreateParams{URL: "http://127.0.0.1:9/x"})
		_, err := webhooks.RotateSecret(ctx, b.db.Pool, s.ID, time.Hour)
		require.NoError(t, err)
		_, err = webhooks.RotateSecret(ctx, b.db.Pool, s.ID, 0)
		require.NoError(t, err)
		var prev *string
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT previous_secret FROM webhook_subscriptions WHERE id = $1`, s.ID).Scan(&prev))
		require.Nil(t, prev)
		_, err = webhooks.RotateSecret(ctx, b.db.Pool, s.ID, time.Hour)
		require.NoError(t, err, "no overlap runs after an immediate rotation")
	})

	t.Run("RotatesAgainOnceTheOverlapEnded", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		ctx := context.Background()
		s, _ := b.subscribe(t, &webhooks.CreateParams{URL: "http://127.0.0.1:9/x"})
		_, err := webhooks.RotateSecret(ctx, b.db.Pool, s.ID, time.Hour)
		require.NoError(t, err)
		_, err = b.db.Pool.Exec(ctx, `UPDATE webhook_subscriptions SET previous_secret_until = now() - interval '1 second' WHERE id = $1`, s.ID)
		require.NoError(t, err)
		_, err = webhooks.RotateSecret(ctx, b.db.Pool, s.ID, time.Hour)
		require.NoError(t, err)
	})

	t.Run("UnknownSubscriptionIsNotFound", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		_, err := webhooks.RotateSecret(context.Background(), b.db.Pool, [16]byte{1}, time.Hour)
		require.ErrorIs(t, err, webhooks.ErrNotFound)
	})
}

func TestGet_LastSuccess(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	evs := b.emit(t, "s1", 3)
	s, _ := b.subscribe(t, &webhooks.CreateParams{URL: "http://127.0.0.1:9/x"})

	got, err := webhooks.Get(ctx, b.db.Pool, s.ID)
	require.NoError(t, err)
	require.Equal(t, evs[2].Seq, got.LastDeliveredSeq, "the resume point is the head at creation")
	require.Nil(t, got.LastSuccessSeq, "nothing was delivered")
	require.Nil(t, got.LastSuccessAt)
	v := webhooks.NewSubscriptionView(got)
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	require.Contains(t, string(raw), `"last_success_seq":null,"last_success_at":null`)

	finished := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	_, err = b.db.Pool.Exec(ctx, `
INSERT INTO webhook_deliveries (subscription_id, event_seq, event_id, status, finished_at)
VALUES ($1, 10, gen_random_uuid(), 'delivered', $2), ($1, 11, gen_random_uuid(), 'delivered', $2 + interval '1 minute'),
       ($1, 12, gen_random_uuid(), 'dead', $2), ($1, 13, gen_random_uuid(), 'pending', NULL)`, s.ID, finished)
	require.NoError(t, err)
	got, err = webhooks.Get(ctx, b.db.Pool, s.ID)
	require.NoError(t, err)
	require.Equal(t, int64(11), *got.LastSuccessSeq)
	require.True(t, finished.Add(time.Minute).Equal(*got.LastSuccessAt))

	list, err := webhooks.List(ctx, b.db.Pool, &webhooks.ListParams{Owner: "alice"})
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, int64(11), *list[0].LastSuccessSeq)
}
